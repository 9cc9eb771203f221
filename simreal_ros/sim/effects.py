"""Effects of a physical arm that no MuJoCo profile here can express, as settings.

A second-engine stand-in (``engine: drake`` in a profile, see ``sim/drake_physics.py``)
reads them from its profile's ``effects:`` mapping. Every joint effect is one number for
every arm joint (the gripper keeps its nominal servo) or a list with one number per arm
joint in controller order. They combine freely:

- ``backlash_rad``: play in the transmission. The link follows the servo only once the
  commanded motion has taken up the play: after a reversal the joint stands still until
  the command has moved back by the backlash (a dead zone of that width).
- ``deadband_rad``: the servo ignores position errors smaller than this.
- ``coulomb_friction_nm`` and ``stiction_nm``: joint friction opposing motion; a joint at
  rest breaks away only once the torque on it exceeds the stiction (Stribeck curve, with
  ``stiction_nm`` 0 meaning the same as the Coulomb level).
- ``servo_velocity_limit``: the servo's set-point moves at most this fast (rad/s), as a
  velocity-limited position loop does; 0 is no limit.
- ``servo_torque_scale``: the current limit, a fraction of the model's force range.
- ``encoder_offset_rad``: the joint encoders read this much more than the joint's true
  angle, and the servo regulates the reading.
- ``table_height_offset_m``: the table top is this much above the plane the task assumes.
- ``cube_edge_radius_m``, ``cube_mass_kg``, ``cube_com_offset_m``, ``cube_friction``:
  a cube with rounded edges, another mass, an off-centre centre of mass and another
  friction coefficient.

The in-family effects (gains, latency, masses, damping, noise) use the profile's ``scale:``
and ``set:`` entries, with the same names as on MuJoCo.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from simreal_ros import config_schema
from simreal_ros.config_schema import setting

JointValue = float | list[float]

# The joint effects: the settings that take one number per arm joint.
JOINT_EFFECTS = (
    "backlash_rad",
    "deadband_rad",
    "coulomb_friction_nm",
    "stiction_nm",
    "servo_velocity_limit",
    "servo_torque_scale",
    "encoder_offset_rad",
)


@dataclasses.dataclass(frozen=True)
class EngineEffects:
    """The stand-in's effects beyond the simulator's family (all off by default)."""

    backlash_rad: JointValue = setting(0.0, "transmission play per joint", low=0.0, high=0.1)
    deadband_rad: JointValue = setting(
        0.0, "servo position-error deadband per joint", low=0.0, high=0.05
    )
    coulomb_friction_nm: JointValue = setting(
        0.0, "Coulomb friction torque per joint (N m)", low=0.0, high=30.0
    )
    stiction_nm: JointValue = setting(
        0.0, "breakaway (static) friction torque per joint, N m (0: the Coulomb level)",
        low=0.0, high=40.0,
    )  # fmt: skip
    servo_velocity_limit: JointValue = setting(
        0.0, "servo set-point speed limit per joint, rad/s (0: none)", low=0.0, high=10.0
    )
    servo_torque_scale: JointValue = setting(
        1.0, "servo current limit as a fraction of the model's force range", low=0.05, high=1.0
    )
    encoder_offset_rad: JointValue = setting(
        0.0, "encoder reading minus true joint angle, per joint", low=-0.05, high=0.05
    )
    table_height_offset_m: float = setting(
        0.0, "table top above the task's plane z = 0 (m)", low=-0.02, high=0.02
    )
    cube_edge_radius_m: float = setting(
        0.0, "radius of the cube's rounded edges (m; 0: sharp)", low=0.0, high=0.012
    )
    cube_mass_kg: float = setting(0.0, "cube mass (kg; 0: the model's)", low=0.0, high=2.0)
    cube_com_offset_m: list[float] = setting(
        [0.0, 0.0, 0.0], "cube centre of mass from its centre, cube frame (m)",
        low=-0.015, high=0.015,
    )  # fmt: skip
    cube_friction: float = setting(
        0.0, "cube sliding friction coefficient (0: the model's)", low=0.0, high=2.0
    )
    time_step_s: float = setting(
        0.005, "the engine's discrete time step (s)", low=0.0005, high=0.01
    )

    def __post_init__(self) -> None:
        config_schema.validate(self)
        if len(self.cube_com_offset_m) != 3:
            raise ValueError(
                f"cube_com_offset_m = {self.cube_com_offset_m!r}: give [x, y, z] in metres."
            )

    def per_joint(self, name: str, count: int) -> np.ndarray:
        """A joint effect as one value per arm joint; ValueError if a list has another
        length."""
        value = getattr(self, name)
        if isinstance(value, list | tuple):
            if len(value) != count:
                raise ValueError(
                    f"effects.{name} has {len(value)} values but the arm has {count} arm "
                    "joints (the gripper excluded); give one number, or one per arm joint in "
                    "controller order."
                )
            return np.asarray(value, dtype=float)
        return np.full(count, float(value))


def effects_from_mapping(raw: Mapping[str, Any] | None, where: str) -> EngineEffects:
    """``effects:`` of a profile, validated; ValueError naming the file and the setting."""
    if raw is None:
        return EngineEffects()
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: effects must be a mapping of setting: value.")
    try:
        values = {k: list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v
                  for k, v in raw.items()}  # fmt: skip
        return config_schema.from_mapping(EngineEffects, values)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{where}: effects: {error}") from None


class ServoLoop:
    """The joint side of the effects, stepped once per physics step (engine-free).

    In: the command after latency (controller targets of the arm joints) and the true
    joint angles and velocities. Out: the set-point the engine's PD servo tracks (true
    angle coordinates), and a feed-forward torque (friction).
    """

    def __init__(self, effects: EngineEffects, count: int, dt: float) -> None:
        self.dt = dt
        self.backlash = effects.per_joint("backlash_rad", count)
        self.deadband = effects.per_joint("deadband_rad", count)
        self.coulomb = effects.per_joint("coulomb_friction_nm", count)
        stiction = effects.per_joint("stiction_nm", count)
        self.stiction = np.where(stiction > 0, np.maximum(stiction, self.coulomb), self.coulomb)
        self.velocity_limit = effects.per_joint("servo_velocity_limit", count)
        self.encoder_offset = effects.per_joint("encoder_offset_rad", count)
        self.setpoint = np.zeros(count)
        self.output = np.zeros(count)  # after the play: what the link is driven towards

    def reset(self, true_positions: np.ndarray) -> None:
        """At rest at ``true_positions``: the set-point there, the play centred."""
        reading = np.asarray(true_positions, dtype=float) + self.encoder_offset
        self.setpoint = reading.copy()
        self.output = reading.copy()

    def measured(self, true_positions: np.ndarray) -> np.ndarray:
        """What the encoders read."""
        return np.asarray(true_positions, dtype=float) + self.encoder_offset

    def reference(self, command: np.ndarray, true_positions: np.ndarray) -> np.ndarray:
        """The set-point for this physics step, in true joint angles."""
        target = np.asarray(command, dtype=float)
        limited = self.velocity_limit > 0
        if limited.any():
            step = self.velocity_limit * self.dt
            moved = np.clip(target - self.setpoint, -step, step)
            target = np.where(limited, self.setpoint + moved, target)
        self.setpoint = target
        # Play: the output follows the set-point only once it pushes on one side of the gap.
        half = 0.5 * self.backlash
        self.output = np.clip(self.output, target - half, target + half)
        reading = self.measured(true_positions)
        error = self.output - reading
        band = self.deadband
        error = np.where(np.abs(error) <= band, 0.0, error - np.sign(error) * band)
        return np.asarray(true_positions, dtype=float) + error

    def friction(
        self, velocities: np.ndarray, drive: np.ndarray, inertia: np.ndarray, stuck: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Joint friction for this step: (torque, stuck).

        ``drive``: the torque on each joint besides friction (servo and gravity);
        ``inertia``: each joint's diagonal mass-matrix entry; ``stuck``: the joints held
        last step. A stuck joint is held, friction balancing the drive, until the drive
        exceeds the stiction; a moving one that slows below ``STICK_SPEED`` with the drive
        under the stiction sticks. A moving joint feels the Coulomb level against its
        motion. Friction never exceeds what stops a joint within the step: an explicit
        step must not reverse it."""
        v = np.asarray(velocities, dtype=float)
        drive = np.asarray(drive, dtype=float)
        stopping = np.asarray(inertia, dtype=float) * np.abs(v) / self.dt
        has = self.stiction > 0
        breaks = np.abs(drive) > self.stiction
        slow = np.abs(v) < STICK_SPEED
        stuck = has & np.where(stuck, ~breaks, slow & ~breaks)
        moving = -np.sign(v) * np.minimum(self.coulomb, stopping)
        spare = np.maximum(self.stiction - np.abs(drive), 0.0)
        holding = -drive - np.sign(v) * np.minimum(spare, stopping)
        return np.where(stuck, holding, moving), stuck


# Below this speed (rad/s) a joint whose drive is under the stiction sticks.
STICK_SPEED = 0.01
