"""The shipped Panda model against Franka's published kinematics and limits (no ROS).

A pure-numpy forward kinematics from Franka's modified (Craig) DH table is the reference:
over random configurations within the published limits, panda.xml's flange and tool centre
point must match it; the model's ranges, the actuators' force ranges, joint_limits.yaml and
the home pose in robot.yaml must agree with the published values.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest
import yaml

PANDA_DIR = Path(__file__).resolve().parents[2] / "simreal_ros/robot/arms/panda"
MODEL = PANDA_DIR / "panda.xml"

# Franka "Robot and interface specifications", Craig's convention: per row a_{i-1} (m),
# d_i (m), alpha_{i-1} (rad); theta_i = q_i (0 for the flange).
DH = np.array(
    [
        [0.0, 0.333, 0.0],
        [0.0, 0.0, -np.pi / 2],
        [0.0, 0.316, np.pi / 2],
        [0.0825, 0.0, np.pi / 2],
        [-0.0825, 0.384, -np.pi / 2],
        [0.0, 0.0, np.pi / 2],
        [0.088, 0.0, np.pi / 2],
    ]
)
FLANGE_D = 0.107
HAND_ROTATION = -np.pi / 4  # the hand on the flange, about the flange z axis
TCP_OFFSET = 0.1034  # along the flange z axis

ARM_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))
FINGER = "panda_finger_joint1"
CONTROLLER_JOINTS = (*ARM_JOINTS, FINGER)
# Published limits (arm) and the Franka Hand's; finger velocity/accel/jerk as README.md says.
Q_MIN = np.array([-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973, 0.0])
Q_MAX = np.array([2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973, 0.04])
VELOCITY = np.array([2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61, 0.05])
ACCELERATION = np.array([15.0, 7.5, 10.0, 12.5, 15.0, 20.0, 20.0, 1.0])
JERK = np.array([7500.0, 3750.0, 5000.0, 6250.0, 7500.0, 10000.0, 10000.0, 20.0])
EFFORT = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0, 70.0])

SAMPLES = 500
POSITION_TOLERANCE = 1e-3  # m
ROTATION_TOLERANCE = 1e-3  # rad


def _rot_x(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    t = np.eye(4)
    t[1:3, 1:3] = [[c, -s], [s, c]]
    return t


def _rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    t = np.eye(4)
    t[0:2, 0:2] = [[c, -s], [s, c]]
    return t


def _trans(x: float = 0.0, z: float = 0.0) -> np.ndarray:
    t = np.eye(4)
    t[0, 3], t[2, 3] = x, z
    return t


def dh_flange(q: np.ndarray) -> np.ndarray:
    """Base-to-flange transform: T_{i-1,i} = RotX(alpha) TransX(a) RotZ(theta) TransZ(d)."""
    pose = np.eye(4)
    for (a, d, alpha), theta in zip(DH, q, strict=True):
        pose = pose @ _rot_x(alpha) @ _trans(x=a) @ _rot_z(theta) @ _trans(z=d)
    return pose @ _trans(z=FLANGE_D)


def dh_tcp(q: np.ndarray) -> np.ndarray:
    return dh_flange(q) @ _rot_z(HAND_ROTATION) @ _trans(z=TCP_OFFSET)


def _rotation_error(r_model: np.ndarray, r_reference: np.ndarray) -> float:
    cosine = (np.trace(r_model.T @ r_reference) - 1.0) / 2.0
    return float(np.arccos(np.clip(cosine, -1.0, 1.0)))


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(MODEL))


def _site_pose(model: mujoco.MjModel, data: mujoco.MjData, q: np.ndarray, site: str):
    for name, value in zip(ARM_JOINTS, q, strict=True):
        data.qpos[model.joint(name).qposadr[0]] = value
    mujoco.mj_kinematics(model, data)
    return data.site(site).xpos.copy(), data.site(site).xmat.reshape(3, 3).copy()


def _random_configurations() -> np.ndarray:
    rng = np.random.default_rng(20240607)
    return rng.uniform(Q_MIN[:7], Q_MAX[:7], size=(SAMPLES, 7))


def test_dh_reference_matches_the_published_zero_pose():
    flange = dh_flange(np.zeros(7))
    np.testing.assert_allclose(flange[:3, 3], [0.088, 0.0, 0.926], atol=1e-12)
    np.testing.assert_allclose(flange[:3, 2], [0.0, 0.0, -1.0], atol=1e-12)


@pytest.mark.parametrize(
    ("site", "reference"), [("tcp", dh_tcp), ("flange", dh_flange)], ids=["tcp", "flange"]
)
def test_model_matches_published_dh(model, site, reference):
    data = mujoco.MjData(model)
    position_errors, rotation_errors = [], []
    for q in _random_configurations():
        position, rotation = _site_pose(model, data, q, site)
        expected = reference(q)
        position_errors.append(np.linalg.norm(position - expected[:3, 3]))
        rotation_errors.append(_rotation_error(rotation, expected[:3, :3]))
    assert max(position_errors) < POSITION_TOLERANCE, f"{site}: {max(position_errors):.2e} m"
    assert max(rotation_errors) < ROTATION_TOLERANCE, f"{site}: {max(rotation_errors):.2e} rad"


def test_flange_site_is_link7_frame_moved_along_its_z(model):
    data = mujoco.MjData(model)
    for q in _random_configurations()[:20]:
        position, _ = _site_pose(model, data, q, "flange")
        link7 = data.body("panda_link7")
        expected = link7.xpos + FLANGE_D * link7.xmat.reshape(3, 3)[:, 2]
        np.testing.assert_allclose(position, expected, atol=1e-9)


def test_model_joint_ranges_are_the_published_limits(model):
    for i, name in enumerate(CONTROLLER_JOINTS):
        joint = model.joint(name)
        assert model.jnt_limited[joint.id], name
        assert tuple(model.jnt_range[joint.id]) == (Q_MIN[i], Q_MAX[i]), name
    mirror = model.joint("panda_finger_joint2")
    assert tuple(model.jnt_range[mirror.id]) == (Q_MIN[7], Q_MAX[7])


def test_actuator_force_ranges_are_the_effort_limits(model):
    for i, name in enumerate(CONTROLLER_JOINTS):
        joint_id = model.joint(name).id
        actuators = np.flatnonzero(model.actuator_trnid[:, 0] == joint_id)
        assert len(actuators) == 1, name
        actuator = actuators[0]
        assert model.actuator_forcelimited[actuator], name
        assert tuple(model.actuator_forcerange[actuator]) == (-EFFORT[i], EFFORT[i]), name
        assert tuple(model.actuator_ctrlrange[actuator]) == (Q_MIN[i], Q_MAX[i]), name


def test_joint_limits_yaml_has_the_published_values():
    with open(PANDA_DIR / "joint_limits.yaml", encoding="utf-8") as stream:
        table = yaml.safe_load(stream)["joint_limits"]
    assert tuple(table) == CONTROLLER_JOINTS
    for i, name in enumerate(CONTROLLER_JOINTS):
        entry = table[name]
        for flag in ("position", "velocity", "acceleration", "jerk", "effort"):
            assert entry[f"has_{flag}_limits"] is True, (name, flag)
        assert entry["min_position"] == Q_MIN[i], name
        assert entry["max_position"] == Q_MAX[i], name
        assert entry["max_velocity"] == VELOCITY[i], name
        assert entry["max_acceleration"] == ACCELERATION[i], name
        assert entry["max_jerk"] == JERK[i], name
        assert entry["max_effort"] == EFFORT[i], name


def test_home_is_inside_the_limits_and_points_the_tool_down(model):
    with open(PANDA_DIR / "robot.yaml", encoding="utf-8") as stream:
        robot = yaml.safe_load(stream)
    assert tuple(robot["controller_joints"]) == CONTROLLER_JOINTS
    home = np.asarray(robot["home"], dtype=float)
    assert home.shape == (8,)
    assert np.all(home >= Q_MIN) and np.all(home <= Q_MAX)
    assert home[7] == 0.0  # fingers closed
    data = mujoco.MjData(model)
    position, rotation = _site_pose(model, data, home[:7], robot["tool_frame"])
    assert np.linalg.norm(position - [0.45, 0.0, 0.20]) < 0.02, position
    assert rotation[:, 2] @ [0.0, 0.0, -1.0] > 0.99
    np.testing.assert_allclose(position, dh_tcp(home[:7])[:3, 3], atol=POSITION_TOLERANCE)
    lower, upper = (np.asarray(robot["workspace"][k], dtype=float) for k in ("lower", "upper"))
    assert np.all(position > lower) and np.all(position < upper)
