"""How a node process runs: init, spin one node, and shut down cleanly on Ctrl-C/SIGTERM."""

from __future__ import annotations

from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node


def run_node(make_node: Callable[[], Node], args=None) -> None:
    """Spin the node ``make_node()`` builds on one thread until the process is asked to stop.

    One thread on purpose: rclpy's multi-threaded executor costs more per callback than
    these nodes' control-path work; heavy work runs on the nodes' own worker threads.
    """
    rclpy.init(args=args)
    node = None
    try:
        node = make_node()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
