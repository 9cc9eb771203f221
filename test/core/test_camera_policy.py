"""Camera policies: the numpy CNN equals torch's, the checkpoint and spec round-trip and
refuse what does not fit, LoRA on the encoder deploys as peft trained it, and the scene's
appearance changes what the camera sees and nothing else."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from simreal_ros.learner import lora
from simreal_ros.policy.camera import CAMERA_OBSERVATION_FIELDS, CameraSpec, normalized_image
from simreal_ros.policy.checkpoint import CheckpointError, load_numpy_checkpoint
from simreal_ros.policy.inference import NumpyCameraActor, deploy_adapter, deploy_base
from simreal_ros.policy.spec import PolicySpec, SpecConverter, default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.camera_pretrain import shifted
from simreal_ros.training.model import (
    ENCODER_LORA_TARGETS,
    ActorCritic,
    Architecture,
    EncoderArchitecture,
)
from simreal_ros.training.torch_checkpoint import load_checkpoint, save_checkpoint

ROBOT = load_robot_description()
ARCH_ENCODER = EncoderArchitecture(height=24, width=32, channels=(4, 6, 5))


def camera_spec(width=32, height=24) -> PolicySpec:
    spec = default_spec(ROBOT, "push", 20.0, CAMERA_OBSERVATION_FIELDS)
    return dataclasses.replace(spec, camera=CameraSpec(width=width, height=height))


def camera_model(seed=0) -> tuple[ActorCritic, PolicySpec]:
    torch.manual_seed(seed)
    spec = camera_spec()
    arch = Architecture(spec.obs_dim, spec.act_dim, (16, 16), (16, 16), encoder=ARCH_ENCODER)
    return ActorCritic(arch), spec


def frames(n, seed=1, height=24, width=32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, height, width, 3), dtype=np.uint8)


def torch_actions(actor, spec, obs, images) -> np.ndarray:
    x = np.stack([normalized_image(i, spec.camera) for i in images])
    with torch.no_grad():
        return actor(torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(x).float()).numpy()


def test_numpy_camera_actor_computes_what_torch_computes():
    model, spec = camera_model()
    state = {k: v.detach().numpy() for k, v in model.actor.state_dict().items()}
    actor = NumpyCameraActor(state, spec.camera, ARCH_ENCODER.strides)
    obs = np.random.default_rng(2).normal(size=(5, spec.obs_dim))
    images = frames(5)
    want = torch_actions(model.actor, spec, obs, images)
    got = np.stack([actor(o, i) for o, i in zip(obs, images, strict=True)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # The image matters: another frame gives another action.
    assert np.abs(actor(obs[0], images[1]) - actor(obs[0], images[0])).max() > 1e-4


def test_camera_checkpoint_round_trip_and_state_fingerprint_unchanged(tmp_path):
    model, spec = camera_model()
    path = save_checkpoint(
        tmp_path / "cam", model, spec, version="cam-v1", gamma=0.99, training={}
    )
    assert not (path / "critic.safetensors").exists()  # a camera policy has no critic
    loaded = load_numpy_checkpoint(path, ROBOT)
    assert loaded.spec == spec and loaded.spec.camera == spec.camera
    torch_loaded = load_checkpoint(path, ROBOT)
    assert torch_loaded.model.critic is None
    kinematics = SpecConverter.for_robot(spec, ROBOT).forward_kinematics
    deployed = deploy_base(loaded, kinematics)
    obs = {
        "joint_position": np.zeros(ROBOT.num_joints),
        "joint_velocity": np.zeros(ROBOT.num_joints),
        "goal_position": np.array([0.6, 0.1, 0.025]),
        "image": frames(1)[0],
    }
    command = deployed.act(obs)
    assert command.shape == (ROBOT.num_joints,) and np.all(np.isfinite(command))
    # A state spec serialises without a camera key: its fingerprint is what it always was.
    state_spec = default_spec(ROBOT, "push", 20.0)
    assert "camera" not in state_spec.to_dict()
    assert PolicySpec.from_dict(state_spec.to_dict()).fingerprint() == state_spec.fingerprint()
    assert spec.fingerprint() != dataclasses.replace(spec, camera=None).fingerprint()


def test_checkpoint_with_encoder_but_no_camera_spec_is_refused(tmp_path):
    model, spec = camera_model()
    path = save_checkpoint(tmp_path / "cam", model, spec, version="v", gamma=0.99, training={})
    metadata = json.loads((path / "policy.json").read_text())
    del metadata["spec"]["camera"]
    metadata["spec_fingerprint"] = None
    (path / "policy.json").write_text(json.dumps(metadata))
    with pytest.raises(CheckpointError, match=r"architecture\.encoder and spec\.camera"):
        load_numpy_checkpoint(path)


def test_convention_check_names_resolution_topic_and_encoding():
    camera = CameraSpec()
    camera.check_frame(96, 72, "rgb8")
    camera.check_topic("/camera/image_raw")
    with pytest.raises(ValueError, match="frames are 640x480 but the checkpoint was trained"):
        camera.check_frame(640, 480, "rgb8")
    with pytest.raises(ValueError, match="camera encoding: frames are 'bgr8'"):
        camera.check_frame(96, 72, "bgr8")
    with pytest.raises(ValueError, match="trained on '/camera/image_raw' but the node reads"):
        camera.check_topic("/wrist/image_raw")
    with pytest.raises(ValueError, match="image has shape"):
        normalized_image(np.zeros((48, 64, 3), np.uint8), camera)
    with pytest.raises(ValueError, match="missing field"):
        CameraSpec.from_dict({"width": 96})


def test_encoder_lora_deploys_as_peft_merged_it(tmp_path):
    """An adapter on the encoder's convolutions (and the trunk), merged in numpy by the
    node's path, acts as peft's merged model does; the encoder's adapter changes actions."""
    model, spec = camera_model()
    base_dir = save_checkpoint(tmp_path / "b", model, spec, version="b1", gamma=0.99, training={})
    base = load_numpy_checkpoint(base_dir, ROBOT)
    peft_model = lora.wrap(model.actor, rank=2, alpha=4, targets=ENCODER_LORA_TARGETS)
    generator = torch.Generator().manual_seed(3)
    weights = {
        k: 0.3 * torch.randn(v.shape, generator=generator)
        for k, v in lora.adapter_state(peft_model).items()
    }
    lora.set_adapter_weights(peft_model, weights)
    lora.save(peft_model, tmp_path / "a")
    metadata = {"base_version": "b1", "spec_fingerprint": spec.fingerprint()}
    (tmp_path / "a" / "simreal_adapter.json").write_text(json.dumps(metadata))
    kinematics = SpecConverter.for_robot(spec, ROBOT).forward_kinematics
    deployed = deploy_adapter(base, tmp_path / "a", "a1", forward_kinematics=kinematics)
    obs = np.random.default_rng(4).normal(size=(4, spec.obs_dim))
    images = frames(4, seed=5)
    got = np.stack([deployed.actor(o, i) for o, i in zip(obs, images, strict=True)])
    want = torch_actions(lora.merged(peft_model), spec, obs, images)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    plain = torch_actions(model.actor, spec, obs, images)
    assert np.abs(want - plain).max() > 1e-3


