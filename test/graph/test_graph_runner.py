"""`simreal up` starts the graph description as processes talking over DDS."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

import numpy as np
import pytest
from rostest_helpers import spin_until, wait_for_subscribers

from simreal_ros.graph.processes import NodeProcess, graph_environment
from simreal_ros.graph.runner import exit_code_for

pytestmark = pytest.mark.graph


def simreal_up(*args: str) -> NodeProcess:
    argv = [sys.executable, "-m", "simreal_ros.cli.main", "up", *args]
    return NodeProcess("simreal-up", argv, graph_environment())


def child_pids(up: NodeProcess) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(r"started (\w+) \(pid (\d+)\)", up.output())}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_sim_bridge_publishes_joint_states_at_rate_and_follows_commands(rclpy_context, executor):
    import rclpy
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from simreal_ros.nodes import qos
    from simreal_ros.robot.description import load_robot_description

    robot = load_robot_description()
    rate_hz = 500.0
    up = simreal_up("--only", "sim_bridge", "--set", f"sim_bridge.joint_state_rate_hz={rate_hz}")
    try:
        node = rclpy.create_node("runner_probe", context=rclpy_context)
        executor.add_node(node)
        stamps: list[float] = []
        latest: list[JointState] = []

        def on_state(message: JointState) -> None:
            stamps.append(time.monotonic())
            latest[:] = [message]

        # Best effort like the publisher, with a deep queue: a probe whose executor falls
        # behind for a moment (a loaded 2-core machine) must not count DDS's overwritten
        # samples as a slow bridge.
        probe_qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=500, reliability=ReliabilityPolicy.BEST_EFFORT
        )
        node.create_subscription(JointState, "/joint_states", on_state, probe_qos)
        assert spin_until(executor, lambda: len(stamps) > 10, 30.0), up.output()[-3000:]
        # Rate over a 3 s window of arrivals, after 0.5 s that lets any backlog queued
        # while the probe was discovering drain (a burst would read as a fast bridge).
        stamps.clear()
        spin_until(executor, lambda: False, 3.5, period=0.001)
        window = [s for s in stamps if s >= stamps[0] + 0.5]
        measured = (len(window) - 1) / (window[-1] - window[0])
        print(f"/joint_states: measured {measured:.1f} Hz, configured {rate_hz:.0f} Hz")
        assert abs(measured - rate_hz) <= 0.1 * rate_hz
        assert tuple(latest[0].name) == robot.joint_names

        target = np.array(robot.home_position, dtype=float)
        target[0] += 0.3
        target[2] -= 0.2
        publisher = node.create_publisher(
            Float64MultiArray, "/forward_position_controller/commands", qos.COMMAND
        )
        assert wait_for_subscribers(executor, publisher)
        command = Float64MultiArray(data=target.tolist())

        def reached() -> bool:
            publisher.publish(command)
            position = np.array(latest[0].position)
            arm = list(robot.arm_indices)
            return bool(np.max(np.abs(position[arm] - target[arm])) < 0.02)

        assert spin_until(executor, reached, 15.0, period=0.02), (
            f"joints {np.round(latest[0].position, 3)} never reached {np.round(target, 3)}"
        )
    finally:
        up.stop()
    assert up.returncode == 0, up.output()[-2000:]


def test_a_node_that_dies_is_respawned_and_the_arm_side_stays_up():
    up = simreal_up("--only", "sim_bridge,safety")
    try:
        assert up.wait_for_output("started safety", 30.0), up.output()
        pids = child_pids(up)
        time.sleep(0.5)  # not a sync point: the kill may land at any moment of start-up
        os.kill(pids["safety"], signal.SIGKILL)
        assert up.wait_for_output("respawned safety", 20.0), up.output()[-2000:]
        assert up.returncode is None, up.output()[-2000:]
        assert alive(pids["sim_bridge"]), "the sim bridge was stopped when safety died"
        respawned = int(re.findall(r"respawned safety \(pid (\d+)", up.output())[-1])
        assert respawned != pids["safety"] and alive(respawned)
    finally:
        up.stop()
    assert up.returncode == 0, up.output()[-2000:]
    assert "node 'safety' exited with code -9; respawning it" in up.output()


def test_without_respawn_a_death_stops_the_graph_and_the_exit_code_names_it():
    up = simreal_up("--only", "sim_bridge,safety", "--no-respawn")
    try:
        assert up.wait_for_output("started safety", 30.0), up.output()
        pids = child_pids(up)
        # Let both nodes come up, then kill the second one (index 1 in the graph).
        time.sleep(0.5)  # not a sync point: the kill may land at any moment of start-up
        os.kill(pids["safety"], signal.SIGKILL)
        up.process.wait(timeout=20.0)
    finally:
        up.stop()
    assert up.returncode == exit_code_for(1), up.output()[-2000:]
    assert "node 'safety' exited" in up.output()
    assert not alive(pids["sim_bridge"]), "sim_bridge was left running"


def test_ctrl_c_stops_every_node_cleanly():
    up = simreal_up("--only", "sim_bridge,safety")
    try:
        assert up.wait_for_output("started safety", 30.0), up.output()
        pids = child_pids(up)
        os.kill(up.process.pid, signal.SIGINT)
        up.process.wait(timeout=20.0)
    finally:
        up.stop()
    assert up.returncode == 0, up.output()[-2000:]
    assert not any(alive(pid) for pid in pids.values())
