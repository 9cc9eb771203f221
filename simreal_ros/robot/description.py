"""The arm's description: controller joint order, limits, tool frame, home pose, workspace.

One source for every node (sim bridge, safety, policy, recorder, learner): a robot is a
directory holding ``robot.yaml`` (or that file itself), which names

- ``model``: the arm's MJCF or URDF, compiled by MuJoCo (``robot/model.py``);
- ``joint_limits``: the controller joints' limits in the ros2_control ``joint_limits``
  convention (``has_velocity_limits``, ``max_velocity``, ...);
- ``controller_joints`` (the controller's order), ``gripper_joint`` (optional),
  ``tool_frame`` (a site or body), ``home`` and the ``workspace`` box.

The arm is chosen once for the whole graph (``robot:=``, ``--robot``): a shipped arm by
name (``SHIPPED_ROBOTS``) or a path. Any number of joints, any names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from simreal_ros.robot.description_record import RobotDescription, RobotDescriptionError
from simreal_ros.robot.model import check_against_model

ARMS_DIR = Path(__file__).resolve().parent / "arms"
DESCRIPTION_FILE = "robot.yaml"
# Arms shipped with the package, by name; any other is given by its path.
SHIPPED_ROBOTS = ("simreal_arm", "panda")
DEFAULT_ROBOT = "simreal_arm"

# The ros2_control joint_limits fields the safety filter needs, per controller joint.
LIMIT_FIELDS = (
    ("velocity", "has_velocity_limits", "max_velocity"),
    ("acceleration", "has_acceleration_limits", "max_acceleration"),
    ("jerk", "has_jerk_limits", "max_jerk"),
    ("effort", "has_effort_limits", "max_effort"),
)


EXTRA_LIMITS = "__other_joints__"


def _array(values) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    array.setflags(write=False)  # shared by every caller; nobody may edit limits in place
    return array


def resolve_robot_path(robot: str | Path | None) -> Path:
    """The ``robot.yaml`` of a shipped arm's name, a robot directory or the file itself."""
    if robot is None or str(robot) == "":
        robot = DEFAULT_ROBOT
    if str(robot) in SHIPPED_ROBOTS:
        return ARMS_DIR / str(robot) / DESCRIPTION_FILE
    path = Path(robot).expanduser()
    if path.is_dir():
        path = path / DESCRIPTION_FILE
    if not path.is_file():
        raise RobotDescriptionError(
            f"robot {str(robot)!r}: no such robot. Give a shipped arm "
            f"({', '.join(SHIPPED_ROBOTS)}), a directory holding {DESCRIPTION_FILE}, or the "
            "path of such a file (see docs/configuration.md, 'Bring your own arm')."
        )
    return path.resolve()


