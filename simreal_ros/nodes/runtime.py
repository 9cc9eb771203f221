"""How a node process runs: init, spin one node, and shut down cleanly on Ctrl-C/SIGTERM."""

from __future__ import annotations

import os
from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation
from rclpy.node import Node

from simreal_ros.graph.processes import notify_ready, wait_for_handover


def raise_priority(niceness: int = -10) -> str:
    """Run this process ahead of ordinary ones (ros2_control's controller manager asks for
    a real-time priority the same way): a node that guards the arm must not wait behind
    training or a busy graph. Returns why not, where the OS refuses (no privilege)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except OSError as error:
        return f"running at normal priority ({error.strerror or error})"
    return ""


def run_node(
    make_node: Callable[[], Node], args=None, priority: Callable[[], str] | None = None
) -> int:
    """Spin the node ``make_node()`` builds on one thread until the process is asked to stop,
    or until the node sets ``exit_code``; returns that code (0 when it set none).

    A standby process (``graph.processes.STANDBY_ENV``) has its imports done when it gets
    here, and waits for the runner's handover before it joins the graph. Once the node is
    built, the process reports itself ready to ``simreal up`` (``notify_ready``), unless
    the node sets ``defers_ready`` and reports it itself.

    One thread on purpose: rclpy's multi-threaded executor costs more per callback than
    these nodes' control-path work; heavy work runs on the nodes' own worker threads.
    """
    if not wait_for_handover():
        return 0  # a standby whose runner stopped
    refused = priority() if priority is not None else ""
    rclpy.init(args=args)
    node = None
    try:
        node = make_node()
        if refused:
            node.get_logger().warning(refused)
        if not getattr(node, "defers_ready", False):
            notify_ready()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while rclpy.ok() and getattr(node, "exit_code", None) is None:
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except rclpy_implementation.RCLError:
        # SIGTERM's handler shuts the context down from the signal: one that lands between
        # the ok() check and spin_once fails spin_once's own timer. A stop, not a crash.
        if rclpy.ok():
            raise
    finally:
        exit_code = getattr(node, "exit_code", None) or 0
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return exit_code
