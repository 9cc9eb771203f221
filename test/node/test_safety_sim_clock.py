"""safety node on sim time: one filter step per control period, however /clock arrives.

A timer on sim time fires at most once per /clock message. When /clock advances in steps
longer than the control period (the sim bridge faster than real time, or a lagging
executor), the filter must still step once per period of sim time, or the arm moves
slower than its limits allow and a policy trained at the control period fails its task.
"""

from __future__ import annotations

import numpy as np
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import JointState
from simreal_ros.msg import PolicyAction
from std_msgs.msg import Float64MultiArray

from simreal_ros.nodes import qos
from simreal_ros.nodes.safety import SafetyNode
from simreal_ros.robot.description import load_robot_description
from simreal_ros.safety import SafetyFilter

ROBOT = load_robot_description()
HOME = np.asarray(ROBOT.home_position, dtype=float)
NAMES = list(ROBOT.joint_names)
START = 1.0  # sim time of the first /clock, s
CLOCK_STEP = 0.025  # sim seconds per /clock message: 2.5 control periods of 10 ms
CLOCK_MESSAGES = 8  # 0.2 s of sim time: mid-motion towards the target


def _stamp(seconds: float, stamp) -> None:
    stamp.sec, stamp.nanosec = divmod(round(seconds * 1e9), 1_000_000_000)


class SimClockBench:
    """A fake sim bridge (/clock, /joint_states following the command) and a fake policy."""

    def __init__(self, rclpy_context, executor) -> None:
        self.safety = SafetyNode(
            context=rclpy_context,
            parameter_overrides=[
                Parameter("use_sim_time", value=True),
                Parameter("autostart", value=True),
            ],
        )
        self.node = Node("safety_sim_clock_bench", context=rclpy_context)
        self.executor = executor
        executor.add_node(self.safety)
        executor.add_node(self.node)
        self.commands: list[np.ndarray] = []
        keep = QoSProfile(
            depth=1000, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
        )
        self.node.create_subscription(
            Float64MultiArray,
            "/forward_position_controller/commands",
            lambda m: self.commands.append(np.array(m.data)),
            keep,
        )
        self.clock_pub = self.node.create_publisher(Clock, "/clock", qos.STATE)
        self.state_pub = self.node.create_publisher(JointState, "/joint_states", qos.STATE)
        self.action_pub = self.node.create_publisher(PolicyAction, "/policy/action", qos.COMMAND)
        for publisher in (self.clock_pub, self.state_pub, self.action_pub):
            assert wait_for_subscribers(executor, publisher)

    def sim_now(self) -> float:
        return self.safety.get_clock().now().nanoseconds * 1e-9

    def advance(self, t: float, action=None) -> None:
        """Inputs stamped ``t``, then /clock to ``t``; wait for the tick it causes."""
        position = self.commands[-1] if self.commands else HOME  # the arm follows
        state = JointState(name=NAMES, position=[float(v) for v in position])
        _stamp(t, state.header.stamp)
        self.state_pub.publish(state)
        if action is not None:
            msg = PolicyAction(policy_version="v-test", joint_names=NAMES)
            msg.values = [float(v) for v in action]
            _stamp(t, msg.header.stamp)
            self.action_pub.publish(msg)
        published = len(self.commands)
        clock = Clock()
        _stamp(t, clock.clock)
        for _ in range(50):  # /clock is best effort for the time source: resend if lost
            self.clock_pub.publish(clock)
            if spin_until(
                self.executor,
                lambda: self.sim_now() >= t - 1e-9 and len(self.commands) > published,
                0.2,
            ):
                return
        raise AssertionError(f"no command after /clock reached {t:.3f} s")


def test_filter_steps_once_per_control_period_when_clock_comes_in_coarse_steps(
    rclpy_context, executor
):
    bench = SimClockBench(rclpy_context, executor)
    dt = bench.safety.config.dt
    assert 2 * dt < CLOCK_STEP, "the test needs /clock coarser than the control period"
    bench.advance(START)  # first joint state: the node starts commanding where the arm is
    np.testing.assert_allclose(bench.commands[-1], HOME)
    target = HOME.copy()
    target[0] += 0.6
    ticks_before = bench.safety.filter.ticks
    t = START
    for _ in range(CLOCK_MESSAGES):
        t += CLOCK_STEP
        bench.advance(t, action=target)
    periods = round((t - START) / dt)
    ticks = bench.safety.filter.ticks - ticks_before
    assert abs(ticks - periods) <= 1, (
        f"{ticks} filter steps in {t - START:.3f} s of sim time ({periods} control periods) "
        f"from {CLOCK_MESSAGES} /clock messages: missed periods were not made up"
    )
    assert bench.safety.catch_up_steps > 0
    # The command got as far as the same filter stepped on every period of the same time.
    reference = SafetyFilter.from_description(ROBOT, bench.safety.config)
    reference.submit_state(HOME, START, START)
    reference.tick(START)
    reference.submit_state(HOME, START + CLOCK_STEP, START + CLOCK_STEP)
    reference.submit_command(target, START + CLOCK_STEP, START + CLOCK_STEP, NAMES, "v-test")
    for k in range(1, periods + 1):
        reference.tick(START + k * dt)
    expected = reference.commanded_position[0] - HOME[0]
    moved = bench.commands[-1][0] - HOME[0]
    assert expected > 0.05
    assert moved >= 0.8 * expected, (
        f"the arm was commanded {moved:.3f} rad in {t - START:.3f} s of sim time; the filter "
        f"allows {expected:.3f} rad: it stepped less often than its control period"
    )
    # A published step stands for the control periods its tick made up (2 or 3 here):
    # never more than the velocity limit allows over those periods.
    limit = np.asarray(ROBOT.velocity_limit) * dt * np.ceil(CLOCK_STEP / dt) * 1.001
    for before, after in zip(bench.commands[1:], bench.commands[2:], strict=False):
        assert np.all(np.abs(after - before) <= limit + 1e-12), (before, after)
