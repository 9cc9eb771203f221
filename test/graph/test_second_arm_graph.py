"""`simreal up --robot panda`: the whole sim graph on the second arm, over DDS.

Every node gets the arm from the one graph-level setting; the shipped Panda push policy
drives the simulated Panda through the safety filter, and the test only resets episodes
and watches the topics.
"""

from __future__ import annotations

import sys

import pytest
from rostest_helpers import play_episodes, spin_until

from simreal_ros.graph.processes import NodeProcess, graph_environment
from simreal_ros.graph.runner import GRAPH_READY
from simreal_ros.policy.checkpoint import shipped_checkpoint
from simreal_ros.robot.description import load_robot_description

# Serial: the whole graph runs on wall time, and beside a second worker on a slow 2-core
# host the policy's actions reached the safety filter stale (held, fail-closed) often
# enough that 0 of 4 pushes landed in one CI run, 1 of 4 in another; alone it passes.
pytestmark = [pytest.mark.graph, pytest.mark.slow, pytest.mark.serial]

SEEDS = (0, 1, 2, 3)


@pytest.fixture
def panda_graph(tmp_path):
    robot = load_robot_description("panda")
    checkpoint = shipped_checkpoint("push", robot)
    assert (checkpoint / "policy.json").is_file(), f"no shipped Panda push policy at {checkpoint}"
    argv = [
        sys.executable,
        "-m",
        "simreal_ros.cli.main",
        "up",
        "--robot",
        "panda",
        "--set",
        f"recorder.data_dir={tmp_path / 'episodes'}",
        "--set",
        "recorder.min_free_disk_mb=0.0",
        "--set",
        "learner.round_every_episodes=0",  # no fine-tuning round during the test
        "--set",
        f"learner.store_root={tmp_path / 'adapters'}",
        "--set",
        f"policy.adapter_store={tmp_path / 'adapters'}",
    ]
    up = NodeProcess("simreal-up", argv, graph_environment())
    try:
        assert up.wait_for_output("robot ", 30.0), up.output()
        yield robot, up
    finally:
        up.stop(timeout=20.0)


def test_simreal_up_robot_panda_runs_its_shipped_push_policy(panda_graph, rclpy_context, executor):
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from simreal_ros.msg import PolicyAction, TaskStatus
    from simreal_ros.srv import ResetEpisode
    from std_msgs.msg import Float64MultiArray

    from simreal_ros.nodes import qos

    robot, up = panda_graph
    assert f"robot {robot.source}" in up.output()
    probe = Node("panda_probe", context=rclpy_context)
    executor.add_node(probe)
    states: list[JointState] = []
    actions: list[PolicyAction] = []
    commands: list[Float64MultiArray] = []
    statuses: list[TaskStatus] = []
    probe.create_subscription(JointState, "/joint_states", states.append, qos.SENSOR_DATA)
    probe.create_subscription(PolicyAction, "/policy/action", actions.append, qos.COMMAND)
    probe.create_subscription(
        Float64MultiArray, "/forward_position_controller/commands", commands.append, qos.COMMAND
    )
    probe.create_subscription(TaskStatus, "/task/status", statuses.append, qos.STATUS)
    reset = probe.create_client(ResetEpisode, "/sim_bridge/reset")
    # The policy imports numpy weights and the learner torch: slow on a loaded machine.
    started = lambda: len(actions) > 5 and len(commands) > 5 and states  # noqa: E731
    assert spin_until(executor, started, 180.0), up.output()[-4000:]
    assert tuple(states[-1].name) == robot.joint_names
    assert len(actions[-1].values) == robot.num_joints == 8
    assert len(commands[-1].data) == robot.num_joints
    assert reset.wait_for_service(timeout_sec=10.0)
    # Episodes played while the learner imports torch went stale on a loaded CI host (the
    # filter held on stale commands; 1 of 4 pushed): judge the policy on a graph that is up.
    assert up.wait_for_output(GRAPH_READY, 180.0), up.output()[-4000:]

    outcomes = play_episodes(executor, reset, statuses, SEEDS)
    # Off ROS it solves 189 of 200 nominal train episodes (checkpoints/panda/push).
    assert sum(outcomes) >= 2, f"push outcomes {outcomes}\n{up.output()[-4000:]}"
