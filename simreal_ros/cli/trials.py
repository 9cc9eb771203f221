"""`simreal trials`: run N recorded, labelled episodes through the running graph."""

from __future__ import annotations

import argparse
import json
import sys

from simreal_ros.cli.profile_options import add_old_profile_flag


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "trials",
        help="drive recorded, labelled episodes through the running graph",
        description=(
            "Per episode: reset (sim bridge service, or an operator prompt on the real "
            "graph), start the recorder, run until /task/status says done (or the operator "
            "ends it, or the timeout), stop the recorder with the outcome. Needs a running "
            "graph (`simreal up`, or ros2 launch) on the same ROS_DOMAIN_ID. An episode that "
            "could not run is reported as aborted, never counted as a success or failure."
        ),
    )
    parser.add_argument(
        "--graph", choices=("sim", "real"), default="sim", help="the running graph"
    )
    add_old_profile_flag(parser)
    parser.add_argument("--episodes", type=int, default=5, help="episodes to run")
    parser.add_argument("--condition", choices=("train", "shifted"), default="train")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per episode")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    parser.add_argument("--task", default="push", help="task label stored with the episodes")
    parser.add_argument(
        "--source", default="", help="source label (default: from the graph / sim dynamics)"
    )
    parser.add_argument(
        "--no-keyboard", action="store_true", help="real graph: label only via ~/label"
    )
    parser.add_argument(
        "--wait-for-graph",
        type=float,
        default=10.0,
        help="seconds to wait for the graph's services before giving up",
    )
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.set_defaults(func=_run)


def required_services(graph: str) -> list[str]:
    """The services a trial cannot run without: the recorder's, and the sim's reset."""
    from simreal_ros.trials.config import TrialRunnerConfig

    config = TrialRunnerConfig()
    names = [config.start_service, config.stop_service]
    return [*names, config.reset_service] if graph == "sim" else names


def _run(args: argparse.Namespace) -> int:
    import dataclasses

    from simreal_ros.nodes.services import missing_services
    from simreal_ros.nodes.trial_runner import run_with_overrides
    from simreal_ros.trials.runner import summarize

    missing = missing_services(required_services(args.graph), args.wait_for_graph)
    if missing:
        raise ValueError(
            f"no running {args.graph} graph found: after {args.wait_for_graph:g} s no node "
            f"offers {', '.join(missing)}. Start one first (`simreal up --graph {args.graph}` "
            "in another shell, same ROS_DOMAIN_ID), then run the trials."
        )
    overrides = {
        "profile": args.graph,
        "episodes": args.episodes,
        "condition": args.condition,
        "timeout_s": float(args.timeout),
        "seed": args.seed,
        "task": args.task,
        "source": args.source,
        "keyboard": not args.no_keyboard,
    }
    results = run_with_overrides(overrides)
    ran = [r for r in results if not r.error]
    aborted = [r for r in results if r.error]
    print(summarize(ran))
    for r in aborted:
        print(f"  aborted {r.index + 1:3d} {r.episode_id or '-'} seed {r.seed}: ERROR {r.error}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=2)
    if aborted:
        print(
            f"{len(aborted)} episode(s) aborted (not counted as outcomes); see ERROR above.",
            file=sys.stderr,
        )
    return 1 if aborted else 0
