"""The robot description record: an arm's controller joints and per-joint arrays.

``RobotDescription`` is what every node and tool reads about the arm; it is read from a
``robot.yaml`` by ``robot.description`` and checked against the arm's model by
``robot.model``, which both import it from here. ``RobotDescriptionError`` is the error of
a description that cannot be used.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np


class RobotDescriptionError(ValueError):
    """A robot description that cannot be used; the message names the file and field."""


@dataclasses.dataclass(frozen=True, eq=False)
class RobotDescription:
    """Joint names in controller order and per-joint arrays in that same order.

    Units: rad (rad/s, ...) for revolute joints; metres (m/s, ...) for prismatic ones, such
    as a gripper finger's opening.
    """

    name: str
    joint_names: tuple[str, ...]
    position_lower: np.ndarray
    position_upper: np.ndarray
    velocity_limit: np.ndarray
    acceleration_limit: np.ndarray
    jerk_limit: np.ndarray
    effort_limit: np.ndarray
    home_position: np.ndarray
    model_path: Path
    tool_frame: str  # the tool's site in the compiled model (added there for a tool_link)
    workspace_lower: np.ndarray
    workspace_upper: np.ndarray
    gripper_joint: str | None = None
    source: Path | None = None  # the robot.yaml it was read from
    joint_limits_path: Path | None = None
    other_limited_joints: tuple[str, ...] = ()  # named in the limits, not controlled
    joint_units: tuple[str, ...] | None = None  # "rad"/"m" per joint, from the model
    # A tool frame the model lacks: a site named ``tool_frame`` added on compile to the body
    # ``tool_link`` at ``tool_offset`` (m) and ``tool_rpy`` (rad, URDF roll-pitch-yaw).
    tool_link: str | None = None
    tool_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    tool_rpy: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    @property
    def arm_indices(self) -> tuple[int, ...]:
        """Controller indices of the arm's joints (every joint but the gripper)."""
        return tuple(i for i, n in enumerate(self.joint_names) if n != self.gripper_joint)

    @property
    def arm_joint_names(self) -> tuple[str, ...]:
        return tuple(self.joint_names[i] for i in self.arm_indices)

    @property
    def gripper_index(self) -> int | None:
        if self.gripper_joint is None:
            return None
        return self.joint_names.index(self.gripper_joint)

    def limits_summary(self) -> dict[str, Any]:
        """The limits as plain lists, keyed by joint: what a checkpoint records of its arm."""
        return {
            name: {
                "lower": float(self.position_lower[i]),
                "upper": float(self.position_upper[i]),
                "velocity": float(self.velocity_limit[i]),
            }
            for i, name in enumerate(self.joint_names)
        }
