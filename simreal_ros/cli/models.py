"""`simreal models list|show|rollback`: the versioned adapter store."""

from __future__ import annotations

import argparse
import datetime
import json

from simreal_ros.adapters.store import BASE
from simreal_ros.adapters.store import DEFAULT_STORE_ROOT as DEFAULT_STORE

STORE_HELP = (
    "adapter store directory; {robot} and {base} are filled in from --robot and the base "
    "checkpoint (--checkpoint, else the one shipped for --task)"
)


def _add_store_options(parser) -> None:
    parser.add_argument("--store", default=DEFAULT_STORE, help=STORE_HELP)
    parser.add_argument("--checkpoint", default="", help="base checkpoint (fills {base})")
    parser.add_argument("--task", default="push", choices=("push", "reach"))


def open_store(args):
    """The store these arguments name, for this robot and base."""
    from simreal_ros.adapters.store import AdapterStore, scoped_store_root
    from simreal_ros.policy.checkpoint import read_metadata, shipped_checkpoint
    from simreal_ros.robot.description import load_robot_description

    root = args.store
    if "{" in root:
        checkpoint = args.checkpoint or shipped_checkpoint(args.task)
        base = read_metadata(checkpoint)
        root = scoped_store_root(root, load_robot_description().name, base)
    return AdapterStore(root)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list, inspect and roll back adapter versions in the store",
        description="Adapter versions: models/<version>/ with peft files, metadata, screening.",
    )
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    p = sub.add_parser("list", help="one line per kept version")
    _add_store_options(p)
    p.set_defaults(func=_list)
    p = sub.add_parser("show", help="metadata and screening of one version")
    p.add_argument("version")
    _add_store_options(p)
    p.set_defaults(func=_show)
    p = sub.add_parser(
        "rollback",
        help="make an earlier version the running one",
        description="Make an earlier version the running one (the store's active.json). "
        "With --service a running policy node does it: it rolls back its own adapter_store "
        "and runs the result, or refuses and keeps both as they were, so the store and the "
        "node never disagree. Without --service only the store at --store changes.",
    )
    p.add_argument(
        "version", nargs="?", default="",
        help=f"a version, or {BASE!r} for the base checkpoint (default: the one before)",
    )  # fmt: skip
    _add_store_options(p)
    p.add_argument(
        "--service", default="",
        help="ask this Rollback service of a running policy node, e.g. /policy/rollback, to "
        "roll back its adapter_store and run the result",
    )  # fmt: skip
    p.set_defaults(func=_rollback)


def format_table(store) -> str:
    current = store.current()
    lines = [
        f"{'':2}{'version':10} {'parent':10} {'method':6} {'decision':9} {'created':19} reason"
    ]
    for item in store.list():
        created = datetime.datetime.fromtimestamp(item.manifest.get("created", 0))
        marker = "*" if item.version == current else ""
        decision = "rejected" if item.rejected else "promoted" if item.promoted else "-"
        lines.append(
            f"{marker:2}{item.version:10} {item.parent_version or 'base':10} "
            f"{item.metadata.get('method', ''):6} {decision:9} "
            f"{created:%Y-%m-%d %H:%M:%S} {item.screening.get('reason', '')}"
        )
    if current is None:
        lines.append("(running: the base checkpoint)")
    return "\n".join(lines)


def _list(args: argparse.Namespace) -> int:
    store = open_store(args)
    print(f"store {store.root}")
    print(format_table(store))
    return 0


def _show(args: argparse.Namespace) -> int:
    item = open_store(args).load(args.version)
    print(
        json.dumps(
            {
                "version": item.version,
                "path": str(item.path),
                "checksum": item.checksum,
                "metadata": item.metadata,
                "screening": item.screening,
            },
            indent=2,
        )
    )
    return 0


def _rollback(args: argparse.Namespace) -> int:
    if args.service:
        from simreal_ros.nodes.rollback_client import call_rollback_service

        return call_rollback_service(args.service, args.version)
    version = open_store(args).rollback(args.version or None)
    print(f"running version is now {version or 'the base checkpoint'}")
    return 0
