"""The replay check compares a version with the teacher it learned from: an adapted
version's retuned teacher (lead, speed, its per-tick step) read from its adapter metadata,
through its parents in the same store; the base's nominal teacher when none adapted."""

import json

import pytest

from simreal_ros.diagnosis.scenarios import adapted_teacher, make_demonstrator
from simreal_ros.policy.checkpoint import ADAPTER_METADATA
from simreal_ros.robot.description import load_robot_description

STEP = [0.157, 0.157, 0.157, 0.157, 0.157, 0.157, 0.0025]


def _version(store, name, parent=None, metrics=None, action_scale=STEP):
    directory = store / name
    directory.mkdir(parents=True)
    metadata = {"version": name, "parent_version": parent, "metrics": metrics or {},
                "action_scale": action_scale}  # fmt: skip
    (directory / ADAPTER_METADATA).write_text(json.dumps(metadata))
    return directory


ADAPTED = {"adapt_imitated": 1.0, "adapt_teacher_lead": 2.0, "adapt_teacher_speed": 1.5}


def test_an_adapted_version_and_its_descendants_get_the_retuned_teacher(tmp_path):
    robot = load_robot_description()
    _version(tmp_path, "v0001", None, ADAPTED)
    child = _version(tmp_path, "v0002", "v0001", {"actor_loss": 0.1})  # an rl update on it
    for directory in (tmp_path / "v0001", child):
        tuning = adapted_teacher(directory, robot)
        assert (tuning.command_lead, tuning.speed_scale) == (2.0, 1.5)
        assert tuning.max_joint_step == tuple(STEP[i] for i in robot.arm_indices)
    expert = make_demonstrator("push", 20.0, robot=robot, tuning=adapted_teacher(child, robot))
    assert expert.expert.tuning.command_lead == 2.0


def test_no_adaptation_on_the_lineage_means_the_nominal_teacher(tmp_path):
    robot = load_robot_description()
    _version(tmp_path, "v0001", None, {"actor_loss": 0.1})
    stood = {**ADAPTED, "adapt_imitated": 0.0}  # the running policy stood: no DAgger
    assert adapted_teacher(_version(tmp_path, "v0002", "v0001", stood), robot) is None
    # A parent named by a path, not a sibling's name, is never followed.
    _version(tmp_path / "elsewhere", "v0009", None, ADAPTED)
    escaping = _version(tmp_path, "v0003", "../elsewhere/v0009")
    assert adapted_teacher(escaping, robot) is None


def test_damaged_teacher_metadata_is_a_clear_error(tmp_path):
    robot = load_robot_description()
    bad = _version(tmp_path, "v0001", None, {**ADAPTED, "adapt_teacher_lead": float("nan")})
    with pytest.raises(ValueError, match="not finite and positive"):
        adapted_teacher(bad, robot)
    _version(tmp_path, "v0002", "v0003")
    _version(tmp_path, "v0003", "v0002")
    with pytest.raises(ValueError, match="cycle"):
        adapted_teacher(tmp_path / "v0002", robot)
