"""`simreal robot`: check a robot description before a graph drives it; compute a home."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

# Below this share of successes on either condition the scripted expert, and so every
# policy pretrained by imitating it, cannot do the task on the arm: check refuses it.
MIN_EXPERT_SUCCESS = 0.5


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "robot",
        help="check a robot description (model, limits, contacts, task fit); compute a home",
        description=(
            "check: load a robot description the way every node does and print what it "
            "parsed (controller joints and limits, the tool frame at home, the workspace "
            "box), every contact at home, where the task's region lies against the arm's "
            "reach, and the scripted expert's success on the task. Exits 2, naming the "
            "file and field and what to do, when the description cannot be used. "
            "home: compute a home posture with the tool over the table pointing down, "
            "ready to paste into robot.yaml."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sub = parser.add_subparsers(dest="robot_command", metavar="ACTION", required=True)
    robot_help = "a shipped arm (simreal_arm, panda), a robot directory or robot.yaml"
    check = sub.add_parser(
        "check",
        help="parse and check one description",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    check.add_argument("path", help=robot_help)
    check.add_argument("--task", default="push", choices=("push", "reach"))
    check.add_argument(
        "--fit-episodes",
        type=int,
        default=30,
        help="episodes per condition whose tool points are checked against the arm's reach",
    )
    check.add_argument(
        "--expert-episodes",
        type=int,
        default=10,
        help="episodes per condition of the scripted expert (0: skip); `simreal expert` "
        "measures more",
    )
    check.set_defaults(func=run_check)
    home = sub.add_parser(
        "home",
        help="compute a home posture: the tool at a point over the table, pointing down",
        description=(
            "Solve the arm's inverse kinematics (damped least squares on its MuJoCo model, "
            "within the joint limits, from several starts) for the tool frame at (x, y, "
            "tool height) pointing straight down (its z axis along -z), and print the "
            "home line for robot.yaml. robot.yaml needs some home to load: any values "
            "(zeros) do."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    home.add_argument("path", help=robot_help)
    home.add_argument("--x", type=float, default=0.45, help="tool x, m (base frame)")
    home.add_argument("--y", type=float, default=0.0, help="tool y, m (base frame)")
    home.add_argument(
        "--tool-height", type=float, default=0.20, help="tool z above the table top, m"
    )
    home.set_defaults(func=run_home)


def _xyz(vector) -> str:
    return "(" + ", ".join(f"{float(v):.3f}" for v in vector) + ")"


def _tool_at(model, robot, q) -> tuple[np.ndarray, np.ndarray]:
    import mujoco

    data = mujoco.MjData(model)
    for i, name in enumerate(robot.joint_names):
        data.qpos[model.joint(name).qposadr[0]] = q[i]
    mujoco.mj_kinematics(model, data)
    site = data.site(robot.tool_frame)
    return site.xpos.copy(), site.xmat.reshape(3, 3).copy()


def home_outside_box_advice(robot, tool: np.ndarray) -> str:
    """What to do when the tool at home is outside the workspace box: which way and how
    far, and how to tell a wrong home (fix it) from a box too small (widen it)."""
    lower, upper = np.asarray(robot.workspace_lower), np.asarray(robot.workspace_upper)
    misses = []
    for axis, name in enumerate("xyz"):
        if tool[axis] < lower[axis]:
            misses.append(f"{100 * (lower[axis] - tool[axis]):.1f} cm below the box's "
                          f"lower {name} ({lower[axis]:g})")  # fmt: skip
        elif tool[axis] > upper[axis]:
            misses.append(f"{100 * (tool[axis] - upper[axis]):.1f} cm beyond the box's "
                          f"upper {name} ({upper[axis]:g})")  # fmt: skip
    where = "; ".join(misses)
    command = f"simreal robot home {robot.source.parent} --tool-height 0.2"
    if tool[2] < 0.0:
        return (
            f"the tool at home is {100 * -tool[2]:.1f} cm below the table top (z = 0; {where}): "
            f"the home posture is wrong, not the box. Compute a home over the table with "
            f"`{command}` and paste its home line into robot.yaml."
        )
    return (
        f"the tool at home lies outside the workspace box ({where}). Either the home "
        f"posture is wrong (a tool that should start over the task region, about (0.45, 0, "
        f"0.2) m, but does not: compute one with `{command}`), or the box is too small for "
        "where you want the tool (the home is right: widen workspace.lower/upper, keeping "
        "the box over the table)."
    )


def _print_contacts(robot) -> bool:
    """Print every contact at home; True when one is a modelling error (exit 2)."""
    from simreal_ros.robot.contacts import arm_weight, contacts_at
    from simreal_ros.robot.model import compile_robot

    contacts = contacts_at(robot)
    excluded = compile_robot(robot).nexclude
    print(
        f"  contacts at home (arm held at rest; its weight {arm_weight(robot):.1f} N; "
        f"{excluded} adjacent link pairs never collide): "
        + ("none" if not contacts else f"{len(contacts)}")
    )
    for contact in contacts:
        print(f"    {contact.describe()}")
    if not contacts:
        return False
    arm_arm = [c for c in contacts if c.arm_arm]
    scene = [c for c in contacts if not c.arm_arm]
    if arm_arm:
        pairs = sorted({f"{c.body1} <-> {c.body2}" for c in arm_arm})
        print(
            f"  error: links that are not neighbours touch at home ({', '.join(pairs)}): at "
            "rest nothing but gravity loads the arm, so these forces are a modelling error "
            "that every episode would run on. Fix the collision geometry of those links "
            "(meshes that overlap where the real links do not), or the home posture if "
            "it folds the arm into itself (`simreal robot home`)."
        )
    if scene:
        pairs = sorted({f"{c.body1} <-> {c.body2}" for c in scene})
        print(
            f"  error: the arm touches the scene at home ({', '.join(pairs)}): the table "
            "top is z = 0 and the arm's base stands on it. Compute a home with the tool "
            "over the table (`simreal robot home`), or move the base in the model if its "
            "links sit in the table."
        )
    return True


def _print_task_fit(robot, task: str, episodes: int) -> bool:
    """Print where the task lies against the arm's reach; True when the arm would be in
    the table at the task's points (exit 2)."""
    from simreal_ros.sim.task_fit import task_fit

    print(
        f"  task {task}: the tool points its scripted expert needs ({episodes} episodes a "
        "condition), within reach from home holding the home orientation:"
    )
    advice, touching = [], []
    for condition in ("train", "shifted"):
        fit = task_fit(robot, task, condition, episodes)
        distance = fit.distance
        print(
            f"    {condition:<8} {fit.fraction:6.1%} of {len(fit.reached)} points, "
            f"{distance.min():.3f}..{distance.max():.3f} m from the base"
        )
        if fit.advice():
            advice.append(f"{condition}: {fit.advice()}")
        if fit.touching_advice:
            touching.append((condition, fit.touching_advice))
    for line in advice:
        print(f"  warning: {line}")
    if touching:  # the same advice on both conditions, said once
        conditions = " and ".join(condition for condition, _ in touching)
        print(f"  error: {conditions}: {touching[0][1]}")
    return bool(touching)


