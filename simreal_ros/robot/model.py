"""The arm's MuJoCo model: compiled from its MJCF or URDF, checked against its description.

``compile_robot`` gives the arm alone (forward kinematics for the policy and the safety
filter); ``compile_scene`` attaches it at the world origin of the task scene
(``sim/scene.xml``: table, cube, goal, cameras) for the simulator. Both go through
``robot_spec``, so the simulator and the kinematics can never see different arms.

What a model may lack is filled in the way a ros2_control arm behaves:

- a controller joint without an actuator gets a position servo that reaches its effort
  limit at ``AUTO_SERVO_ERROR`` of tracking error, critically damped, force-limited to
  the effort limit;
- a URDF's bodies are gravity-compensated (a position-controlled arm's drives hold it up),
  and its fixed-joint links are kept, so a tool link can be the tool frame;
- a ``tool_frame`` that names a body gets a site of the same name at the body's origin,
  and one given as ``{link, offset, rpy}`` a site there;
- adjacent links (a link and its parent) and the fixed base never collide, whatever the
  model's collision bits say (``exclude_adjacent_links``).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import mujoco
import numpy as np

from simreal_ros.robot.description_record import RobotDescription, RobotDescriptionError

SCENE_FILE = Path(__file__).resolve().parents[1] / "sim" / "scene.xml"
AUTO_SERVO_ERROR = 0.05  # rad (m for a slide) of tracking error at the effort limit
_LIMIT_SLACK = 1e-6


def _load_spec(description: RobotDescription) -> mujoco.MjSpec:
    path = description.model_path
    if not path.is_file():
        raise RobotDescriptionError(
            f"{description.source}: model {path} does not exist; 'model' is the MJCF or URDF "
            "file, relative to robot.yaml."
        )
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as error:  # MuJoCo raises ValueError with its parser's message
        raise RobotDescriptionError(
            f"{description.source}: model {path} does not load in MuJoCo: {error}"
            f"{_package_hint(path)}"
        ) from error
    if path.suffix.lower() == ".urdf":
        spec.compiler.fusestatic = False
        for body in spec.bodies:
            if body.name != "world":
                body.gravcomp = 1.0
    return spec


def degrees_hint(description: RobotDescription) -> str:
    """A hint when an MJCF reads its angles in degrees (MuJoCo's default) while every
    hinge range it writes looks like radians (all within ±2π): a range="-3.1 3.1" meant
    as ±3.1 rad compiles to ±0.054 rad. Empty when that does not look like the case."""
    path = description.model_path
    if path.suffix.lower() == ".urdf" or not path.is_file():
        return ""
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception:  # _load_spec reports a model that does not load
        return ""
    if not spec.compiler.degree:
        return ""
    ranges = [
        (joint.name, float(joint.range[0]), float(joint.range[1]))
        for joint in spec.joints
        if joint.type == mujoco.mjtJoint.mjJNT_HINGE and joint.range[0] < joint.range[1]
    ]
    if not ranges or any(max(abs(low), abs(high)) > 2 * np.pi + 1e-3 for _, low, high in ranges):
        return ""
    name, low, high = ranges[0]
    return (
        f" Hint: {path.name} reads angles in degrees (MuJoCo's default for MJCF), but its "
        f'hinge ranges look like radians ({name!r} range="{low:g} {high:g}" compiles to '
        f"[{np.radians(low):.3g}, {np.radians(high):.3g}] rad); add "
        '<compiler angle="radian"/> to the model.'
    )


def _joint_kinds(spec: mujoco.MjSpec) -> dict[str, mujoco.MjsJoint]:
    return {joint.name: joint for joint in spec.joints}


def robot_spec(description: RobotDescription) -> mujoco.MjSpec:
    """The arm's MjSpec with its tool site and one position servo per controller joint."""
    spec = _load_spec(description)
    joints = _joint_kinds(spec)
    where = f"{description.source}"
    for name in description.joint_names:
        joint = joints.get(name)
        if joint is None:
            raise RobotDescriptionError(
                f"{where}: controller joint {name!r} is not in the model "
                f"{description.model_path.name}; its joints are: {', '.join(sorted(joints))}."
            )
        if joint.type not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
            raise RobotDescriptionError(
                f"{where}: controller joint {name!r} is a ball or free joint; a position "
                "controller drives hinge (revolute) and slide (prismatic) joints only."
            )
    unknown = [name for name in description.other_limited_joints if name not in joints]
    if unknown:
        raise RobotDescriptionError(
            f"{description.joint_limits_path}: joint_limits names joint(s) "
            f"{', '.join(unknown)} that the model {description.model_path.name} does not have; "
            f"its joints are: {', '.join(sorted(joints))}."
        )
    tool = description.tool_frame
    sites = {site.name for site in spec.sites}
    if description.tool_link is not None:
        _add_tool_site(spec, description, sites)
    elif tool not in sites:
        bodies = {body.name: body for body in spec.bodies}
        if tool not in bodies:
            raise RobotDescriptionError(
                f"{where}: tool_frame {tool!r} is neither a site nor a body of the model "
                f"{description.model_path.name}; name the site (or link) at the tool centre "
                "point."
            )
        bodies[tool].add_site(name=tool)
    exclude_adjacent_links(spec)
    driven: dict[str, list] = {}
    for actuator in spec.actuators:
        driven.setdefault(actuator.target, []).append(actuator)
    for i, name in enumerate(description.joint_names):
        if name in driven:
            _check_position_servo(description, name, driven[name])
            continue
        effort = float(description.effort_limit[i])
        actuator = spec.add_actuator(name=f"{name}_servo", target=name)
        actuator.trntype = mujoco.mjtTrn.mjTRN_JOINT
        actuator.set_to_position(kp=effort / AUTO_SERVO_ERROR, dampratio=1.0)
        actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        actuator.forcerange = [-effort, effort]
        lower, upper = description.position_lower[i], description.position_upper[i]
        if np.isfinite(lower) and np.isfinite(upper):
            actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
            actuator.ctrlrange = [float(lower), float(upper)]
    return spec


def _add_tool_site(spec: mujoco.MjSpec, description: RobotDescription, sites: set) -> None:
    """The tool frame of ``tool_frame: {link, offset, rpy}``: a site on that link."""
    bodies = {body.name: body for body in spec.bodies if body.name}
    where = f"{description.source}: tool_frame"
    if description.tool_link not in bodies:
        raise RobotDescriptionError(
            f"{where}.link {description.tool_link!r} is not a body (link) of the model "
            f"{description.model_path.name}; its bodies are: {', '.join(sorted(bodies))}."
        )
    if description.tool_frame in sites:
        raise RobotDescriptionError(
            f"{where}: the model already has a site {description.tool_frame!r}; name that "
            "site as the tool_frame, or give the new one another name (tool_frame.name)."
        )
    roll, pitch, yaw = description.tool_rpy
    quat = np.zeros(4)
    # URDF's rpy: about the fixed x, then y, then z axes, so R = Rz(yaw) Ry(pitch) Rx(roll).
    mujoco.mju_euler2Quat(quat, np.array([roll, pitch, yaw]), "XYZ")
    bodies[description.tool_link].add_site(
        name=description.tool_frame, pos=list(description.tool_offset), quat=quat.tolist()
    )


def _weld_roots(spec: mujoco.MjSpec) -> dict[str, str]:
    """Each named body's weld root: the nearest jointed body at or above it, or "" for a
    body welded to the world (a fixed base and its fixed links)."""
    roots: dict[str, str] = {}
    stack = [(child, "") for child in spec.worldbody.bodies]
    while stack:
        body, above = stack.pop()
        root = body.name if len(body.joints) else above
        roots[body.name] = root
        stack.extend((child, root) for child in body.bodies)
    return roots


def exclude_adjacent_links(spec: mujoco.MjSpec) -> int:
    """Exclude contacts between every pair of adjacent links (a link and its parent, fixed
    links counted with the link they hang on), the fixed base included; returns how many
    body pairs were excluded.

    MuJoCo filters parent-child contacts itself, except where the parent is welded to the
    world: a fixed base and link 1 collide. A URDF cannot set collision bits, so its meshes
    come in as contype 1 / conaffinity 1, and meshes that meet at a joint then press the
    base into link 1 with kilonewtons at rest. A real arm's adjacent links never touch
    through their joint, whatever the model file says."""
    for index, body in enumerate(spec.bodies):
        if body.name == "":  # an exclude names its bodies
            body.name = f"unnamed_body_{index}"
    roots = _weld_roots(spec)
    groups: dict[str, list[str]] = {}
    for name, root in roots.items():
        groups.setdefault(root, []).append(name)
    parent_root = {
        body.name: roots.get(body.parent.name, "")
        for body in spec.bodies
        if body.name in roots and len(body.joints)
    }
    existing = {frozenset((e.bodyname1, e.bodyname2)) for e in spec.excludes}
    added = 0
    for child, parent in parent_root.items():
        for first in groups.get(parent, []):
            for second in groups[child]:
                pair = frozenset((first, second))
                if pair not in existing:
                    spec.add_exclude(bodyname1=first, bodyname2=second)
                    existing.add(pair)
                    added += 1
    return added


def _package_hint(path: Path) -> str:
    if "package://" not in path.read_text(encoding="utf-8", errors="replace"):
        return ""
    return (
        " The model uses package:// URIs, which MuJoCo cannot resolve: point its meshes at "
        "files relative to the model (or drop the visual meshes)."
    )


def _check_position_servo(description: RobotDescription, joint: str, actuators: list) -> None:
    """The controller sends position targets: a joint's actuator must be one servo."""
    where = f"{description.source}: model {description.model_path.name}"
    if len(actuators) > 1:
        raise RobotDescriptionError(
            f"{where}: controller joint {joint!r} has {len(actuators)} actuators; keep one "
            "position actuator per controller joint."
        )
    actuator = actuators[0]
    kp, bias = float(actuator.gainprm[0]), float(actuator.biasprm[1])
    servo = (
        actuator.trntype == mujoco.mjtTrn.mjTRN_JOINT
        and actuator.gaintype == mujoco.mjtGain.mjGAIN_FIXED
        and actuator.biastype == mujoco.mjtBias.mjBIAS_AFFINE
        and kp > 0
        and abs(kp + bias) <= 1e-9 * kp
    )
    if not servo:
        raise RobotDescriptionError(
            f"{where}: the actuator of controller joint {joint!r} is not a position servo "
            "(a motor or velocity actuator would read position targets as torques or "
            "speeds); make it a <position> actuator, or remove it and a servo is added."
        )


def _compile(spec: mujoco.MjSpec, description: RobotDescription) -> mujoco.MjModel:
    try:
        return spec.compile()
    except Exception as error:
        raise RobotDescriptionError(
            f"{description.source}: model {description.model_path} does not compile in "
            f"MuJoCo: {error}{_package_hint(description.model_path)}"
        ) from error


def compile_robot(description: RobotDescription) -> mujoco.MjModel:
    """The arm alone, base at the world origin."""
    return _compile(robot_spec(description), description)


def compile_scene(description: RobotDescription) -> mujoco.MjModel:
    """The task scene with the arm attached at the world origin."""
    scene = mujoco.MjSpec.from_file(str(SCENE_FILE))
    arm = robot_spec(description)
    # An empty prefix keeps the arm's names (the description's joint names); MuJoCo warns
    # that such a model cannot be saved to XML, which is never done here.
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(_quiet_prefix_warning)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            scene.attach(arm, prefix="", frame=scene.worldbody.add_frame())
            return _compile(scene, description)
    finally:
        mujoco.set_mju_user_warning(previous)


def _quiet_prefix_warning(message: str) -> None:
    if "empty prefix" not in message:
        warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


def joint_address(model: mujoco.MjModel, names) -> tuple[np.ndarray, np.ndarray]:
    """qpos and dof addresses of named joints, in the given order."""
    qpos = np.array([int(model.joint(n).qposadr[0]) for n in names], dtype=np.intp)
    dof = np.array([int(model.joint(n).dofadr[0]) for n in names], dtype=np.intp)
    return qpos, dof


def _urdf_velocity_limits(path: Path) -> dict[str, float]:
    """The ``<limit velocity>`` of each URDF joint: MuJoCo keeps a URDF's effort (as the
    joint's actuatorfrcrange) but drops its velocity, which the limits are checked
    against all the same."""
    import xml.etree.ElementTree as ElementTree

    if path.suffix.lower() != ".urdf":
        return {}
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError:
        return {}  # MuJoCo's parser has accepted it; nothing more to read here
    velocities = {}
    for joint in root.iter("joint"):
        limit = joint.find("limit")
        if limit is not None and limit.get("velocity") is not None:
            try:
                velocities[str(joint.get("name"))] = float(limit.get("velocity"))
            except ValueError:
                continue
    return velocities


def _above_model(where: str, what: str, ours: float, theirs: float, source: str) -> str:
    return (
        f"joint {where!r} {what} {ours:g} is above the model's {theirs:g} ({source}); the "
        f"model's is the more restrictive (a limit may not exceed the model's): lower "
        f"{what} to {theirs:g} or less in the joint limits file, or, if the model's value "
        "is wrong, correct the model."
    )


def check_against_model(description: RobotDescription) -> RobotDescription:
    """The description with position limits the limits file left out taken from the model
    and its joint units ("rad" per hinge, "m" per slide); refuses limits beyond the model's
    (every one at once) and a home pose outside the limits."""
    model = compile_robot(description)
    where = f"{description.source}"
    lower = np.array(description.position_lower, dtype=float)
    upper = np.array(description.position_upper, dtype=float)
    urdf_velocity = _urdf_velocity_limits(description.model_path)
    problems: list[str] = []
    for i, name in enumerate(description.joint_names):
        joint = model.joint(name)
        limited = bool(model.jnt_limited[joint.id])
        low, high = (float(x) for x in model.jnt_range[joint.id])
        if np.isnan(lower[i]) or np.isnan(upper[i]):
            if not limited:
                problems.append(
                    f"joint {name!r} has no position limits in the joint limits file nor a "
                    "range in the model; set has_position_limits: true with min_position "
                    "and max_position."
                )
                continue
            lower[i] = low if np.isnan(lower[i]) else lower[i]
            upper[i] = high if np.isnan(upper[i]) else upper[i]
        if lower[i] >= upper[i]:
            problems.append(
                f"joint {name!r} has min_position {lower[i]:g} >= max_position {upper[i]:g}."
            )
        if limited and (lower[i] < low - _LIMIT_SLACK or upper[i] > high + _LIMIT_SLACK):
            problems.append(
                f"joint {name!r} position limits [{lower[i]:g}, {upper[i]:g}] go beyond the "
                f"model's range [{low:g}, {high:g}]; a limit may not exceed the model's."
                f"{degrees_hint(description)}"
            )
        effort = float(description.effort_limit[i])
        if model.jnt_actfrclimited[joint.id]:
            force = float(np.max(np.abs(model.jnt_actfrcrange[joint.id])))
            if effort > force + _LIMIT_SLACK:
                source = (
                    "the URDF's <limit effort>"
                    if description.model_path.suffix.lower() == ".urdf"
                    else "the joint's actuatorfrcrange"
                )
                problems.append(_above_model(name, "max_effort", effort, force, source))
        for actuator in np.flatnonzero(model.actuator_trnid[:, 0] == joint.id):
            if model.actuator_forcelimited[actuator]:
                force = float(np.max(np.abs(model.actuator_forcerange[actuator])))
                if effort > force + _LIMIT_SLACK:
                    problems.append(
                        _above_model(name, "max_effort", effort, force, "its actuator's "
                                     "forcerange")
                    )  # fmt: skip
        velocity = float(description.velocity_limit[i])
        if name in urdf_velocity and velocity > urdf_velocity[name] + _LIMIT_SLACK:
            problems.append(
                _above_model(name, "max_velocity", velocity, urdf_velocity[name],
                             "the URDF's <limit velocity>")
            )  # fmt: skip
    if problems:
        listing = "\n  - ".join(problems)
        raise RobotDescriptionError(
            f"{where} (limits {description.joint_limits_path}): {len(problems)} problem(s) "
            f"against the model {description.model_path.name}:\n  - {listing}"
        )
    home = np.asarray(description.home_position)
    outside = [
        name
        for i, name in enumerate(description.joint_names)
        if not lower[i] - _LIMIT_SLACK <= home[i] <= upper[i] + _LIMIT_SLACK
    ]
    if outside:
        raise RobotDescriptionError(
            f"{where}: home is outside the position limits of {', '.join(outside)}."
        )
    frozen_lower, frozen_upper = lower.copy(), upper.copy()
    frozen_lower.setflags(write=False)
    frozen_upper.setflags(write=False)
    units = tuple(
        "m" if model.jnt_type[model.joint(n).id] == mujoco.mjtJoint.mjJNT_SLIDE else "rad"
        for n in description.joint_names
    )
    return dataclasses.replace(
        description, position_lower=frozen_lower, position_upper=frozen_upper, joint_units=units
    )
