"""`simreal trials`: run N recorded, labelled episodes through the running graph."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "trials",
        help="drive recorded, labelled episodes through the running graph",
        description=(
            "Per episode: reset (sim bridge service, or an operator prompt on the real "
            "profile), start the recorder, run until /task/status says done (or the operator "
            "ends it, or the timeout), stop the recorder with the outcome."
        ),
    )
    parser.add_argument("--profile", choices=("sim", "real"), default="sim")
    parser.add_argument("--episodes", type=int, default=5, help="episodes to run")
    parser.add_argument("--condition", choices=("train", "shifted"), default="train")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per episode")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    parser.add_argument("--task", default="push", help="task label stored with the episodes")
    parser.add_argument(
        "--source", default="", help="source label (default: from the profile / sim dynamics)"
    )
    parser.add_argument(
        "--no-keyboard", action="store_true", help="real profile: label only via ~/label"
    )
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import dataclasses

    from simreal_ros.nodes.trial_runner import run_with_overrides
    from simreal_ros.trials.runner import summarize

    overrides = {
        "profile": args.profile,
        "episodes": args.episodes,
        "condition": args.condition,
        "timeout_s": float(args.timeout),
        "seed": args.seed,
        "task": args.task,
        "source": args.source,
        "keyboard": not args.no_keyboard,
    }
    results = run_with_overrides(overrides)
    print(summarize(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=2)
    errors = [r for r in results if r.error]
    if errors:
        print(f"{len(errors)} episode(s) failed to run; see ERROR above.", file=sys.stderr)
    return 1 if errors else 0
