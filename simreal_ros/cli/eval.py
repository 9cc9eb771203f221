"""`simreal eval`: success rate of a checkpoint (optionally + adapter) off ROS."""

from __future__ import annotations

import argparse
import json

from simreal_ros.cli.executor_options import add_executor_options, executor_from_args
from simreal_ros.cli.profile_options import add_dynamics_profile_option
from simreal_ros.sim.profiles import is_stand_in
from simreal_ros.training.evaluate import CONDITIONS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a checkpoint in sim over seeds (Wilson 95%% CI)",
        description=(
            "Run one episode per seed off ROS (parallel worker processes) and print the "
            "success rate with a Wilson 95% confidence interval, mean return and mean "
            "episode length. real_twin is a simulated stand-in for the arm, not the arm."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory")
    parser.add_argument("--adapter", default=None, help="peft LoRA adapter directory")
    add_dynamics_profile_option(
        parser,
        default="nominal",
        help="dynamics profile: nominal, randomized, real_twin (the stand-in) or a YAML path",
    )
    parser.add_argument("--condition", choices=CONDITIONS, default="train")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0)
    add_executor_options(parser)
    parser.add_argument(
        "--safety-filter",
        action="store_true",
        help="run every command through the safety filter at its own rate, as the graph does",
    )
    parser.add_argument("--json", default=None, help="also write the result (with episodes)")
    parser.add_argument(
        "--record",
        action="store_true",
        help="store the result under evaluation.<profile>/<condition> in the checkpoint's "
        "policy.json (weights and their checksums are untouched)",
    )
    parser.set_defaults(func=run)


def check_checkpoint_for_robot(checkpoint: str) -> None:
    """Refuse a checkpoint made for another arm before any episode runs, naming the joint
    names and count on both sides (as the policy node does at configure)."""
    from simreal_ros.policy.checkpoint import load_numpy_checkpoint
    from simreal_ros.robot.description import load_robot_description

    load_numpy_checkpoint(checkpoint, description=load_robot_description())


def run(args) -> int:
    from simreal_ros.training.evaluate import PolicySource, evaluate_policy

    if args.episodes < 1:
        raise ValueError("--episodes must be at least 1.")
    from simreal_ros.robot.description import load_robot_description

    check_checkpoint_for_robot(args.checkpoint)
    source = PolicySource(args.checkpoint, adapter_dir=args.adapter)
    with executor_from_args(args) as executor:
        result = evaluate_policy(
            source,
            profile=args.profile,
            condition=args.condition,
            seeds=range(args.first_seed, args.first_seed + args.episodes),
            safety_filter=args.safety_filter,
            executor=executor,
            robot=load_robot_description(),
        )
    label = " (simulated stand-in for the arm)" if is_stand_in(args.profile) else ""
    print(result.summary() + label)
    if args.record:
        from simreal_ros.policy.checkpoint import read_metadata, update_metadata

        if args.adapter or args.safety_filter:
            raise ValueError(
                "--record stores the base checkpoint's own results; drop --adapter and "
                "--safety-filter."
            )
        evaluation = dict(read_metadata(args.checkpoint).get("evaluation") or {})
        entry = result.to_dict()
        entry["seeds"] = [args.first_seed, args.first_seed + args.episodes - 1]
        evaluation[f"{args.profile}/{args.condition}"] = entry
        update_metadata(args.checkpoint, evaluation=evaluation)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(result.to_dict(with_records=True), stream, indent=1)
    return 0
