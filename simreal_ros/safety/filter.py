"""The safety filter: what may reach the arm this control tick, and why not more.

Inputs arrive asynchronously (``submit_command``, ``submit_state``); the output is made on
the filter's own clock (``tick``), so a silent policy or a silent arm is noticed on the
next tick. Holding means braking to a stop within the acceleration limit, never a step.
Every change to a request is an ``Intervention`` with its reason; refused input is never
passed on. An exception inside a tick yields a braking output, never the raw request.
"""

from __future__ import annotations

import dataclasses
import math
import traceback
from collections.abc import Sequence

import numpy as np

from simreal_ros.robot.joint_order import JointOrder
from simreal_ros.safety.config import ALL_REASONS, SafetyConfig
from simreal_ros.safety.limits import (
    HOLD,
    SOURCE_NAMES,
    JointLimits,
    MotionLimiter,
    limits_from_description,
)
from simreal_ros.safety.watchdog import Watchdog
from simreal_ros.safety.workspace import Workspace

# SafetyStatus.state values.
PASS, LIMITED, HOLDING, ESTOP = 0, 1, 2, 3
STATE_NAMES = ("pass", "limited", "holding", "estop")

_NAN = float("nan")


@dataclasses.dataclass(frozen=True)
class Intervention:
    """One change or refusal: which limit, which joint ("" for all), asked, allowed, excess."""

    limit: str
    joint: str
    requested: float
    allowed: float
    excess: float

    def describe(self) -> str:
        where = f" on {self.joint}" if self.joint else ""
        return (
            f"{self.limit}{where}: requested {self.requested:g}, allowed {self.allowed:g} "
            f"(excess {self.excess:g})"
        )


class TickResult:
    """What one tick produced (a new object per tick). ``command`` is the filter's output
    buffer, overwritten by the next tick: convert or copy it first."""

    __slots__ = (
        "changed",
        "command",
        "command_age",
        "engaged",
        "error",
        "estop_latched",
        "interventions",
        "limited_joints",
        "policy_version",
        "state",
        "state_age",
        "watchdog_tripped",
    )

    def __init__(self, command: np.ndarray) -> None:
        self.command = command
        self.state = HOLDING
        self.interventions: list[Intervention] = []
        self.limited_joints: list[str] = []
        self.watchdog_tripped = False
        self.estop_latched = False
        self.engaged = True
        self.command_age = math.inf
        self.state_age = math.inf
        self.policy_version = ""
        self.changed = True
        self.error = ""


