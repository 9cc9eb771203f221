"""`simreal expert`: the scripted expert's success rate over many seeds (sim/expert.py)."""

from __future__ import annotations

import argparse

from simreal_ros.cli.profile_options import add_dynamics_profile_option


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "expert",
        help="measure the scripted expert's success rate",
        description="Measure the scripted expert's success rate, with a 95% Wilson interval.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", default="push", choices=("push", "reach"))
    parser.add_argument("--condition", default="train", choices=("train", "shifted"))
    add_dynamics_profile_option(
        parser, "nominal", help="dynamics profile: nominal, randomized, real_twin or a YAML path"
    )
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--retune",
        "--stand-in-tuning",
        action="store_true",
        help="first retune the expert on --profile (its tuning grid, 20 episodes a point on "
        "other seeds, within the widest per-tick step sim adaptation may give the policy), "
        "then measure that tuning",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from simreal_ros.policy.spec import default_spec
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.expert import (
        RETUNE_SEED_OFFSET,
        measure_success,
        retuned_on,
        widest_joint_step,
    )

    robot = load_robot_description()  # --robot
    tuning = None
    if args.retune:
        # Within the widest step sim adaptation may give a policy (its velocity limit).
        step = widest_joint_step(robot, default_spec(robot, args.task))
        tuning, table = retuned_on(
            args.task, args.condition, args.profile, 20, args.first_seed + RETUNE_SEED_OFFSET,
            step, robot=robot,
        )  # fmt: skip
        print("retuned on " + args.profile + ": " + ", ".join(
            f"lead {t['lead']:g} speed {t['speed']:g} {t['successes']}/{t['episodes']}"
            for t in table))  # fmt: skip
    result = measure_success(
        args.task, args.condition, args.profile, args.episodes, args.first_seed, tuning,
        robot=robot,
    )  # fmt: skip
    low, high = result["ci95"]
    print(
        f"expert {result['task']}/{result['condition']}/{result['profile']}: "
        f"{result['successes']}/{result['episodes']} = {result['rate']:.1%} "
        f"(95% Wilson CI {low:.1%}..{high:.1%}), mean {result['mean_steps']:.1f} steps, "
        f"{result['seconds']:.1f} s; failed seeds {result['failed_seeds']}"
    )
    return 0
