"""A stand-in for a position-controlled arm, like ros2_control's mock_components.

``StandInArm`` is what the ``stand_in_arm`` node runs in the ``real`` profile when no
physical arm is attached: every controller joint follows its commanded position like a
position-controlled drive, as a first-order lag with time constant ``time_constant``
whose speed is capped at the joint's velocity limit, and it never leaves the joint's
position limits. It is a kinematic stand-in: no dynamics, no contacts, no task, no
reality gap. It is neither the physical arm nor the MuJoCo sim bridge (use the sim
bridge's ``real_twin`` profile for a stand-in with a reality gap).

All arrays are in controller order (``RobotDescription.joint_names``); positions in rad
(m for a prismatic joint), velocities per second. One ``advance`` allocates nothing: it
runs at the joint-state rate (100 Hz and up).

Plain Python and numpy: no rclpy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from simreal_ros.config_schema import setting, validate
from simreal_ros.robot.description_record import RobotDescription

DEFAULT_TIME_CONSTANT = 0.05  # s: a stiff position loop, well inside one 20 Hz policy step


@dataclasses.dataclass
class StandInArmConfig:
    """Settings of the stand-in arm and its node (``stand_in_arm``)."""

    rate_hz: float = setting(
        100.0,
        "Rate at which the stand-in advances its joints and publishes /joint_states",
        low=1.0,
        high=1000.0,
        unit="Hz",
    )
    time_constant: float = setting(
        DEFAULT_TIME_CONSTANT,
        "Time constant of each joint's first-order lag toward its commanded position "
        "(the joint's speed is also capped at its velocity limit)",
        low=0.001,
        high=10.0,
        unit="s",
    )

    def __post_init__(self) -> None:
        validate(self)


class StandInArm:
    """Joints that follow absolute position targets within their limits.

    ``command(values)`` sets one target per controller joint (clipped to the position
    limits); ``advance(dt)`` moves every joint toward its target. The joint state starts
    at the description's home pose, holding still there until the first command.
    """

    def __init__(
        self, description: RobotDescription, time_constant: float = DEFAULT_TIME_CONSTANT
    ) -> None:
        if not (isinstance(time_constant, int | float) and math.isfinite(time_constant)):
            raise ValueError(
                f"time_constant = {time_constant!r}; give a positive number of seconds."
            )
        if time_constant <= 0.0:
            raise ValueError(
                f"time_constant = {time_constant:g} s must be positive (e.g. "
                f"{DEFAULT_TIME_CONSTANT:g} s)."
            )
        self.description = description
        self.time_constant = float(time_constant)
        self.joint_names: tuple[str, ...] = tuple(description.joint_names)
        n = len(self.joint_names)
        self._lower = np.array(description.position_lower, dtype=float)
        self._upper = np.array(description.position_upper, dtype=float)
        self._velocity_limit = np.array(description.velocity_limit, dtype=float)
        bad = [
            name
            for i, name in enumerate(self.joint_names)
            if not (
                math.isfinite(self._lower[i])
                and math.isfinite(self._upper[i])
                and self._lower[i] < self._upper[i]
            )
            or not (math.isfinite(self._velocity_limit[i]) and self._velocity_limit[i] > 0.0)
        ]
        if bad:
            raise ValueError(
                f"robot {description.name!r}: joint(s) {', '.join(bad)} lack finite position "
                "limits or a positive velocity limit; load the description with "
                "load_robot_description(), which takes missing position limits from the model."
            )
        self._position = np.clip(
            np.array(description.home_position, dtype=float), self._lower, self._upper
        )
        self._target = self._position.copy()
        self._velocity = np.zeros(n)
        # Scratch buffers: a command is checked here before it replaces the target, and
        # a step is computed here before it moves the joints.
        self._incoming = np.zeros(n)
        self._step = np.zeros(n)
        self._max_step = np.zeros(n)
        self._min_step = np.zeros(n)
        self._next = np.zeros(n)
        self._views = {}
        for name in ("position", "velocity", "target"):
            view = getattr(self, f"_{name}").view()
            view.setflags(write=False)
            self._views[name] = view

    # ------------------------------------------------------------------ state

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    @property
    def positions(self) -> np.ndarray:
        """Joint positions, controller order (a read-only view that ``advance`` updates)."""
        return self._views["position"]

    @property
    def velocities(self) -> np.ndarray:
        """Joint velocities over the last ``advance`` (a read-only view)."""
        return self._views["velocity"]

    @property
    def targets(self) -> np.ndarray:
        """The commanded positions after clipping to the limits (a read-only view)."""
        return self._views["target"]

    def reset(self, positions: Sequence[float] | None = None) -> None:
        """Put the joints at rest at ``positions`` (default: home), targets there too."""
        if positions is None:
            positions = self.description.home_position
        self._check_into(positions, self._incoming, "reset positions")
        np.clip(self._incoming, self._lower, self._upper, out=self._position)
        self._target[:] = self._position
        self._velocity[:] = 0.0

    # ------------------------------------------------------------------ input

    def command(self, values: Sequence[float]) -> bool:
        """Set one absolute position target per controller joint, in controller order.

        Targets outside the position limits are clipped to them; returns whether any was.
        Raises ValueError, keeping the previous targets, for a wrong number of values or
        a value that is not a finite number.
        """
        self._check_into(values, self._incoming, "command")
        incoming = self._incoming
        clipped = bool((incoming < self._lower).any() or (incoming > self._upper).any())
        np.clip(incoming, self._lower, self._upper, out=self._target)
        return clipped

    def _check_into(self, values: Sequence[float], buffer: np.ndarray, what: str) -> None:
        n = self.num_joints
        try:
            count = len(values)
        except TypeError:
            raise ValueError(
                f"{what} must be a sequence of {n} numbers, one per controller joint "
                f"({', '.join(self.joint_names)}); got {type(values).__name__}."
            ) from None
        if count != n:
            raise ValueError(
                f"{what} has {count} value(s) but the arm {self.description.name!r} has {n} "
                f"controller joints: {', '.join(self.joint_names)}. Send one absolute "
                "position per joint, in that order."
            )
        try:
            buffer[:] = values
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{what} must hold {n} numbers (one per joint: "
                f"{', '.join(self.joint_names)}); {error}"
            ) from None
        if not math.isfinite(float(buffer.sum())):
            bad = np.flatnonzero(~np.isfinite(buffer))
            if bad.size:  # (a finite sum can overflow; only a non-finite value is refused)
                i = int(bad[0])
                raise ValueError(
                    f"{what} value for joint {self.joint_names[i]!r} (index {i}) is "
                    f"{buffer[i]!r}; every value must be a finite position (rad, or m for "
                    "a prismatic joint). Ignored: the arm keeps its previous targets."
                )

    # ------------------------------------------------------------------ motion

    def advance(self, dt: float) -> None:
        """Move every joint ``dt`` seconds toward its target.

        Exact first-order lag over ``dt`` (stable for any ``dt``), its step capped at the
        velocity limit times ``dt``, the result kept inside the position limits.
        """
        if not (dt > 0.0 and math.isfinite(dt)):
            raise ValueError(f"dt = {dt!r}; advance the arm by a positive, finite time (s).")
        alpha = -math.expm1(-dt / self.time_constant)  # 1 - exp(-dt / tau), accurately
        step, position = self._step, self._position
        np.subtract(self._target, position, out=step)
        step *= alpha
        np.multiply(self._velocity_limit, dt, out=self._max_step)
        np.negative(self._max_step, out=self._min_step)
        np.clip(step, self._min_step, self._max_step, out=step)
        np.add(position, step, out=self._next)
        np.clip(self._next, self._lower, self._upper, out=self._next)
        np.subtract(self._next, position, out=self._velocity)
        self._velocity /= dt
        position[:] = self._next
