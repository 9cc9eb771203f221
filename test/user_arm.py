"""A user's own arm for tests: 4 joints, no gripper, its own joint names, not shipped.

``write_user_arm`` writes it as a user would: an MJCF of the arm alone, a ros2_control
joint_limits YAML and a robot.yaml. Variants cover what descriptions differ in: the tool
frame a site or a (massless) body, the limits bare or nested in a node's
``ros__parameters``, and one joint's position limits left to the model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

JOINT_SUFFIXES = ("yaw", "shoulder", "elbow", "wrist")
# Tool at (0.45, 0, 0.20) m pointing down (damped least-squares IK on the model).
HOME = np.array([0.0, -0.7724, 1.6166, -0.8442])
VELOCITY_LIMITS = np.array([1.5, 1.2, 1.5, 2.0])
_RANGES = ((-2.7, 2.7), (-1.9, 1.1), (-0.2, 2.5), (-2.4, 2.4))
_EFFORTS = (60.0, 60.0, 30.0, 10.0)

_MJCF = """\
<mujoco model="{name}">
  <compiler angle="radian" autolimits="true"/>
  <default>
    <joint damping="1.0" armature="0.05"/>
    <geom contype="2" conaffinity="1" rgba="0.8 0.5 0.3 1"/>
  </default>
  <worldbody>
    <body name="{name}_base">
      <geom type="cylinder" size="0.06 0.05" pos="0 0 0.05" contype="0" conaffinity="0"/>
      <body name="{name}_turret" pos="0 0 0.1" gravcomp="1">
        <inertial pos="0 0 0.1" mass="2.0" diaginertia="0.01 0.01 0.005"/>
        <joint name="{name}_yaw" axis="0 0 1" range="-2.8 2.8"/>
        <geom type="capsule" size="0.04" fromto="0 0 0 0 0 0.2" contype="0" conaffinity="0"/>
        <body name="{name}_upper" pos="0 0 0.2" gravcomp="1">
          <inertial pos="0.175 0 0" mass="1.5" diaginertia="0.002 0.016 0.016"/>
          <joint name="{name}_shoulder" axis="0 1 0" range="-2.0 1.2"/>
          <geom type="capsule" size="0.035" fromto="0 0 0 0.35 0 0"/>
          <body name="{name}_fore" pos="0.35 0 0" gravcomp="1">
            <inertial pos="0.15 0 0" mass="1.0" diaginertia="0.001 0.008 0.008"/>
            <joint name="{name}_elbow" axis="0 1 0" range="-0.3 2.6"/>
            <geom type="capsule" size="0.03" fromto="0 0 0 0.3 0 0"/>
            <body name="{name}_hand" pos="0.3 0 0" gravcomp="1">
              <inertial pos="0 0 -0.06" mass="0.3" diaginertia="0.0005 0.0005 0.0002"/>
              <joint name="{name}_wrist" axis="0 1 0" range="-2.5 2.5"/>
              <geom type="capsule" size="0.025" fromto="0 0 0 0 0 -0.12"/>
              {tool}
            </body>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
# z down, x along -y at zero yaw; as a body it is massless, like a URDF's tool0.
_TOOL_SITE = '<site name="{name}_tool" pos="0 0 -0.12" quat="0 0.7071068 -0.7071068 0"/>'
_TOOL_BODY = '<body name="{name}_tool" pos="0 0 -0.12" quat="0 0.7071068 -0.7071068 0"/>'


def joint_names(name: str) -> tuple[str, ...]:
    return tuple(f"{name}_{suffix}" for suffix in JOINT_SUFFIXES)


def _limits(low: float | None, high: float | None, velocity: float, effort: float) -> dict:
    entry: dict = {"has_position_limits": low is not None}
    if low is not None:
        entry.update(min_position=low, max_position=high)
    entry.update(
        has_velocity_limits=True,
        max_velocity=velocity,
        has_acceleration_limits=True,
        max_acceleration=8.0,
        has_jerk_limits=True,
        max_jerk=2000.0,
        has_effort_limits=True,
        max_effort=effort,
    )
    return entry


def write_user_arm(
    directory: Path,
    name: str = "desk_arm",
    tool_as_body: bool = False,
    nested_limits: bool = False,
    wrist_limits_from_model: bool = False,
) -> Path:
    """Write the arm's three files into ``directory``; returns the directory."""
    tool = (_TOOL_BODY if tool_as_body else _TOOL_SITE).format(name=name)
    (directory / f"{name}.xml").write_text(_MJCF.format(name=name, tool=tool))
    table = {}
    for i, joint in enumerate(joint_names(name)):
        low, high = _RANGES[i]
        if wrist_limits_from_model and i == 3:
            low = high = None
        table[joint] = _limits(low, high, float(VELOCITY_LIMITS[i]), _EFFORTS[i])
    limits: dict = {"joint_limits": table}
    if nested_limits:  # as a ros2_control parameter file holds it
        limits = {"controller_manager": {"ros__parameters": limits}}
    (directory / "limits.yaml").write_text(yaml.safe_dump(limits))
    description = {
        "name": name,
        "model": f"{name}.xml",
        "joint_limits": "limits.yaml",
        "controller_joints": list(joint_names(name)),
        "tool_frame": f"{name}_tool",
        "home": HOME.tolist(),
        "workspace": {"lower": [0.20, -0.45, 0.005], "upper": [0.85, 0.45, 0.60]},
    }
    (directory / "robot.yaml").write_text(yaml.safe_dump(description, sort_keys=False))
    return directory
