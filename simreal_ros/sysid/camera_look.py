"""How the arm's scene looks, identified from its frames: the light and the table's colour.

The camera policy's worst visual gap is the light (a dim, warm, low light alone took the
shipped push policy from 36 to 2 of 50): it changes each surface differently with its
angle to the light, so no colour map of the frame undoes it. It can be rendered, though.
With the camera's pose known (``sysid.camera_pose``), each recorded frame lines up with the
sim's render of the arm at the same joint positions; the light (diffuse intensity, ambient
intensity, colour, direction) and the table's colour that make those renders match the
frames best are the estimate. The cube and the goal are not rendered (the arm's states say
nothing of where they are); the error is the mean absolute colour difference, which lets
their few pixels count little. Nelder-Mead from the sim's own look.

The estimate is used only when it explains frames it was not fitted on better than the
sim's own look: the held-out frames' error must fall by more than twice its paired
standard error. The cube's colour is not identified here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from simreal_ros.config_schema import setting, validate

# The fitted fields, in order, with their bounds (sim.visuals.VisualSettings' own limits,
# the light's direction kept within 60 degrees of straight down).
LOOK_FIELDS = (
    ("light_diffuse", 1, (0.0, 2.0)),
    ("light_ambient", 1, (0.0, 2.0)),
    ("light_tint", 3, (0.0, 1.0)),
    ("light_tilt", 2, (-1.7, 1.7)),
    ("table_rgb", 3, (0.0, 1.0)),
)


@dataclasses.dataclass
class LookConfig:
    frames: int = setting(24, "recorded frames the fit renders", low=2)
    held_out_frames: int = setting(24, "other frames the estimate is checked on", low=2)
    evaluations: int = setting(800, "objective evaluations", low=10)
    seed: int = setting(0, "seed of which frames are fitted and which held out", low=0)

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass(frozen=True)
class LookFit:
    look: dict[str, Any]  # the fitted VisualSettings fields (light_*, table_rgb)
    held_out_error_before: float  # mean absolute RGB error (0-1) against the renders
    held_out_error_after: float
    held_out_gain_se: float
    frames_fitted: int
    frames_held_out: int
    evaluations: int
    accepted: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _vector(settings) -> np.ndarray:
    return np.concatenate([np.atleast_1d(getattr(settings, name)) for name, _, _ in LOOK_FIELDS])


def _fields(vector: np.ndarray) -> dict[str, Any]:
    out, start = {}, 0
    for name, size, _ in LOOK_FIELDS:
        values = [float(v) for v in vector[start : start + size]]
        out[name] = values[0] if size == 1 else tuple(values)
        start += size
    return out


def identify_look(
    frames: np.ndarray,
    joint_positions: np.ndarray,
    robot,
    camera,
    offset_m=(0.0, 0.0, 0.0),
    rotation_deg=(0.0, 0.0, 0.0),
    config: LookConfig | None = None,
) -> LookFit:
    """The light and table colour of the scene that recorded ``frames`` (uint8 (N, H, W, 3))
    with each frame's ``joint_positions``, seen by ``camera`` (the policy's ``CameraSpec``)
    moved by the identified ``offset_m`` / ``rotation_deg``."""
    from scipy.optimize import minimize

    from simreal_ros.sim.visuals import NOMINAL, VisualSettings
    from simreal_ros.sysid.camera_pose import (
        ArmRenderer,
        check_frames_and_joints,
        held_out_gain,
        split_frames,
    )

    config = config or LookConfig()
    frames = np.asarray(frames)
    joints = np.asarray(joint_positions, dtype=np.float64)
    check_frames_and_joints(frames, joints, camera, robot, "scene look")
    fitted, held = split_frames(len(frames), config.frames, config.held_out_frames, config.seed)
    pose = {"camera_offset_m": tuple(offset_m), "camera_rotation_deg": tuple(rotation_deg)}
    bounds = [b for _, size, b in LOOK_FIELDS for _ in range(size)]
    low, high = np.array(bounds).T
    renderer = ArmRenderer(robot, camera.camera_name, camera.width, camera.height)

    def errors(vector: np.ndarray, indices: np.ndarray) -> np.ndarray:
        settings = VisualSettings(**_fields(np.clip(vector, low, high)), **pose)
        return np.array([
            float(np.abs(renderer.render(joints[i], settings=settings) / 255.0
                         - frames[i] / 255.0).mean())
            for i in indices
        ])  # fmt: skip

    try:
        start = _vector(NOMINAL)
        simplex = np.vstack([start, start + np.diag(np.where(start + 0.15 <= high, 0.15, -0.15))])
        result = minimize(
            lambda x: float(errors(x, fitted).mean()), start, method="Nelder-Mead",
            bounds=bounds,
            options={"initial_simplex": simplex, "maxfev": config.evaluations,
                     "xatol": 1e-3, "fatol": 1e-5},
        )  # fmt: skip
        best = np.clip(result.x, low, high)
        before, after = errors(start, held), errors(best, held)
    finally:
        renderer.close()
    gain_se, accepted = held_out_gain(before - after)
    return LookFit(
        look=_fields(best),
        held_out_error_before=float(before.mean()),
        held_out_error_after=float(after.mean()),
        held_out_gain_se=gain_se,
        frames_fitted=len(fitted),
        frames_held_out=len(held),
        evaluations=int(result.nfev),
        accepted=accepted,
    )


def describe_look(record) -> str:
    """One line of a fit's record (``LookFit.to_dict()``) for people."""
    return (
        "scene look from the frames (light, table): mean RGB error against the sim's renders "
        f"on held-out frames {record['held_out_error_before']:.3f} -> "
        f"{record['held_out_error_after']:.3f}; "
        + ("accepted: adaptation renders it" if record["accepted"] else "not accepted")
    )
