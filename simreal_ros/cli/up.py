"""`simreal up`: start a profile's graph as separate processes (no `ros2 launch` needed)."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from simreal_ros.graph import description
from simreal_ros.graph.runner import NODE_EXIT_BASE, GraphRunner


def parse_override(text: str) -> tuple[str, str, Any]:
    """Parse ``node.param=value``; the value is read as YAML data (numbers, bools, lists)."""
    target, separator, value = text.partition("=")
    node, dot, parameter = target.partition(".")
    if not separator or not dot or not node or not parameter:
        raise ValueError(
            f"--set {text!r} is not of the form NODE.PARAMETER=VALUE, e.g. safety.rate_hz=100."
        )
    return node, parameter, yaml.safe_load(value)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "up",
        help="start the graph of a profile as processes",
        description=(
            "Start the nodes of a profile (the same description the launch files read) as "
            "separate processes, stream their logs, and stop them all on Ctrl-C. If a node "
            f"dies the others are stopped and the exit code is {NODE_EXIT_BASE} plus the "
            "node's position in the graph (0-based, in start order)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--profile", choices=description.PROFILES, default="sim")
    parser.add_argument(
        "--task",
        default=description.DEFAULT_TASK,
        choices=("push", "reach"),
        help="the task, for every node that takes it (sim bridge, policy, learner)",
    )
    parser.add_argument(
        "--checkpoint",
        default="",
        help="base checkpoint directory for the policy and the learner (default: the one "
        "shipped for the robot and task)",
    )
    parser.add_argument(
        "--only", default="", help="comma-separated node names to start (default: all)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE.PARAM=VALUE",
        help="override a node parameter (repeatable)",
    )
    parser.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID to use")
    parser.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds"
    )
    parser.add_argument("--list", action="store_true", help="print the graph and exit")
    parser.set_defaults(func=run)


def run(args) -> int:
    overrides: dict[str, dict[str, Any]] = {}
    for text in args.set:
        node, parameter, value = parse_override(text)
        overrides.setdefault(node, {})[parameter] = value
    nodes = description.graph(args.profile, overrides, task=args.task, checkpoint=args.checkpoint)
    nodes = description.select(nodes, [n for n in args.only.split(",") if n])
    if args.list:
        for index, node in enumerate(nodes):
            print(f"{index}: {node.name:<12} {node.module:<32} {node.description}")
        return 0
    robot = next((n.parameters["robot"] for n in nodes if "robot" in n.parameters), "")
    print(
        f"[simreal up] profile {args.profile}, robot {robot}, task {args.task}: "
        f"{', '.join(n.name for n in nodes)}"
    )
    return GraphRunner(nodes, args.profile, domain_id=args.domain_id).run(args.duration)
