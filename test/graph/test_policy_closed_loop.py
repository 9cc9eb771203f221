"""Closed loop over DDS: sim_bridge + safety + policy processes solve `reach`.

The shipped reach checkpoint runs in the policy process; its actions go through the
safety node to the simulated arm (free-running at real time); the test only watches
/task/status and resets episodes.
"""

from __future__ import annotations

import importlib.util

import pytest
from rostest_helpers import play_episodes, spin_until

from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv
from simreal_ros.policy.checkpoint import shipped_checkpoint

pytestmark = [pytest.mark.graph, pytest.mark.slow]

EPISODES = (0, 1, 2)
# The bridge stamps observations with sim time (/clock); nodes that compare stamps with
# their clock (safety's staleness check) must run on it too, as in the sim launch profile.
SIM_TIME = ["-p", "use_sim_time:=true"]


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture
def closed_loop():
    assert _have("simreal_ros.nodes.sim_bridge"), "simreal_ros.nodes.sim_bridge is missing"
    checkpoint = shipped_checkpoint("reach")
    assert (checkpoint / "policy.json").is_file(), f"no shipped reach checkpoint at {checkpoint}"
    env = graph_environment()
    processes = []
    try:
        bridge = NodeProcess(
            "sim_bridge",
            python_module_argv(
                "simreal_ros.nodes.sim_bridge",
                [
                    "-p",
                    "autostart:=true",
                    "-p",
                    "task:=reach",
                    "-p",
                    "seed:=1000",
                    "-p",
                    "episode_seconds:=8.0",
                ],
            ),
            env,
        )
        processes.append(bridge)
        assert bridge.wait_for_output("active: episode", timeout=60.0), bridge.output()
        processes.append(
            NodeProcess(
                "safety",
                python_module_argv(
                    "simreal_ros.nodes.safety", ["-p", "autostart:=true", *SIM_TIME]
                ),
                env,
            )
        )
        policy = NodeProcess(
            "policy",
            python_module_argv(
                "simreal_ros.nodes.policy",
                ["-p", "autostart:=true", "-p", f"checkpoint:={checkpoint}", *SIM_TIME],
            ),
            env,
        )
        processes.append(policy)
        # configure imports torch and peft: slow on a loaded machine.
        assert policy.wait_for_output("active: publishing", timeout=120.0), policy.output()
        yield processes
    finally:
        for process in reversed(processes):
            process.stop()


def test_shipped_reach_checkpoint_solves_reach_in_the_sim_graph(
    closed_loop, rclpy_context, executor
):
    from rclpy.node import Node
    from simreal_ros.msg import PolicyAction, TaskStatus
    from simreal_ros.srv import ResetEpisode

    from simreal_ros.nodes import qos

    probe = Node("closed_loop_probe", context=rclpy_context)
    executor.add_node(probe)
    statuses: list[TaskStatus] = []
    actions: list[PolicyAction] = []
    probe.create_subscription(TaskStatus, "/task/status", statuses.append, qos.STATUS)
    probe.create_subscription(PolicyAction, "/policy/action", actions.append, qos.COMMAND)
    reset = probe.create_client(ResetEpisode, "/sim_bridge/reset")
    assert reset.wait_for_service(timeout_sec=10.0)
    assert spin_until(executor, lambda: len(actions) > 5, 20.0), closed_loop[-1].output()
    assert actions[-1].policy_version == "reach-base"

    outcomes = play_episodes(executor, reset, statuses, EPISODES)
    logs = "\n".join(p.output()[-1500:] for p in closed_loop)
    assert sum(outcomes) >= 2, f"reach outcomes {outcomes}\n{logs}"
