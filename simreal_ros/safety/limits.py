"""Joint limits and the per-tick motion limiter.

The limiter works on the commanded trajectory sampled at the control period dt: the last
output q, its velocity v = (q - q_prev) / dt and acceleration a = (v - v_prev) / dt. Each
tick it picks the next velocity inside, in order of priority:

1. acceleration: |v' - v| <= A dt (always holds, so the output never steps);
2. velocity: |v'| <= V;
3. position: the arm can still stop inside [lower, upper] braking at A (a braking profile,
   so the position limit never forces a deceleration above A);
4. tracking error: |q' - measured| <= E;
5. jerk: |a' - a| <= J dt.

When two of them conflict (only possible after a measured-state jump or a start outside the
limits), the higher one wins and the lower one is relaxed; the relaxation is counted.
A request the limits allow passes exactly; one they do not is approached on a profile that
does not overshoot it. Plain numpy; buffers are preallocated so a tick allocates little.
A request that passes is recognised first by ``passes`` in plain Python floats (for a
handful of joints numpy's per-call overhead dominates); the numpy path runs only when a
limit acts, and decides exactly as ``passes`` would where the request passes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from simreal_ros.safety.config import SafetyConfig

# Numerical slack: bounds are shrunk by this relative amount so rounding never lets an
# output exceed a limit.
_SHRINK = 1e-9
# Stand-in for "no limit" that keeps the arithmetic finite (inf * 0 would be NaN).
_UNLIMITED = 1e9


@dataclasses.dataclass(frozen=True, eq=False)
class JointLimits:
    """Enforced per-joint limits in controller order (soft position limits, margins applied)."""

    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    jerk: np.ndarray
    tracking_error: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.names)
        if n == 0:
            raise ValueError("JointLimits needs at least one joint name.")
        for field in ("lower", "upper", "velocity", "acceleration", "jerk", "tracking_error"):
            value = np.array(getattr(self, field), dtype=float)
            if value.shape != (n,):
                raise ValueError(
                    f"JointLimits.{field} has {value.size} values for {n} joints "
                    f"({', '.join(self.names)}); give one per joint."
                )
            if not np.all(np.isfinite(value)):
                raise ValueError(f"JointLimits.{field} = {value.tolist()} is not finite.")
            value.setflags(write=False)
            object.__setattr__(self, field, value)
        for i, name in enumerate(self.names):
            if self.lower[i] >= self.upper[i]:
                raise ValueError(
                    f"joint {name}: position lower limit {self.lower[i]:g} is not below the "
                    f"upper limit {self.upper[i]:g}; swap them or reduce the margin."
                )
            for field in ("velocity", "acceleration", "jerk", "tracking_error"):
                if getattr(self, field)[i] <= 0:
                    raise ValueError(
                        f"joint {name}: {field} limit {getattr(self, field)[i]:g} must be "
                        "positive."
                    )

    @property
    def num_joints(self) -> int:
        return len(self.names)


def _per_joint(
    config_name: str,
    configured: Sequence[float],
    hardware: np.ndarray,
    scale: float,
    names: Sequence[str],
    unit: str,
) -> np.ndarray:
    """A configured per-joint limit, or the hardware's scaled; never above the hardware's."""
    hardware = np.asarray(hardware, dtype=float)
    if not configured:
        return hardware * scale
    values = np.asarray(configured, dtype=float)
    if values.shape != hardware.shape:
        raise ValueError(
            f"SafetyConfig.{config_name} has {values.size} values but the robot has "
            f"{hardware.size} joints ({', '.join(names)}); give one per joint in that order "
            "or leave it empty to use the robot description."
        )
    for i, name in enumerate(names):
        if not values[i] > 0:
            raise ValueError(
                f"SafetyConfig.{config_name}[{i}] ({name}) = {values[i]:g} {unit}; a limit "
                "must be positive."
            )
        if values[i] > hardware[i]:
            raise ValueError(
                f"SafetyConfig.{config_name}[{i}] ({name}) = {values[i]:g} {unit} is above "
                f"the hardware limit {hardware[i]:g} {unit} from the robot description; "
                "lower it (the filter may only tighten the hardware's limits)."
            )
    return values


def limits_from_description(description, config: SafetyConfig) -> JointLimits:
    """Enforced limits: the description's hardware limits tightened by the config.

    ``description`` is a ``RobotDescription`` (or anything with the same fields).
    """
    names = tuple(description.joint_names)
    hard_lower = np.asarray(description.position_lower, dtype=float)
    hard_upper = np.asarray(description.position_upper, dtype=float)
    span = hard_upper - hard_lower
    if config.position_margins:
        margins = np.asarray(config.position_margins, dtype=float)
        if margins.shape != span.shape:
            raise ValueError(
                f"SafetyConfig.position_margins has {margins.size} values for {len(names)} "
                f"joints ({', '.join(names)}); give one per joint or leave it empty."
            )
    else:
        exempt = {*config.margin_exempt_joints, getattr(description, "gripper_joint", None)}
        margins = np.array([0.0 if name in exempt else config.position_margin for name in names])
    for i, name in enumerate(names):
        if 2 * margins[i] >= span[i]:
            raise ValueError(
                f"position margin {margins[i]:g} on joint {name} leaves no range inside its "
                f"hard limits [{hard_lower[i]:g}, {hard_upper[i]:g}]; use a margin below "
                f"{span[i] / 2:g}."
            )
    lower, upper = hard_lower + margins, hard_upper - margins
    home = np.asarray(description.home_position, dtype=float)
    for i, name in enumerate(names):
        if not lower[i] <= home[i] <= upper[i]:
            raise ValueError(
                f"home position {home[i]:g} of joint {name} is outside the enforced range "
                f"[{lower[i]:g}, {upper[i]:g}] (hard limits minus margin {margins[i]:g}); "
                "reduce the margin or fix the home pose."
            )
    scale = config.limit_scale
    tracking = config.tracking_error_limit or _UNLIMITED
    return JointLimits(
        names=names,
        lower=lower,
        upper=upper,
        velocity=_per_joint(
            "velocity_limits",
            config.velocity_limits,
            description.velocity_limit,
            scale,
            names,
            "rad/s",
        ),
        acceleration=_per_joint(
            "acceleration_limits",
            config.acceleration_limits,
            description.acceleration_limit,
            scale,
            names,
            "rad/s^2",
        ),
        jerk=_per_joint(
            "jerk_limits", config.jerk_limits, description.jerk_limit, scale, names, "rad/s^3"
        ),
        tracking_error=np.full(len(names), float(tracking)),
    )


# Codes of the constraint that set a velocity bound (index into SOURCE_NAMES).
ACC, VEL, POS, TRACK, HOLD, JERK = range(6)
SOURCE_NAMES = ("acceleration", "velocity", "position", "tracking_error", "hold", "jerk")


class MotionLimiter:
    """Chooses the next commanded position of every joint inside the limits, per tick."""

    def __init__(self, limits: JointLimits, dt: float) -> None:
        if not dt > 0:
            raise ValueError(f"control period dt = {dt!r} must be positive.")
        self.limits = limits
        self.dt = float(dt)
        n = limits.num_joints
        self.n = n
        shrink = 1.0 - _SHRINK
        self._lower = limits.lower.copy()
        self._upper = limits.upper.copy()
        self._v_max = limits.velocity * shrink
        self._a_dt = limits.acceleration * self.dt * shrink
        self._a = limits.acceleration * shrink
        self._two_a = 2.0 * self._a
        self._a_dt_sq = self._a_dt**2
        self._j_dt2 = limits.jerk * self.dt * self.dt * shrink
        self._two_j = 2.0 * limits.jerk
        self._track_over_dt = limits.tracking_error / self.dt * shrink
        self._inv_dt = 1.0 / self.dt
        # Bounds on the next velocity, one row per constraint, and their sources.
        self.lo = np.empty(n)
        self.hi = np.empty(n)
        self.lo_src = np.zeros(n, dtype=np.int8)
        self.hi_src = np.zeros(n, dtype=np.int8)
        self._t1 = np.empty(n)
        self._t2 = np.empty(n)
        self._t3 = np.empty(n)
        self._rows_lo = np.empty((6, n))
        self._rows_hi = np.empty((6, n))
        self._rows_lo[VEL] = -self._v_max
        self._rows_hi[VEL] = self._v_max
        self._argbuf_lo = np.empty(n, dtype=np.intp)
        self._argbuf_hi = np.empty(n, dtype=np.intp)
        self._sources_known = False
        self.v_request = np.empty(n)
        self.v_out = np.empty(n)
        self.target = np.empty(n)
        # Constraints relaxed since construction, per source (conflict resolution counts).
        self.relaxed = np.zeros(6, dtype=np.int64)
        self.relaxed_this_tick = np.zeros(6, dtype=bool)
        # Per-joint constants for ``passes`` as plain floats, the same values as above.
        self._per_joint = tuple(
            zip(
                self._a_dt.tolist(),
                self._v_max.tolist(),
                self._lower.tolist(),
                self._upper.tolist(),
                self._two_a.tolist(),
                self._a_dt_sq.tolist(),
                self._track_over_dt.tolist(),
                self._j_dt2.tolist(),
                strict=True,
            )
        )
        self.decel_step = tuple(self._a_dt.tolist())  # speed lost per tick braking at A

    def passes(
        self,
        q: Sequence[float],
        v: Sequence[float],
        a: Sequence[float],
        target: Sequence[float],
        measured: Sequence[float],
    ) -> bool:
        """True when ``target`` lies inside every bound ``compute_bounds`` would give (not
        holding), so ``next_velocity`` would pass it unchanged. Same float operations in the
        same order as the numpy path, so the two never disagree on a passing request."""
        inv_dt, dt, sqrt = self._inv_dt, self.dt, math.sqrt
        for qj, vj, aj, tj, mj, (a_dt, v_max, lower, upper, two_a, a_dt_sq, track, j_dt2) in zip(
            q, v, a, target, measured, self._per_joint, strict=True
        ):
            vr = (tj - qj) * inv_dt
            if vr > vj + a_dt or vr < vj - a_dt or vr > v_max or vr < -v_max:
                return False
            c = aj * dt + vj
            if vr > c + j_dt2 or vr < c - j_dt2:
                return False
            c = (mj - qj) * inv_dt
            if vr > c + track or vr < c - track:
                return False
            if vr > 0.0:  # the braking bound toward the upper limit (>= 0 inside it)
                d = upper - qj
                if vr > sqrt((d if d > 0.0 else 0.0) * two_a + a_dt_sq) - a_dt:
                    return False
            elif vr < 0.0:
                d = qj - lower
                if vr < a_dt - sqrt((d if d > 0.0 else 0.0) * two_a + a_dt_sq):
                    return False
        return True

    def braking_bounds(self, q: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        """Velocity bounds from which the joint can still stop inside its position limits.

        Largest v with q + v dt + v^2 / (2A) <= upper (stopping distance of a discrete
        profile braking at A is at most v^2 / (2A)): v = -A dt + sqrt((A dt)^2 + 2 A d).
        """
        np.subtract(self._upper, q, out=self._t1)
        np.maximum(self._t1, 0.0, out=self._t1)
        np.multiply(self._t1, self._two_a, out=self._t1)
        np.add(self._t1, self._a_dt_sq, out=self._t1)
        np.sqrt(self._t1, out=self._t1)
        np.subtract(self._t1, self._a_dt, out=hi)
        np.subtract(q, self._lower, out=self._t1)
        np.maximum(self._t1, 0.0, out=self._t1)
        np.multiply(self._t1, self._two_a, out=self._t1)
        np.add(self._t1, self._a_dt_sq, out=self._t1)
        np.sqrt(self._t1, out=self._t1)
        np.subtract(self._a_dt, self._t1, out=lo)

    def compute_bounds(
        self, q: np.ndarray, v: np.ndarray, a: np.ndarray, measured: np.ndarray, hold: bool
    ) -> None:
        """Fill ``lo``/``hi`` (next-velocity bounds) and their sources, by priority."""
        rows_lo, rows_hi = self._rows_lo, self._rows_hi
        np.subtract(v, self._a_dt, out=rows_lo[ACC])
        np.add(v, self._a_dt, out=rows_hi[ACC])
        self.braking_bounds(q, rows_lo[POS], rows_hi[POS])
        if hold:
            # Holding: the speed may only fall (stop, never re-accelerate); no tracking pull.
            np.minimum(v, 0.0, out=rows_lo[HOLD])
            np.maximum(v, 0.0, out=rows_hi[HOLD])
            rows_lo[TRACK] = -np.inf
            rows_hi[TRACK] = np.inf
        else:
            rows_lo[HOLD] = -np.inf
            rows_hi[HOLD] = np.inf
            np.subtract(measured, q, out=self._t2)
            np.multiply(self._t2, self._inv_dt, out=self._t2)
            np.subtract(self._t2, self._track_over_dt, out=rows_lo[TRACK])
            np.add(self._t2, self._track_over_dt, out=rows_hi[TRACK])
        np.multiply(a, self.dt, out=self._t2)
        np.add(self._t2, v, out=self._t2)
        np.subtract(self._t2, self._j_dt2, out=rows_lo[JERK])
        np.add(self._t2, self._j_dt2, out=rows_hi[JERK])
        np.maximum.reduce(rows_lo, axis=0, out=self.lo)
        np.minimum.reduce(rows_hi, axis=0, out=self.hi)
        self.relaxed_this_tick[:] = False
        if (self.lo <= self.hi).all():
            self._sources_known = False  # found only if a request is limited (rare)
            return
        self._intersect_by_priority()
        self._sources_known = True

    def _find_sources(self) -> None:
        """Which constraint set each bound (all constraints agreed on this tick)."""
        if not self._sources_known:
            np.argmax(self._rows_lo, axis=0, out=self._argbuf_lo)
            np.argmin(self._rows_hi, axis=0, out=self._argbuf_hi)
            self.lo_src[:] = self._argbuf_lo
            self.hi_src[:] = self._argbuf_hi
            self._sources_known = True

    def _intersect_by_priority(self) -> None:
        """Constraints conflict: intersect in priority order, relaxing the lower ones."""
        rows_lo, rows_hi = self._rows_lo, self._rows_hi
        for j in range(self.n):
            lo, hi = rows_lo[ACC, j], rows_hi[ACC, j]
            lo_src = hi_src = ACC
            for source in (VEL, POS, TRACK, HOLD, JERK):
                c_lo, c_hi = rows_lo[source, j], rows_hi[source, j]
                if c_hi < lo or c_lo > hi:
                    # No overlap: keep the point of the higher-priority interval nearest to it.
                    self.relaxed[source] += 1
                    self.relaxed_this_tick[source] = True
                    if c_hi < lo:
                        hi, hi_src = lo, lo_src
                    else:
                        lo, lo_src = hi, hi_src
                    continue
                if c_lo > lo:
                    lo, lo_src = c_lo, source
                if c_hi < hi:
                    hi, hi_src = c_hi, source
            self.lo[j], self.hi[j] = lo, hi
            self.lo_src[j], self.hi_src[j] = lo_src, hi_src

    def next_velocity(
        self,
        q: np.ndarray,
        v: np.ndarray,
        a: np.ndarray,
        target: np.ndarray | None,
        measured: np.ndarray,
    ) -> bool:
        """Next velocity into ``v_out``; returns True when the request passed unchanged.

        ``target`` is the requested position (already inside the position limits), or None
        to hold (come to a stop). ``v_request`` holds the one-step velocity asked for.
        """
        hold = target is None
        self.compute_bounds(q, v, a, measured, hold)
        if hold:
            self.v_request.fill(0.0)
        else:
            np.subtract(target, q, out=self.v_request)
            np.multiply(self.v_request, self._inv_dt, out=self.v_request)
        np.maximum(self.v_request, self.lo, out=self.v_out)
        np.minimum(self.v_out, self.hi, out=self.v_out)
        if (self.v_out == self.v_request).all():
            return True
        self._find_sources()
        self._shape_approach(q, v, target)
        return False

    def _shape_approach(self, q: np.ndarray, v: np.ndarray, target: np.ndarray | None) -> None:
        """A request the limits refuse: approach it without overshoot, jerk-aware.

        The desired velocity is the largest from which the remaining distance can still be
        braked at A; the acceleration toward it is capped so jerk can bring it back to zero.
        """
        t1, t2 = self._t1, self._t2
        if target is None:
            t2.fill(0.0)
        else:
            np.subtract(target, q, out=t1)  # remaining distance e
            np.abs(t1, out=t2)
            np.multiply(t2, self._two_a, out=t2)
            np.add(t2, self._a_dt_sq, out=t2)
            np.sqrt(t2, out=t2)
            np.subtract(t2, self._a_dt, out=t2)  # braking-feasible speed
            np.minimum(t2, np.abs(self.v_request), out=t2)
            np.copysign(t2, t1, out=t2)  # desired velocity, toward the target
        np.subtract(t2, v, out=t1)  # velocity change wanted
        np.abs(t1, out=self._t3)
        np.multiply(self._t3, self._two_j, out=self._t3)
        np.sqrt(self._t3, out=self._t3)
        np.multiply(self._t3, self.dt, out=self._t3)  # largest change jerk can unwind
        np.minimum(np.abs(t1), self._t3, out=self._t3)
        np.copysign(self._t3, t1, out=self._t3)
        np.add(v, self._t3, out=self._t3)
        np.maximum(self._t3, self.lo, out=self.v_out)
        np.minimum(self.v_out, self.hi, out=self.v_out)
        # Faster toward the target than braking at A could still stop for: brake now, even if
        # that breaks the jerk limit (jerk yields; overshooting the request does not happen).
        over = np.abs(self.v_out) > np.abs(t2)
        over &= self.v_out * t2 >= 0
        if target is not None and over.any():
            lo_nj, hi_nj = self.bounds_without_jerk()
            braked = np.clip(t2, lo_nj, hi_nj)
            relaxed = over & (braked != self.v_out)
            if relaxed.any():
                self.relaxed[JERK] += 1
                self.relaxed_this_tick[JERK] = True
                self.v_out[relaxed] = braked[relaxed]
                self.lo_src[relaxed] = ACC
                self.hi_src[relaxed] = ACC

    def bounds_without_jerk(self, physical_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """This tick's velocity bounds without the jerk limit (for braking hard).

        ``physical_only`` keeps just acceleration, velocity and position: braking for the
        workspace must not be pulled along by the tracking window of a glitching state.
        """
        rows = TRACK if physical_only else JERK
        lo = np.max(self._rows_lo[:rows], axis=0)
        hi = np.min(self._rows_hi[:rows], axis=0)
        conflict = lo > hi
        if conflict.any():  # fall back to the priority-resolved bounds there
            lo[conflict] = self.lo[conflict]
            hi[conflict] = self.hi[conflict]
        return lo, hi

    def stop_velocity(self, v: np.ndarray) -> np.ndarray:
        """The most braking the acceleration limit allows, using nothing but ``v``.

        The fallback when the full computation failed: each joint slows by A dt toward zero.
        """
        return np.where(v > 0, np.maximum(v - self._a_dt, 0.0), np.minimum(v + self._a_dt, 0.0))
