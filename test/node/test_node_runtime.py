"""run_node: how a node process spins and stops, in one process with rclpy."""

from __future__ import annotations


def test_a_stop_between_the_ok_check_and_the_spin_is_a_clean_exit(monkeypatch):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from simreal_ros.nodes import runtime

    original = SingleThreadedExecutor.spin_once
    calls = []

    def spin_once_after_a_signal(self, timeout_sec=None):
        calls.append(timeout_sec)
        if len(calls) == 3:
            # What SIGTERM's handler does, landing just after rclpy.ok() said yes: the
            # stand-in arm's process exited 1 with an RCLError from spin_once's timer.
            rclpy.shutdown()
        return original(self, timeout_sec=timeout_sec)

    monkeypatch.setattr(SingleThreadedExecutor, "spin_once", spin_once_after_a_signal)
    assert runtime.run_node(lambda: Node("runtime_probe"), args=[]) == 0
    assert len(calls) == 3 and not rclpy.ok()


def test_ctrl_c_stops_between_callbacks_and_leaves_no_coroutine_unawaited(monkeypatch, recwarn):
    import gc
    import os
    import signal

    from rclpy.executors import Executor
    from rclpy.node import Node

    from simreal_ros.nodes import runtime

    ran = []

    class Ticking(Node):
        def __init__(self) -> None:
            super().__init__("runtime_ticking")
            self.create_timer(0.01, lambda: ran.append(len(ran)))

    make_handler = Executor._make_handler
    made = []

    def ctrl_c_once_the_callback_is_made(self, *args, **kwargs):
        # The moment a user's Ctrl-C met the learner: rclpy has made the coroutine that runs
        # a callback and not yet awaited it.
        task = make_handler(self, *args, **kwargs)
        made.append(None)  # not the task: a reference would keep its coroutine from warning
        if len(made) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return task

    monkeypatch.setattr(Executor, "_make_handler", ctrl_c_once_the_callback_is_made)
    before = signal.getsignal(signal.SIGINT)
    assert runtime.run_node(Ticking, args=[]) == 0
    gc.collect()
    unawaited = [str(w.message) for w in recwarn if "never awaited" in str(w.message)]
    assert not unawaited, unawaited
    # The callback made when the signal came ran; the loop stopped after it.
    assert len(made) == 2 and ran == [0, 1]
    assert signal.getsignal(signal.SIGINT) is before
