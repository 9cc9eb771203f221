"""The policy's conventions: what it observes, what its actions mean, and how to convert.

The actor works in normalised coordinates: observations are standardised with fixed
statistics and actions lie in [-1, 1]. The arm works in SI units: joint positions in rad
(metres for a prismatic gripper) and absolute position targets in controller order. This
module is the one place that converts between the two; the gym env wrapper used in
pretraining, the off-ROS evaluation and the policy node all call the same functions, so a
mismatch between training and deployment cannot creep in through a second copy.

Action modes
    ``delta``: target = measured joint position + action * action_scale (a max step per
    control tick, per joint), then clipped to [target_lower, target_upper].
    ``absolute``: target = action_offset + action * action_scale, then clipped likewise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from simreal_ros.robot.observation import (
    DERIVED_FIELD_SIZES,
    KINEMATIC_FIELDS,
    RAW_FIELD_SIZES,
    field_size,
)

ACTION_MODES = ("delta", "absolute")

# The actor's log-std clamp, one for the torch model (training) and the numpy actor (the node).
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """Conventions a checkpoint was trained with; checked against the robot before running."""

    task: str
    joint_names: tuple[str, ...]
    joint_units: tuple[str, ...]  # "rad" for revolute joints, "m" for prismatic ones
    action_mode: str
    action_scale: tuple[float, ...]  # per joint, in joint units (per tick in delta mode)
    action_offset: tuple[float, ...]  # per joint, in joint units (zero in delta mode)
    target_lower: tuple[float, ...]  # targets are clipped to these, inside the joint limits
    target_upper: tuple[float, ...]
    control_rate_hz: float
    observation_fields: tuple[str, ...]
    obs_mean: tuple[float, ...]
    obs_std: tuple[float, ...]
    # A camera policy's image conventions (policy.camera.CameraSpec); None for a state policy.
    camera: Any = None

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        if self.action_mode not in ACTION_MODES:
            raise ValueError(
                f"spec.action_mode = {self.action_mode!r}; use one of {', '.join(ACTION_MODES)}."
            )
        for name in ("joint_units", "action_scale", "action_offset", "target_lower"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"spec.{name} has {len(getattr(self, name))} entries but there are {n} "
                    "joints; give one per joint in joint_names order."
                )
        if len(self.target_upper) != n:
            raise ValueError(f"spec.target_upper needs {n} entries, one per joint.")
        if not self.control_rate_hz > 0:
            raise ValueError(f"spec.control_rate_hz = {self.control_rate_hz}; must be > 0.")
        for field in self.observation_fields:
            if field not in RAW_FIELD_SIZES and field not in DERIVED_FIELD_SIZES:
                known = ", ".join([*RAW_FIELD_SIZES, *DERIVED_FIELD_SIZES])
                raise ValueError(
                    f"spec.observation_fields: unknown field {field!r}; known: {known}."
                )
        dim = self.obs_dim
        if len(self.obs_mean) != dim or len(self.obs_std) != dim:
            raise ValueError(
                f"spec.obs_mean/obs_std have {len(self.obs_mean)}/{len(self.obs_std)} entries; "
                f"the observation layout has {dim}."
            )
        if any(not s > 0 for s in self.obs_std):
            raise ValueError("spec.obs_std must be positive everywhere.")
        if any(not s > 0 for s in self.action_scale):
            raise ValueError("spec.action_scale must be positive for every joint.")

    @property
    def act_dim(self) -> int:
        return len(self.joint_names)

    @property
    def obs_dim(self) -> int:
        return sum(field_size(f, self.act_dim) for f in self.observation_fields)

    @property
    def needs_kinematics(self) -> bool:
        return any(f in KINEMATIC_FIELDS for f in self.observation_fields)

    def layout(self) -> list[tuple[str, int, int]]:
        """(field, start, stop) of each field in the observation vector."""
        out, start = [], 0
        for field in self.observation_fields:
            size = field_size(field, self.act_dim)
            out.append((field, start, start + size))
            start += size
        return out

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready values; a state policy's has no ``camera`` key, so its
        fingerprint is what it was before camera policies existed."""
        out = {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(self).items()
            if k != "camera"
        }
        if self.camera is not None:
            out["camera"] = self.camera.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicySpec:
        names = {f.name for f in dataclasses.fields(cls)} - {"camera"}
        missing = sorted(names - set(data))
        if missing:
            raise ValueError(f"policy spec is missing field(s): {', '.join(missing)}.")
        values = {}
        for name in names:
            value = data[name]
            values[name] = tuple(value) if isinstance(value, list) else value
        values["control_rate_hz"] = float(values["control_rate_hz"])
        if data.get("camera") is not None:
            from simreal_ros.policy.camera import CameraSpec

            if not isinstance(data["camera"], Mapping):
                raise ValueError("spec.camera must be a mapping of the camera's conventions.")
            values["camera"] = CameraSpec.from_dict(data["camera"])
        return cls(**values)

    def fingerprint(self) -> str:
        """SHA-256 of the conventions, so an adapter can prove it was trained on this spec."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def with_statistics(
        self, mean: np.ndarray, std: np.ndarray, floor: float = 1e-3
    ) -> PolicySpec:
        std = np.maximum(np.asarray(std, dtype=np.float64), floor)
        return dataclasses.replace(
            self,
            obs_mean=tuple(float(x) for x in mean),
            obs_std=tuple(float(x) for x in std),
        )


class SpecConverter:
    """Fast conversions for one spec (arrays precomputed once; the control path reuses them).

    ``forward_kinematics`` maps a joint position vector (controller order) to the tool
    centre point (xyz, base frame); it is needed only when the layout has kinematic fields
    (``SpecConverter.for_robot`` builds it from the arm's model).
    """

    def __init__(
        self,
        spec: PolicySpec,
        forward_kinematics: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        if spec.needs_kinematics and forward_kinematics is None:
            raise ValueError(
                f"the {spec.task} policy observes kinematic fields: give its arm's "
                "forward_kinematics (SpecConverter.for_robot(spec, robot))."
            )
        self.spec = spec
        self.forward_kinematics = forward_kinematics
        self.obs_mean = np.asarray(spec.obs_mean, dtype=np.float64)
        self.obs_inv_std = 1.0 / np.asarray(spec.obs_std, dtype=np.float64)
        self.scale = np.asarray(spec.action_scale, dtype=np.float64)
        self.offset = np.asarray(spec.action_offset, dtype=np.float64)
        self.lower = np.asarray(spec.target_lower, dtype=np.float64)
        self.upper = np.asarray(spec.target_upper, dtype=np.float64)
        self.delta = spec.action_mode == "delta"

    @classmethod
    def for_robot(cls, spec: PolicySpec, robot: Any) -> SpecConverter:
        """``spec``'s converter on ``robot`` (a ``RobotDescription``): its tool kinematics
        when the layout has kinematic fields."""
        if not spec.needs_kinematics:
            return cls(spec)
        from simreal_ros.robot.kinematics import ToolKinematics

        return cls(spec, ToolKinematics.for_robot(robot))

    def observation_vector(self, obs: Mapping[str, Any]) -> np.ndarray:
        """Raw (unnormalised) observation vector in the spec's field order."""
        ee = None
        parts = []
        for field in self.spec.observation_fields:
            if field in RAW_FIELD_SIZES:
                value = np.asarray(obs[field], dtype=np.float64).reshape(-1)
                expected = field_size(field, self.spec.act_dim)
                if value.shape[0] != expected:
                    raise ValueError(
                        f"observation field {field!r} has {value.shape[0]} values; "
                        f"the policy expects {expected}."
                    )
                parts.append(value)
                continue
            if field == "goal_minus_object":
                parts.append(_vec(obs["goal_position"]) - _vec(obs["object_position"]))
                continue
            if ee is None:
                ee = np.asarray(self.forward_kinematics(_vec(obs["joint_position"])))  # type: ignore[misc]
            if field == "ee_position":
                parts.append(ee)
            elif field == "goal_minus_ee":
                parts.append(_vec(obs["goal_position"]) - ee)
            elif field == "object_minus_ee":
                parts.append(_vec(obs["object_position"]) - ee)
        vector = np.concatenate(parts)
        if not np.all(np.isfinite(vector)):
            raise ValueError("observation has non-finite values; refusing to act on it.")
        return vector

    def normalize(self, vector: np.ndarray) -> np.ndarray:
        return (vector - self.obs_mean) * self.obs_inv_std

    def normalized_observation(self, obs: Mapping[str, Any]) -> np.ndarray:
        return self.normalize(self.observation_vector(obs))

    def command_from_action(self, action: np.ndarray, joint_position: np.ndarray) -> np.ndarray:
        """Normalised action in [-1, 1] -> absolute joint position targets (SI units)."""
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        base = np.asarray(joint_position, dtype=np.float64) if self.delta else self.offset
        return np.clip(base + action * self.scale, self.lower, self.upper)

    def action_from_command(self, target: np.ndarray, joint_position: np.ndarray) -> np.ndarray:
        """Absolute targets -> the normalised action that best reproduces them (clipped)."""
        base = np.asarray(joint_position, dtype=np.float64) if self.delta else self.offset
        return np.clip((np.asarray(target, dtype=np.float64) - base) / self.scale, -1.0, 1.0)


def _vec(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=np.float64).reshape(-1)


def expected_joint_units(description: Any) -> tuple[str, ...]:
    """Units of each controller joint: "rad" for hinges, "m" for slides.

    Taken from the description's ``joint_units`` when it has one, else from the joint types
    in its model.
    """
    units = getattr(description, "joint_units", None)
    if units is not None:
        return tuple(units)
    if getattr(description, "model_path", None) is None:
        return tuple("rad" for _ in description.joint_names)
    from simreal_ros.robot.model import check_against_model

    return check_against_model(description).joint_units


def validate_against_robot(
    spec: PolicySpec,
    description: Any,
    control_rate_hz: float | None = None,
    joint_units: Sequence[str] | None = None,
    tolerance: float = 1e-6,
) -> None:
    """Refuse a checkpoint whose conventions differ from the robot's, naming the field.

    This is the guard against an action-convention or normalisation mismatch that would
    make a policy move confidently to the wrong place.
    """
    robot_names = tuple(description.joint_names)
    if tuple(spec.joint_names) != robot_names:
        if sorted(spec.joint_names) == sorted(robot_names):
            raise ValueError(
                f"joint_names: the checkpoint orders the joints {list(spec.joint_names)} but "
                f"the robot's controller order is {list(robot_names)}; retrain or re-export "
                "the checkpoint in controller order."
            )
        robot = getattr(description, "name", "this robot")
        raise ValueError(
            f"joint_names: the checkpoint drives {len(spec.joint_names)} joints "
            f"{list(spec.joint_names)} but the robot {robot!r} has {len(robot_names)} "
            f"{list(robot_names)}; this checkpoint is for a different robot: give one "
            "trained for this arm (simreal pretrain --robot ...)."
        )
    units = tuple(joint_units) if joint_units is not None else expected_joint_units(description)
    for name, have, want in zip(spec.joint_names, spec.joint_units, units, strict=True):
        if have != want:
            raise ValueError(
                f"joint_units: joint {name!r} is in {have!r} in the checkpoint but in {want!r} "
                "on the robot; the checkpoint's actions would be misread."
            )
    lower = np.asarray(description.position_lower, dtype=np.float64)
    upper = np.asarray(description.position_upper, dtype=np.float64)
    for i, name in enumerate(spec.joint_names):
        if (
            spec.target_lower[i] < lower[i] - tolerance
            or spec.target_upper[i] > upper[i] + tolerance
        ):
            raise ValueError(
                f"action range: joint {name!r} targets span [{spec.target_lower[i]:.4g}, "
                f"{spec.target_upper[i]:.4g}] but its limits are [{lower[i]:.4g}, "
                f"{upper[i]:.4g}]; the checkpoint was made for other joint limits."
            )
        if spec.target_lower[i] >= spec.target_upper[i]:
            raise ValueError(f"action range: joint {name!r} has an empty target range.")
    velocity = getattr(description, "velocity_limit", None)
    if velocity is not None and spec.action_mode == "delta":
        step_speed = np.asarray(spec.action_scale) * spec.control_rate_hz
        for i, name in enumerate(spec.joint_names):
            if step_speed[i] > float(velocity[i]) * (1 + 1e-6):
                raise ValueError(
                    f"action_scale: joint {name!r} may step {spec.action_scale[i]:.4g} per tick "
                    f"at {spec.control_rate_hz:g} Hz = {step_speed[i]:.4g}/s, over its velocity "
                    f"limit {float(velocity[i]):.4g}/s."
                )
    rate_given = control_rate_hz is not None and control_rate_hz > 0
    if rate_given and abs(control_rate_hz - spec.control_rate_hz) > 1e-6 * spec.control_rate_hz:
        raise ValueError(
            f"control_rate_hz: the checkpoint was trained at {spec.control_rate_hz:g} Hz but "
            f"the node is configured for {control_rate_hz:g} Hz; a delta policy would move "
            "at the wrong speed. Set control_rate_hz to the checkpoint's rate or 0."
        )


def version_spec(spec: PolicySpec, metadata: Mapping[str, Any], description: Any = None):
    """The conventions one version runs with: the base's ``spec``, with what its
    ``simreal_adapter.json`` names: the per-tick step (``action_scale``; sim adaptation
    widens it for an arm that follows its targets slowly), and a camera policy's frame
    warp (``camera_rectification``: the arm camera's identified pose, ``sysid.camera_pose``).
    With ``description`` the step is checked against the arm's velocity limits, as the
    base's is."""
    from simreal_ros.policy.camera import VERSION_METADATA

    if any(metadata.get(key) is not None for key in VERSION_METADATA):
        if spec.camera is None:
            raise ValueError(
                "the adapter's metadata has a camera correction but its base is a state "
                "policy; the adapter belongs to a camera policy's base."
            )
        try:
            camera = spec.camera.for_version(metadata)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"camera correction in the adapter's metadata: {error} Re-run the "
                "alignment or remove the entry."
            ) from None
        spec = dataclasses.replace(spec, camera=camera)
    scale = metadata.get("action_scale")
    if scale is None:
        return spec
    try:
        values = tuple(float(v) for v in scale)
    except (TypeError, ValueError):
        raise ValueError(
            f"action_scale in the adapter's metadata is {scale!r}; it must be a list of "
            f"{spec.act_dim} numbers, one per joint. Re-train or remove the entry."
        ) from None
    if len(values) != spec.act_dim or not all(np.isfinite(values)):
        raise ValueError(
            f"action_scale in the adapter's metadata has {len(values)} entries "
            f"({list(values)[:8]}); it needs {spec.act_dim} finite numbers, one per joint."
        )
    widened = dataclasses.replace(spec, action_scale=values)
    if description is not None:
        validate_against_robot(widened, description)
    return widened


