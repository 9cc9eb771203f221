"""`simreal pretrain-camera` at a tiny scale: the loop runs, labels come from the expert,
the checkpoint loads as a camera policy for the arm, and a stand-in is refused."""

from __future__ import annotations

import numpy as np
import pytest

from simreal_ros.sim.rendering import ensure_headless_gl

ensure_headless_gl()

from simreal_ros.policy.camera import CAMERA_OBSERVATION_FIELDS  # noqa: E402
from simreal_ros.policy.checkpoint import load_numpy_checkpoint  # noqa: E402
from simreal_ros.robot.description import load_robot_description  # noqa: E402
from simreal_ros.training.camera_pretrain import (  # noqa: E402
    CameraPretrainConfig,
    CameraPretrainer,
)

ROBOT = load_robot_description()


def test_tiny_pretraining_writes_a_camera_checkpoint(tmp_path):
    config = CameraPretrainConfig(
        demo_episodes=2, dagger_iterations=1, dagger_episodes=1, demo_steps=3, round_steps=3,
        scenes=20, perception_steps=2, scene_batch=4,
        batch_size=8, hidden=16, width=32, height=24, threads=1,
    )  # fmt: skip
    trainer = CameraPretrainer(config, tmp_path / "cam", robot=ROBOT, command="test")
    path = trainer.run()
    data = trainer.data
    assert data.size > 20
    # Every frame is a real render of the right size, and the labels are normalised actions.
    assert data.images[: data.size].shape[1:] == (24, 32, 3)
    assert data.images[: data.size].std() > 5
    assert np.abs(data.labels[: data.size]).max() <= 1.0
    assert np.abs(data.labels[: data.size]).max() > 0.1
    checkpoint = load_numpy_checkpoint(path, ROBOT)
    spec = checkpoint.spec
    assert spec.observation_fields == CAMERA_OBSERVATION_FIELDS
    assert (spec.camera.width, spec.camera.height) == (32, 24)
    assert not any("object" in f for f in spec.observation_fields)
    training = checkpoint.metadata["training"]
    phases = [entry["phase"] for entry in training["log"]]
    assert phases == ["scenes", "demos", "dagger 1 (expert 0.500)"]
    assert training["log"][1]["successes"] == 2  # the expert drove the demos
    # Still scenes: the cube anywhere on the table, independent of the arm's pose.
    scenes = trainer.scenes
    assert scenes.images.shape == (20, 24, 32, 3) and scenes.images.std() > 5
    assert scenes.objects[:, 0].std() > 0.05 and scenes.objects[:, 1].std() > 0.08
    assert "visual_randomization" in training


def test_a_stand_in_is_never_a_training_profile():
    with pytest.raises(ValueError, match="stand-in"):
        CameraPretrainConfig(profile="visual_shift")
