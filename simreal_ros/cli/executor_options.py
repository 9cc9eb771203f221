"""The options of every command that runs sim episodes in parallel: where they run.

``add_executor_options(parser)`` adds ``--executor``, ``--ray-address`` and ``--workers``;
``executor_from_args(args)`` makes the executor they describe (``simreal_ros.executor``),
a context manager that releases its workers on exit.
"""

from __future__ import annotations


def add_executor_options(parser) -> None:
    group = parser.add_argument_group("where sim work runs")
    group.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: worker processes on this machine; ray: tasks on a Ray cluster "
        "(see docs/executor.md)",
    )
    group.add_argument(
        "--ray-address",
        default=None,
        help="with --executor ray: the cluster's address (host:port, as `ray start --head` "
        "prints it); default: a Ray instance started on this machine for the command",
    )
    group.add_argument(
        "--workers",
        type=int,
        default=None,
        help="parallel workers (default: every core, or every CPU of the Ray cluster)",
    )


def executor_from_args(args):
    from simreal_ros.executor import make_executor

    return make_executor(args.executor, args.workers, args.ray_address)
