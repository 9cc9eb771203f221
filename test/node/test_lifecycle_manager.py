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


def bridge_safety_and_probe(context):
    """A sim bridge and a safety node, unconfigured, and a probe node that records each
    one's lifecycle transitions as (node, goal state) in order."""
    bridge = SimBridgeNode(context=context)
    safety = SafetyNode(
        context=context, parameter_overrides=[Parameter("use_sim_time", value=True)]
    )
    probe = rclpy.create_node("probe", context=context)
    events: list[tuple[str, str]] = []
    for name in ("sim_bridge", "safety"):
        probe.create_subscription(
            TransitionEvent,
            f"/{name}/transition_event",
            lambda m, name=name: events.append((name, m.goal_state.label)),
            10,
        )
    return bridge, safety, probe, events


def up_events(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The events whose goal is inactive or active, in order (each transition also sends
    one into its transition state)."""
    return [event for event in events if event[1] in ("inactive", "active")]


def test_autostart_brings_the_graph_up_in_order_and_pause_takes_it_down_in_reverse(
    rclpy_context, executor
):
    bridge, safety, probe, events = bridge_safety_and_probe(rclpy_context)
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
    # Each transition sends two events (into its transition state, then to its goal): wait
    # for the four goals, not for any four events (one CI run judged before the last).
    assert spin_until(executor, lambda: len(up_events(events)) >= 4, 10.0), events
    assert up_events(events) == [
        ("sim_bridge", "inactive"),
        ("sim_bridge", "active"),
        ("safety", "inactive"),
        ("safety", "active"),
    ]
    events.clear()
    client = probe.create_client(Trigger, "/lifecycle_manager/pause")
    answer = call(executor, client)
    assert answer.success, answer.message
    assert spin_until(executor, lambda: len(up_events(events)) >= 2, 10.0), events
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


def test_a_node_that_dies_holds_what_follows_it_and_comes_back_through_the_manager(
    rclpy_context, executor
):
    """Supervision in one process: the sim bridge "dies" (its node is destroyed), the safety
    filter after it is deactivated at once; a new bridge appears (as a respawned process
    would) and both are brought up again in order, with the restart on /diagnostics."""
    from diagnostic_msgs.msg import DiagnosticArray

    bridge, safety, probe, events = bridge_safety_and_probe(rclpy_context)
    diagnostics: list[dict[str, str]] = []

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("lifecycle_manager"):
                values = {kv.key: kv.value for kv in status.values}
                diagnostics.append({"level": status.level, "message": status.message, **values})

    probe.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
    for node in (bridge, safety, probe):
        executor.add_node(node)
    manager = LifecycleManagerNode(
        context=rclpy_context,
        parameter_overrides=[
            Parameter("node_names", value=["sim_bridge", "safety"]),
            Parameter("autostart", value=True),
            Parameter("probe_timeout_s", value=0.5),
        ],
    )
    executor.add_node(manager)
    new_bridge = None
    try:
        assert spin_until(executor, lambda: manager.states.get("safety") == "active", 60.0), (
            manager.last_result
        )
        events.clear()
        executor.remove_node(bridge)
        bridge.destroy_node()  # the bridge's process died
        held = {"sim_bridge": "gone", "safety": "unconfigured"}
        assert spin_until(executor, lambda: manager.states == held, 20.0), manager.states
        # The manager's view can run ahead of the filter's own event to the probe.
        assert spin_until(executor, lambda: ("safety", "unconfigured") in events, 10.0), events
        assert spin_until(executor, lambda: any(d["level"] != b"\x00" for d in diagnostics), 5.0)
        # Held: while the bridge is gone the filter is not brought back.
        spin_until(executor, lambda: False, 1.0)
        assert safety._tick_timer is None
        new_bridge = SimBridgeNode(context=rclpy_context)  # the respawned process
        executor.add_node(new_bridge)
        assert spin_until(
            executor,
            lambda: manager.states == {"sim_bridge": "active", "safety": "active"},
            60.0,
        ), manager.last_result
        expected_ups = [
            ("sim_bridge", "inactive"),
            ("sim_bridge", "active"),
            ("safety", "inactive"),
            ("safety", "active"),
        ]

        # Wait for the filter's last event, not only the manager's view (one CI run judged
        # before the probe had it); a wrong order never turns into the right one.
        spin_until(executor, lambda: up_events(events)[-4:] == expected_ups, 10.0)
        assert up_events(events)[-4:] == expected_ups, events
        assert manager.restarts_seen == {"sim_bridge": 1, "safety": 0}
        assert "recovered" in manager.last_result and manager.last_ok
        diagnostics.clear()
        assert spin_until(executor, lambda: bool(diagnostics), 5.0)
        assert diagnostics[-1]["sim_bridge.restarts_seen"] == "1"
    finally:
        manager.destroy_node()
        if new_bridge is not None:
            new_bridge.destroy_node()
        safety.destroy_node()


def test_an_unanswered_probe_of_a_process_that_still_runs_is_busy_until_the_grace_ends(
    rclpy_context,
):
    """With `simreal up`'s status file, a node busy in a long callback is not taken for
    dead (and its followers are not taken down) until busy_grace_s; a death the runner saw,
    a new process, or no status file at all is a death at once."""
    import time

    from simreal_ros.graph.bringup import GONE

    manager = LifecycleManagerNode(
        context=rclpy_context,
        parameter_overrides=[
            Parameter("node_names", value=["sim_bridge", "safety"]),
            Parameter("autostart", value=False),
            Parameter("busy_grace_s", value=0.3),
        ],
    )
    try:
        running = {"sim_bridge": {"state": "running", "pid": 41}}
        manager._seen = {"sim_bridge": "active", "safety": "active"}
        assert manager._busy_or_gone("sim_bridge", "active", running) == "active"
        assert manager._busy_or_gone("sim_bridge", GONE, running) == "active"  # busy
        respawning = {"sim_bridge": {"state": "respawning", "pid": 41}}
        assert manager._busy_or_gone("sim_bridge", GONE, respawning) == GONE
        another = {"sim_bridge": {"state": "running", "pid": 42}}
        assert manager._busy_or_gone("sim_bridge", GONE, another) == GONE
        assert manager._busy_or_gone("sim_bridge", GONE, {}) == GONE  # ros2 launch
        assert manager._busy_or_gone("sim_bridge", "active", running) == "active"
        assert manager._busy_or_gone("sim_bridge", GONE, running) == "active"
        time.sleep(0.35)
        assert manager._busy_or_gone("sim_bridge", GONE, running) == GONE  # past the grace
    finally:
        manager.destroy_node()
