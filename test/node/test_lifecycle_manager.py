"""The lifecycle manager brings real lifecycle nodes up in order and down in reverse."""

from __future__ import annotations

import rclpy
from lifecycle_msgs.msg import TransitionEvent
from rclpy.parameter import Parameter
from rostest_helpers import spin_until
from std_srvs.srv import Trigger

from simreal_ros.nodes.lifecycle_manager import LifecycleManagerNode
from simreal_ros.nodes.safety import SafetyNode
from simreal_ros.nodes.sim_bridge import SimBridgeNode


def call(executor, client, timeout=60.0) -> Trigger.Response:
    assert client.wait_for_service(timeout_sec=10.0)
    future = client.call_async(Trigger.Request())
    assert spin_until(executor, future.done, timeout)
    return future.result()


def test_autostart_brings_the_graph_up_in_order_and_pause_takes_it_down_in_reverse(
    rclpy_context, executor
):
    bridge = SimBridgeNode(context=rclpy_context)
    safety = SafetyNode(
        context=rclpy_context, parameter_overrides=[Parameter("use_sim_time", value=True)]
    )
    probe = rclpy.create_node("probe", context=rclpy_context)
    events: list[tuple[str, str]] = []
    for name in ("sim_bridge", "safety"):
        probe.create_subscription(
            TransitionEvent,
            f"/{name}/transition_event",
            lambda m, name=name: events.append((name, m.goal_state.label)),
            10,
        )
    for node in (bridge, safety, probe):
        executor.add_node(node)
    # Nothing runs until the manager says so: both nodes wait unconfigured.
    assert safety._command_pub is None and bridge.core is None
    manager = LifecycleManagerNode(
        context=rclpy_context,
        parameter_overrides=[
            Parameter("node_names", value=["sim_bridge", "safety"]),
            Parameter("autostart", value=True),
        ],
    )
    executor.add_node(manager)
    assert spin_until(executor, lambda: manager.states.get("safety") == "active", 60.0), (
        manager.last_result
    )
    assert manager.last_ok, manager.last_result
    assert spin_until(executor, lambda: len(events) >= 4, 10.0)
    ups = [event for event in events if event[1] in ("inactive", "active")]
    assert ups == [
        ("sim_bridge", "inactive"),
        ("sim_bridge", "active"),
        ("safety", "inactive"),
        ("safety", "active"),
    ]
    events.clear()
    client = probe.create_client(Trigger, "/lifecycle_manager/pause")
    answer = call(executor, client)
    assert answer.success, answer.message
    assert spin_until(executor, lambda: len(events) >= 2, 10.0)
    assert [name for name, label in events if label == "inactive"] == ["safety", "sim_bridge"]
    assert manager.states == {"sim_bridge": "inactive", "safety": "inactive"}
    answer = call(executor, probe.create_client(Trigger, "/lifecycle_manager/resume"))
    assert answer.success and manager.states["safety"] == "active", answer.message


def test_a_missing_node_fails_startup_with_a_reason(rclpy_context, executor):
    manager = LifecycleManagerNode(
        context=rclpy_context,
        parameter_overrides=[
            Parameter("node_names", value=["nobody_here"]),
            Parameter("service_timeout_s", value=0.5),
        ],
    )
    executor.add_node(manager)
    probe = rclpy.create_node("probe2", context=rclpy_context)
    executor.add_node(probe)
    answer = call(executor, probe.create_client(Trigger, "/lifecycle_manager/startup"))
    assert not answer.success
    assert "nobody_here" in answer.message and "is it running" in answer.message
