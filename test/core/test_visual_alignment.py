"""CORAL alignment of the camera encoder: the distance is a real distance, training on
unlabeled stand-in frames lowers it on held-out frames, only the encoder's LoRA trains,
and an alignment that changes nothing fails loudly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from simreal_ros.sim.rendering import ensure_headless_gl

ensure_headless_gl()

from simreal_ros.learner import lora  # noqa: E402
from simreal_ros.learner.visual_alignment import (  # noqa: E402
    AlignmentConfig,
    align_encoder,
    coral_distance,
    feature_shift,
)
from simreal_ros.policy.camera import (  # noqa: E402
    CAMERA_OBSERVATION_FIELDS,
    CameraSpec,
    normalized_image,
)
from simreal_ros.policy.spec import default_spec  # noqa: E402
from simreal_ros.robot.description import load_robot_description  # noqa: E402
from simreal_ros.sim.gym_env import ArmTaskEnv  # noqa: E402
from simreal_ros.sim.profiles import load_profile  # noqa: E402
from simreal_ros.sim.visuals import NOMINAL, CameraObservations  # noqa: E402
from simreal_ros.training.model import (  # noqa: E402
    ActorCritic,
    Architecture,
    EncoderArchitecture,
)

ROBOT = load_robot_description()
CAMERA = CameraSpec(width=32, height=24)


def rendered(appearance, seeds) -> torch.Tensor:
    """One frame after reset and one after a step, per seed, normalised."""
    env = CameraObservations(
        ArmTaskEnv(task="push", profile="nominal", robot=ROBOT), "workspace", 32, 24, appearance
    )
    images = []
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=int(seed), options={"condition": "train"})
            images.append(obs["image"])
            images.append(env.step(obs["joint_position"] + 0.03)[0]["image"])
    finally:
        env.close()
    return torch.as_tensor(np.stack([normalized_image(i, CAMERA) for i in images])).float()


@pytest.fixture(scope="module")
def frames():
    stand_in = load_profile("visual_shift").visual
    return rendered(NOMINAL, range(12)), rendered(stand_in, range(50, 62))


def tiny_model():
    torch.manual_seed(0)
    spec = dataclasses.replace(
        default_spec(ROBOT, "push", 20.0, CAMERA_OBSERVATION_FIELDS), camera=CAMERA
    )
    encoder = EncoderArchitecture(24, 32, channels=(6, 8, 6))
    arch = Architecture(spec.obs_dim, spec.act_dim, (16, 16), (16, 16), encoder=encoder)
    return ActorCritic(arch), spec


def tiny_actor():
    model, spec = tiny_model()
    return model.actor, spec


def test_coral_distance_is_zero_for_equal_sets_and_grows_with_shift():
    x = torch.randn(200, 5, generator=torch.Generator().manual_seed(0))
    assert float(coral_distance(x, x)) == pytest.approx(0.0, abs=1e-12)
    assert float(coral_distance(x, x + 0.5)) > float(coral_distance(x, x + 0.1)) > 0.0
    assert float(coral_distance(x, 3 * x)) > 0.1  # covariance alone
    with pytest.raises(ValueError, match="shapes"):
        coral_distance(x, x[:, :3])


def test_alignment_lowers_the_feature_distance_on_held_out_frames(frames):
    sim_images, arm_images = frames
    actor, spec = tiny_actor()
    generator = torch.Generator().manual_seed(1)
    sim_obs = torch.randn(len(sim_images), spec.obs_dim, generator=generator)
    with torch.no_grad():  # the anchor: keep the base's own actions on the sim frames
        labels = actor(sim_obs, sim_images)
    before_state = {k: v.clone() for k, v in actor.state_dict().items()}
    result = align_encoder(
        actor, sim_images, sim_obs, labels, arm_images, AlignmentConfig(steps=60, batch_size=8)
    )
    print(f"held-out feature distance {result.distance_before:.4g} -> {result.distance_after:.4g}")
    assert result.distance_after < 0.8 * result.distance_before
    trained = {k for k, v in lora.adapter_state(result.peft_model).items()}
    assert trained and all(".encoder." in k for k in trained)  # only the encoder's LoRA
    for k, v in actor.state_dict().items():  # the base is untouched
        torch.testing.assert_close(v, before_state[k], rtol=0, atol=0)


def test_the_frozen_reference_keeps_the_sim_features_scale(frames):
    # The arm's features are matched to the base's sim features, and the adapted encoder's
    # sim features are held at the base's: the alignment cannot pass by shrinking them.
    sim_images, arm_images = frames
    actor, spec = tiny_actor()
    generator = torch.Generator().manual_seed(1)
    sim_obs = torch.randn(len(sim_images), spec.obs_dim, generator=generator)
    with torch.no_grad():
        labels = actor(sim_obs, sim_images)
    config = AlignmentConfig(steps=60, batch_size=8, alignment_weight=10.0)
    assert config.frozen_reference  # the default
    result = align_encoder(actor, sim_images, sim_obs, labels, arm_images, config)
    assert len(result.sim_feature_scale) == 3  # one per convolution's activations
    assert all(0.7 < v < 1.3 for v in result.sim_feature_scale), result.sim_feature_scale
    assert result.distance_after < result.distance_before


def test_an_alignment_that_changes_nothing_fails_loudly(frames):
    sim_images, arm_images = frames
    actor, spec = tiny_actor()
    sim_obs = torch.zeros(len(sim_images), spec.obs_dim)
    labels = torch.zeros(len(sim_images), spec.act_dim)
    idle = AlignmentConfig(steps=3, batch_size=8, alignment_weight=0.0, anchor_weight=0.0)
    with pytest.raises(RuntimeError, match="did not lower the feature distance"):
        align_encoder(actor, sim_images, sim_obs, labels, arm_images, idle)


def test_too_few_frames_is_a_clear_error(frames):
    sim_images, arm_images = frames
    actor, spec = tiny_actor()
    sim_obs = torch.zeros(len(sim_images), spec.obs_dim)
    labels = torch.zeros(len(sim_images), spec.act_dim)
    with pytest.raises(ValueError, match="at least 8 frames"):
        align_encoder(actor, sim_images, sim_obs, labels, arm_images[:4], AlignmentConfig())


def test_feature_shift_flags_stand_in_frames_and_not_other_sim_frames(frames):
    sim_images, arm_images = frames
    other_sim = rendered(NOMINAL, range(100, 106))
    actor, _ = tiny_actor()
    same = feature_shift(actor, sim_images, other_sim)
    shifted = feature_shift(actor, sim_images, arm_images)
    print(f"shift ratio: other sim frames {same['ratio']:.2f}, stand-in {shifted['ratio']:.2f}")
    assert not same["outside_sim"]
    assert shifted["outside_sim"]
    assert shifted["ratio"] > 3 * same["ratio"]


def test_recorded_frames_to_a_deployable_adapter(tmp_path, frames):
    """`simreal align`'s path: frames read back from episode bags (only ticks that had a
    frame), aligned, written as a peft adapter the node's numpy merge deploys."""
    from simreal_ros.cli.align import arm_frames
    from simreal_ros.episodes.frames import FrameCompression
    from simreal_ros.episodes.synthetic import JOINTS, write_camera_episode
    from simreal_ros.learner.visual_alignment import align_to_arm_frames
    from simreal_ros.policy.checkpoint import load_numpy_checkpoint, read_adapter_metadata
    from simreal_ros.policy.inference import deploy_adapter, deploy_base
    from simreal_ros.policy.spec import SpecConverter
    from simreal_ros.training.torch_checkpoint import save_checkpoint

    stand_in = rendered(load_profile("visual_shift").visual, range(70, 76))  # 12 frames
    raw = np.clip(stand_in.numpy() * CAMERA.pixel_std + CAMERA.pixel_mean, 0, 1)
    images = (np.moveaxis(raw, 1, -1) * 255).round().astype(np.uint8)
    t0, ms = 1_700_000_000_000_000_000, 1_000_000
    for episode in range(2):
        ticks = [t0 + i * 50 * ms for i in range(8)]
        sent = [(t0 + (i * 50 + 10) * ms, t0 + (i * 50 + 10) * ms, images[episode * 6 + i])
                for i in range(6)]  # fmt: skip
        write_camera_episode(tmp_path / "bags" / f"ep{episode}", ticks, sent,
                             FrameCompression("png"), episode_id=f"ep{episode}")  # fmt: skip
    recorded, joints, episodes = arm_frames([tmp_path / "bags"], JOINTS)
    assert episodes == 2
    assert joints.shape == (len(recorded), len(JOINTS)) and np.all(np.isfinite(joints))
    # Tick 0 precedes each episode's first frame; the last two ticks share its last frame.
    assert recorded.shape == (2 * 7, 24, 32, 3)
    np.testing.assert_array_equal(recorded[:6], images[:6])  # PNG: lossless, in tick order
    np.testing.assert_array_equal(recorded[6], images[5])

    model, spec = tiny_model()
    base_dir = save_checkpoint(tmp_path / "base", model, spec, version="cam0", gamma=0.99,
                               training={})  # fmt: skip
    summary = align_to_arm_frames(
        base_dir, recorded, tmp_path / "aligned", ROBOT, version="a1", sim_episodes=2,
        config=AlignmentConfig(steps=40, batch_size=8),
    )  # fmt: skip
    assert summary["feature_distance_after"] < summary["feature_distance_before"]
    # The perception signal, on the base: the stand-in's frames lie outside the sim's.
    assert summary["feature_shift"]["outside_sim"] is True, summary["feature_shift"]
    assert summary["feature_shift"]["ratio"] > 3.0
    metadata = read_adapter_metadata(tmp_path / "aligned")
    assert metadata["base_version"] == "cam0" and metadata["training"]["arm_frames"] == 14
    base = load_numpy_checkpoint(base_dir, ROBOT)
    kinematics = SpecConverter.for_robot(spec, ROBOT).forward_kinematics
    aligned = deploy_adapter(base, tmp_path / "aligned", "a1", forward_kinematics=kinematics)
    plain = deploy_base(base, kinematics)
    obs = np.zeros(spec.obs_dim)
    assert np.abs(aligned.actor(obs, recorded[0]) - plain.actor(obs, recorded[0])).max() > 1e-6
