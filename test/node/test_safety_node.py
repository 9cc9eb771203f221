"""safety node in one process: publishing, watchdog trip, e-stop latch/reset, status, faults."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import JointState
from simreal_ros.msg import PolicyAction, SafetyStatus
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from simreal_ros.nodes import qos
from simreal_ros.nodes.safety import SafetyNode
from simreal_ros.robot.description import load_robot_description

ROBOT = load_robot_description()
HOME = np.asarray(ROBOT.home_position, dtype=float)
NAMES = list(ROBOT.joint_names)
# The arm publishes its joints in another order (and an extra one); the node maps by name.
STATE_ORDER = [*reversed(NAMES), "camera_pan_joint"]
TIMEOUT = 0.15


class Bench:
    """Test side of the node: a fake arm (joint states), a fake policy, and listeners."""

    def __init__(self, rclpy_context, executor, **overrides) -> None:
        from rclpy.node import Node

        params = {"command_timeout": TIMEOUT, "state_timeout": TIMEOUT, "autostart": True}
        params.update(overrides)
        self.safety = SafetyNode(
            context=rclpy_context,
            parameter_overrides=[Parameter(k, value=v) for k, v in params.items()],
        )
        self.node = Node("safety_test_bench", context=rclpy_context)
        self.executor = executor
        executor.add_node(self.safety)
        executor.add_node(self.node)
        keep = QoSProfile(
            depth=10000, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
        )
        self.commands: list[np.ndarray] = []
        self.statuses: list[SafetyStatus] = []
        self.diagnostics: list[DiagnosticArray] = []
        self.node.create_subscription(
            Float64MultiArray,
            "/forward_position_controller/commands",
            lambda m: self.commands.append(np.array(m.data)),
            keep,
        )
        self.node.create_subscription(SafetyStatus, "/safety/status", self.statuses.append, keep)
        self.node.create_subscription(
            DiagnosticArray, "/diagnostics", self.diagnostics.append, keep
        )
        self.state_pub = self.node.create_publisher(JointState, "/joint_states", qos.STATE)
        self.action_pub = self.node.create_publisher(PolicyAction, "/policy/action", qos.COMMAND)
        self.estop = self.node.create_client(Trigger, "/safety/estop")
        self.reset = self.node.create_client(Trigger, "/safety/reset")
        self.position = HOME.copy()
        self.sequence = 0
        assert wait_for_subscribers(executor, self.state_pub)
        assert wait_for_subscribers(executor, self.action_pub)

    def now(self):
        return self.node.get_clock().now().to_msg()

    def send_state(self, position=None) -> None:
        position = self.position if position is None else position
        msg = JointState()
        msg.header.stamp = self.now()
        msg.name = STATE_ORDER
        lookup = dict(zip(NAMES, position, strict=True))
        msg.position = [float(lookup.get(name, 0.0)) for name in STATE_ORDER]
        self.state_pub.publish(msg)

    def send_action(self, values, names=(), stamp=None) -> None:
        msg = PolicyAction()
        msg.header.stamp = stamp if stamp is not None else self.now()
        msg.policy_version = "v-test"
        self.sequence += 1
        msg.sequence = self.sequence
        msg.joint_names = list(names)
        msg.values = [float(v) for v in values]
        self.action_pub.publish(msg)

    def drive(self, seconds: float, action=None, follow: bool = True) -> None:
        """Spin for ``seconds``: arm follows the command; the policy repeats ``action``."""
        import time

        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if follow and self.commands:
                self.position = self.commands[-1].copy()
            self.send_state()
            if action is not None:
                self.send_action(action)
            spin_until(self.executor, lambda: False, 0.01)

    def drive_until(self, condition, timeout: float, action=None) -> bool:
        """Like ``drive``, but until ``condition()`` holds (a loaded machine may need long)."""
        import time

        end = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > end:
                return False
            self.drive(0.01, action=action)
        return True

    def call(self, client) -> Trigger.Response:
        assert client.wait_for_service(timeout_sec=5.0)
        future = client.call_async(Trigger.Request())
        assert spin_until(self.executor, future.done, 5.0)
        return future.result()


@pytest.fixture
def bench(rclpy_context, executor):
    return Bench(rclpy_context, executor)


def steps_ok(commands: list[np.ndarray], dt: float, slack: float = 1.05) -> None:
    """No published step exceeds the velocity limit (slack for a missed timer tick)."""
    limit = np.asarray(ROBOT.velocity_limit) * dt
    for before, after in itertools.pairwise(commands):
        assert np.all(np.abs(after - before) <= limit * 2 * slack), (before, after)


def test_publishes_nothing_before_the_first_joint_state(bench):
    bench.send_action(HOME)
    spin_until(bench.executor, lambda: False, 0.3)
    assert bench.commands == []
    bench.send_state()
    assert spin_until(bench.executor, lambda: len(bench.commands) >= 3, 2.0)
    # Holding where the arm is, at the control rate.
    np.testing.assert_allclose(bench.commands[-1], HOME)


def test_follows_limited_actions_then_watchdog_holds_when_the_policy_goes_silent(bench):
    target = HOME.copy()
    target[0] += 0.6
    bench.drive(0.8, action=target)
    moved = bench.commands[-1][0] - HOME[0]
    assert moved > 0.3, f"the arm did not follow a fresh action (moved {moved:.3f} rad)"
    steps_ok(bench.commands, 0.01)
    assert any(
        i.limit in ("velocity", "acceleration", "jerk") and i.joint == NAMES[0]
        for s in bench.statuses
        for i in s.interventions
    )
    # The policy goes silent mid-motion: send a far target once, then nothing.
    bench.statuses.clear()
    far = HOME.copy()
    far[0] -= 0.8
    bench.send_action(far)
    bench.drive(0.6, action=None)
    tripped = [s for s in bench.statuses if s.watchdog_tripped]
    assert tripped, "the command watchdog never tripped"
    assert any(i.limit == "stale_command" for s in tripped for i in s.interventions)
    assert tripped[-1].state == SafetyStatus.STATE_HOLDING
    assert tripped[-1].command_age > TIMEOUT
    # Held: the last commands no longer move, and nothing stepped on the way.
    np.testing.assert_allclose(bench.commands[-1], bench.commands[-5], atol=1e-9)
    steps_ok(bench.commands, 0.01)


def test_state_watchdog_holds_and_reports_stale_state(bench):
    target = HOME.copy()
    target[1] -= 0.3
    bench.drive(0.3, action=target)
    bench.statuses.clear()
    # Joint states stop; actions keep coming.
    import time

    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        bench.send_action(target)
        spin_until(bench.executor, lambda: False, 0.01)
    assert any(i.limit == "stale_state" for s in bench.statuses for i in s.interventions), (
        "stale joint states did not trip the watchdog"
    )
    assert bench.statuses[-1].state == SafetyStatus.STATE_HOLDING
    assert bench.safety.filter.state_watchdog.trips == 1


def test_estop_latches_and_reset_needs_fresh_inputs(bench):
    target = HOME.copy()
    target[2] += 0.2
    bench.drive(0.3, action=HOME)
    assert bench.call(bench.estop).success
    bench.drive(0.5, action=target)
    assert bench.statuses[-1].state == SafetyStatus.STATE_ESTOP
    assert bench.statuses[-1].estop_latched
    assert abs(bench.commands[-1][2] - HOME[2]) < 1e-6, "e-stop let the arm move"
    # Inputs go stale; reset must refuse and say why.
    spin_until(bench.executor, lambda: False, 0.4)
    refused = bench.call(bench.reset)
    assert not refused.success
    assert "stale" in refused.message and "policy actions" in refused.message
    assert bench.safety.filter.estop_latched
    # Fresh inputs: reset clears it and the arm follows again.
    bench.drive(0.1, action=target)
    accepted = bench.call(bench.reset)
    assert accepted.success, accepted.message
    bench.drive(0.6, action=target)
    assert bench.statuses[-1].state in (SafetyStatus.STATE_PASS, SafetyStatus.STATE_LIMITED)
    assert bench.commands[-1][2] > HOME[2] + 0.15


def test_status_names_the_limit_and_refusals_hold(bench):
    bench.drive(0.2, action=HOME)
    beyond = HOME.copy()
    beyond[1] = 0.5  # shoulder_lift upper hard limit is 0.0
    bench.statuses.clear()
    bench.drive(0.3, action=beyond)
    items = [i for s in bench.statuses for i in s.interventions]
    position = [i for i in items if i.limit == "position" and i.joint == "shoulder_lift_joint"]
    assert position, [i.limit for i in items]
    assert position[0].requested == pytest.approx(0.5)
    assert position[0].allowed == pytest.approx(-0.02)  # hard limit 0.0 minus the margin
    assert position[0].excess == pytest.approx(0.52)
    assert any(s.state == SafetyStatus.STATE_LIMITED for s in bench.statuses)
    assert "shoulder_lift_joint" in bench.statuses[-1].limited_joints or any(
        "shoulder_lift_joint" in s.limited_joints for s in bench.statuses
    )
    assert bench.statuses[-1].policy_version == "v-test"
    assert bench.statuses[-1].interventions_total >= len(items)
    # Non-finite, wrong size, wrong joint order: each refused with its reason, and held.
    for bad, names, reason in (
        ([float("nan")] * 7, (), "non_finite"),
        (HOME[:5], (), "wrong_size"),
        (HOME, list(reversed(NAMES)), "joint_order"),
    ):
        bench.statuses.clear()
        bench.send_action(bad, names)
        refused = lambda r=reason: any(  # noqa: E731
            i.limit == r for s in bench.statuses for i in s.interventions
        )
        assert bench.drive_until(refused, 10.0), reason
        assert bench.statuses[-1].state == SafetyStatus.STATE_HOLDING
        assert np.all(np.isfinite(bench.commands[-1]))


def test_diagnostics_report_counts_trips_and_ages(bench):
    bench.drive(0.2, action=HOME)
    bench.send_action([float("inf")] * 7)
    bench.drive(1.3, action=None)
    assert bench.diagnostics
    values = {kv.key: kv.value for kv in bench.diagnostics[-1].status[0].values}
    assert values["interventions_non_finite"] == "1"
    assert int(values["watchdog_trips_command"]) == 1
    assert float(values["command_age_s"]) > TIMEOUT
    assert values["estop_latched"] == "False"
    assert bench.diagnostics[-1].status[0].level == b"\x01"  # WARN: holding


def test_an_exception_in_the_filter_brakes_and_the_node_keeps_running(bench):
    target = HOME.copy()
    target[0] += 1.2
    bench.drive(0.3, action=target)
    moving = bench.safety.filter.commanded_velocity[0]
    at_fault = bench.safety.filter.commanded_position[0]
    assert moving > 0.5

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault")

    bench.safety.filter.limiter.next_velocity = broken
    bench.statuses.clear()
    before = len(bench.commands)
    bench.drive(0.5, action=target)
    assert len(bench.commands) > before + 20, "the node stopped publishing"
    assert any(i.limit == "exception" for s in bench.statuses for i in s.interventions)
    assert bench.statuses[-1].state == SafetyStatus.STATE_HOLDING
    # Braked to a stop within the acceleration limit, never followed the raw target.
    tail = bench.commands[before - 2 :]
    steps_ok(tail, 0.01)
    np.testing.assert_allclose(bench.commands[-1], bench.commands[-2], atol=1e-12)
    braking = moving**2 / (2 * ROBOT.acceleration_limit[0]) + 2 * moving * 0.01
    assert bench.commands[-1][0] <= at_fault + braking
    assert bench.commands[-1][0] < target[0] - 0.1


def test_limits_that_loosen_safety_are_read_only(bench):
    result = bench.safety.set_parameters([Parameter("command_timeout", value=5.0)])
    assert not result[0].successful
    descriptor = bench.safety.describe_parameter("velocity_limits")
    assert descriptor.read_only and "velocity" in descriptor.description


def test_a_limit_above_the_hardware_is_refused_at_start(rclpy_context):
    with pytest.raises(ValueError, match=r"velocity_limits\[0\].*above the hardware limit"):
        SafetyNode(
            context=rclpy_context,
            parameter_overrides=[Parameter("velocity_limits", value=[9.0] * 7)],
        )


def test_optional_joint_trajectory_output_carries_the_same_command(rclpy_context, executor):
    from trajectory_msgs.msg import JointTrajectory

    bench = Bench(rclpy_context, executor, output_trajectory=True)
    trajectories: list[JointTrajectory] = []
    bench.node.create_subscription(
        JointTrajectory,
        "/joint_trajectory_controller/joint_trajectory",
        trajectories.append,
        qos.COMMAND,
    )
    target = HOME.copy()
    target[0] += 0.1
    bench.drive(0.5, action=target)
    assert trajectories, "no JointTrajectory published"
    last = trajectories[-1]
    assert list(last.joint_names) == NAMES
    (point,) = last.points
    assert point.time_from_start.nanosec == 10_000_000  # one control period
    assert any(np.allclose(point.positions, c) for c in bench.commands[-3:])


def test_deactivating_brakes_the_arm_to_rest_then_stops_the_output(bench):
    """Deactivation holds the arm: the commanded motion brakes within the limits to rest,
    then nothing more reaches the arm, whatever the policy sends; activation follows only
    actions sent after it."""
    from rclpy.lifecycle import TransitionCallbackReturn

    target = HOME.copy()
    target[0] += 1.0
    # Drive until the shoulder is moving fast toward the target.
    assert bench.drive_until(lambda: bench.safety.filter.commanded_velocity[0] > 0.5, 10.0, target)
    speed_before = float(bench.safety.filter.commanded_velocity[0])
    assert bench.safety.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    steps = bench.safety.last_brake_steps
    assert steps > 1

    seen = -1
    while seen != len(bench.commands):  # until no command arrives for 0.3 s
        seen = len(bench.commands)
        spin_until(bench.executor, lambda: False, 0.3)
    # The braking path: the last command sent while active, then the brake steps.
    braking = bench.commands[-(steps + 1) :]
    velocity = np.diff(np.asarray(braking), axis=0) / 0.01
    speed = np.abs(velocity[:, 0])
    assert speed[0] <= speed_before + 1e-9
    assert np.all(np.diff(speed) <= 1e-9), "the speed grew while braking"
    assert speed[-1] == 0.0, "the brake did not reach rest"
    accel = np.abs(np.diff(velocity, axis=0))[:, 0] / 0.01
    assert accel.max() <= ROBOT.acceleration_limit[0] * (1 + 1e-6)
    rest = bench.commands[-1].copy()
    assert rest[0] < target[0]  # it stopped short, where braking ended
    count = len(bench.commands)
    bench.drive(0.5, action=target)  # inactive: states and actions keep coming
    assert len(bench.commands) == count, "an inactive safety node commanded the arm"
    # Active again: it holds until a new action, then follows it.
    assert bench.safety.trigger_activate() == TransitionCallbackReturn.SUCCESS
    bench.drive(0.3)
    assert len(bench.commands) > count
    np.testing.assert_allclose(bench.commands[-1], rest, atol=1e-9)
    assert bench.drive_until(lambda: bench.commands[-1][0] > rest[0] + 0.05, 10.0, target)
