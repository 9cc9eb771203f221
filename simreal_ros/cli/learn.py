"""`simreal learn --episodes DIR`: one fine-tuning round off ROS (what the learner node does).

Reads the episode bags, fine-tunes a LoRA adapter (bc, rl, sgft or sysid), screens it in sim
over seeds (in the profile identified from the bags with sysid.enabled or method
sysid), stores it with its decision and promotes it only if it passes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import yaml

from simreal_ros.adapters.store import DEFAULT_STORE_ROOT as DEFAULT_STORE
from simreal_ros.learner.config import METHODS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "learn",
        help="fine-tune a LoRA adapter on recorded episodes, screen it, store it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--episodes", required=True, nargs="+", help="episode bag(s) or folder(s)")
    p.add_argument(
        "--method",
        choices=METHODS,
        help="default: sgft; sysid needs --set sysid.profile=PATH (from `simreal "
        "sysid`) or identifies from the episodes' bags",
    )
    p.add_argument("--horizon", type=int, help="SGFT horizon H (0 = infinite)")
    p.add_argument("--checkpoint", help="base checkpoint dir (default: shipped for --task)")
    p.add_argument("--task", choices=("push", "reach"))
    p.add_argument("--store", help=f"adapter store (default {DEFAULT_STORE})")
    p.add_argument("--sim-data", help="sim episode bags for replay/EWC/shaping scale")
    p.add_argument("--sim-episodes", type=int, help="sim episodes to collect without --sim-data")
    p.add_argument("--updates", type=int, help="gradient updates")
    p.add_argument("--screen-seeds", type=int, help="sim episodes per screened condition")
    p.add_argument("--workers", type=int, help="parallel screening workers")
    p.add_argument("--config", help="YAML of learner settings (keys of LearnerConfig)")
    p.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE",
        help="any other learner setting, e.g. --set ewc=true real_weight=2",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    p.set_defaults(func=_learn)


def build_config(args: argparse.Namespace):
    from simreal_ros.config_schema import from_mapping
    from simreal_ros.learner.config import LearnerConfig

    values: dict = {"store_root": DEFAULT_STORE}
    if args.config:
        with open(args.config) as stream:
            loaded = yaml.safe_load(stream) or {}
        if "learner" in loaded:  # a ROS parameter file keyed by node name
            loaded = loaded["learner"].get("ros__parameters", {})
        values.update(loaded)
    for item in args.set:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: write KEY=VALUE.")
        key, text = item.split("=", 1)
        values[key] = yaml.safe_load(text)
    flags = {
        "method": args.method,
        "horizon": args.horizon,
        "checkpoint_dir": args.checkpoint,
        "task": args.task,
        "store_root": args.store,
        "sim_data_dir": args.sim_data,
        "sim_episodes": args.sim_episodes,
        "updates_per_round": args.updates,
        "screen.seeds": args.screen_seeds,
        "screen.workers": args.workers,
    }
    values.update({k: v for k, v in flags.items() if v is not None})
    from simreal_ros.settings_check import check_node_settings

    check_node_settings("learner", values, "simreal learn")
    config = from_mapping(LearnerConfig, values)
    return dataclasses.replace(config, store_root=str(scoped_store(config)))


def scoped_store(config):
    """The learner's store for this robot and base (the one `simreal up` runs from)."""
    from simreal_ros.adapters.store import scoped_store_root
    from simreal_ros.policy.checkpoint import read_metadata, shipped_checkpoint
    from simreal_ros.robot.description import load_robot_description

    checkpoint = config.checkpoint_dir or shipped_checkpoint(config.task)
    robot_name = load_robot_description().name
    return scoped_store_root(config.store_root, robot_name, read_metadata(checkpoint))


def _say(text: str) -> None:
    print(f"[simreal learn] {text}", flush=True)


def _learn(args: argparse.Namespace) -> int:
    import logging
    import time

    from simreal_ros.learner.data import load_episodes
    from simreal_ros.learner.online import OnlineLearner
    from simreal_ros.learner.promotion import policy_evaluator
    from simreal_ros.robot.description import load_robot_description

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started = time.monotonic()
    config = build_config(args)
    _say(f"store {config.store_root}; loading the base and episodes ...")
    learner = OnlineLearner(config, robot=load_robot_description())
    session = learner._default_session()
    real, manifest = load_episodes(args.episodes, session.checkpoint, session.converter)
    if real is None:
        raise ValueError(f"no transitions in {args.episodes}; record episodes first.")
    sim = real.subset(~real.real_mask())
    if len(sim):
        session.add_sim_data(sim)
    real = real.subset(real.real_mask())
    if len(real) == 0:
        raise ValueError("the episodes are all sim; fine-tuning needs real (or real_twin) data.")
    _say(f"{len(real)} real transitions, {len(sim)} sim ({time.monotonic() - started:.0f} s)")
    if config.identifies_from_bags:
        from simreal_ros.episodes.dataset import find_bags

        _say("identifying the dynamics from the bags ...")
        session.identify(find_bags(args.episodes))
    profile = session.screening_profile
    _say(
        f"training {config.method}, then screening in sim profile {profile!r} over "
        f"{config.screen.seeds} seeds per condition ({', '.join(config.screen.conditions)})"
    )
    evaluate = policy_evaluator(config, lambda: session.screening_profile, robot=session.robot)

    def evaluator(checkpoint_dir, adapter_dir, condition, seeds):
        which = "the running version" if adapter_dir is None else "the candidate"
        _say(f"screening {which} on {condition} ({time.monotonic() - started:.0f} s)")
        return evaluate(checkpoint_dir, adapter_dir, condition, seeds)

    result = session.run_round(real, evaluator, manifest)
    decision = result.decision
    screened = "; ".join(f"{r.condition} {r.successes}/{r.episodes}" for r in decision.results)
    summary = {
        "version": result.stored.version,
        "path": str(result.stored.path),
        "parent_version": result.stored.parent_version,
        "method": config.method,
        "promoted": decision.promoted,
        "reason": decision.reason,
        "screening_profile": profile,
        "metrics": result.metrics,
        "config": dataclasses.asdict(config),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{result.stored.version} ({config.method}) -> {result.stored.path}")
        print(
            f"screened in sim, profile {profile!r} (not the arm): {screened}; "
            f"{'promoted' if decision.promoted else 'rejected'} after "
            f"{time.monotonic() - started:.0f} s"
        )
        print(decision.reason)
    return 0 if decision.promoted else 1
