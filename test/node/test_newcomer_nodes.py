"""Issue 28 in the nodes: what runs is visible, and an adapter for another arm or base is
refused naming both sides, by the policy (which runs the base) and by the learner (which
stays up and says why) instead of a raw size mismatch."""

from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rostest_helpers import spin_until
from safetensors.numpy import save_file

from simreal_ros.adapters.store import AdapterStore, scoped_store_root
from simreal_ros.nodes import qos
from simreal_ros.nodes.learner import LearnerNode
from simreal_ros.nodes.policy import PolicyNode
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.torch_checkpoint import make_untrained_checkpoint

ROBOT = load_robot_description()
PANDA = load_robot_description("panda")


def commit_foreign_adapter(tmp_path, store: AdapterStore) -> None:
    """An adapter trained on a Panda base, as the learner of a Panda graph commits it."""
    panda_base = make_untrained_checkpoint(tmp_path / "panda", PANDA, task="push")
    theirs = ckpt.read_metadata(panda_base)
    with store.staging("v0001") as staging:
        save_file(
            {
                "base_model.model.trunk.0.lora_A.weight": np.zeros(
                    (4, theirs["architecture"]["obs_dim"]), np.float32
                )
            },
            str(staging / "adapter_model.safetensors"),
        )
        metadata = {
            "robot": "panda", "joint_names": list(PANDA.joint_names),
            "base_version": theirs["version"], "spec_fingerprint": theirs["spec_fingerprint"],
        }  # fmt: skip
        store.commit(
            staging, "v0001", metadata, {"promoted": True, "reason": "screened"}, robot=PANDA
        )
    store.activate("v0001", "promoted")


def make_policy(rclpy_context, executor, **params) -> PolicyNode:
    overrides = [Parameter(name, value=value) for name, value in params.items()]
    node = PolicyNode(context=rclpy_context, parameter_overrides=overrides)
    executor.add_node(node)
    return node


def test_policy_runs_the_base_and_names_both_sides_of_a_foreign_adapter(
    rclpy_context, executor, tmp_path
):
    base = make_untrained_checkpoint(tmp_path / "base", ROBOT, task="push")
    store = AdapterStore(tmp_path / "flat")  # a root without {robot}/{base}: shared by hand
    commit_foreign_adapter(tmp_path, store)
    node = make_policy(
        rclpy_context, executor, checkpoint=str(base), adapter_store=str(store.root)
    )
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.versions.active_version == "untrained"
        assert node.versions.source == f"base untrained from {base}"
        error = node.versions.last_error
        assert "v0001" in error and "robot 'panda', 8 joints" in error, error
        assert f"this graph runs robot '{ROBOT.name}', 7 joints" in error, error
        values = {}

        def diagnostics_seen() -> bool:
            node._publish_diagnostics()
            return "version_source" in values

        probe = Node("newcomer_probe", context=rclpy_context)
        executor.add_node(probe)
        probe.create_subscription(
            DiagnosticArray,
            "/diagnostics",
            lambda m: values.update({v.key: v.value for s in m.status for v in s.values}),
            qos.STATUS,
        )
        assert spin_until(executor, diagnostics_seen, 10.0)
        assert values["version_source"] == f"base untrained from {base}"
        assert values["adapter_store"] == str(store.root)
    finally:
        executor.remove_node(node)
        node.destroy_node()


def test_policy_reads_its_own_robot_and_base_store(rclpy_context, executor, tmp_path):
    base = make_untrained_checkpoint(tmp_path / "base", ROBOT, task="push")
    template = str(tmp_path / "adapters" / "{robot}" / "{base}")
    commit_foreign_adapter(tmp_path, AdapterStore(tmp_path / "adapters" / "panda" / "x"))
    node = make_policy(rclpy_context, executor, checkpoint=str(base), adapter_store=template)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.versions.store.root == scoped_store_root(
            template, ROBOT.name, ckpt.read_metadata(base)
        )
        # The Panda's adapter is in another store: not offered.
        assert node.versions.last_error == ""
        assert node.versions.active_version == "untrained"
    finally:
        executor.remove_node(node)
        node.destroy_node()


def test_learner_refuses_a_foreign_running_version_and_stays_up(rclpy_context, tmp_path):
    base = make_untrained_checkpoint(tmp_path / "base", ROBOT, task="push")
    store = AdapterStore(tmp_path / "flat")
    commit_foreign_adapter(tmp_path, store)
    overrides = [
        Parameter("checkpoint_dir", value=str(base)),
        Parameter("store_root", value=str(store.root)),
        Parameter("sim_episodes", value=0),
    ]
    node = LearnerNode(context=rclpy_context, parameter_overrides=overrides)
    try:
        deadline = time.monotonic() + 30.0
        while node.learner.status().state != "failed" and time.monotonic() < deadline:
            time.sleep(0.05)
        status = node.learner.status()
        assert status.state == "failed", status
        assert "refusing the store's running version" in status.last_error
        assert "robot 'panda'" in status.last_error and ROBOT.name in status.last_error
        assert "size mismatch" not in status.last_error
    finally:
        node.destroy_node()