def _print_expert(robot, task: str, episodes: int) -> bool:
    """Run the scripted expert; True when it fails the task (exit 2)."""
    from simreal_ros.sim.expert import measure_success

    print(f"  scripted expert, {task}, nominal dynamics ({episodes} episodes a condition):")
    failed = []
    for condition in ("train", "shifted"):
        result = measure_success(task, condition, "nominal", episodes, 0, robot=robot)
        low, high = result["ci95"]
        print(
            f"    {condition:<8} {result['successes']}/{episodes} = {result['rate']:.0%} "
            f"(95% CI {low:.0%}..{high:.0%}); failed seeds {result['failed_seeds']}"
        )
        if result["rate"] < MIN_EXPERT_SUCCESS:
            failed.append(condition)
    if failed:
        print(
            f"  error: the scripted expert solves under {MIN_EXPERT_SUCCESS:.0%} of the "
            f"{task} episodes on {' and '.join(failed)}; pretraining imitates it, so no "
            "policy will do better. Check the tool frame is the tip of a tool that can "
            "push (not the bare flange), that the task fits the arm's reach (above), and "
            "that the home posture points the tool down over the table; see "
            "docs/configuration.md, 'Does the task fit the arm?'."
        )
    return bool(failed)


def run_check(args) -> int:
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.robot.model import compile_robot, compile_scene, degrees_hint

    robot = load_robot_description(args.path)
    hint = degrees_hint(robot)
    model = compile_robot(robot)
    compile_scene(robot)  # the arm must also fit the task scene
    units = robot.joint_units
    print(f"robot {robot.name}: {robot.source}")
    print(f"  model: {robot.model_path} ({model.nbody - 1} bodies, {model.njnt} joints)")
    print(f"  controller joints ({robot.num_joints}, controller order):")
    header = "    {:<30} {:>5} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9}"
    print(header.format("joint", "unit", "lower", "upper", "vel", "acc", "jerk", "effort", "home"))
    for i, name in enumerate(robot.joint_names):
        role = " (gripper)" if name == robot.gripper_joint else ""
        print(
            f"    {name + role:<30} {units[i]:>5} {robot.position_lower[i]:>10.4f} "
            f"{robot.position_upper[i]:>10.4f} {robot.velocity_limit[i]:>9.4g} "
            f"{robot.acceleration_limit[i]:>9.4g} {robot.jerk_limit[i]:>9.4g} "
            f"{robot.effort_limit[i]:>8.4g} {robot.home_position[i]:>9.4f}"
        )
    position, rotation = _tool_at(model, robot, robot.home_position)
    added = f" (on {robot.tool_link})" if robot.tool_link else ""
    print(f"  tool frame {robot.tool_frame!r}{added} at home (base frame):")
    print(f"    position  {np.array2string(position, precision=4)} m")
    print(f"    z axis    {np.array2string(rotation[:, 2], precision=3)}")
    inside = bool(
        np.all(position >= robot.workspace_lower) and np.all(position <= robot.workspace_upper)
    )
    print(
        f"  workspace box: lower {np.array2string(robot.workspace_lower, precision=3)}, upper "
        f"{np.array2string(robot.workspace_upper, precision=3)} m; home tool "
        f"{'inside' if inside else 'OUTSIDE'}"
    )
    if hint:
        print(f"  warning:{hint}")
    if not inside:
        print(f"  error: {home_outside_box_advice(robot, position)}")
        return 2
    if _print_contacts(robot):
        return 2
    if args.fit_episodes > 0 and _print_task_fit(robot, args.task, args.fit_episodes):
        return 2
    if args.expert_episodes > 0 and _print_expert(robot, args.task, args.expert_episodes):
        return 2
    print("  ok")
    return 0


