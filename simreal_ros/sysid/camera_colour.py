"""The arm camera's colour response identified from its frames: a map into the sim's.

Light, white balance and the table's paint change every pixel of a frame in much the
same way, and a camera policy trained on the sim's colours reads a darker, warmer or
greener frame as a different scene. Once the camera's pose is known
(``sysid.camera_pose``), each recorded frame, warped into the trained camera's view, lines
up pixel for pixel with the sim's render of the arm at the same joint positions under the
sim's nominal look. A least-squares fit of ``sim = gain * arm + offset``, per channel, over
those pixel pairs is the camera's colour response in the sim's terms: exposure, white
balance and the light's colour (the von Kries model of colour constancy). A full 3x3 map
is not identifiable here: a frame of a table and a grey arm holds two or three colours, and
a map fitted on them sends every other colour (the cube's) anywhere.

Robust, because not every pixel has a partner: the cube and the goal are not rendered (the
arm's states say nothing of where they are) and shading from a differently placed light is
not a colour map. Huber-weighted least squares, reweighted a few times, lets those pixels
count less. Pixels the warp leaves without a source are left out.

The map is used only when it explains frames it was not fitted on better than no map: the
held-out frames' mean colour error must fall by more than twice its paired standard error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from simreal_ros.config_schema import setting, validate


@dataclasses.dataclass
class ColourConfig:
    frames: int = setting(24, "recorded frames the fit uses", low=2)
    held_out_frames: int = setting(24, "other frames the map is checked on", low=2)
    huber: float = setting(0.05, "Huber threshold on a pixel's error (RGB in [0, 1])", low=1e-4)
    reweightings: int = setting(6, "rounds of Huber reweighting", low=0)
    seed: int = setting(0, "seed of which frames are fitted and which held out", low=0)

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass(frozen=True)
class ColourFit:
    """``correction``: 12 numbers, the 3x4 [A | b] row-major, on RGB in [0, 1]."""

    correction: tuple[float, ...]
    held_out_error_before: float  # mean absolute RGB error against the renders, no map
    held_out_error_after: float
    held_out_gain_se: float
    frames_fitted: int
    frames_held_out: int
    accepted: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def apply_colour(rgb: np.ndarray, correction) -> np.ndarray:
    """(..., 3) RGB in [0, 1] through the 3x4 map."""
    affine = np.asarray(correction, dtype=np.float64).reshape(3, 4)
    return rgb @ affine[:, :3].T + affine[:, 3]


def _pairs(frames, joints, indices, renderer, camera, valid) -> tuple[np.ndarray, np.ndarray]:
    """(frames, pixels, 3) arm and sim RGB in [0, 1] at the valid pixels."""
    from simreal_ros.policy.camera import rectified_frames

    arm, sim = [], []
    for i in indices:
        seen = rectified_frames(frames[i], camera).astype(np.float64) / 255.0
        drawn = renderer.render(joints[i], (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)) / 255.0
        arm.append(seen[valid])
        sim.append(drawn[valid])
    return np.stack(arm), np.stack(sim)


def _huber_fit(arm: np.ndarray, sim: np.ndarray, config: ColourConfig) -> np.ndarray:
    """The per-channel gain and offset (a diagonal 3x4 map) minimising the Huber loss of
    each pixel's error (its norm over the channels, so a pixel without a partner counts
    less in every channel)."""
    x, y = arm.reshape(-1, 3), sim.reshape(-1, 3)
    affine = np.zeros((3, 4))
    weights = np.ones(len(x))
    for _ in range(config.reweightings + 1):
        for c in range(3):
            design = np.column_stack([x[:, c], np.ones(len(x))]) * np.sqrt(weights)[:, None]
            (gain, offset), *_ = np.linalg.lstsq(design, y[:, c] * np.sqrt(weights), rcond=None)
            affine[c, c], affine[c, 3] = gain, offset
        residual = np.linalg.norm(apply_colour(x, affine) - y, axis=1)
        weights = np.minimum(1.0, config.huber / np.maximum(residual, 1e-12))
    return affine


def identify_colour_response(
    frames: np.ndarray,
    joint_positions: np.ndarray,
    robot,
    camera,
    config: ColourConfig | None = None,
) -> ColourFit:
    """The map from the arm camera's colours to the sim's. ``camera`` is the policy's
    ``CameraSpec``, with the arm camera's ``rectification`` where its pose was identified;
    ``frames`` uint8 (N, H, W, 3) RGB, ``joint_positions`` (N, J) as for the pose."""
    import cv2

    from simreal_ros.sysid.camera_pose import ArmRenderer, check_frames_and_joints

    config = config or ColourConfig()
    frames = np.asarray(frames)
    joints = np.asarray(joint_positions, dtype=np.float64)
    check_frames_and_joints(frames, joints, camera, robot, "colour response")
    rng = np.random.default_rng(config.seed)
    order = rng.permutation(len(frames))
    half = len(frames) // 2
    fitted = np.sort(order[:half][: config.frames])
    held = np.sort(order[half:][: config.held_out_frames])
    valid = np.ones((camera.height, camera.width), dtype=bool)
    if camera.rectification is not None:  # pixels the warp fills from outside the frame
        warp = np.asarray(camera.rectification).reshape(3, 3)
        ones = np.full((camera.height, camera.width), 255, np.uint8)
        reached = cv2.warpPerspective(ones, warp, (camera.width, camera.height),
                                      flags=cv2.INTER_NEAREST, borderValue=0)  # fmt: skip
        valid = cv2.erode(reached, np.ones((3, 3), np.uint8)) > 0
    renderer = ArmRenderer(robot, camera.camera_name, camera.width, camera.height)
    try:
        arm_fit, sim_fit = _pairs(frames, joints, fitted, renderer, camera, valid)
        arm_held, sim_held = _pairs(frames, joints, held, renderer, camera, valid)
    finally:
        renderer.close()
    affine = _huber_fit(arm_fit, sim_fit, config)
    before = np.abs(arm_held - sim_held).mean(axis=(1, 2))
    after = np.abs(apply_colour(arm_held, affine) - sim_held).mean(axis=(1, 2))
    gain = before - after
    gain_se = float(gain.std(ddof=1) / np.sqrt(len(gain)))
    return ColourFit(
        correction=tuple(float(v) for v in affine.ravel()),
        held_out_error_before=float(before.mean()),
        held_out_error_after=float(after.mean()),
        held_out_gain_se=gain_se,
        frames_fitted=len(fitted),
        frames_held_out=len(held),
        accepted=bool(gain.mean() > 2.0 * gain_se),
    )
