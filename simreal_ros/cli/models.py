"""`simreal models list|show|rollback`: the versioned adapter store."""

from __future__ import annotations

import argparse
import datetime
import json

DEFAULT_STORE = "~/.simreal/adapters"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list, inspect and roll back adapter versions in the store",
        description="Adapter versions: models/<version>/ with peft files, metadata, screening.",
    )
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    p = sub.add_parser("list", help="one line per kept version")
    p.add_argument("--store", default=DEFAULT_STORE, help="adapter store directory")
    p.set_defaults(func=_list)
    p = sub.add_parser("show", help="metadata and screening of one version")
    p.add_argument("version")
    p.add_argument("--store", default=DEFAULT_STORE, help="adapter store directory")
    p.set_defaults(func=_show)
    p = sub.add_parser(
        "rollback",
        help="make an earlier version the running one",
        description="Make an earlier version the running one (the store's active.json). "
        "With --service a running policy node does it: it rolls back its own adapter_store "
        "and runs the result, or refuses and keeps both as they were, so the store and the "
        "node never disagree. Without --service only the store at --store changes.",
    )
    p.add_argument("version", nargs="?", default="", help="default: the one before")
    p.add_argument(
        "--store", default=DEFAULT_STORE, help="adapter store directory (not with --service)"
    )
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
            f"{created:%Y-%m-%d %H:%M:%S} {item.screening.get('reason', '')[:80]}"
        )
    if current is None:
        lines.append("(running: the base checkpoint)")
    return "\n".join(lines)


def _list(args: argparse.Namespace) -> int:
    from simreal_ros.adapters.store import AdapterStore

    print(format_table(AdapterStore(args.store)))
    return 0


def _show(args: argparse.Namespace) -> int:
    from simreal_ros.adapters.store import AdapterStore

    item = AdapterStore(args.store).load(args.version)
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
    from simreal_ros.adapters.store import AdapterStore

    version = AdapterStore(args.store).rollback(args.version or None)
    print(f"running version is now {version or 'the base checkpoint'}")
    return 0
