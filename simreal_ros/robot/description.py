"""The arm's description: controller joint order, limits, home pose, model file.

One source for every node (sim bridge, safety, policy, recorder): joint names and limits
come from ``limits.yaml`` beside the MJCF model ``arm.xml``. Plain Python, no MuJoCo or ROS
import, so the safety node can load it cheaply.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml

ROBOT_DIR = Path(__file__).resolve().parent
LIMITS_FILE = ROBOT_DIR / "limits.yaml"


@dataclasses.dataclass(frozen=True, eq=False)
class RobotDescription:
    """Joint names in controller order and per-joint arrays in that same order.

    Units: rad (rad/s, ...) for the six revolute joints; metres (m/s, ...) for
    ``gripper_joint``, the opening of one finger (0 = closed).
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
    mjcf_path: Path
    ee_site: str
    workspace_lower: np.ndarray
    workspace_upper: np.ndarray

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    @property
    def arm_joint_names(self) -> tuple[str, ...]:
        """The six revolute joints (everything but the gripper)."""
        return self.joint_names[:-1]


def _array(values) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    array.setflags(write=False)  # shared by every caller; nobody may edit limits in place
    return array


def parse_robot_description(path: Path) -> RobotDescription:
    """Read a limits YAML (see ``limits.yaml``); errors name the file and the field."""
    with open(path, encoding="utf-8") as stream:
        raw = yaml.safe_load(stream)
    try:
        joints = raw["joints"]
        fields = ("lower", "upper", "velocity", "acceleration", "jerk", "effort", "home")
        columns = {key: [float(joint[key]) for joint in joints] for key in fields}
        names = tuple(str(joint["name"]) for joint in joints)
        description = RobotDescription(
            name=str(raw["name"]),
            joint_names=names,
            position_lower=_array(columns["lower"]),
            position_upper=_array(columns["upper"]),
            velocity_limit=_array(columns["velocity"]),
            acceleration_limit=_array(columns["acceleration"]),
            jerk_limit=_array(columns["jerk"]),
            effort_limit=_array(columns["effort"]),
            home_position=_array(columns["home"]),
            mjcf_path=(path.parent / raw["mjcf"]).resolve(),
            ee_site=str(raw["ee_site"]),
            workspace_lower=_array(raw["workspace"]["lower"]),
            workspace_upper=_array(raw["workspace"]["upper"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"robot description {path} is malformed ({error!r}); every joint needs name, "
            "lower, upper, velocity, acceleration, jerk, effort and home, and the file needs "
            "name, mjcf, ee_site and workspace.lower/upper."
        ) from error
    if np.any(description.position_lower >= description.position_upper):
        raise ValueError(f"robot description {path}: a joint has lower >= upper.")
    for key in ("velocity_limit", "acceleration_limit", "jerk_limit", "effort_limit"):
        if np.any(getattr(description, key) <= 0):
            raise ValueError(f"robot description {path}: every {key} must be positive.")
    return description


@lru_cache(maxsize=1)
def load_robot_description() -> RobotDescription:
    """The arm this package drives (cached; the arrays are read-only)."""
    return parse_robot_description(LIMITS_FILE)
