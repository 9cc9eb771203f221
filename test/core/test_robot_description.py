"""The robot description agrees with the MJCF model every node and the sim use.

mujoco comes through ``simreal_ros.sim``, so its headless GL default is set before mujoco loads.
"""

import numpy as np
import pytest

from simreal_ros.robot.description import load_robot_description, parse_robot_description
from simreal_ros.sim.physics import mujoco

CONTROLLER_ORDER = (
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "wrist_1_joint",
    "wrist_2_joint",
    "wrist_3_joint",
    "gripper_joint",
)


def test_joint_order_and_array_shapes():
    robot = load_robot_description()
    assert robot.joint_names == CONTROLLER_ORDER
    for key in (
        "position_lower",
        "position_upper",
        "velocity_limit",
        "acceleration_limit",
        "jerk_limit",
        "effort_limit",
        "home_position",
    ):
        assert getattr(robot, key).shape == (7,), key
    assert np.all(robot.position_lower <= robot.home_position)
    assert np.all(robot.home_position <= robot.position_upper)
    assert robot.mjcf_path.exists()
    with pytest.raises(ValueError):
        robot.velocity_limit[0] = 1.0  # read-only: shared by every caller


def test_limits_match_the_mjcf_model():
    robot = load_robot_description()
    model = mujoco.MjModel.from_xml_path(str(robot.mjcf_path))
    for index, name in enumerate(robot.joint_names):
        joint = model.joint(name)
        assert joint.range[0] == pytest.approx(robot.position_lower[index], abs=1e-6), name
        assert joint.range[1] == pytest.approx(robot.position_upper[index], abs=1e-6), name
        actuator = model.actuator(model.actuator_trnid[:, 0].tolist().index(joint.id))
        assert actuator.ctrlrange == pytest.approx(joint.range, abs=1e-6), name
        assert actuator.forcerange[1] == pytest.approx(robot.effort_limit[index]), name
    assert model.site(robot.ee_site).id >= 0
    assert model.opt.timestep == pytest.approx(0.002)
    assert model.ncam >= 1


def test_home_pose_puts_the_tool_inside_the_workspace_pointing_down():
    robot = load_robot_description()
    model = mujoco.MjModel.from_xml_path(str(robot.mjcf_path))
    data = mujoco.MjData(model)
    for index, name in enumerate(robot.joint_names):
        data.qpos[model.joint(name).qposadr[0]] = robot.home_position[index]
    mujoco.mj_kinematics(model, data)
    tool = data.site(robot.ee_site)
    assert np.all(tool.xpos >= robot.workspace_lower)
    assert np.all(tool.xpos <= robot.workspace_upper)
    assert tool.xmat.reshape(3, 3)[2, 2] == pytest.approx(-1.0, abs=1e-3)


def test_holding_home_is_stable_at_the_model_timestep():
    robot = load_robot_description()
    model = mujoco.MjModel.from_xml_path(str(robot.mjcf_path))
    data = mujoco.MjData(model)
    for index, name in enumerate(robot.joint_names):
        data.qpos[model.joint(name).qposadr[0]] = robot.home_position[index]
    data.ctrl[:] = robot.home_position
    for _ in range(1000):
        mujoco.mj_step(model, data)
    assert np.all(np.isfinite(data.qpos))
    arm = [model.joint(name).qposadr[0] for name in robot.joint_names]
    assert np.max(np.abs(data.qpos[arm] - robot.home_position)) < 1e-3


def test_malformed_description_is_refused_with_a_clear_error(tmp_path):
    bad = tmp_path / "limits.yaml"
    bad.write_text("name: x\nmjcf: arm.xml\nee_site: ee_site\njoints:\n  - {name: a}\n")
    with pytest.raises(ValueError, match="malformed"):
        parse_robot_description(bad)
