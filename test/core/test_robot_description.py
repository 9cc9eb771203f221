"""Robot descriptions: both shipped arms agree with their models, and bad ones are refused.

mujoco comes through ``simreal_ros.sim``, so its headless GL default is set before mujoco loads.
"""

import shutil
import textwrap

import numpy as np
import pytest
import yaml

from simreal_ros.robot import description as robot_description
from simreal_ros.robot.description import (
    SHIPPED_ROBOTS,
    load_robot_description,
    parse_robot_description,
    resolve_robot_path,
)
from simreal_ros.robot.description_record import RobotDescriptionError
from simreal_ros.robot.model import compile_robot, compile_scene
from simreal_ros.sim.physics import ArmPhysics, mujoco

FIRST_ARM_ORDER = (
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "wrist_1_joint",
    "wrist_2_joint",
    "wrist_3_joint",
    "gripper_joint",
)


@pytest.fixture(params=SHIPPED_ROBOTS)
def robot(request):
    return load_robot_description(request.param)


def test_the_default_arm_keeps_its_controller_order():
    assert load_robot_description().joint_names == FIRST_ARM_ORDER
    assert load_robot_description("panda").num_joints == 8  # 7 arm joints and a finger


def test_array_shapes_and_read_only(robot):
    n = robot.num_joints
    for key in (
        "position_lower",
        "position_upper",
        "velocity_limit",
        "acceleration_limit",
        "jerk_limit",
        "effort_limit",
        "home_position",
    ):
        assert getattr(robot, key).shape == (n,), key
    assert np.all(robot.position_lower <= robot.home_position)
    assert np.all(robot.home_position <= robot.position_upper)
    assert robot.model_path.exists()
    assert len(robot.arm_joint_names) == n - 1
    assert robot.joint_names[robot.gripper_index] == robot.gripper_joint
    with pytest.raises(ValueError):
        robot.velocity_limit[0] = 1.0  # read-only: shared by every caller


def test_limits_lie_within_the_model(robot):
    model = compile_robot(robot)
    for index, name in enumerate(robot.joint_names):
        joint = model.joint(name)
        assert joint.range[0] <= robot.position_lower[index] + 1e-6, name
        assert joint.range[1] >= robot.position_upper[index] - 1e-6, name
        actuator = model.actuator(model.actuator_trnid[:, 0].tolist().index(joint.id))
        assert actuator.forcerange[1] >= robot.effort_limit[index] - 1e-6, name
    assert model.site(robot.tool_frame).id >= 0


def test_scene_holds_the_arm_and_the_task(robot):
    model = compile_scene(robot)
    assert model.opt.timestep == pytest.approx(0.002)
    assert model.ncam >= 1
    for name in ("cube", "goal"):
        assert model.body(name).id > 0
    assert model.nu == robot.num_joints


def test_home_pose_puts_the_tool_inside_the_workspace_pointing_down(robot):
    model = compile_robot(robot)
    data = mujoco.MjData(model)
    for index, name in enumerate(robot.joint_names):
        data.qpos[model.joint(name).qposadr[0]] = robot.home_position[index]
    mujoco.mj_kinematics(model, data)
    tool = data.site(robot.tool_frame)
    assert np.all(tool.xpos >= robot.workspace_lower)
    assert np.all(tool.xpos <= robot.workspace_upper)
    assert tool.xmat.reshape(3, 3)[2, 2] == pytest.approx(-1.0, abs=1e-2)


def test_holding_home_is_stable_at_the_model_timestep(robot):
    model = compile_scene(robot)
    data = mujoco.MjData(model)
    qpos = [model.joint(name).qposadr[0] for name in robot.joint_names]
    actuators = [
        model.actuator_trnid[:, 0].tolist().index(model.joint(name).id)
        for name in robot.joint_names
    ]
    data.qpos[qpos] = robot.home_position
    data.ctrl[actuators] = robot.home_position
    for _ in range(1000):
        mujoco.mj_step(model, data)
    assert np.all(np.isfinite(data.qpos))
    assert np.max(np.abs(data.qpos[qpos] - robot.home_position)) < 2e-3