def test_a_version_with_a_camera_warp_deploys_it(tmp_path):
    """An adapter whose metadata names the arm camera's warp deploys as a policy that sees
    every frame warped: the same actions as the base on frames warped beforehand."""
    import cv2

    model, spec = camera_model()
    base_dir = save_checkpoint(tmp_path / "b", model, spec, version="b1", gamma=0.99, training={})
    base = load_numpy_checkpoint(base_dir, ROBOT)
    lora.save(
        lora.wrap(model.actor, rank=2, alpha=4, targets=ENCODER_LORA_TARGETS), tmp_path / "a"
    )
    warp = np.array([[1.02, 0.01, -1.5], [-0.01, 0.98, 2.0], [0.0, 0.0, 1.0]])
    metadata = {
        "base_version": "b1", "spec_fingerprint": spec.fingerprint(),
        "camera_rectification": warp.ravel().tolist(),
    }  # fmt: skip
    (tmp_path / "a" / "simreal_adapter.json").write_text(json.dumps(metadata))
    kinematics = SpecConverter.for_robot(spec, ROBOT).forward_kinematics
    deployed = deploy_adapter(base, tmp_path / "a", "a1", forward_kinematics=kinematics)
    assert deployed.converter.spec.camera.rectification == tuple(warp.ravel())
    obs = np.random.default_rng(4).normal(size=(3, spec.obs_dim))
    images = frames(3, seed=6)
    got = np.stack([deployed.actor(o, i) for o, i in zip(obs, images, strict=True)])
    corrected = []
    for image in images:
        moved = cv2.warpPerspective(image, warp, (32, 24), flags=cv2.INTER_LINEAR,
                                    borderMode=cv2.BORDER_REPLICATE) / 255.0  # fmt: skip
        corrected.append((moved - spec.camera.pixel_mean) / spec.camera.pixel_std)
    x = torch.as_tensor(np.moveaxis(np.stack(corrected), -1, 1)).float()
    with torch.no_grad():
        want = model.actor(torch.as_tensor(obs, dtype=torch.float32), x).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # The corrections change what the encoder sees: its keypoints move.
    plain = deploy_base(base, kinematics).actor
    moved = [np.abs(deployed.actor.inputs(o, i) - plain.inputs(o, i)).max() for o, i in
             zip(obs, images, strict=True)]  # fmt: skip
    assert min(moved) > 1e-3, moved


def test_training_shift_moves_frames_by_at_most_the_bound():
    images = torch.arange(2 * 3 * 10 * 12, dtype=torch.float32).reshape(2, 3, 10, 12)
    out = shifted(images, 2, torch.Generator().manual_seed(0))
    assert out.shape == images.shape
    for k in range(2):  # each output is the input translated by (dy, dx) with |d| <= 2
        found = False
        for dy in range(-2, 3):
            for dx in range(-2, 3):
                inner = images[k, :, 2:-2, 2:-2]
                moved = out[k, :, 2 + dy : 8 + dy, 2 + dx : 10 + dx]
                found = found or bool(torch.equal(inner, moved))
        assert found


def test_the_learner_refuses_a_camera_base_saying_what_to_use(tmp_path):
    from simreal_ros.learner.config import LearnerConfig
    from simreal_ros.learner.session import LearnerSession

    model, spec = camera_model()
    path = save_checkpoint(tmp_path / "cam", model, spec, version="cam-v1", gamma=0.99,
                           training={})  # fmt: skip
    config = LearnerConfig(checkpoint_dir=str(path), store_root=str(tmp_path / "store"))
    with pytest.raises(ValueError, match=r"camera policy.*simreal align"):
        LearnerSession(config, robot=ROBOT)