def posable_description(path: str):
    """The description at ``path`` checked against its model, whatever its home: a home
    outside the limits (a placeholder) is moved inside them, as ``robot home`` replaces
    it anyway."""
    from simreal_ros.robot.description import parse_robot_description, resolve_robot_path
    from simreal_ros.robot.model import check_against_model, compile_robot

    parsed = parse_robot_description(resolve_robot_path(path))
    model = compile_robot(parsed)
    lower = np.array(parsed.position_lower, dtype=float)
    upper = np.array(parsed.position_upper, dtype=float)
    for i, name in enumerate(parsed.joint_names):
        low, high = model.jnt_range[model.joint(name).id]
        if np.isnan(lower[i]):
            lower[i] = low
        if np.isnan(upper[i]):
            upper[i] = high
    home = np.clip(np.asarray(parsed.home_position, dtype=float), lower, upper)
    return check_against_model(dataclasses.replace(parsed, home_position=home))


def run_home(args) -> int:
    from simreal_ros.robot.contacts import contacts_at
    from simreal_ros.robot.home_pose import full_home, solve_home
    from simreal_ros.robot.model import compile_robot

    robot = posable_description(args.path)
    model = compile_robot(robot)
    target = np.array([args.x, args.y, args.tool_height])
    solution = solve_home(robot, model, target)
    home = full_home(robot, solution.arm_q)
    arm = list(robot.arm_indices)
    span = (robot.position_upper - robot.position_lower)[arm]
    margins = np.minimum(solution.arm_q - robot.position_lower[arm],
                         robot.position_upper[arm] - solution.arm_q) / span  # fmt: skip
    tightest = robot.arm_joint_names[int(np.argmin(margins))]
    print(
        f"robot {robot.name}: tool frame {robot.tool_frame!r} at "
        f"{_xyz(solution.tool_position)} m (target {_xyz(target)}), "
        f"{1000 * solution.position_error:.2f} mm "
        f"off, its z axis {np.degrees(solution.axis_error):.2f} deg from straight down; "
        f"nearest limit: {tightest} at {float(np.min(margins)):.0%} of its range"
    )
    if not solution.reached:
        print(
            "error: no posture within the joint limits puts the tool there pointing down; "
            "try a point nearer the middle of the task region (--x, --y) or another "
            "--tool-height, and check that the tool frame's z axis is the tool's "
            "approach axis (tool_frame.rpy turns it)."
        )
        return 2
    contacts = contacts_at(robot, home)
    for contact in contacts:
        print(f"  contact at that posture: {contact.describe()}")
    if contacts:
        print("error: the arm touches something at that posture; try another target.")
        return 2
    values = ", ".join(f"{round(float(value), 4) + 0.0:.4f}" for value in home)  # no -0.0
    print("paste into robot.yaml (controller order):")
    print(f"home: [{values}]")
    return 0
