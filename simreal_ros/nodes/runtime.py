"""How a node process runs: init, spin one node, and shut down cleanly on Ctrl-C/SIGTERM."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

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

    Ctrl-C (SIGINT) and SIGTERM ask the loop to stop between two callbacks (``StopSignals``):
    a KeyboardInterrupt raised wherever the main thread happens to be could land inside
    rclpy's executor, between the coroutine it makes for a callback and the await that
    runs it, and leave a "coroutine ... was never awaited" warning (or an rcl error) in
    the node's output. A second Ctrl-C interrupts at once.
    """
    if not wait_for_handover():
        return 0  # a standby whose runner stopped
    refused = priority() if priority is not None else ""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    executor = None
    stop = StopSignals()
    try:
        node = make_node()  # a signal while it is built stops the node once it is built
        if refused:
            node.get_logger().warning(refused)
        if not getattr(node, "defers_ready", False):
            notify_ready()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while not stop.requested and rclpy.ok() and getattr(node, "exit_code", None) is None:
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass  # a second Ctrl-C, or a context shut down by someone else
    except rclpy_implementation.RCLError:
        # A context shut down elsewhere fails spin_once's own timer. A stop, not a crash.
        if rclpy.ok():
            raise
    finally:
        exit_code = getattr(node, "exit_code", None) or 0
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
        stop.restore()
    return exit_code


class StopSignals:
    """SIGINT and SIGTERM noted as a request to stop (``requested``) instead of raised in
    whatever the main thread runs; after the first, SIGINT raises KeyboardInterrupt again."""

    def __init__(self) -> None:
        self.requested = 0  # the first signal's number, 0 until one came
        self._previous = {
            sig: signal.signal(sig, self._note) for sig in (signal.SIGINT, signal.SIGTERM)
        }

    def _note(self, signum, frame) -> None:
        self.requested = self.requested or signum
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
