"""sim_bridge as its own process over DDS: /joint_states rate and command following."""

from __future__ import annotations

import time

import numpy as np
import pytest
from rostest_helpers import spin_until, wait_for_subscribers

from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv

pytestmark = pytest.mark.graph

RATE_HZ = 500.0


@pytest.fixture
def bridge_process():
    argv = python_module_argv(
        "simreal_ros.nodes.sim_bridge",
        ["-p", "autostart:=true", "-p", f"joint_state_rate_hz:={RATE_HZ}"],
    )
    process = NodeProcess("sim_bridge", argv, graph_environment())
    try:
        assert process.wait_for_output("active: episode", timeout=30.0), process.output()
        yield process
    finally:
        process.stop()


def test_joint_states_at_configured_rate_and_commands_move_the_joints(
    bridge_process, rclpy_context, executor
):
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from simreal_ros.nodes import qos
    from simreal_ros.robot.description import load_robot_description

    robot = load_robot_description()
    probe = Node("sim_bridge_graph_probe", context=rclpy_context)
    executor.add_node(probe)
    arrivals: list[float] = []
    stamps: list[float] = []
    latest: list[JointState] = []

    def on_state(message: JointState) -> None:
        arrivals.append(time.monotonic())
        stamps.append(message.header.stamp.sec + message.header.stamp.nanosec * 1e-9)
        latest[:] = [message]

    probe.create_subscription(JointState, "/joint_states", on_state, qos.STATE)
    assert spin_until(executor, lambda: len(arrivals) >= 50, timeout=20.0), bridge_process.output()
    # Rate over a 2 s wall window (free-running at real-time factor 1). The header stamps
    # are on the bridge's 2 ms sim-time grid, so the stamp span counts every message the
    # bridge published in the window, even ones a starved subscriber never got.
    arrivals.clear()
    stamps.clear()
    spin_until(executor, lambda: arrivals and arrivals[-1] - arrivals[0] >= 2.0, timeout=10.0)
    wall = arrivals[-1] - arrivals[0]
    published_rate = (stamps[-1] - stamps[0]) * RATE_HZ / wall
    arrival_rate = (len(arrivals) - 1) / wall
    assert published_rate == pytest.approx(RATE_HZ, rel=0.10), bridge_process.output()[-2000:]
    # Most of them must also arrive here (DDS, not the bridge, decides under heavy load).
    assert arrival_rate >= 0.5 * RATE_HZ
    assert list(latest[0].name) == list(robot.joint_names)

    target = np.asarray(robot.home_position) + np.array([0.25, -0.15, 0.2, -0.1, 0.15, 0.3, 0.03])
    commands = probe.create_publisher(
        Float64MultiArray, "/forward_position_controller/commands", qos.COMMAND
    )
    assert wait_for_subscribers(executor, commands)

    def reached() -> bool:
        commands.publish(Float64MultiArray(data=target.tolist()))
        return bool(latest) and np.allclose(latest[0].position, target, atol=5e-3)

    assert spin_until(executor, reached, timeout=10.0, period=0.02), (
        f"joints at {list(latest[0].position)}, target {target.tolist()}"
    )
