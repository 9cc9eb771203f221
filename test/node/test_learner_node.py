"""learner node in-process: episodes in, a screened update out (latched), executor free."""

from __future__ import annotations

from pathlib import Path

import pytest
import rclpy
import torch
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.parameter import Parameter
from rostest_helpers import spin_until, wait_for_subscribers
from simreal_ros.msg import EpisodeEvent, PolicyUpdate

from simreal_ros.config_schema import settings
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.sim_episodes import record_rollout
from simreal_ros.nodes import qos
from simreal_ros.nodes.learner import LearnerNode
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.spec import default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import ActorCritic, Architecture
from simreal_ros.training.torch_checkpoint import load_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def base_and_bags(tmp_path_factory):
    robot = load_robot_description()
    spec = default_spec(robot, "push")
    torch.manual_seed(0)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (32, 32), (32, 32)))
    root = tmp_path_factory.mktemp("learner")
    save_checkpoint(root / "push", model, spec, version="base", gamma=0.95, training={})
    base = load_checkpoint(root / "push")
    bags = [
        record_rollout(
            root / "episodes" / f"ep{i}", base, seed=i, episode_seconds=1.0, robot=robot
        )
        for i in range(2)
    ]
    return root / "push", root / "episodes", bags


def make_node(rclpy_context, checkpoint_dir, store, **params):
    values = {
        "checkpoint_dir": str(checkpoint_dir), "store_root": str(store), "method": "bc",
        "bc_use_failures": True, "updates_per_round": 10, "batch_size": 16, "screen.seeds": 2,
        "screen.conditions": ["train"], "screen.workers": 1, "screen.profile": "nominal",
        "promotion.ci_low": 0.0, "promotion.tolerance": 1.0, "round_every_episodes": 2,
        "min_real_transitions": 10, "sim_episodes": 0, "sim_replay": False,
    }  # fmt: skip
    values.update(params)
    overrides = [Parameter(k, value=v) for k, v in values.items()]
    return LearnerNode(context=rclpy_context, parameter_overrides=overrides)


def announce(executor, probe, episodes_dir: Path, metas):
    pub = probe.create_publisher(EpisodeEvent, "/episodes/recorded", qos.STATUS)
    assert wait_for_subscribers(executor, pub)
    for meta in metas:
        msg = EpisodeEvent()
        msg.episode_id = meta.episode_id
        msg.bag_path = str(episodes_dir / meta.episode_id)
        msg.source = meta.source
        msg.outcome = meta.outcome
        msg.success = meta.success
        pub.publish(msg)


@pytest.mark.parametrize("ci_low", [0.0, 1.0])
def test_episodes_trigger_a_round_and_the_decision_is_published_latched(
    rclpy_context, executor, tmp_path, base_and_bags, ci_low
):
    checkpoint_dir, episodes_dir, metas = base_and_bags
    node = make_node(
        rclpy_context, checkpoint_dir, tmp_path / "models", **{"promotion.ci_low": ci_low}
    )
    # The node declares the schema's settings, grouped ones by their dotted names.
    assert all(node.has_parameter(name) for name in settings(LearnerConfig))
    assert node.get_parameter("promotion.ci_low").value == ci_low
    probe = rclpy.create_node("probe", context=rclpy_context)
    executor.add_node(node)
    executor.add_node(probe)
    diagnostics: list[DiagnosticArray] = []
    probe.create_subscription(
        DiagnosticArray, "/diagnostics",
        lambda m: diagnostics.extend([m] if m.status[0].name.startswith("learner") else []),
        qos.STATUS,
    )  # fmt: skip
    updates: list[PolicyUpdate] = []
    probe.create_subscription(PolicyUpdate, "/learner/policy_update", updates.append, qos.LATCHED)
    announce(executor, probe, episodes_dir, metas)
    assert spin_until(executor, lambda: updates, timeout=120), node.learner.status()
    update = updates[-1]
    assert update.version == "v0001" and update.method == "bc"
    assert update.promoted is (ci_low == 0.0), update.reason
    assert len(update.screening) == 1 and update.screening[0].episodes == 2
    assert Path(update.adapter_path, "adapter_model.safetensors").is_file()
    assert update.checksum == ckpt.sha256_file(Path(update.adapter_path, ckpt.ADAPTER_WEIGHTS))
    # A late joiner still gets the decision (latched).
    late: list[PolicyUpdate] = []
    probe.create_subscription(PolicyUpdate, "/learner/policy_update", late.append, qos.LATCHED)
    assert spin_until(executor, lambda: late, timeout=10)
    assert late[0].version == "v0001"
    # Diagnostics kept flowing (the executor never waited on training) and report the round.
    assert spin_until(
        executor,
        lambda: any(
            {kv.key: kv.value for kv in d.status[0].values}.get("last_gate") for d in diagnostics
        ),
        timeout=5,
    )
    values = {kv.key: kv.value for kv in diagnostics[-1].status[0].values}
    assert values["round"] == "1" and float(values["samples_per_s"]) > 0
    assert values["buffer_real_twin"] == str(sum(m.steps for m in metas))
    assert ("promoted" if ci_low == 0.0 else "rejected") in values["last_gate"]


def test_restart_announces_the_running_version(rclpy_context, executor, tmp_path, base_and_bags):
    checkpoint_dir, episodes_dir, metas = base_and_bags
    first = make_node(rclpy_context, checkpoint_dir, tmp_path / "models")
    probe = rclpy.create_node("probe2", context=rclpy_context)
    executor.add_node(first)
    executor.add_node(probe)
    updates: list[PolicyUpdate] = []
    probe.create_subscription(PolicyUpdate, "/learner/policy_update", updates.append, qos.LATCHED)
    announce(executor, probe, episodes_dir, metas)
    assert spin_until(executor, lambda: updates, timeout=120)
    assert [u.version for u in updates] == ["v0001"] and updates[0].promoted
    executor.remove_node(first)
    first.destroy_node()
    second = make_node(rclpy_context, checkpoint_dir, tmp_path / "models")
    executor.add_node(second)
    # The restarted learner latches the running version for whoever joins.
    assert spin_until(executor, lambda: len(updates) >= 2, timeout=10)
    assert updates[1].version == "v0001" and updates[1].promoted
    assert "start-up" in updates[1].reason
