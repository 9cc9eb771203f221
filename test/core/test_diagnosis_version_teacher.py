"""The replay check compares a version with the teacher it learned from: an adapted
version's retuned teacher (lead, speed, its per-tick step) read from its adapter metadata,
through its parents in the same store; the base's nominal teacher when none adapted. Its
own sim is where that teacher is the reference: the adapted version's identified sim."""

import json

import pytest

from simreal_ros.diagnosis.scenarios import adapted_teacher, make_demonstrator, teacher_sim
from simreal_ros.policy.checkpoint import ADAPTER_METADATA
from simreal_ros.robot.description import load_robot_description

STEP = [0.157, 0.157, 0.157, 0.157, 0.157, 0.157, 0.0025]


def _version(store, name, parent=None, metrics=None, action_scale=STEP, screened=""):
    directory = store / name
    directory.mkdir(parents=True)
    metadata = {"version": name, "parent_version": parent, "metrics": metrics or {},
                "action_scale": action_scale, "screening_profile": str(screened)}  # fmt: skip
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


IDENTIFIED = """\
profile: identified
randomize_each_reset: false
scale:
  gain.*: 0.2
"""


def test_the_teachers_sim_is_the_identified_one_the_store_holds(tmp_path):
    store = tmp_path / "models"
    (store / "sysid").mkdir(parents=True)
    identified = store / "sysid" / "profile.yaml"
    identified.write_text(IDENTIFIED)
    adapted = _version(store, "v0001", None, ADAPTED, screened=identified)
    child = _version(store, "v0002", "v0001", {"actor_loss": 0.1}, screened="randomized")
    for version in (adapted, child):  # a descendant keeps its ancestor's teacher and sim
        assert teacher_sim(version, "randomized") == str(identified.resolve())
    # As the learner writes it, relative to its working directory, and with the store moved.
    relative = _version(store, "v0005", None, ADAPTED, screened="runs/x/models/sysid/profile.yaml")
    assert teacher_sim(relative, "randomized") == str(identified.resolve())
    # No retuned teacher on the lineage: the base's sim, whatever the version was screened in.
    plain = _version(store, "v0003", None, {"actor_loss": 0.1}, screened=identified)
    assert teacher_sim(plain, "randomized") == "randomized"
    assert teacher_sim(None, "nominal") == "nominal"
    # A shipped profile name is read as one.
    assert teacher_sim(_version(store, "v0004", None, ADAPTED, screened="nominal"), "x") == (
        "nominal"
    )


def test_a_teachers_sim_outside_the_store_or_a_stand_in_is_not_used(tmp_path):
    store = tmp_path / "models"
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(IDENTIFIED)
    assert teacher_sim(_version(store, "v0001", None, ADAPTED, screened=outside), "r") is None
    stand_in = store / "twin.yaml"
    stand_in.write_text(
        IDENTIFIED.replace("randomize_each_reset", "stand_in: true\nrandomize_each_reset")
    )
    assert teacher_sim(_version(store, "v0002", None, ADAPTED, screened=stand_in), "r") is None
    assert teacher_sim(_version(store, "v0003", None, ADAPTED, screened="real_twin"), "r") is None
    missing = store / "gone.yaml"
    assert teacher_sim(_version(store, "v0004", None, ADAPTED, screened=missing), "r") is None
    assert teacher_sim(_version(store, "v0005", None, ADAPTED), "r") is None
    climbing = _version(store, "v0006", None, ADAPTED, screened="models/../elsewhere.yaml")
    assert teacher_sim(climbing, "r") is None
