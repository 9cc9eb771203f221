"""`simreal`: one command, with a subcommand per job.

Each subcommand lives in its own module under ``simreal_ros.cli`` and exposes
``add_parser(subparsers)``, which registers its arguments and sets ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that provide subcommands, in the order `--help` lists them.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "simreal_ros.cli.up",
    "simreal_ros.cli.pretrain",
    "simreal_ros.cli.eval",
    "simreal_ros.cli.premise",
    "simreal_ros.cli.sysid",
    "simreal_ros.cli.episodes",
    "simreal_ros.cli.trials",
    "simreal_ros.cli.learn",
    "simreal_ros.cli.models",
    "simreal_ros.cli.diagnose",
    "simreal_ros.cli.loop",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simreal",
        description="On-robot fine-tuning of arm policies in one ROS 2 graph.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError) as error:
        # Configuration and input errors: say what was wrong, without a traceback.
        print(f"simreal {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