def _read_yaml(path: Path, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as stream:
            return yaml.safe_load(stream)
    except FileNotFoundError as error:
        raise RobotDescriptionError(f"{what} {path} does not exist.") from error
    except yaml.YAMLError as error:
        raise RobotDescriptionError(f"{what} {path} is not valid YAML: {error}") from error


def _field(raw: Mapping, key: str, path: Path, hint: str) -> Any:
    if key not in raw or raw[key] is None:
        raise RobotDescriptionError(f"{path}: field {key!r} is missing; {hint}")
    return raw[key]


def _number(value: Any, path: Path, field: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as error:
        raise RobotDescriptionError(f"{path}: {field} = {value!r} is not a number.") from error
    if not np.isfinite(number):
        raise RobotDescriptionError(f"{path}: {field} = {value!r} is not finite.")
    return number


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _limit_fields(entry: Mapping) -> list[tuple[str, str, str]]:
    """(name, flag, key) of every field an entry must have: position limits when its
    has_position_limits is true, and the four the safety filter needs."""
    position = [("lower", "has_position_limits", "min_position"),
                ("upper", "has_position_limits", "max_position")]  # fmt: skip
    return (position if entry.get("has_position_limits", False) else []) + list(LIMIT_FIELDS)


def read_joint_limits(path: Path, joints: tuple[str, ...]) -> dict[str, Any]:
    """Per controller joint: lower, upper (None when the file leaves them to the model),
    velocity, acceleration, jerk and effort, from a ros2_control joint_limits YAML; under
    ``EXTRA_LIMITS``, the other joints the file names.

    Accepts the bare ``joint_limits:`` mapping or one nested under a node's
    ``ros__parameters``, as a ros2_control parameter file holds it.
    """
    raw = _read_yaml(path, "joint limits file")
    if isinstance(raw, Mapping) and "joint_limits" not in raw:
        for value in raw.values():  # <node>: {ros__parameters: {joint_limits: ...}}
            if isinstance(value, Mapping) and isinstance(value.get("ros__parameters"), Mapping):
                raw = value["ros__parameters"]
                break
    if not isinstance(raw, Mapping) or not isinstance(raw.get("joint_limits"), Mapping):
        raise RobotDescriptionError(
            f"{path}: no 'joint_limits' mapping; write joint_limits: {{<joint>: "
            "{has_velocity_limits: true, max_velocity: ..., ...}} (the ros2_control "
            "joint_limits convention)."
        )
    table = raw["joint_limits"]
    limits: dict[str, Any] = {}
    # Every problem of the file at once: a user fixing one per run needs as many runs.
    problems: list[str] = []
    for joint in joints:
        entry = table.get(joint)
        if not isinstance(entry, Mapping):
            problems.append(
                f"joint_limits.{joint} is missing; every controller joint needs velocity, "
                "acceleration, jerk and effort limits."
            )
            continue
        values: dict[str, float | None] = {"lower": None, "upper": None}
        for name, flag, key in _limit_fields(entry):
            where = f"joint_limits.{joint}.{key}"
            if not entry.get(flag, False) or key not in entry or entry[key] is None:
                if name in ("lower", "upper"):
                    problems.append(f"{where} is missing; {joint} has position limits.")
                else:
                    problems.append(
                        f"{where} is missing (or {flag} is false); the safety filter needs "
                        f"{_article(name)} {name} limit on every joint: set {flag}: true and "
                        f"{key}."
                    )
                continue
            try:
                value = _number(entry[key], path, where)
            except RobotDescriptionError as error:
                problems.append(str(error).removeprefix(f"{path}: "))
                continue
            if name not in ("lower", "upper") and value <= 0:
                problems.append(f"{where} = {value:g} must be positive.")
                continue
            values[name] = value
        limits[joint] = values
    if problems:
        listing = "\n  - ".join(problems)
        raise RobotDescriptionError(
            f"{path}: {len(problems)} problem(s) with the joint limits:\n  - {listing}"
        )
    # Entries for joints the controller does not drive (a MoveIt file lists every joint)
    # are allowed, but each must name a joint of the model (checked in robot.model).
    limits[EXTRA_LIMITS] = sorted(set(map(str, table)) - set(joints))
    return limits


TOOL_FRAME_HINT = (
    "name the tool's site or body, or give {link: <link>, offset: [x, y, z]} to add one."
)
DEFAULT_TOOL_SITE = "tool_frame"


def _tool_frame(raw: Any, path: Path) -> dict[str, Any]:
    """The description's tool fields from ``tool_frame``: a site or body of the model by
    name, or ``{link, offset, rpy, name}`` for a tool point the model does not mark (a
    URDF without a tool link), added as a site on compile."""
    if not isinstance(raw, Mapping):
        return {"tool_frame": str(raw)}
    unknown = sorted(set(map(str, raw)) - {"link", "offset", "rpy", "name"})
    if unknown or "link" not in raw:
        raise RobotDescriptionError(
            f"{path}: tool_frame as a mapping takes link (required), offset [x, y, z] in "
            f"metres, rpy [roll, pitch, yaw] in radians and name"
            f"{'; unknown: ' + ', '.join(unknown) if unknown else '; link is missing'}."
        )
    vectors = {}
    for key in ("offset", "rpy"):
        value = raw.get(key, [0.0, 0.0, 0.0])
        if not isinstance(value, list) or len(value) != 3:
            raise RobotDescriptionError(f"{path}: tool_frame.{key} needs three numbers.")
        vectors[key] = tuple(_number(v, path, f"tool_frame.{key}") for v in value)
    return {
        "tool_frame": str(raw.get("name") or DEFAULT_TOOL_SITE),
        "tool_link": str(raw["link"]),
        "tool_offset": vectors["offset"],
        "tool_rpy": vectors["rpy"],
    }


def parse_robot_description(path: str | Path) -> RobotDescription:
    """Read a ``robot.yaml`` and its joint limits; no model checks (see ``robot.model``).

    Position limits the limits file leaves out are taken from the model, and a limit
    above the model's is refused, by ``load_robot_description``.
    """
    path = Path(path)
    raw = _read_yaml(path, "robot description")
    if not isinstance(raw, Mapping):
        raise RobotDescriptionError(f"{path}: a robot description is a YAML mapping.")
    hint = "see docs/configuration.md, 'Bring your own arm'."
    name = str(_field(raw, "name", path, hint))
    joints_raw = _field(raw, "controller_joints", path, "list the controller's joint names.")
    if not isinstance(joints_raw, list) or not joints_raw:
        raise RobotDescriptionError(f"{path}: controller_joints must be a non-empty list.")
    joints = tuple(str(j) for j in joints_raw)
    if len(set(joints)) != len(joints):
        raise RobotDescriptionError(f"{path}: controller_joints names a joint twice.")
    gripper = raw.get("gripper_joint")
    if gripper is not None and str(gripper) not in joints:
        raise RobotDescriptionError(
            f"{path}: gripper_joint {gripper!r} is not one of controller_joints."
        )
    limits_path = (path.parent / str(_field(raw, "joint_limits", path, hint))).resolve()
    limits = read_joint_limits(limits_path, joints)
    home_raw = _field(raw, "home", path, "give the home pose, one value per joint.")
    if isinstance(home_raw, Mapping):
        missing = [j for j in joints if j not in home_raw]
        if missing:
            raise RobotDescriptionError(f"{path}: home has no value for {', '.join(missing)}.")
        home_raw = [home_raw[j] for j in joints]
    if not isinstance(home_raw, list) or len(home_raw) != len(joints):
        raise RobotDescriptionError(
            f"{path}: home needs {len(joints)} values (one per controller joint, in "
            "controller order) or a mapping joint -> value."
        )
    home = [_number(v, path, f"home[{i}]") for i, v in enumerate(home_raw)]
    workspace = _field(raw, "workspace", path, "give workspace.lower and workspace.upper.")
    corners = []
    for key in ("lower", "upper"):
        corner = workspace.get(key) if isinstance(workspace, Mapping) else None
        if not isinstance(corner, list) or len(corner) != 3:
            raise RobotDescriptionError(f"{path}: workspace.{key} needs x, y and z (metres).")
        corners.append([_number(v, path, f"workspace.{key}") for v in corner])
    nan = float("nan")
    column = {
        key: [nan if limits[j][key] is None else limits[j][key] for j in joints]
        for key in ("lower", "upper", "velocity", "acceleration", "jerk", "effort")
    }
    return RobotDescription(
        name=name,
        joint_names=joints,
        position_lower=_array(column["lower"]),
        position_upper=_array(column["upper"]),
        velocity_limit=_array(column["velocity"]),
        acceleration_limit=_array(column["acceleration"]),
        jerk_limit=_array(column["jerk"]),
        effort_limit=_array(column["effort"]),
        home_position=_array(home),
        model_path=(path.parent / str(_field(raw, "model", path, hint))).resolve(),
        **_tool_frame(_field(raw, "tool_frame", path, TOOL_FRAME_HINT), path),
        workspace_lower=_array(corners[0]),
        workspace_upper=_array(corners[1]),
        gripper_joint=None if gripper is None else str(gripper),
        source=path.resolve(),
        joint_limits_path=limits_path,
        other_limited_joints=tuple(limits[EXTRA_LIMITS]),
    )


@lru_cache(maxsize=8)
def _load(path: Path) -> RobotDescription:
    return check_against_model(parse_robot_description(path))


# The arm this process drives, chosen once (a node's ``robot`` parameter, ``--robot``).
_selected: Path | None = None


def select_robot(robot: str | Path | None, replace: bool = False) -> RobotDescription:
    """Make ``robot`` the arm of this process, for every later ``load_robot_description()``.

    A process drives one arm: choosing a different one later is refused (``replace`` is
    for tests that run several arms in one process, one after the other).
    """
    global _selected
    given = robot is not None and str(robot) != ""
    path = resolve_robot_path(robot) if given else selected_robot_path()
    description = _load(path)  # check it before it becomes the process's arm
    if _selected is not None and _selected != path and not replace:
        raise RobotDescriptionError(
            f"this process already drives the robot {_selected}; it cannot also drive "
            f"{path}. Start one graph per arm."
        )
    _selected = path
    return description


def selected_robot_path() -> Path:
    """The process's arm: the one selected, else ``$SIMREAL_ROBOT``, else the default."""
    if _selected is not None:
        return _selected
    return resolve_robot_path(os.environ.get("SIMREAL_ROBOT") or DEFAULT_ROBOT)


def load_robot_description(robot: str | Path | None = None) -> RobotDescription:
    """The arm named or found at ``robot`` (None: this process's arm, see
    ``select_robot``), checked against its model. Cached per file; arrays are read-only."""
    if robot is None or str(robot) == "":
        return _load(selected_robot_path())
    return _load(resolve_robot_path(robot))


def robot_reference(path: str | Path) -> str:
    """How another process finds the arm of ``path`` (a robot.yaml or its directory): a
    shipped arm by name (so a cluster node with its own checkout finds it), else the path.
    ``load_robot_description(robot_reference(robot.source))`` is ``robot`` again."""
    path = resolve_robot_path(Path(path))
    for name in SHIPPED_ROBOTS:
        if path.resolve() == (ARMS_DIR / name / DESCRIPTION_FILE).resolve():
            return name
    return str(path)
