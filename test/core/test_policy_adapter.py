"""Base checkpoint + peft LoRA adapter -> merged actor, with conventions and checksum checked."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model

from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.inference import deploy_adapter
from simreal_ros.policy.lora_merge import merged_actor_state
from simreal_ros.robot.description import load_robot_description
from simreal_ros.robot.kinematics import ToolKinematics
from simreal_ros.training.model import ACTOR_LORA_TARGETS
from simreal_ros.training.torch_checkpoint import load_checkpoint, make_untrained_checkpoint


@pytest.fixture(scope="module")
def robot():
    return load_robot_description()


def make_adapter(base_dir, adapter_dir, seed=1, targets=ACTOR_LORA_TARGETS):
    """What the learner does: peft on the actor, train (here: random B), save_pretrained."""
    base = load_checkpoint(base_dir)
    torch.manual_seed(seed)
    peft_actor = get_peft_model(
        copy.deepcopy(base.model.actor),
        LoraConfig(r=4, lora_alpha=8, target_modules=list(targets), lora_dropout=0.0),
    )
    with torch.no_grad():
        for name, parameter in peft_actor.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.2)
    peft_actor.save_pretrained(str(adapter_dir))
    ckpt.write_adapter_metadata(adapter_dir, base, version="a1", parent_version=base.version)
    return peft_actor


def test_merged_actor_equals_peft_forward_and_differs_from_base(tmp_path, robot):
    base_dir = make_untrained_checkpoint(tmp_path / "base", robot)
    peft_actor = make_adapter(base_dir, tmp_path / "a1")
    assert (tmp_path / "a1" / ckpt.ADAPTER_CONFIG).is_file()
    assert (tmp_path / "a1" / ckpt.ADAPTER_WEIGHTS).is_file()
    base = load_checkpoint(base_dir, robot)
    base_actor = base.model.actor
    # The numpy merge every deployment runs, loaded into a torch copy of the base's actor.
    state = merged_actor_state(base, tmp_path / "a1")
    merged = copy.deepcopy(base_actor)
    merged.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    obs = torch.randn(16, merged.arch.obs_dim)
    with torch.no_grad():
        expected = peft_actor(obs)
        assert torch.allclose(merged(obs), expected, atol=1e-5)
        assert not torch.allclose(base_actor(obs), expected, atol=1e-3)
    # Merged means plain Linear layers again: no LoRA left, same layer names.
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert {"trunk.0", "trunk.2", "mean_head"} <= {n for n, _ in merged.named_modules()}
    # The runnable numpy form agrees too.
    fk = ToolKinematics.for_robot(load_robot_description())
    deployed = deploy_adapter(base, tmp_path / "a1", version="a1", forward_kinematics=fk)
    x = np.random.default_rng(0).normal(size=merged.arch.obs_dim)
    with torch.no_grad():
        want = merged(torch.as_tensor(x, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(deployed.actor(x), want, atol=1e-5)
    # The base checkpoint in memory is untouched by merging.
    with torch.no_grad():
        assert torch.allclose(base.model.actor(obs), load_checkpoint(base_dir).model.actor(obs))


def test_wrong_checksum_is_refused(tmp_path, robot):
    base_dir = make_untrained_checkpoint(tmp_path / "base", robot)
    make_adapter(base_dir, tmp_path / "a1")
    base = load_checkpoint(base_dir)
    with pytest.raises(ckpt.CheckpointError, match="checksum"):
        merged_actor_state(base, tmp_path / "a1", expected_sha256="0" * 64)
    weights = tmp_path / "a1" / ckpt.ADAPTER_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(ckpt.CheckpointError, match="checksum"):
        merged_actor_state(base, tmp_path / "a1")


def test_adapter_for_other_conventions_is_refused(tmp_path, robot):
    base_dir = make_untrained_checkpoint(tmp_path / "base", robot)
    other_dir = make_untrained_checkpoint(tmp_path / "other", robot, control_rate_hz=100.0)
    make_adapter(other_dir, tmp_path / "a1")
    with pytest.raises(ckpt.CheckpointError, match="spec_fingerprint"):
        merged_actor_state(load_checkpoint(base_dir), tmp_path / "a1")


def test_adapter_targeting_unknown_layers_is_refused(tmp_path, robot):
    base_dir = make_untrained_checkpoint(tmp_path / "base", robot)
    make_adapter(base_dir, tmp_path / "a1")
    config_path = tmp_path / "a1" / ckpt.ADAPTER_CONFIG
    config = json.loads(config_path.read_text())
    config["target_modules"] = ["encoder.0"]
    config_path.write_text(json.dumps(config))
    with pytest.raises(ckpt.CheckpointError, match=r"target_modules: .*encoder\.0"):
        merged_actor_state(load_checkpoint(base_dir), tmp_path / "a1")


def test_adapter_without_safetensors_is_refused(tmp_path, robot):
    base_dir = make_untrained_checkpoint(tmp_path / "base", robot)
    make_adapter(base_dir, tmp_path / "a1")
    (tmp_path / "a1" / ckpt.ADAPTER_WEIGHTS).rename(tmp_path / "a1" / "adapter_model.bin")
    with pytest.raises(ckpt.CheckpointError, match="only safetensors"):
        merged_actor_state(load_checkpoint(base_dir), tmp_path / "a1")


def test_a_version_runs_with_the_step_its_metadata_names_within_the_velocity_limit(
    tmp_path, robot
):
    """Sim adaptation widens a slow arm's per-tick step in the version's metadata: the node's
    loader and the off-ROS evaluation both run it, and a step over the arm's velocity limit
    (or a malformed one) is refused, naming the joint and the limit."""
    from simreal_ros.policy.runtime import PolicyVersions
    from simreal_ros.policy.spec import widest_action_scale
    from simreal_ros.training.evaluate import PolicySource, build_policy

    base_dir = make_untrained_checkpoint(tmp_path / "base", robot)
    make_adapter(base_dir, tmp_path / "a1")
    base = load_checkpoint(base_dir)
    widest = widest_action_scale(base.spec, robot, robot.arm_indices)
    arm = list(robot.arm_indices)
    assert np.allclose(np.asarray(widest)[arm], 2 * np.asarray(base.spec.action_scale)[arm])
    meta_path = tmp_path / "a1" / ckpt.ADAPTER_METADATA
    metadata = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**metadata, "action_scale": list(widest)}))

    obs = {
        "joint_position": np.zeros(len(robot.joint_names)),
        "joint_velocity": np.zeros(len(robot.joint_names)),
        "object_position": [0.5, 0.0, 0.025], "object_orientation": [1.0, 0.0, 0.0, 0.0],
        "goal_position": [0.6, 0.1, 0.025],
    }  # fmt: skip
    full = np.ones(len(robot.joint_names))
    plain = build_policy(PolicySource(str(base_dir)), robot=robot)
    widened = build_policy(PolicySource(str(base_dir), str(tmp_path / "a1")), robot=robot)
    q = np.asarray(obs["joint_position"])
    step_plain = plain.converter.command_from_action(full, q) - q
    step_wide = widened.converter.command_from_action(full, q) - q
    assert np.allclose(step_wide[arm], 2 * step_plain[arm])
    versions = PolicyVersions(robot, warn=lambda text: None)
    try:
        versions.configure(base_dir, None, "")
        versions.announce("a1", str(tmp_path / "a1"), "")
        loaded = versions.load("a1")
        assert loaded.converter.spec.action_scale == tuple(widest)
    finally:
        versions.shutdown()

    too_far = list(widest)
    too_far[arm[1]] *= 1.5
    meta_path.write_text(json.dumps({**metadata, "action_scale": too_far}))
    name = robot.joint_names[arm[1]]
    with pytest.raises(ValueError, match=f"action_scale: joint '{name}'.*velocity limit"):
        build_policy(PolicySource(str(base_dir), str(tmp_path / "a1")), robot=robot)
    meta_path.write_text(json.dumps({**metadata, "action_scale": widest[:3]}))
    with pytest.raises(ValueError, match="action_scale in the adapter's metadata has 3"):
        build_policy(PolicySource(str(base_dir), str(tmp_path / "a1")), robot=robot)
    meta_path.write_text(json.dumps({**metadata, "action_scale": "wide"}))
    with pytest.raises(ValueError, match="a list of"):
        build_policy(PolicySource(str(base_dir), str(tmp_path / "a1")), robot=robot)