# ------------------------------------------------------------------ bad descriptions
ARM_MJCF = """
<mujoco model="two_link">
  <compiler angle="radian" autolimits="true"/>
  <worldbody>
    <body name="link1">
      <joint name="j1" axis="0 0 1" range="-2 2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" contype="2" conaffinity="1"/>
      <body name="link2" pos="0.3 0 0">
        <joint name="j2" axis="0 1 0" range="-2 2"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" contype="2" conaffinity="1"/>
        <body name="flange" pos="0.3 0 0"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _limits(**overrides):
    entry = {
        "has_position_limits": True,
        "min_position": -1.5,
        "max_position": 1.5,
        "has_velocity_limits": True,
        "max_velocity": 2.0,
        "has_acceleration_limits": True,
        "max_acceleration": 10.0,
        "has_jerk_limits": True,
        "max_jerk": 500.0,
        "has_effort_limits": True,
        "max_effort": 20.0,
    }
    table = {"j1": dict(entry), "j2": dict(entry)}
    for key, value in overrides.items():
        joint, _, field = key.partition("__")
        if value is None:
            table[joint].pop(field, None)
        else:
            table[joint][field] = value
    return {"joint_limits": table}


def _write_robot(tmp_path, model=ARM_MJCF, limits=None, **fields):
    (tmp_path / "arm.xml").write_text(model)
    (tmp_path / "limits.yaml").write_text(yaml.safe_dump(limits or _limits()))
    raw = {
        "name": "two_link",
        "model": "arm.xml",
        "joint_limits": "limits.yaml",
        "controller_joints": ["j1", "j2"],
        "tool_frame": "flange",
        "home": [0.2, 0.3],
        "workspace": {"lower": [-1, -1, -1], "upper": [1, 1, 1]},
    }
    raw.update(fields)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _load(path):
    robot_description._load.cache_clear()
    return load_robot_description(path)


def test_a_user_arm_without_gripper_or_actuators_loads(tmp_path):
    robot = _load(_write_robot(tmp_path))
    assert robot.joint_names == ("j1", "j2")
    assert robot.gripper_joint is None and robot.arm_joint_names == ("j1", "j2")
    model = compile_scene(robot)  # a body as tool frame gets a site; servos are added
    assert model.nu == 2
    assert model.site("flange").id >= 0
    assert model.actuator_forcerange[0, 1] == pytest.approx(20.0)


def test_limits_of_joints_the_controller_does_not_drive_are_allowed(tmp_path):
    # A MoveIt joint_limits.yaml lists every joint; only controller joints are used.
    limits = _limits()
    limits["joint_limits"]["j2"]["max_velocity"] = 3.0
    robot = _load(_write_robot(tmp_path, limits=limits, controller_joints=["j1"], home=[0.2]))
    assert robot.joint_names == ("j1",) and robot.other_limited_joints == ("j2",)


def test_a_urdf_with_package_uris_gets_a_hint(tmp_path):
    mesh = '<collision><geometry><mesh filename="package://my_description/meshes/l.stl"/>'
    link = '<inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" '
    link += 'ixz="0" iyz="0"/></inertial>' + mesh + "</geometry></collision>"
    urdf = (
        f'<robot name="r"><link name="base"/><link name="l1">{link}</link>'
        f'<link name="flange"/><joint name="j1" type="revolute"><parent link="base"/>'
        '<child link="l1"/><limit lower="-2" upper="2" effort="30" velocity="2"/></joint>'
        '<joint name="j2" type="revolute"><parent link="l1"/><child link="flange"/>'
        '<limit lower="-2" upper="2" effort="30" velocity="2"/></joint></robot>'
    )
    (tmp_path / "arm.urdf").write_text(urdf)
    path = _write_robot(tmp_path)
    path.write_text(path.read_text().replace("model: arm.xml", "model: arm.urdf"))
    with pytest.raises(RobotDescriptionError, match="package:// URIs"):
        _load(path)


def test_position_limits_may_come_from_the_model_and_a_ros_parameter_file(tmp_path):
    limits = _limits(j1__has_position_limits=False)
    nested = {"controller_manager": {"ros__parameters": limits}}
    robot = _load(_write_robot(tmp_path, limits=nested))
    assert robot.position_lower[0] == pytest.approx(-2.0)
    assert robot.position_upper[1] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("limits", "fields", "model", "message"),
    [
        (None, {}, "<mujoco><worldbody><body", "arm.xml does not load"),
        (_limits(j2__max_velocity=None), {}, ARM_MJCF, r"joint_limits\.j2\.max_velocity"),
        (_limits(j1__max_jerk=-1.0), {}, ARM_MJCF, r"j1\.max_jerk = -1 must be positive"),
        (
            {"joint_limits": {**_limits()["joint_limits"], "j9": {}}},
            {},
            ARM_MJCF,
            "j9 that the model arm.xml does not have",
        ),
        (
            {
                "joint_limits": {
                    "j1": _limits()["joint_limits"]["j1"],
                    "j3": _limits()["joint_limits"]["j2"],
                }
            },
            {"controller_joints": ["j1", "j3"]},
            ARM_MJCF,
            "controller joint 'j3' is not in the model",
        ),
        (_limits(j1__max_position=2.5), {}, ARM_MJCF, "beyond the model's range"),
        (None, {"tool_frame": "tcp"}, ARM_MJCF, "tool_frame 'tcp' is neither a site nor"),
        (None, {"home": [0.2]}, ARM_MJCF, "home needs 2 values"),
        (None, {"home": [0.2, 1.9]}, ARM_MJCF, "home is outside the position limits of j2"),
        (None, {"gripper_joint": "finger"}, ARM_MJCF, "gripper_joint 'finger'"),
        (None, {"workspace": {"lower": [0, 0]}}, ARM_MJCF, r"workspace\.lower needs x, y"),
    ],
    ids=[
        "model_does_not_compile",
        "missing_velocity_limit",
        "negative_jerk",
        "limit_for_unknown_joint",
        "controller_joint_not_in_model",
        "limit_above_model",
        "no_tool_frame",
        "short_home",
        "home_outside_limits",
        "gripper_not_a_controller_joint",
        "bad_workspace",
    ],
)
def test_bad_descriptions_are_refused_naming_the_file_and_field(
    tmp_path, limits, fields, model, message
):
    path = _write_robot(tmp_path, model=model, limits=limits, **fields)
    with pytest.raises(RobotDescriptionError, match=message) as caught:
        _load(path)
    assert str(tmp_path) in str(caught.value)  # names the file


def test_effort_above_the_models_actuator_is_refused(tmp_path):
    model = ARM_MJCF.replace(
        "</worldbody>",
        '</worldbody><actuator><position joint="j1" kp="100" forcerange="-5 5"/></actuator>',
    )
    with pytest.raises(RobotDescriptionError, match="max_effort 20 is above"):
        _load(_write_robot(tmp_path, model=model))


@pytest.mark.parametrize(
    ("actuators", "message"),
    [
        ('<motor joint="j1" gear="1"/>', "is not a position servo"),
        ('<velocity joint="j1" kv="10"/>', "is not a position servo"),
        ('<position joint="j1" kp="50"/><position joint="j1" kp="60"/>', "has 2 actuators"),
    ],
)
def test_an_actuator_that_is_not_one_position_servo_is_refused(tmp_path, actuators, message):
    model = ARM_MJCF.replace("</worldbody>", f"</worldbody><actuator>{actuators}</actuator>")
    with pytest.raises(RobotDescriptionError, match=message):
        _load(_write_robot(tmp_path, model=model))


def test_a_urdf_model_compiles_with_its_tool_link(tmp_path):
    urdf = textwrap.dedent(
        """\
        <robot name="two_link">
          <link name="base"/>
          <link name="l1"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01"
            izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>
          <link name="l2"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01"
            izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>
          <link name="tool0"/>
          <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/>
            <axis xyz="0 0 1"/><limit lower="-2" upper="2" effort="30" velocity="2"/></joint>
          <joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/>
            <origin xyz="0 0 0.3"/><axis xyz="0 1 0"/>
            <limit lower="-2" upper="2" effort="30" velocity="2"/></joint>
          <joint name="tool" type="fixed"><parent link="l2"/><child link="tool0"/>
            <origin xyz="0.3 0 0"/></joint>
        </robot>
        """
    )
    (tmp_path / "arm.urdf").write_text(urdf)
    path = _write_robot(tmp_path, model=ARM_MJCF, tool_frame="tool0")
    text = path.read_text().replace("model: arm.xml", "model: arm.urdf")
    path.write_text(text)
    robot = _load(path)
    model = compile_robot(robot)
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    assert data.site("tool0").xpos == pytest.approx([0.3, 0.0, 0.3], abs=1e-9)
    # The massless tool link's mass is its carrier's, so profiles can scale mass.tool.
    assert ArmPhysics(robot).get_dynamics(["mass.tool"]) == {"mass.tool": pytest.approx(1.0)}


def test_a_robot_is_found_by_name_directory_or_file(tmp_path):
    assert resolve_robot_path("panda").name == "robot.yaml"
    path = _write_robot(tmp_path)
    assert resolve_robot_path(tmp_path) == path.resolve()
    assert resolve_robot_path(path) == path.resolve()
    with pytest.raises(RobotDescriptionError, match="no such robot"):
        resolve_robot_path(tmp_path / "missing")


def test_a_process_drives_one_arm(tmp_path):
    saved = robot_description._selected
    try:
        robot_description.select_robot("simreal_arm", replace=True)
        with pytest.raises(RobotDescriptionError, match="already drives"):
            robot_description.select_robot("panda")
        assert load_robot_description().name == "simreal_arm"
        robot_description.select_robot(None)  # "the graph's arm": no change
    finally:
        robot_description._selected = saved


def test_parse_alone_needs_no_model(tmp_path):
    path = _write_robot(tmp_path)
    shutil.copy(path, tmp_path / "copy.yaml")
    assert parse_robot_description(tmp_path / "copy.yaml").name == "two_link"


# ------------------------------------------------------------------ limits, tool, home
def test_every_missing_limit_is_reported_at_once_in_plain_english(tmp_path):
    limits = _limits(j1__max_effort=None, j1__max_acceleration=None, j2__has_jerk_limits=False)
    limits["joint_limits"]["j2"]["max_velocity"] = "fast"
    with pytest.raises(RobotDescriptionError) as caught:
        _load(_write_robot(tmp_path, limits=limits))
    message = str(caught.value)
    assert "4 problem(s)" in message
    for field in ("j1.max_effort", "j1.max_acceleration", "j2.max_jerk", "j2.max_velocity"):
        assert f"joint_limits.{field}" in message, field
    assert "an effort limit" in message and "an acceleration limit" in message
    assert "a jerk limit" in message and "a effort" not in message
    assert "'fast' is not a number" in message


def _urdf(effort: float = 30.0, velocity: float = 2.0) -> str:
    inertial = (
        '<inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" '
        'ixz="0" iyz="0"/></inertial>'
    )
    limit = f'<limit lower="-2" upper="2" effort="{effort}" velocity="{velocity}"/>'
    return (
        f'<robot name="r"><link name="base"/><link name="l1">{inertial}</link>'
        f'<link name="l2">{inertial}</link><link name="flange"/>'
        f'<joint name="j1" type="revolute"><parent link="base"/><child link="l1"/>'
        f'<axis xyz="0 0 1"/>{limit}</joint>'
        f'<joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/>'
        f'<origin xyz="0 0 0.3"/><axis xyz="0 1 0"/>{limit}</joint>'
        '<joint name="tip" type="fixed"><parent link="l2"/><child link="flange"/>'
        '<origin xyz="0.3 0 0"/></joint></robot>'
    )


def _write_urdf_robot(tmp_path, urdf: str, limits=None, **fields):
    path = _write_robot(tmp_path, limits=limits, **fields)
    (tmp_path / "arm.urdf").write_text(urdf)
    path.write_text(path.read_text().replace("model: arm.xml", "model: arm.urdf"))
    return path


@pytest.mark.parametrize(
    ("urdf", "field", "theirs", "source"),
    [
        (_urdf(effort=15.0), "max_effort 20", "15", "<limit effort>"),
        (_urdf(velocity=1.5), "max_velocity 2", "1.5", "<limit velocity>"),
    ],
    ids=["effort", "velocity"],
)
def test_a_limit_above_the_urdfs_own_is_refused_saying_which_is_stricter(
    tmp_path, urdf, field, theirs, source
):
    with pytest.raises(RobotDescriptionError) as caught:
        _load(_write_urdf_robot(tmp_path, urdf))
    message = str(caught.value)
    assert f"joint 'j1' {field} is above the model's {theirs}" in message
    assert f"joint 'j2' {field}" in message  # both joints, in one report
    assert source in message and "the model's is the more restrictive" in message
    assert f"to {theirs} or less" in message and str(tmp_path / "limits.yaml") in message
    # At or under the URDF's limit it loads.
    _load(_write_urdf_robot(tmp_path, _urdf()))


def test_a_tool_frame_on_a_link_with_an_offset_and_rpy(tmp_path):
    tool = {"link": "link2", "offset": [0.35, 0.0, 0.0], "rpy": [np.pi, 0.0, 0.0], "name": "tcp"}
    robot = _load(_write_robot(tmp_path, tool_frame=tool))
    assert robot.tool_frame == "tcp" and robot.tool_link == "link2"
    model = compile_robot(robot)
    data = mujoco.MjData(model)
    data.qpos[:] = [0.4, -0.7]
    mujoco.mj_kinematics(model, data)
    link = data.body("link2")
    rotation = link.xmat.reshape(3, 3)
    assert data.site("tcp").xpos == pytest.approx(link.xpos + rotation @ [0.35, 0, 0], abs=1e-9)
    flipped = rotation @ np.diag([1.0, -1.0, -1.0])  # roll by pi about the link's x
    assert data.site("tcp").xmat.reshape(3, 3) == pytest.approx(flipped, abs=1e-9)
    assert compile_scene(robot).site("tcp").id >= 0


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        ({"offset": [0, 0, 0.1]}, "link is missing"),
        ({"link": "link2", "offest": [0, 0, 0.1]}, "unknown: offest"),
        ({"link": "link2", "offset": [0, 0.1]}, r"tool_frame\.offset needs three numbers"),
        ({"link": "link9"}, "tool_frame.link 'link9' is not a body"),
    ],
)
def test_a_bad_tool_frame_mapping_is_refused(tmp_path, tool, message):
    with pytest.raises(RobotDescriptionError, match=message):
        _load(_write_robot(tmp_path, tool_frame=tool))


def test_a_home_outside_the_box_names_both_remedies_and_which_applies(tmp_path, capsys):
    from simreal_ros.cli.main import main

    # The flange at (0.6, 0, 0) at home [0, 0]: below a box whose floor is 0.005.
    box = {"lower": [0.2, -0.45, 0.005], "upper": [0.85, 0.45, 0.6]}
    _write_robot(tmp_path, home=[0.0, 0.0], workspace=box)
    robot_description._load.cache_clear()
    assert main(["robot", "check", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "0.5 cm below the box's lower z" in out
    assert "Either the home posture is wrong" in out and "widen workspace" in out
    assert f"simreal robot home {tmp_path}" in out
    # Tool in the table: the home is wrong, not the box.
    _write_robot(tmp_path, home=[0.0, 0.3], workspace=box)
    robot_description._load.cache_clear()
    assert main(["robot", "check", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "cm below the table top" in out and "the home posture is wrong, not the box" in out
    assert "widen" not in out
