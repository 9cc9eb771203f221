"""`simreal sysid`: identify the simulator's dynamics from recorded episode bags."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "sysid",
        help="fit the sim's dynamics to recorded episodes; write a profile YAML",
        description=(
            "Replays each bag's commands in MuJoCo from its measured start state and fits "
            "friction, masses, damping, actuator gains and latency (CMA-ES) to the recorded "
            "joint and object trajectories; estimates the observation noise from the "
            "residuals. Writes OUT/profile.yaml (usable as --dynamics-profile PATH everywhere), "
            "OUT/sysid.json and OUT/fit.png. Unidentifiable parameters are reported, not "
            "guessed. Nothing is written when a bag cannot be used."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("bags", nargs="+", help="episode bag directories or folders of them")
    parser.add_argument("--out", required=True, help="directory for profile.yaml and the rest")
    parser.add_argument("--task", default="", help="task of the bags (default: their own)")
    parser.add_argument(
        "--params",
        default="",
        help="what to fit, e.g. 'gain.*,latency_steps' or 'mass.cube=0.2:5' (default: gains, "
        "dampings, cube and gripper masses, frictions, latency)",
    )
    parser.add_argument(
        "--per-joint", action="store_true", help="one gain and damping factor per joint"
    )
    parser.add_argument(
        "--model",
        default="auto",
        choices=("auto", "grouped", "joint_groups", "per_joint"),
        help="parameterisation of the gains; auto: chosen by held-out error with a "
        "complexity penalty (see docs/sysid.md)",
    )
    parser.add_argument(
        "--segment-ticks",
        type=int,
        default=10,
        help="control ticks per short-horizon replay segment (0: whole episodes)",
    )
    parser.add_argument("--holdout", type=int, default=2, help="episodes held out of the fit")
    parser.add_argument("--max-episodes", type=int, default=0, help="use the newest N (0: all)")
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=300, help="replays, first restart")
    parser.add_argument(
        "--resample-evaluations", type=int, default=150, help="replays, each further restart"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compare-to",
        default="",
        help="a stand-in profile whose hidden values to report errors against (never used "
        "in the fit)",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sysid import (
        FitSettings,
        SysidInputError,
        identify_bags,
        parse_parameters,
        per_joint_parameters,
    )
    from simreal_ros.sysid.model_selection import parameterisations
    from simreal_ros.sysid.output import format_result, hidden_factors
    from simreal_ros.sysid.simulate import ArmPhysics

    robot = load_robot_description()
    if args.params:
        parameters = parse_parameters(args.params)
    elif args.per_joint:
        parameters = per_joint_parameters(robot.joint_names)
    elif args.model != "auto":
        options = parameterisations(robot.joint_names, ArmPhysics(robot).nominal_dynamics)
        if args.model not in options:
            print(f"simreal sysid: error: this arm has no {args.model} parameterisation "
                  f"(it has {', '.join(options)}).", file=sys.stderr)  # fmt: skip
            return 2
        parameters = options[args.model]
    else:
        parameters = None  # chosen by held-out error
    settings = FitSettings(
        restarts=args.restarts,
        evaluations_per_restart=args.evaluations,
        evaluations_resample=args.resample_evaluations,
        threads=args.threads,
        seed=args.seed,
        segment_ticks=args.segment_ticks,
    )
    try:
        result, profile = identify_bags(
            args.bags, args.out, args.task or None, parameters, args.holdout, settings,
            robot=robot, max_episodes=args.max_episodes,
            progress=lambda text: print(f"[sysid] {text}"),
        )  # fmt: skip
    except (SysidInputError, ValueError) as error:  # bad bags, or a bad --segment-ticks
        print(f"simreal sysid: error: {error}", file=sys.stderr)
        return 2
    hidden = None
    if args.compare_to:
        patterns = [p.pattern for p in result.parameters]
        hidden = hidden_factors(args.compare_to, result.nominal, patterns)
    print(format_result(result, hidden))
    print(f"wrote {profile} (use it as --dynamics-profile {profile}), sysid.json and fit.png")
    return 0
