"""safety node: the filter between the policy and the arm's controller.

Subscribes /policy/action and /joint_states, publishes the filtered command on its own
timer at the control rate (so the watchdog acts when the policy goes silent), reports on
/safety/status and /diagnostics. A latched e-stop (~/estop) is cleared only by ~/reset,
which refuses while inputs are stale. ~/engage and ~/disengage (std_srvs/Trigger) start
and stop following the policy; disengaged (how the real profile starts) the filter brakes
the arm to rest and holds it there. State changes are logged at most once a second with
the reason and a count (``verbose_log``: every one); /safety/status carries them all.
Nothing here decides anything: the SafetyFilter core does; this node converts messages
and keeps time. It fails closed: an error in a callback is logged and the arm is held,
never sent the raw request, and the node keeps running.
"""

from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.lifecycle import State, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from simreal_ros.msg import PolicyAction, SafetyIntervention, SafetyStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import ERROR, OK, WARN, diagnostic_array
from simreal_ros.nodes.lifecycle import AutostartLifecycleNode
from simreal_ros.nodes.params import declare_config, declare_robot
from simreal_ros.nodes.runtime import raise_priority, run_node
from simreal_ros.safety import ALL_REASONS, ESTOP, HOLDING, STATE_NAMES, SafetyConfig, SafetyFilter
from simreal_ros.srv import Resync

COMMAND_TOPIC = "/forward_position_controller/commands"
TRAJECTORY_TOPIC = "/joint_trajectory_controller/joint_trajectory"
# Most control periods one tick makes up for on sim time; a longer gap is a stall.
MAX_CATCH_UP = 5


def _seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


