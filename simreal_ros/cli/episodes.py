"""`simreal episodes list|info|recover|export`: the recorded episode bags."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

DEFAULT_DATA_DIR = "~/.simreal/episodes"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "episodes",
        help="list, inspect, recover and export recorded episode bags",
        description="Recorded episodes: one rosbag2 (MCAP) bag per episode.",
    )
    sub = parser.add_subparsers(dest="episodes_command", metavar="ACTION", required=True)

    p = sub.add_parser("list", help="one line per episode bag")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="folder of episode bags")
    p.set_defaults(func=_list)

    p = sub.add_parser("info", help="metadata and message counts of one bag")
    p.add_argument("episode", help="an episode id (as `list` prints it) or a bag directory")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="where to look up an id")
    p.set_defaults(func=_info)

    p = sub.add_parser("recover", help="close bags left unclosed by a killed recorder")
    p.add_argument("bags", nargs="*", help="episode bag directories (default: every unclosed)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="where to look without BAGS")
    p.add_argument("--keep-original", action="store_true", help="keep <bag>.mcap.unclosed")
    p.set_defaults(func=_recover)

    p = sub.add_parser("export", help="aligned transitions to one .npz for off-ROS training")
    p.add_argument("output", help="output .npz file")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="folder of episode bags")
    p.add_argument("--joint-names", nargs="+", help="expected joint order (default: robot)")
    p.add_argument("--source", nargs="+", default=(), help="sim, real_twin, real")
    p.add_argument("--condition", nargs="+", default=(), help="train, shifted")
    p.add_argument("--outcome", nargs="+", default=(), help="success, failure, ...")
    p.add_argument("--policy-version", nargs="+", default=())
    p.add_argument("--exclude-incomplete", action="store_true")
    p.set_defaults(func=_export)


def _list(args: argparse.Namespace) -> int:
    from simreal_ros.episodes.catalog import format_table, list_episodes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unclosed bags show as such in the table
        print(format_table(list_episodes(Path(args.data_dir).expanduser())))
    return 0


def _info(args: argparse.Namespace) -> int:
    from simreal_ros.episodes.catalog import episode_info, find_episode

    info = episode_info(find_episode(args.episode, args.data_dir))
    print(json.dumps(info, indent=2))
    if info["state"] == "corrupt":
        print(f"{info['bag']}: no readable MCAP file; it cannot be recovered.", file=sys.stderr)
        return 1
    return 0


def _recover(args: argparse.Namespace) -> int:
    from simreal_ros.episodes.catalog import list_episodes
    from simreal_ros.episodes.recovery import recover_bag

    if args.bags:
        bags = [Path(b).expanduser() for b in args.bags]
    else:
        entries = list_episodes(Path(args.data_dir).expanduser())
        bags = [e.bag_dir for e in entries if e.state == "unclosed"]
        if not bags:
            print(f"no unclosed bags under {args.data_dir}")
    failed = 0
    for bag in bags:
        try:
            print(recover_bag(bag, keep_original=args.keep_original).summary())
        except (ValueError, OSError, RuntimeError) as error:
            print(f"{bag}: not recovered: {error}")
            failed += 1
    return 1 if failed else 0


def _export(args: argparse.Namespace) -> int:
    import numpy as np

    from simreal_ros.episodes.dataset import EpisodeFilter, load_transitions

    joint_names = args.joint_names
    if not joint_names:
        from simreal_ros.robot.description import load_robot_description

        joint_names = list(load_robot_description().joint_names)
    where = EpisodeFilter(
        sources=tuple(args.source),
        conditions=tuple(args.condition),
        outcomes=tuple(args.outcome),
        policy_versions=tuple(args.policy_version),
        include_incomplete=not args.exclude_incomplete,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_transitions(Path(args.data_dir).expanduser(), joint_names, where)
    for w in caught:
        print(f"warning: {w.message}")
    if len(data) == 0:
        looked = {
            "source": args.source, "condition": args.condition, "outcome": args.outcome,
            "policy version": args.policy_version,
        }  # fmt: skip
        wanted = ", ".join(f"{k} in {v}" for k, v in looked.items() if v) or "any episode"
        if args.exclude_incomplete:
            wanted += ", complete only"
        raise ValueError(
            f"no transitions match ({wanted}) among the bags under {args.data_dir}; nothing "
            "written. `simreal episodes list` shows what was recorded."
        )
    output = Path(args.output).expanduser()
    np.savez_compressed(output, **data.to_arrays())
    episodes = len(set(data.episode_ids.tolist()))
    print(f"{len(data)} transitions from {episodes} episodes -> {output}")
    return 0
