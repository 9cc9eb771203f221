"""Recorded episodes -> learner -> promoted update -> the policy node swaps, over DDS.

sim_bridge (the real_twin stand-in), policy, recorder and learner run as separate
processes; `simreal trials` drives two recorded episodes. The learner trains an SGFT
adapter on them, screens it in sim, publishes the promotion (latched), and the policy
node's actions switch to the new version. The gate is set to pass here: what it decides is
tested in test/core/test_learner_gate.py; this test is the plumbing between processes.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import rclpy
import torch
from rostest_helpers import spin_until
from simreal_ros.msg import PolicyAction, PolicyUpdate

from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv
from simreal_ros.nodes import qos

pytestmark = [pytest.mark.graph, pytest.mark.slow]

NEEDED = (
    "simreal_ros.nodes.sim_bridge",
    "simreal_ros.nodes.policy",
    "simreal_ros.nodes.recorder",
    "simreal_ros.nodes.trial_runner",
    "simreal_ros.nodes.learner",
)
SIM_TIME = ["-p", "use_sim_time:=true"]


def tiny_checkpoint(directory):
    from simreal_ros.policy.spec import default_spec
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.model import ActorCritic, Architecture
    from simreal_ros.training.torch_checkpoint import save_checkpoint

    spec = default_spec(load_robot_description(), "push")
    torch.manual_seed(0)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (32, 32), (32, 32)))
    save_checkpoint(directory, model, spec, version="graph-base", gamma=0.95, training={})
    return directory


def test_recorded_episodes_lead_to_a_promoted_adapter_the_policy_runs(
    tmp_path, rclpy_context, executor
):
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    assert not missing, f"the project's own node modules are missing: {', '.join(missing)}"
    checkpoint = tiny_checkpoint(tmp_path / "push")
    store = tmp_path / "adapters"
    env = graph_environment()
    learner_params = {
        "checkpoint_dir": str(checkpoint), "store_root": str(store), "method": "sgft",
        "horizon": 1, "updates_per_round": 20, "batch_size": 32, "critic_warmup_updates": 5,
        "sim_episodes": 0, "round_every_episodes": 2, "min_real_transitions": 10,
        "screen.seeds": 2, "screen.conditions": "[train]", "screen.workers": 1,
        "screen.profile": "nominal", "promotion.ci_low": 0.0, "promotion.tolerance": 1.0,
    }  # fmt: skip
    learner_args = [a for k, v in learner_params.items() for a in ("-p", f"{k}:={v}")]
    processes = []
    trials = None
    try:
        processes.append(NodeProcess("sim_bridge", python_module_argv(
            "simreal_ros.nodes.sim_bridge",
            ["-p", "autostart:=true", "-p", "profile:=real_twin", "-p", "episode_seconds:=1.0"],
        ), env))  # fmt: skip
        processes.append(NodeProcess("recorder", python_module_argv(
            "simreal_ros.nodes.recorder",
            ["-p", f"data_dir:={tmp_path / 'episodes'}", "-p", "min_free_disk_mb:=0.0"],
        ), env))  # fmt: skip
        processes.append(NodeProcess("policy", python_module_argv(
            "simreal_ros.nodes.policy",
            ["-p", "autostart:=true", "-p", f"checkpoint:={checkpoint}",
             "-p", f"adapter_store:={store}", *SIM_TIME],
        ), env))  # fmt: skip
        processes.append(NodeProcess("learner", python_module_argv(
            "simreal_ros.nodes.learner", learner_args
        ), env))  # fmt: skip
        bridge, recorder, policy, learner = processes
        assert bridge.wait_for_output("active: episode", 120.0), bridge.output()
        assert recorder.wait_for_output("recorder ready", 120.0), recorder.output()
        assert policy.wait_for_output("active: publishing", 120.0), policy.output()
        assert learner.wait_for_output("learner ready", 120.0), learner.output()

        probe = rclpy.create_node("learner_graph_probe", context=rclpy_context)
        executor.add_node(probe)
        actions: list[PolicyAction] = []
        updates: list[PolicyUpdate] = []
        probe.create_subscription(PolicyAction, "/policy/action", actions.append, qos.COMMAND)
        probe.create_subscription(
            PolicyUpdate, "/learner/policy_update", updates.append, qos.LATCHED
        )
        assert spin_until(executor, lambda: actions, 60.0), policy.output()
        assert actions[-1].policy_version == "graph-base"

        trials = NodeProcess(
            "trials",
            [sys.executable, "-m", "simreal_ros.cli.main", "trials", "--episodes", "2",
             "--timeout", "5", "--seed", "7"],
            env,
        )  # fmt: skip
        # 2 episodes of 1 s take about 10 s; 120 s leaves room and shows the output on a hang.
        assert spin_until(executor, lambda: trials.returncode is not None, 120.0), trials.output()
        assert trials.returncode == 0, trials.output()

        assert spin_until(executor, lambda: updates, 400.0), learner.output()[-3000:]
        update = updates[-1]
        assert update.promoted, update.reason
        assert update.version == "v0001" and update.method == "sgft"
        assert update.screening and update.screening[0].episodes == 2
        # The policy node hot-swaps to the promoted adapter without stopping.
        assert spin_until(executor, lambda: actions[-1].policy_version == update.version, 120.0), (
            policy.output()[-3000:]
        )
        # The log line comes through a pipe; the action that showed the swap came over DDS.
        assert policy.wait_for_output("now running v0001", 30.0), policy.output()[-3000:]
    finally:
        for process in [trials, *reversed(processes)]:
            if process is not None:
                process.stop()