class SafetyNode(AutostartLifecycleNode):
    """ROS adapter of ``SafetyFilter``, as a lifecycle node.

    configure builds the filter and the arm-facing lifecycle publishers; activate starts
    the control tick; deactivate brakes the arm to rest within the limits, then stops the
    output, so the arm's controller holds the last command. Status and diagnostics keep
    flowing in every state, so monitors see an inactive filter as such.
    """

    def __init__(self, *, description=None, **node_kwargs) -> None:
        super().__init__("safety", **node_kwargs)
        self.config: SafetyConfig = declare_config(self, SafetyConfig)
        robot = declare_robot(self)
        self.description = description if description is not None else robot
        # Built here so a bad configuration is refused at start; rebuilt on configure.
        self.filter = SafetyFilter.from_description(self.description, self.config)
        self._command_msg = Float64MultiArray()
        self._command_pub = None
        self._trajectory_pub = None
        self._tick_timer = None
        self._status_pub = self.create_publisher(SafetyStatus, "/safety/status", qos.STATUS)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        self.create_subscription(PolicyAction, "/policy/action", self._on_action, qos.COMMAND)
        self.create_subscription(
            JointState, "/joint_states", self._on_joint_state, qos.SENSOR_DATA
        )
        self.create_service(Trigger, "~/estop", self._on_estop)
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.create_service(Resync, "~/resync", self._on_resync)
        self.create_service(Trigger, "~/engage", self._on_engage)
        self.create_service(Trigger, "~/disengage", self._on_disengage)
        # State changes since the last state log line (throttled to one a second).
        self._changes_unlogged = 0
        self._last_state_log = -float("inf")
        self._last_reason = ""
        self._status_period = 1.0 / self.config.status_rate
        self._last_status = -float("inf")
        self._last_result_state = HOLDING
        self.node_errors = 0
        # Time of the newest filter step, on the tick grid (None: no step yet), and the
        # filter steps run to make up for timer periods that never fired.
        self._step_time: float | None = None
        self.catch_up_steps = 0
        self.last_brake_steps = 0  # commands the last deactivation published while braking
        self.create_timer(1.0 / self.config.diagnostics_rate, self._publish_diagnostics)
        self.autostart(self.config.autostart)

    # ------------------------------------------------------------- lifecycle

    def on_configure(self, state: State) -> TransitionCallbackReturn:
        estop = self.filter.estop_latched  # a latched e-stop survives a reconfigure
        self.filter = SafetyFilter.from_description(self.description, self.config)
        if estop:
            self.filter.engage_estop("e-stop latched before configure")
        names = list(self.filter.names)
        self._command_pub = self.create_lifecycle_publisher(
            Float64MultiArray, COMMAND_TOPIC, qos.COMMAND
        )
        if self.config.output_trajectory:
            self._trajectory_pub = self.create_lifecycle_publisher(
                JointTrajectory, TRAJECTORY_TOPIC, qos.COMMAND
            )
            self._trajectory_msg = JointTrajectory(joint_names=names)
            point = JointTrajectoryPoint()
            point.time_from_start.nanosec = int(self.config.dt * 1e9)
            self._trajectory_msg.points = [point]
        self.get_logger().info(
            f"safety filter on {len(names)} joints at {self.config.control_rate:g} Hz; "
            f"command_timeout {self.config.command_timeout:g} s, state_timeout "
            f"{self.config.state_timeout:g} s, workspace check "
            f"{'on' if self.filter.workspace is not None else 'off'}"
        )
        return super().on_configure(state)

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        # Follow only actions that arrive from now on, never one kept from before.
        self.filter.hold_until_next_command()
        self._step_time = None
        self._tick_timer = self.create_timer(self.config.dt, self._on_tick)
        self.get_logger().info("active: filtering /policy/action to the arm")
        return super().on_activate(state)

    def _halt(self) -> None:
        """Undo activate: brake to rest through the filter, then stop ticking."""
        if self._tick_timer is None:
            return
        self.destroy_timer(self._tick_timer)
        self._tick_timer = None
        self.last_brake_steps = self._brake_to_rest()
        self.get_logger().info(
            f"inactive: braked to rest in {self.last_brake_steps} steps; output stopped"
        )

    def _brake_to_rest(self) -> int:
        """Publish the filter's braking path at the control period until the commanded
        velocity is zero (or ``brake_timeout``). This callback blocks the executor for
        that long on purpose: no input may change the stop."""
        f = self.filter
        f.hold_until_next_command()
        limit = max(1, int(self.config.brake_timeout / self.config.dt))
        for step in range(1, limit + 1):
            result = f.tick(self._now())
            if result is None:
                return 0  # no joint state ever: nothing was commanded
            self._report(result, self._now())
            self._publish_command(result.command)
            if step == limit or not np.any(f.commanded_velocity):
                return step
            time.sleep(self.config.dt)
        return limit

    def _release(self) -> None:
        self._halt()
        for publisher in (self._command_pub, self._trajectory_pub):
            if publisher is not None:
                self.destroy_lifecycle_publisher(publisher)
        self._command_pub = self._trajectory_pub = None

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    # ------------------------------------------------------------- inputs

    def _on_action(self, msg: PolicyAction) -> None:
        if self._tick_timer is None:
            return  # inactive: an action now is never followed later
        try:
            refusal = self.filter.submit_command(
                msg.values,
                _seconds(msg.header.stamp),
                self._now(),
                msg.joint_names,
                msg.policy_version,
            )
        except Exception as error:  # the filter refuses bad input itself; this is a bug
            self._node_error("policy action", error)
            self.filter.engage_estop(f"policy action handling failed: {error!r}")
            return
        if refusal is not None:
            self.get_logger().warning(
                f"policy action refused, holding: {refusal.describe()}",
                throttle_duration_sec=1.0,
            )

    def _on_joint_state(self, msg: JointState) -> None:
        try:
            refusal = self.filter.submit_named_state(
                msg.name, msg.position, _seconds(msg.header.stamp), self._now()
            )
        except Exception as error:
            self._node_error("joint state", error)
            return
        if refusal is not None:
            self.get_logger().warning(
                f"joint state refused, holding: {refusal.describe()}", throttle_duration_sec=1.0
            )

    def _on_estop(self, request, response):
        self.filter.engage_estop("e-stop service")
        self.get_logger().warning("e-stop engaged by service call; holding until ~/reset")
        response.success = True
        response.message = "e-stop latched; holding position until ~/reset succeeds."
        return response

    def _on_reset(self, request, response):
        ok, message = self.filter.reset(self._now())
        if ok:
            self.get_logger().info(message)
        else:
            self.get_logger().warning(message)
        response.success = ok
        response.message = message
        return response

    def _on_engage(self, request, response):
        response.success, response.message = self.filter.engage()
        self.get_logger().info(f"~/engage: {response.message}")
        return response

    def _on_disengage(self, request, response):
        response.success, response.message = self.filter.disengage("~/disengage")
        self.get_logger().info(f"~/disengage: {response.message}")
        return response

    def _on_resync(self, request, response):
        after = _seconds(request.after)
        response.success, response.message = self.filter.resync(
            self._now(), after if after > 0.0 else None
        )
        if not response.success:
            self.get_logger().warning(response.message)
        return response

    # ------------------------------------------------------------- tick

    def _step_times(self, now: float) -> list[float]:
        """Times of the filter steps this tick runs: on sim time, one per control period.

        Every filter step moves the command at most one period's worth (limits x dt). A
        timer on sim time fires at most once per /clock message and skips the periods it
        missed, so when the executor lags (or /clock comes in coarse steps, as it does at
        a real-time factor above 1) a tick can stand for two or more periods; stepping once
        would then slow the simulated arm below its limits, and the task with it. Catching
        up runs the missed steps (at most ``MAX_CATCH_UP``; a longer stall starts a new
        grid) and sends the last: the command never moves faster than the limits over the
        sim time passed. On the wall clock (the physical arm) a late tick stays one step:
        the arm really went without a new command, and slowing it is the safe side.
        """
        dt, last = self.config.dt, self._step_time
        if not self.get_clock().ros_time_is_active:
            return [now]
        if last is None or now < last or now - last > MAX_CATCH_UP * dt:
            self._step_time = now  # first tick, time went back (sim reset), or a stall
            return [now]
        periods = max(1, int((now - last) / dt + 1e-6))
        self._step_time = last + periods * dt
        self.catch_up_steps += periods - 1
        return [last + k * dt for k in range(1, periods)] + [now]

    def _on_tick(self) -> None:
        try:
            result = None
            for now in self._step_times(self._now()):
                result = self.filter.tick(now)
                if result is None:
                    return  # no joint state yet: nothing safe to command
                self._report(result, now)
            # Only the newest step's command goes out: the arm follows the latest target.
            self._publish_command(result.command)
        except Exception as error:
            self._node_error("control tick", error)

    def _publish_command(self, command) -> None:
        self._command_msg.data = command.tolist()
        self._command_pub.publish(self._command_msg)
        if self._trajectory_pub is not None:
            self._trajectory_msg.points[0].positions = self._command_msg.data
            self._trajectory_pub.publish(self._trajectory_msg)

    def _report(self, result, now: float) -> None:
        """Log and publish what one filter step did (every step's changes are reported)."""
        if result.error:
            self.get_logger().error(
                f"safety filter failed, braking to hold: {result.error}",
                throttle_duration_sec=1.0,
            )
        if result.changed and result.state != self._last_result_state:
            self._log_state_change(result)
        self._last_result_state = result.state
        if result.changed or now - self._last_status >= self._status_period:
            self._last_status = now
            self._status_pub.publish(self._status_message(result))

    def _log_state_change(self, result) -> None:
        """One line per change with ``verbose_log``; else at most one a second, naming the
        newest state, its reason and how many changes the line stands for."""
        reasons = sorted({item.limit for item in result.interventions})
        if not result.engaged:
            reasons.append("not engaged")
        reason = ", ".join(reasons) or "inputs fresh and within limits"
        self._changes_unlogged += 1
        now = time.monotonic()
        if not self.config.verbose_log and now - self._last_state_log < 1.0:
            return
        count = self._changes_unlogged
        since = "" if count == 1 else f" ({count} state changes since the last line)"
        self.get_logger().info(f"safety state: {STATE_NAMES[result.state]} ({reason}){since}")
        self._changes_unlogged, self._last_state_log = 0, now

    def _node_error(self, where: str, error: BaseException) -> None:
        self.node_errors += 1
        self.get_logger().error(
            f"safety node error in {where} (holding, not passing input): {error!r}",
            throttle_duration_sec=1.0,
        )

    def _status_message(self, result) -> SafetyStatus:
        msg = SafetyStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.state = result.state
        msg.interventions = [
            SafetyIntervention(
                limit=item.limit,
                joint=item.joint,
                requested=item.requested,
                allowed=item.allowed,
                excess=item.excess,
            )
            for item in result.interventions
        ]
        msg.limited_joints = list(result.limited_joints)
        msg.watchdog_tripped = result.watchdog_tripped
        msg.estop_latched = result.estop_latched
        msg.engaged = result.engaged
        msg.policy_version = result.policy_version
        msg.command_age = min(result.command_age, 1e9)
        msg.state_age = min(result.state_age, 1e9)
        msg.interventions_total = sum(self.filter.counts.values())
        return msg

    def _publish_diagnostics(self) -> None:
        try:
            now = self._now()
            f = self.filter
            name, hardware = "safety: filter", self.description.name
            state = self._last_result_state
            if self._tick_timer is None:
                message = (
                    "unconfigured" if self._command_pub is None else "inactive: output stopped"
                )
                self._diagnostics_pub.publish(
                    diagnostic_array(self, name, hardware, WARN, message)
                )
                return
            if f.estop_latched:
                level, message = ERROR, "e-stop latched"
            elif not f.engaged:
                level, message = WARN, "holding: not engaged (call /safety/engage to start)"
            elif not f.has_state:
                level, message = WARN, "no joint state yet"
            elif state == HOLDING:
                level, message = WARN, "holding"
            else:
                level, message = OK, STATE_NAMES[state]
            if state == ESTOP and not f.estop_latched:
                message = "recovering from e-stop"
            values = [
                ("engaged", f.engaged),
                ("estop_latched", f.estop_latched),
                ("command_age_s", f"{min(f.command_watchdog.age(now), 1e9):.3f}"),
                ("state_age_s", f"{min(f.state_watchdog.age(now), 1e9):.3f}"),
                ("watchdog_trips_command", f.command_watchdog.trips),
                ("watchdog_trips_state", f.state_watchdog.trips),
                ("filter_exceptions", f.exceptions),
                ("node_errors", self.node_errors),
                ("ticks", f.ticks),
                ("catch_up_steps", self.catch_up_steps),
                ("last_brake_steps", self.last_brake_steps),
                ("interventions_total", sum(f.counts.values())),
            ]
            values += [(f"interventions_{reason}", f.counts[reason]) for reason in ALL_REASONS]
            self._diagnostics_pub.publish(
                diagnostic_array(self, name, hardware, level, message, values)
            )
        except Exception as error:
            self._node_error("diagnostics", error)


def main(args=None) -> None:
    run_node(SafetyNode, args, priority=raise_priority)


if __name__ == "__main__":
    main()
