"""`simreal`: one command, with a subcommand per job.

Each subcommand lives in its own module under ``simreal_ros.cli`` and exposes
``add_parser(subparsers)``, which registers its arguments and sets ``func``. ``--robot``
(before or after the subcommand) chooses the arm for all of them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from simreal_ros.cli.profile_options import refuse_old_profile
from simreal_ros.executor import SimExecutorError

# Modules that provide subcommands, in the order `--help` lists them.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "simreal_ros.cli.up",
    "simreal_ros.cli.robot",
    "simreal_ros.cli.pretrain",
    "simreal_ros.cli.pretrain_camera",
    "simreal_ros.cli.eval",
    "simreal_ros.cli.premise",
    "simreal_ros.cli.expert",
    "simreal_ros.cli.sysid",
    "simreal_ros.cli.episodes",
    "simreal_ros.cli.trials",
    "simreal_ros.cli.learn",
    "simreal_ros.cli.align",
    "simreal_ros.cli.models",
    "simreal_ros.cli.diagnose",
    "simreal_ros.cli.loop",
)


ROBOT_HELP = (
    "the arm: a shipped one (simreal_arm, panda) or the path of a robot directory or "
    "robot.yaml (default: $SIMREAL_ROBOT, else simreal_arm)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simreal",
        description="On-robot fine-tuning of arm policies in one ROS 2 graph.",
    )
    parser.add_argument("--robot", default=None, help=ROBOT_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).add_parser(subparsers)
    for subparser in subparsers.choices.values():
        # Also after the subcommand; SUPPRESS keeps a value given before it.
        subparser.add_argument("--robot", default=argparse.SUPPRESS, help=ROBOT_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from simreal_ros.robot.description import select_robot

        refuse_old_profile(args)
        select_robot(args.robot)  # the arm of everything this command runs or starts
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError, SimExecutorError) as error:
        # Configuration and input errors, an unreachable or failing cluster: say what was
        # wrong, without a traceback.
        print(f"simreal {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
