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
