"""`simreal premise`: the premise check before any fine-tuning (see learner/premise.py)."""

from __future__ import annotations

import argparse
import json

from simreal_ros.cli.profile_options import add_dynamics_profile_option


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "premise",
        help="is there a gap, is it closable, does V_sim rank the stand-in's states",
        description=(
            "Before fine-tuning: zero-shot success on the stand-in against nominal sim, a "
            "retuned scripted expert on the stand-in (feasibility), and V_sim's rank "
            "correlation with the Monte-Carlo return-to-go on stand-in and sim states. "
            "Exits 1 when a check fails. The stand-in is simulated, not the arm."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--checkpoint", default="", help="base checkpoint (default: shipped)")
    parser.add_argument("--task", default="push", choices=("push", "reach"))
    add_dynamics_profile_option(
        parser, "real_twin", help="the stand-in's dynamics profile: a name or YAML path"
    )
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--value-episodes", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default="", help="also write the result here")
    parser.set_defaults(func=run)


def run(args) -> int:
    from simreal_ros.learner.premise import PremiseConfig, check_premise, format_premise
    from simreal_ros.policy.checkpoint import shipped_checkpoint
    from simreal_ros.robot.description import load_robot_description

    config = PremiseConfig(
        task=args.task,
        stand_in=args.profile,
        episodes=args.episodes,
        value_episodes=args.value_episodes,
        workers=args.workers,
    )
    checkpoint = args.checkpoint or str(shipped_checkpoint(args.task))
    result = check_premise(checkpoint, config, robot=load_robot_description())  # --robot
    print(format_premise(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(result.to_dict(), stream, indent=2)
    return 0 if result.holds else 1