class SafetyFilter:
    """Per-tick limiter of joint position commands (controller order)."""

    def __init__(
        self,
        limits: JointLimits,
        config: SafetyConfig | None = None,
        workspace: Workspace | None = None,
    ) -> None:
        self.config = config if config is not None else SafetyConfig()
        self.limits = limits
        self.names = limits.names
        self.n = limits.num_joints
        self.dt = self.config.dt
        self.limiter = MotionLimiter(limits, self.dt)
        self.workspace = workspace
        self.command_watchdog = Watchdog("command", self.config.command_timeout)
        self.state_watchdog = Watchdog("state", self.config.state_timeout)
        n = self.n
        # Commanded trajectory (last output, its velocity and acceleration) as plain float
        # lists: for a handful of joints Python floats are several times faster than numpy
        # calls. The numpy copies are filled only when a limit acts (``_sync_arrays``).
        self._ql = [0.0] * n
        self._vl = [0.0] * n
        self._al = [0.0] * n
        self._q = np.zeros(n)
        self._v = np.zeros(n)
        self._a = np.zeros(n)
        self._out = np.zeros(n)
        self._target_raw: list[float] = [0.0] * n
        self._target_list: list[float] = [0.0] * n
        self._target_clipped = np.zeros(n)
        self._measured = np.zeros(n)
        self._measured_list = [0.0] * n
        self._state_buffer = np.zeros(n)
        self._lower = limits.lower.tolist()
        self._upper = limits.upper.tolist()
        self._inv_dt = 1.0 / self.dt
        # Braking the workspace check assumes: the limiter's own (speed falls by A dt a tick).
        self._decel_step = self.limiter.decel_step
        self._inv_two_decel = tuple(self.dt / (2.0 * s) for s in self._decel_step)
        self._have_state = False
        self._rows_fresh = False
        self._have_command = False
        self._target_was_clipped = False
        self._command_refused = False
        self._state_refused = False
        self._command_stamp = -math.inf
        self._state_stamp = -math.inf
        self._resync_after = -math.inf
        self._estop = False
        # Disengaged, the filter holds the arm whatever the policy asks (nothing moves until
        # someone engages it); only with require_engage does it start that way.
        self._engaged = (not self.config.require_engage) or self.config.engage_at_start
        self._policy_version = ""
        self._pending: list[Intervention] = []
        self._previous_state = -1
        self._joint_order = JointOrder(self.names)
        self.counts = dict.fromkeys(ALL_REASONS, 0)
        self.ticks = 0
        self.exceptions = 0
        self.last_error = ""

    @classmethod
    def from_description(cls, description, config: SafetyConfig | None = None) -> SafetyFilter:
        """Limits and workspace from a ``RobotDescription`` tightened by ``config``.

        Refuses (ValueError) a config that loosens the hardware's limits or whose box
        excludes the home pose.
        """
        config = config if config is not None else SafetyConfig()
        limits = limits_from_description(description, config)
        workspace = None
        if config.workspace_check:
            lower = config.workspace_lower or list(description.workspace_lower)
            upper = config.workspace_upper or list(description.workspace_upper)
            boxes = [
                config.keep_out_boxes[i : i + 6] for i in range(0, len(config.keep_out_boxes), 6)
            ]
            from simreal_ros.robot.kinematics import ToolKinematics

            workspace = Workspace(
                ToolKinematics.for_robot(description),
                lower,
                upper,
                boxes,
            )
            workspace.require_inside(np.asarray(description.home_position, float), "home")
        return cls(limits, config, workspace)

    # ----------------------------------------------------------------- inputs

    def _refuse(self, limit: str, joint: str, requested: float, allowed: float, excess: float):
        item = Intervention(limit, joint, float(requested), float(allowed), float(excess))
        self._pending.append(item)
        self.counts[limit] += 1
        return item

    def submit_command(
        self,
        values: Sequence[float] | np.ndarray,
        stamp: float,
        now: float,
        names: Sequence[str] = (),
        policy_version: str = "",
    ) -> Intervention | None:
        """Offer a policy action (absolute joint positions); None if accepted, else why not.

        A refused action makes the filter hold until an acceptable one arrives.
        """
        try:
            refusal = self._check_command(values, stamp, now, names)
        except Exception as error:  # malformed beyond recognition: refuse, never crash
            refusal = self._refuse("non_finite", "", _NAN, _NAN, 0.0)
            self.last_error = f"command check failed: {error!r}"
        if refusal is not None:
            self._command_refused = True
            return refusal
        self._command_refused = False
        self._have_command = True
        self._command_stamp = stamp
        self.command_watchdog.feed(stamp if self.config.check_stamps else now)
        self._policy_version = policy_version
        return None

    def _check_command(self, values, stamp: float, now: float, names: Sequence[str]):
        n = self.n
        if len(values) != n:
            return self._refuse("wrong_size", "", len(values), n, abs(len(values) - n))
        if len(names) and tuple(names) != self.names:
            for i, expected in enumerate(self.names):
                got = names[i] if i < len(names) else ""
                if got != expected:
                    return self._refuse("joint_order", expected, i, i, 0.0)
            return self._refuse("joint_order", "", len(names), n, abs(len(names) - n))
        if isinstance(values, np.ndarray):
            array = np.asarray(values, dtype=float)
            if array.ndim != 1:
                raise ValueError(f"a command must be one-dimensional, got shape {array.shape}")
            target = array.tolist()
        else:
            target = [float(x) for x in values]  # raises on non-numbers
        clipped = [
            lo if x < lo else hi if x > hi else x
            for x, lo, hi in zip(target, self._lower, self._upper, strict=True)
        ]
        total = sum(target)
        if total - total != 0.0:  # a NaN or an infinity somewhere (finite sums stay finite)
            for i, x in enumerate(target):
                if x - x != 0.0:
                    return self._refuse("non_finite", self.names[i], x, _NAN, 0.0)
        if (stamp if self.config.check_stamps else now) <= self._resync_after:
            # Computed from the old episode's state: it would drag the arm back there.
            return self._refuse(
                "before_resync", "", stamp, self._resync_after, self._resync_after - stamp
            )
        if self.config.check_stamps:
            timeout = self.config.command_timeout
            if not math.isfinite(stamp) or stamp <= 0.0:
                return self._refuse("stale_command", "", stamp, now, math.inf)
            age = now - stamp
            if age > timeout:
                return self._refuse("stale_command", "", age, timeout, age - timeout)
            if age < -timeout:  # from the future: the sender's clock is not ours
                return self._refuse("stale_command", "", age, -timeout, -timeout - age)
            if stamp < self._command_stamp:
                return self._refuse(
                    "out_of_order", "", stamp, self._command_stamp, self._command_stamp - stamp
                )
        self._target_raw = target
        self._target_list = clipped
        self._target_was_clipped = clipped != target
        return None

    def state_index(self, names: Sequence[str]) -> tuple[np.ndarray | None, str]:
        """Indices of the controller's joints in a JointState's ``names``, or None and the
        first joint it lacks."""
        index, missing = self._joint_order.index(names)
        return index, missing[0] if missing else ""

    def submit_named_state(
        self, names: Sequence[str], positions: Sequence[float], stamp: float, now: float
    ) -> Intervention | None:
        """Offer a measured joint state given by name (any order, extra joints ignored)."""
        if len(positions) != len(names):
            self._state_refused = True
            return self._refuse(
                "state_wrong_size",
                "",
                len(positions),
                len(names),
                abs(len(positions) - len(names)),
            )
        index, missing = self.state_index(names)
        if index is None:
            self._state_refused = True
            return self._refuse("state_joint_missing", missing, _NAN, _NAN, 0.0)
        buffer = self._state_buffer
        buffer[:] = np.take(np.asarray(positions, dtype=float), index)
        return self.submit_state(buffer, stamp, now)

    def submit_state(
        self, positions: Sequence[float] | np.ndarray, stamp: float, now: float
    ) -> Intervention | None:
        """Offer measured joint positions in controller order; None if accepted."""
        refusal = None
        try:
            if len(positions) != self.n:
                refusal = self._refuse(
                    "state_wrong_size", "", len(positions), self.n, abs(len(positions) - self.n)
                )
            else:
                buffer = self._state_buffer
                buffer[:] = positions
                if not np.isfinite(buffer).all():
                    bad = int(np.flatnonzero(~np.isfinite(buffer))[0])
                    refusal = self._refuse(
                        "state_non_finite", self.names[bad], float(buffer[bad]), _NAN, 0.0
                    )
                elif self.config.check_stamps and stamp < self._state_stamp:
                    refusal = self._refuse(
                        "state_out_of_order",
                        "",
                        stamp,
                        self._state_stamp,
                        self._state_stamp - stamp,
                    )
        except Exception as error:
            refusal = self._refuse("state_non_finite", "", _NAN, _NAN, 0.0)
            self.last_error = f"state check failed: {error!r}"
        if refusal is not None:
            self._state_refused = True
            return refusal
        if (stamp if self.config.check_stamps else now) <= self._resync_after:
            return None  # measured before the resync (the old pose): neither state nor anchor
        self._state_refused = False
        self._measured[:] = self._state_buffer
        self._measured_list = self._state_buffer.tolist()
        self._state_stamp = stamp
        self.state_watchdog.feed(stamp if self.config.check_stamps else now)
        if not self._have_state:
            # The commanded trajectory starts at rest where the arm is, or at the nearest
            # point inside the position limits: no command ever lies outside them (an arm
            # measured a hair past a limit, as a gripper at -3 um, is commanded onto it).
            self._have_state = True
            self._ql = [
                lo if x < lo else hi if x > hi else x
                for x, lo, hi in zip(self._measured_list, self._lower, self._upper, strict=True)
            ]
            self._vl = [0.0] * self.n
            self._al = [0.0] * self.n
        return None

    # ----------------------------------------------------------------- e-stop

    def engage_estop(self, reason: str = "") -> None:
        """Latch the e-stop: hold (braking) until ``reset`` succeeds."""
        if not self._estop:
            self._estop = True
            self._refuse("estop", "", _NAN, _NAN, 0.0)
            self.last_error = reason or self.last_error

    def reset(self, now: float) -> tuple[bool, str]:
        """Clear the e-stop, only while both inputs are fresh."""
        if not self._estop:
            return True, "the e-stop was not engaged; nothing to reset."
        problems = []
        state_age = self.state_watchdog.age(now)
        if not self._have_state or self._state_refused or state_age > self.config.state_timeout:
            problems.append(
                f"joint states are stale (newest accepted {state_age:.3f} s ago, "
                f"state_timeout {self.config.state_timeout:g} s)"
            )
        command_age = self.command_watchdog.age(now)
        if (
            not self._have_command
            or self._command_refused
            or command_age > self.config.command_timeout
        ):
            problems.append(
                f"policy actions are stale (newest accepted {command_age:.3f} s old, "
                f"command_timeout {self.config.command_timeout:g} s)"
            )
        if problems:
            return False, (
                "reset refused: " + "; ".join(problems) + ". Restore the inputs, then reset again."
            )
        self._estop = False
        return True, "e-stop reset; following fresh policy actions again."

    def engage(self) -> tuple[bool, str]:
        """Follow policy actions again, from the next accepted one (never an older one)."""
        if self._engaged:
            return True, "already engaged."
        self._engaged = True
        self._have_command = False
        if self._estop:
            return True, "engaged, but the e-stop is latched: holding until ~/reset succeeds."
        return True, "engaged: following the next fresh policy action."

    def disengage(self, reason: str = "") -> tuple[bool, str]:
        """Brake to rest and hold there until ``engage``."""
        if not self._engaged:
            return True, "already disengaged: holding."
        self._engaged = False
        self._refuse("disengaged", "", _NAN, _NAN, 0.0)
        self.last_error = reason or self.last_error
        return True, "disengaged: braking to rest and holding until ~/engage."

    @property
    def engaged(self) -> bool:
        return self._engaged

    def resync(self, now: float, after: float | None = None) -> tuple[bool, str]:
        """After a simulated arm jumped to a new start pose (an episode reset): restart the
        commanded trajectory at rest at the next measured state and hold there until the
        next command. Without it the filter would keep commanding the old episode's pose
        and speed, dragging the arm from its new start. Refused unless ``allow_resync``.

        States and commands stamped at or before ``after`` (the reset's own stamp) belong
        to the old episode and are refused, however late they arrive. Without ``after``,
        one control period past ``now`` stands in for it, which a lagging clock defeats.
        """
        if not self.config.allow_resync:
            return False, (
                "resync refused: allow_resync is false. It is for simulated arms that jump "
                "to a new pose on reset; a physical arm is brought to its start through "
                "this filter instead."
            )
        self._have_state = False
        self._have_command = False
        self._resync_after = now + self.dt if after is None else float(after)
        return True, "resynced: holding at the next measured state until the next command."

    def hold_until_next_command(self) -> None:
        """Brake to rest and hold there until a command newer than this call is accepted
        (the node is being deactivated, or is becoming active again)."""
        self._have_command = False

    @property
    def estop_latched(self) -> bool:
        return self._estop

    @property
    def has_state(self) -> bool:
        return self._have_state

    @property
    def commanded_velocity(self) -> np.ndarray:
        """Velocity of the last output (a new array)."""
        return np.array(self._vl)

    @property
    def commanded_position(self) -> np.ndarray:
        """The last output (a new array)."""
        return np.array(self._ql)

    def _sync_arrays(self) -> None:
        """Numpy copies of the trajectory and target for the limiter (only when it acts)."""
        self._q[:] = self._ql
        self._v[:] = self._vl
        self._a[:] = self._al
        self._target_clipped[:] = self._target_list

    # ----------------------------------------------------------------- tick

    def tick(self, now: float) -> TickResult | None:
        """The command for this control tick; None before the first joint state."""
        if not self._have_state:
            return None
        result = TickResult(self._out)
        result.interventions = self._pending
        self._pending = []
        result.limited_joints = []
        result.error = ""
        self.ticks += 1
        try:
            self._tick(now, result)
        except Exception as error:
            self._fail_closed(error, result)
        for item in result.interventions:
            if item.joint and item.joint not in result.limited_joints:
                result.limited_joints.append(item.joint)
        result.changed = bool(result.interventions) or result.state != self._previous_state
        self._previous_state = result.state
        return result

    def _tick(self, now: float, result: TickResult) -> None:
        command_wd, state_wd = self.command_watchdog, self.state_watchdog
        if state_wd.check(now):
            age = state_wd.last_age
            self._add(result, "stale_state", "", age, state_wd.timeout, age - state_wd.timeout)
        if command_wd.check(now):
            age = command_wd.last_age
            self._add(
                result, "stale_command", "", age, command_wd.timeout, age - command_wd.timeout
            )
            if self.config.engage_after_command_loss and self._engaged:
                self._engaged = False  # an operator resumes explicitly
                self._add(result, "disengaged", "", _NAN, _NAN, 0.0)
        result.command_age = command_wd.last_age
        result.state_age = state_wd.last_age
        result.watchdog_tripped = command_wd.tripped or state_wd.tripped
        result.estop_latched = self._estop
        result.engaged = self._engaged
        result.policy_version = self._policy_version
        hold = (
            self._estop
            or not self._engaged
            or result.watchdog_tripped
            or self._command_refused
            or self._state_refused
            or not self._have_command
        )
        limiter = self.limiter
        ql = self._ql
        if not hold and self._target_was_clipped:
            self._report_position_clip(result)
        if not hold and limiter.passes(
            ql, self._vl, self._al, self._target_list, self._measured_list
        ):
            out = self._target_list  # bit-exact pass-through of an allowed request
            self._rows_fresh = False
        else:
            self._rows_fresh = True
            self._sync_arrays()
            q = self._q
            if hold:
                limiter.next_velocity(q, self._v, self._a, None, self._measured)
                passed = False
            else:
                passed = limiter.next_velocity(
                    q, self._v, self._a, self._target_clipped, self._measured
                )
                if not passed:
                    self._attribute(result)
            if passed:
                out = self._target_list
            else:
                dt = self.dt
                out = [p + w * dt for p, w in zip(ql, limiter.v_out.tolist(), strict=True)]
        inv_dt = self._inv_dt
        v_new = [(o - p) * inv_dt for o, p in zip(out, ql, strict=True)]
        if self.workspace is not None:
            out, v_new = self._check_workspace(result, out, v_new)
        out, v_new = self._clamp_last(out, v_new)
        total = sum(out)
        if total - total != 0.0:
            raise FloatingPointError(f"non-finite output {list(out)}")
        # Advance the commanded trajectory (finite differences at the control period).
        self._al = [(w - u) * inv_dt for w, u in zip(v_new, self._vl, strict=True)]
        self._vl = v_new
        self._ql = out
        self._out[:] = out
        if self._estop:
            result.state = ESTOP
        elif hold:
            result.state = HOLDING
        else:
            result.state = LIMITED if result.interventions else PASS

    def _clamp_last(self, out: list, v_new: list) -> tuple[list, list]:
        """Every output inside the position limits, exactly: the last operation on it.

        The limiter keeps its braking inside the limits, but ``q + v dt`` (and the
        workspace's scaling) can round past one. Clamping here, after everything else,
        leaves nothing that could move it back out.
        """
        clamped = False
        result = list(out)
        for j, (x, lo, hi) in enumerate(zip(out, self._lower, self._upper, strict=True)):
            if x < lo:
                result[j], clamped = lo, True
            elif x > hi:
                result[j], clamped = hi, True
        if not clamped:
            return out, v_new
        inv_dt = self._inv_dt
        return result, [(o - p) * inv_dt for o, p in zip(result, self._ql, strict=True)]

    def _add(self, result, limit, joint, requested, allowed, excess) -> None:
        result.interventions.append(
            Intervention(limit, joint, float(requested), float(allowed), max(float(excess), 0.0))
        )
        self.counts[limit] += 1

    def _report_position_clip(self, result: TickResult) -> None:
        raw, clipped = self._target_raw, self._target_list
        for j, (x, c) in enumerate(zip(raw, clipped, strict=True)):
            if x != c:
                self._add(result, "position", self.names[j], x, c, abs(x - c))

    def _attribute(self, result: TickResult) -> None:
        """Name the limit that changed each joint's step, in that limit's unit."""
        limiter, limits, dt = self.limiter, self.limits, self.dt
        v_req, v_out = limiter.v_request, limiter.v_out
        q, v, a = self._q, self._v, self._a
        for j in np.flatnonzero(v_req != v_out):
            if v_out[j] == limiter.hi[j]:
                source = SOURCE_NAMES[limiter.hi_src[j]]
            elif v_out[j] == limiter.lo[j]:
                source = SOURCE_NAMES[limiter.lo_src[j]]
            else:
                source = "acceleration"  # the no-overshoot approach profile
            name = self.names[j]
            if source == "velocity":
                self._add(
                    result, source, name, v_req[j], v_out[j], abs(v_req[j]) - limits.velocity[j]
                )
            elif source == "acceleration" or source == SOURCE_NAMES[HOLD]:
                a_req, a_out = (v_req[j] - v[j]) / dt, (v_out[j] - v[j]) / dt
                self._add(
                    result,
                    "acceleration",
                    name,
                    a_req,
                    a_out,
                    max(abs(a_req) - limits.acceleration[j], abs(a_req - a_out)),
                )
            elif source == "jerk":
                j_req = ((v_req[j] - v[j]) / dt - a[j]) / dt
                j_out = ((v_out[j] - v[j]) / dt - a[j]) / dt
                self._add(result, source, name, j_req, j_out, abs(j_req) - limits.jerk[j])
            elif source == "tracking_error":
                requested = q[j] + v_req[j] * dt - self._measured[j]
                allowed = q[j] + v_out[j] * dt - self._measured[j]
                self._add(
                    result,
                    source,
                    name,
                    requested,
                    allowed,
                    abs(requested) - limits.tracking_error[j],
                )
            else:  # position: braking to stay inside the position limits
                requested, allowed = q[j] + v_req[j] * dt, q[j] + v_out[j] * dt
                self._add(result, "position", name, requested, allowed, abs(requested - allowed))

    # ----------------------------------------------------------------- workspace

    def _path_violation(self, q: list, end: list, velocity: list) -> tuple[str, float]:
        """Worst excursion of the step to ``end`` and of the braking from it to rest."""
        return self.workspace.braking_path_violation(
            q,
            end,
            velocity,
            self._decel_step,
            self._inv_two_decel,
            self.dt,
            self.config.workspace_tolerance,
        )

    def _stop_point_violation(self, end: list, velocity: list) -> tuple[str, float]:
        """Worst of the step's end and its braking stop point (judges recovery only)."""
        workspace = self.workspace
        limit, excess = workspace.violation(end)
        stop = [
            min(max(e + w * abs(w) * k, lo), hi)
            for e, w, k, lo, hi in zip(
                end, velocity, self._inv_two_decel, self._lower, self._upper, strict=True
            )
        ]
        stop_limit, stop_excess = workspace.violation(stop)
        if stop_excess > excess:
            return stop_limit, stop_excess
        return limit, excess

    def _check_workspace(self, result: TickResult, out: list, v_out: list) -> tuple:
        """Keep the tool's path inside: first drop the step's outward part (slide along
        the face), then scale that back toward braking until the path is proved
        (bisection); returns the step's end and velocity.

        A step is acceptable when its whole path (the step and the braking that may follow
        it, to rest) is proved inside. Braking along a proved path stays proved, so there
        is always an acceptable step. When the arm is already outside (it started there),
        a step is acceptable when its end and braking stop point go no further out.
        """
        q = self._ql
        limit, excess = self._path_violation(q, out, v_out)
        if not limit:
            return out, v_out
        current = self.workspace.violation(q)[1]
        if current > 0.0:
            limit, excess = self._stop_point_violation(out, v_out)
            if excess <= current:
                return out, v_out  # already outside and not getting worse: let it recover
        limiter = self.limiter
        if not self._rows_fresh:  # the fast path skipped the limiter: its rows are old
            self._sync_arrays()
            limiter.compute_bounds(self._q, self._v, self._a, self._measured, hold=False)
        # The hardest braking the limits allow; jerk yields to staying inside the box.
        lo, hi = limiter.bounds_without_jerk(physical_only=True)
        v_brake = np.clip(0.0, lo, hi).tolist()
        dt = self.dt
        margin = self.config.workspace_slide_margin
        if margin > 0.0 and current <= 0.0:
            # Keep the motion along the face: only the outward part goes, within the
            # limits a jerk-free step allows (the same box the braking below lives in).
            slide = self.workspace.slide_step(q, [w * dt for w in v_out], margin)
            lo_all, hi_all = limiter.bounds_without_jerk(physical_only=False)
            v_slide = [
                min(max(s * self._inv_dt, a), b)
                for s, a, b in zip(slide, lo_all.tolist(), hi_all.tolist(), strict=True)
            ]
            end = [p + w * dt for p, w in zip(q, v_slide, strict=True)]
            if not self._path_violation(q, end, v_slide)[0]:
                self._add(result, limit, "", excess, 0.0, excess)
                return end, v_slide
            v_out = v_slide  # not proved as it is: scale the slide back instead

        def trial(scale: float) -> tuple[list, list, str, float]:
            v_step = [b + scale * (w - b) for w, b in zip(v_out, v_brake, strict=True)]
            end = [p + w * dt for p, w in zip(q, v_step, strict=True)]
            if current > 0.0:
                return v_step, end, *self._stop_point_violation(end, v_step)
            return v_step, end, *self._path_violation(q, end, v_step)

        best = 0.0
        low, high = 0.0, 1.0
        for _ in range(self.config.workspace_bisection_steps):
            mid = 0.5 * (low + high)
            _, _, trial_limit, trial_excess = trial(mid)
            if not trial_limit or trial_excess <= current:
                best, low = mid, mid
            else:
                high = mid
        _, end, _, allowed = trial(best)
        # In metres outside the box (or inside a keep-out): requested step, allowed step.
        self._add(result, limit, "", excess, allowed, excess - max(allowed, current))
        inv_dt = self._inv_dt
        return end, [(e - p) * inv_dt for e, p in zip(end, q, strict=True)]

    # ----------------------------------------------------------------- failure

    def _fail_closed(self, error: BaseException, result: TickResult) -> None:
        """Brake within the acceleration limit using only the last output; never pass input."""
        self.exceptions += 1
        self.last_error = "".join(traceback.format_exception_only(type(error), error)).strip()
        result.error = self.last_error
        q, v = np.array(self._ql), np.array(self._vl)
        try:
            v_new = self.limiter.stop_velocity(v)
            if not np.all(np.isfinite(v_new)):
                v_new = np.zeros(self.n)
            new_q = q + v_new * self.dt
            # Clamp last, as in a tick.
            new_q = np.minimum(np.maximum(new_q, self.limits.lower), self.limits.upper)
            v_new = (new_q - q) / self.dt
            if np.all(np.isfinite(new_q)):
                self._al = ((v_new - v) / self.dt).tolist()
                self._vl = v_new.tolist()
                self._ql = new_q.tolist()
        except Exception:  # last resort: repeat the last output
            pass
        self._out[:] = self._ql
        result.interventions.append(Intervention("exception", "", _NAN, _NAN, 0.0))
        self.counts["exception"] += 1
        result.engaged = self._engaged
        result.state = ESTOP if self._estop else HOLDING
