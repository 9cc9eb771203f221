"""`simreal diagnose`: which failure mode a policy shows, from three evaluation sets."""

from __future__ import annotations

import argparse
import dataclasses
import json

from simreal_ros.cli.executor_options import add_executor_options, executor_from_args
from simreal_ros.cli.profile_options import add_dynamics_profile_option


def _threshold_fields():
    from simreal_ros.diagnosis.classify import Thresholds

    return Thresholds, dataclasses.fields(Thresholds)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="classify a policy's failure mode (train / shifted / open-loop replay)",
        description=(
            "Evaluate a checkpoint (optionally + adapter) in training and shifted "
            "conditions and run the open-loop replay check on successful episodes "
            "(recorded bags, or fresh scripted demonstrations), then print the failure "
            "mode with its evidence: action_convention_mismatch, dynamics_gap (with "
            "--own-sim), over_specialization, mode_collapse, healthy (or inconclusive). "
            "real_twin is a simulated stand-in for the arm, not the arm."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory")
    parser.add_argument("--adapter", default=None, help="peft LoRA adapter directory")
    parser.add_argument(
        "--task",
        default=None,
        help="push, reach or reach_around; None: the checkpoint's task",
    )
    add_dynamics_profile_option(
        parser,
        default="nominal",
        help="dynamics profile: nominal, randomized, real_twin (the stand-in) or a YAML path",
    )
    parser.add_argument("--episodes", type=int, default=20, help="episodes per condition")
    parser.add_argument("--seed", type=int, default=0, help="first evaluation seed")
    add_executor_options(parser)
    parser.add_argument(
        "--bags",
        default=None,
        help="episode bag(s) for the replay check (default: scripted demonstrations)",
    )
    parser.add_argument(
        "--replay-episodes", type=int, default=8, help="scripted demonstrations to replay"
    )
    parser.add_argument(
        "--own-sim",
        default=None,
        help="also run the policy in its own sim (a profile that is not a stand-in): the "
        "evidence for dynamics_gap, and for a convention error the diagnosed profile's "
        "replay cannot show; auto: randomized, or for an adapted version the identified "
        "sim it was adapted in",
    )
    parser.add_argument("--json", default=None, help="also write label and evidence here")
    _, fields = _threshold_fields()
    group = parser.add_argument_group("thresholds")
    for field in fields:
        meta = field.metadata
        group.add_argument(
            "--" + field.name.replace("_", "-"),
            type=float,
            default=field.default,
            help=meta.get("description", ""),
        )
    parser.set_defaults(func=run)


def run(args) -> int:
    from simreal_ros.cli.eval import check_checkpoint_for_robot
    from simreal_ros.diagnosis.run import diagnose
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.evaluate import PolicySource

    check_checkpoint_for_robot(args.checkpoint)
    own_sim = args.own_sim
    if own_sim == "auto":
        from simreal_ros.diagnosis.scenarios import teacher_sim

        own_sim = teacher_sim(args.adapter, "randomized")
        if own_sim is None:
            raise ValueError(
                f"--own-sim auto: the identified profile {args.adapter} was adapted in is not "
                "in its adapter store (or is a stand-in); give --own-sim PROFILE."
            )
    thresholds_cls, fields = _threshold_fields()
    thresholds = thresholds_cls(**{f.name: getattr(args, f.name) for f in fields})
    with executor_from_args(args) as executor:
        result = diagnose(
            PolicySource(args.checkpoint, adapter_dir=args.adapter),
            task=args.task,
            profile=args.profile,
            episodes=args.episodes,
            seed=args.seed,
            bags=args.bags,
            thresholds=thresholds,
            replay_episodes=args.replay_episodes,
            executor=executor,
            own_sim=own_sim,
            robot=load_robot_description(),  # --robot
        )
    if args.json:  # first: the evidence is kept even if printing fails (closed pipe)
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(
                {"label": result.label, "summary": result.summary, "evidence": result.evidence},
                stream,
                indent=1,
                default=float,
            )
    print(result.summary)
    return 0