def widest_action_scale(spec: PolicySpec, description: Any, joints: Sequence[int]):
    """``spec``'s per-tick step with ``joints`` widened to their velocity limit (the most
    ``validate_against_robot`` accepts in delta mode); the others as they are."""
    scale = list(spec.action_scale)
    velocity = getattr(description, "velocity_limit", None)
    if spec.action_mode != "delta" or velocity is None:
        return tuple(scale)
    for i in joints:
        scale[i] = max(scale[i], float(velocity[i]) / spec.control_rate_hz)
    return tuple(scale)


DEFAULT_OBSERVATION_FIELDS = (
    "joint_position",
    "joint_velocity",
    "object_position",
    "object_orientation",
    "goal_position",
    "goal_minus_object",
    "ee_position",
    "goal_minus_ee",
    "object_minus_ee",
)


def default_spec(
    description: Any,
    task: str,
    control_rate_hz: float = 20.0,
    observation_fields: Sequence[str] = DEFAULT_OBSERVATION_FIELDS,
    max_speed_fraction: float = 0.5,
    joint_units: Sequence[str] | None = None,
) -> PolicySpec:
    """Delta-mode spec for the robot: a full action step moves each joint at
    ``max_speed_fraction`` of its velocity limit; identity normalisation until statistics
    are fitted with ``with_statistics``."""
    n = len(description.joint_names)
    velocity = np.asarray(description.velocity_limit, dtype=np.float64)
    dim = sum(field_size(f, n) for f in observation_fields)
    units = tuple(joint_units) if joint_units is not None else expected_joint_units(description)
    return PolicySpec(
        task=task,
        joint_names=tuple(description.joint_names),
        joint_units=units,
        action_mode="delta",
        action_scale=tuple(float(v) for v in velocity * max_speed_fraction / control_rate_hz),
        action_offset=(0.0,) * n,
        target_lower=tuple(float(x) for x in description.position_lower),
        target_upper=tuple(float(x) for x in description.position_upper),
        control_rate_hz=float(control_rate_hz),
        observation_fields=tuple(observation_fields),
        obs_mean=(0.0,) * dim,
        obs_std=(1.0,) * dim,
    )
