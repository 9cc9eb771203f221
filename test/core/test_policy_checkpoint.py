"""Checkpoint round trip, conventions checked against the robot, tampering refused."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.inference import NumpyActor, deploy_base
from simreal_ros.policy.spec import PolicySpec, SpecConverter, default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import ActorCritic, Architecture
from simreal_ros.training.torch_checkpoint import (
    load_checkpoint,
    make_untrained_checkpoint,
    save_checkpoint,
    verified_tensors,
)


@pytest.fixture(scope="module")
def robot():
    return load_robot_description()


@pytest.fixture
def saved(tmp_path, robot):
    return make_untrained_checkpoint(tmp_path / "base", robot, control_rate_hz=20.0)


def _edit_spec(directory, **changes):
    """Rewrite the spec in policy.json consistently (as a differently trained model would)."""
    meta = json.loads((directory / ckpt.METADATA_FILE).read_text())
    spec = PolicySpec.from_dict(meta["spec"])
    spec = dataclasses.replace(spec, **changes)
    meta["spec"] = spec.to_dict()
    meta["spec_fingerprint"] = spec.fingerprint()
    (directory / ckpt.METADATA_FILE).write_text(json.dumps(meta))


def test_round_trip_preserves_weights_spec_and_provenance(tmp_path, robot):
    torch.manual_seed(3)
    spec = default_spec(robot, "push").with_statistics(np.arange(36.0), np.full(36, 2.0))
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (32, 32), (32, 32)))
    training = {"command": "simreal pretrain --task push", "seed": 3, "wall_time_s": 1.5}
    path = save_checkpoint(
        tmp_path / "c",
        model,
        spec,
        version="v1",
        parent_version="v0",
        gamma=0.98,
        training=training,
    )
    loaded = load_checkpoint(path, description=robot, control_rate_hz=20.0)
    assert loaded.version == "v1" and loaded.parent_version == "v0"
    assert loaded.gamma == 0.98 and loaded.metadata["training"] == training
    assert loaded.spec == spec
    for (name, a), (_, b) in zip(
        model.state_dict().items(), loaded.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    obs = torch.randn(5, spec.obs_dim)
    assert torch.allclose(model.actor(obs), loaded.model.actor(obs))
    assert torch.allclose(model.v_sim(obs), loaded.model.v_sim(obs))
    files = sorted(p.name for p in path.iterdir())
    assert files == [ckpt.ACTOR_FILE, ckpt.CRITIC_FILE, ckpt.METADATA_FILE]
    # Small enough to ship: a few hundred kB at the default size.
    assert sum(p.stat().st_size for p in path.iterdir()) < 1_000_000


def test_numpy_forward_matches_torch(saved):
    loaded = load_checkpoint(saved)
    obs = np.random.default_rng(0).normal(size=loaded.spec.obs_dim)
    with torch.no_grad():
        expected = loaded.model.actor(torch.as_tensor(obs, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(NumpyActor(loaded.model.actor)(obs), expected, atol=1e-5)


def test_v_sim_is_min_of_twin_critics_at_mean_action(saved):
    model = load_checkpoint(saved).model
    obs = torch.randn(8, model.arch.obs_dim)
    with torch.no_grad():
        q1, q2 = model.critic(obs, model.actor(obs))
    value = model.v_sim(obs)
    assert torch.equal(value, torch.minimum(q1, q2))
    assert not value.requires_grad


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            {
                "joint_names": (
                    "elbow_joint",
                    "shoulder_pan_joint",
                    "shoulder_lift_joint",
                    "wrist_1_joint",
                    "wrist_2_joint",
                    "wrist_3_joint",
                    "gripper_joint",
                )
            },
            "joint_names: the checkpoint orders the joints",
        ),
        ({"joint_names": ("a", "b", "c", "d", "e", "f", "g")}, "different robot"),
        ({"joint_units": ("rad",) * 7}, "joint_units: joint 'gripper_joint'"),
        ({"joint_units": ("deg",) + ("rad",) * 5 + ("m",)}, "joint_units: joint 'shoulder_pan"),
        (
            {"target_upper": (3.14159, 0.5, 3.14159, 3.14159, 3.14159, 3.14159, 0.04)},
            "action range: joint 'shoulder_lift_joint'",
        ),
        ({"action_scale": (1.0,) * 7}, "action_scale: joint 'shoulder_pan_joint'"),
    ],
)
def test_convention_mismatch_is_refused_naming_the_field(saved, robot, change, field):
    _edit_spec(saved, **change)
    with pytest.raises(ckpt.CheckpointError, match=field.replace("(", r"\(")):
        load_checkpoint(saved, description=robot)


def test_control_rate_mismatch_is_refused(saved, robot):
    load_checkpoint(saved, description=robot, control_rate_hz=20.0)
    with pytest.raises(ckpt.CheckpointError, match=r"control_rate_hz: .* 20 Hz .* 100 Hz"):
        load_checkpoint(saved, description=robot, control_rate_hz=100.0)


def test_hand_edited_spec_is_refused(saved):
    meta = json.loads((saved / ckpt.METADATA_FILE).read_text())
    meta["spec"]["obs_mean"][0] = 5.0
    (saved / ckpt.METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError, match="spec_fingerprint"):
        load_checkpoint(saved)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
@pytest.mark.parametrize("name", [ckpt.ACTOR_FILE, ckpt.CRITIC_FILE])
def test_tampered_or_truncated_weights_are_refused_by_checksum(saved, name, damage):
    path = saved / name
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0x01  # a weight bit, the file still parses
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match=f"checksum: .*{name}"):
        load_checkpoint(saved)


def test_pickle_weights_are_never_loaded(saved):
    meta = json.loads((saved / ckpt.METADATA_FILE).read_text())
    torch.save({"x": torch.zeros(1)}, saved / "actor.pt")
    meta["files"] = {"actor.pt": ckpt.sha256_file(saved / "actor.pt")}
    (saved / ckpt.METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError):
        load_checkpoint(saved)
    with pytest.raises(ckpt.CheckpointError, match=r"not a \.safetensors file"):
        verified_tensors(saved / "actor.pt", None, "actor")


def test_an_oversized_weights_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "actor.safetensors"
    with path.open("wb") as f:  # sparse: no disk or memory is used
        f.truncate(ckpt.MAX_WEIGHTS_BYTES + 1)
    with pytest.raises(ckpt.CheckpointError, match=r"actor: .* MiB, over the 1024 MiB"):
        verified_tensors(path, None, "actor")


def test_missing_and_foreign_directories_say_what_is_wrong(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="not a directory"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ckpt.CheckpointError, match=r"no policy\.json"):
        load_checkpoint(tmp_path / "empty")


def test_conversion_delta_mode_round_trips_and_clips(robot):
    spec = default_spec(robot, "reach", control_rate_hz=20.0)
    conv = SpecConverter(spec, forward_kinematics=lambda q: np.zeros(3))
    q = np.asarray(robot.home_position, dtype=float)
    action = np.linspace(-0.9, 0.9, 7)
    target = conv.command_from_action(action, q)
    np.testing.assert_allclose(target - q, action * np.asarray(spec.action_scale), atol=1e-12)
    np.testing.assert_allclose(conv.action_from_command(target, q), action, atol=1e-9)
    # At a limit the target never leaves the joint range.
    at_upper = np.asarray(robot.position_upper, dtype=float)
    assert np.all(conv.command_from_action(np.ones(7), at_upper) <= at_upper)


def test_deployed_policy_acts_in_controller_order_from_an_observation_dict(saved, robot):
    policy = deploy_base(load_checkpoint(saved), forward_kinematics=lambda q: q[:3])
    obs = {
        "joint_position": np.asarray(robot.home_position, dtype=float),
        "joint_velocity": np.zeros(7),
        "object_position": np.array([0.5, 0.0, 0.02]),
        "object_orientation": np.array([1.0, 0, 0, 0]),
        "goal_position": np.array([0.6, 0.1, 0.02]),
    }
    target = policy.act(obs)
    assert target.shape == (7,) and np.all(np.isfinite(target))
    step = np.abs(target - obs["joint_position"])
    assert np.all(step <= np.asarray(policy.converter.spec.action_scale) + 1e-12)
    obs["goal_position"] = np.array([np.nan, 0, 0])
    with pytest.raises(ValueError, match="non-finite"):
        policy.act(obs)
