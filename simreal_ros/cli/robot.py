"""`simreal robot`: check a robot description before a graph drives it."""

from __future__ import annotations

import argparse

import numpy as np


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "robot",
        help="check a robot description (model, joint limits, tool frame, workspace)",
        description=(
            "Load a robot description the way every node does and print what it parsed: "
            "the controller joints and their limits, the tool frame's pose at home by "
            "forward kinematics of the model, and the workspace box. Exits 2, naming the "
            "file and field, when the description cannot be used."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sub = parser.add_subparsers(dest="robot_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="parse and check one description")
    check.add_argument(
        "path", help="a shipped arm (simreal_arm, panda), a robot directory or robot.yaml"
    )
    check.set_defaults(func=run_check)


def run_check(args) -> int:
    import mujoco

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
    data = mujoco.MjData(model)
    for i, name in enumerate(robot.joint_names):
        data.qpos[model.joint(name).qposadr[0]] = robot.home_position[i]
    mujoco.mj_kinematics(model, data)
    site = data.site(robot.tool_frame)
    rotation = site.xmat.reshape(3, 3)
    print(f"  tool frame {robot.tool_frame!r} at home (base frame):")
    print(f"    position  {np.array2string(site.xpos, precision=4)} m")
    print(f"    z axis    {np.array2string(rotation[:, 2], precision=3)}")
    inside = bool(
        np.all(site.xpos >= robot.workspace_lower) and np.all(site.xpos <= robot.workspace_upper)
    )
    print(
        f"  workspace box: lower {np.array2string(robot.workspace_lower, precision=3)}, upper "
        f"{np.array2string(robot.workspace_upper, precision=3)} m; home tool "
        f"{'inside' if inside else 'OUTSIDE'}"
    )
    if hint:
        print(f"  warning:{hint}")
    if not inside:
        print("  error: the home pose's tool frame is outside the workspace box; widen it.")
        return 2
    print("  ok")
    return 0
