"""The camera's pose identified from the arm's own frames: the arm's body is the target.

A camera policy reads where things are in the image, so a camera a few centimetres or
degrees from where it was trained sees every position moved (on the shipped push policy, a
3 cm / 3 degree offset alone took nominal success to 0 of 50). Each recorded frame comes
with the arm's joint positions, so the sim can draw what the trained camera would have
seen of the arm at that instant. The camera offset that makes those renders match the
frames best is the estimate: no marker, no labels, only the episodes the arm recorded.

Match on edges, not colours: each frame and render is reduced to the gradient magnitude
of its blurred grey image, normalised per frame, and scored by their mean product (a
zero-mean normalised correlation). Lighting and colours that differ from the sim's change
an edge's strength, not where it is. The cube and the goal are left out of the renders
(the arm's states say nothing of where they are); their edges in the frames cost the same
at every candidate pose. Nelder-Mead from the trained pose, coarse blur then fine.

The estimate is used only when it explains frames it was not fitted on: the held-out
frames' correlation must rise by more than twice its paired standard error. Otherwise
the camera is taken to be where it was trained (``accepted`` False) and nothing is warped.

``rectification`` turns an accepted estimate into the homography that maps the arm
camera's pixels to the trained camera's, exact on the horizontal plane at the cube's
centre (the plane where the task's positions lie); a policy warps each frame by it
before its encoder (``policy.camera.normalized_image``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from simreal_ros.config_schema import setting, validate

# Candidate poses stay inside what ``sim.visuals.VisualSettings`` can render.
MAX_OFFSET_M = 0.15
MAX_ROTATION_DEG = 15.0
MIN_FRAMES = 8


@dataclasses.dataclass
class CameraPoseConfig:
    frames: int = setting(40, "recorded frames the fit renders (spread over the episodes)", low=4)
    held_out_frames: int = setting(40, "other frames the estimate is checked on", low=4)
    blur_px: tuple[float, ...] = (2.0, 1.0)  # coarse to fine
    evaluations: int = setting(300, "objective evaluations per blur level", low=10)
    initial_step_m: float = setting(0.02, "the search's first step in position", low=1e-4)
    initial_step_deg: float = setting(2.0, "the search's first step in rotation", low=1e-3)
    seed: int = setting(0, "seed of which frames are fitted and which held out", low=0)

    def __post_init__(self) -> None:
        validate(self)
        if not self.blur_px or min(self.blur_px) <= 0:
            raise ValueError(f"camera pose: blur_px {self.blur_px!r}; give positive widths.")


@dataclasses.dataclass(frozen=True)
class CameraPoseFit:
    """The camera's offset from the trained pose (``sim.visuals.VisualSettings``'
    convention: metres in the world frame, degrees about the camera's own x, y, z)."""

    offset_m: tuple[float, float, float]
    rotation_deg: tuple[float, float, float]
    fitted_before: float  # mean edge correlation on the fitted frames, trained pose
    fitted_after: float
    held_out_before: float  # the same on frames the fit never saw
    held_out_after: float
    held_out_gain_se: float  # the paired standard error of the held-out gain
    frames_fitted: int
    frames_held_out: int
    evaluations: int
    accepted: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def edge_image(image: np.ndarray, blur_px: float) -> np.ndarray:
    """The normalised gradient magnitude of a blurred grey RGB frame (zero mean, unit std)."""
    import cv2

    grey = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY).astype(np.float32)
    grey = cv2.GaussianBlur(grey, (0, 0), blur_px)
    magnitude = cv2.magnitude(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1))
    magnitude -= magnitude.mean()
    return magnitude / max(float(magnitude.std()), 1e-6)


class ArmRenderer:
    """Renders the arm alone at given joint positions, from the trained camera moved by an
    offset (the cube and the goal parked out of sight)."""

    def __init__(self, robot, camera: str, width: int, height: int) -> None:
        from simreal_ros.sim.physics import ArmPhysics
        from simreal_ros.sim.rendering import CameraRenderer, ensure_headless_gl
        from simreal_ros.sim.visuals import SceneAppearance

        ensure_headless_gl()
        self.physics = ArmPhysics(robot)
        self.scene = SceneAppearance(self.physics, camera)
        self.renderer = CameraRenderer(self.physics, camera, width, height)
        self._away = np.array([10.0, 10.0, -5.0])

    def render(self, joints: np.ndarray, offset_m=(0.0, 0.0, 0.0), rotation_deg=(0.0, 0.0, 0.0),
               settings=None) -> np.ndarray:  # fmt: skip
        """The arm at ``joints``; the scene as ``settings`` (a ``VisualSettings``) where
        given, else the sim's own look from the camera moved by the offset."""
        from simreal_ros.sim.visuals import VisualSettings

        self.physics.reset(joint_positions=joints, cube_position=self._away, goal=self._away)
        if settings is None:
            settings = VisualSettings(
                camera_offset_m=tuple(offset_m), camera_rotation_deg=tuple(rotation_deg)
            )
        self.scene.apply(settings)
        return self.renderer.render()

    def close(self) -> None:
        self.renderer.close()


def check_frames_and_joints(frames: np.ndarray, joints: np.ndarray, camera, robot, what: str):
    """Refuse frames and joint positions a fit of ``what`` cannot use, saying why."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(
            f"{what}: frames must be uint8 (N, H, W, 3) RGB; got {frames.dtype} {frames.shape}."
        )
    camera.check_frame(frames.shape[2], frames.shape[1], "rgb8")
    if joints.shape != (len(frames), len(robot.joint_names)):
        raise ValueError(
            f"{what}: joint positions have shape {joints.shape}; need one row of "
            f"{len(robot.joint_names)} ({', '.join(robot.joint_names)}) per frame "
            f"({len(frames)})."
        )
    if not np.all(np.isfinite(joints)):
        raise ValueError(f"{what}: joint positions contain NaN or inf; drop those frames.")
    if len(frames) < 2 * MIN_FRAMES:
        raise ValueError(
            f"{what}: {len(frames)} frames; need at least {2 * MIN_FRAMES} (half fitted, "
            "half held out). Record more episodes with the camera on."
        )


def split_frames(count: int, fitted: int, held_out: int, seed: int):
    """Sorted indices of up to ``fitted`` frames to fit on and ``held_out`` others to check
    on, drawn from disjoint random halves of ``count``."""
    order = np.random.default_rng(seed).permutation(count)
    half = count // 2
    return np.sort(order[:half][:fitted]), np.sort(order[half:][:held_out])


def held_out_gain(gain: np.ndarray) -> tuple[float, bool]:
    """The paired standard error of per-frame ``gain`` on held-out frames, and whether the
    mean gain exceeds twice it (an estimate is used only then)."""
    se = float(gain.std(ddof=1) / np.sqrt(len(gain)))
    return se, bool(gain.mean() > 2.0 * se)


def identify_camera_pose(
    frames: np.ndarray,
    joint_positions: np.ndarray,
    robot,
    camera,
    config: CameraPoseConfig | None = None,
) -> CameraPoseFit:
    """The offset of the camera that recorded ``frames`` (uint8 (N, H, W, 3) RGB) from
    ``camera`` (a ``policy.camera.CameraSpec``: the sim camera the policy was trained on),
    with each frame's ``joint_positions`` (N, J) in ``robot.joint_names`` order."""
    from scipy.optimize import minimize

    config = config or CameraPoseConfig()
    frames = np.asarray(frames)
    joints = np.asarray(joint_positions, dtype=np.float64)
    check_frames_and_joints(frames, joints, camera, robot, "camera pose")
    fitted, held = split_frames(len(frames), config.frames, config.held_out_frames, config.seed)
    renderer = ArmRenderer(robot, camera.camera_name, camera.width, camera.height)
    step = np.array([config.initial_step_m] * 3 + [config.initial_step_deg] * 3)
    bounds = [(-MAX_OFFSET_M, MAX_OFFSET_M)] * 3 + [(-MAX_ROTATION_DEG, MAX_ROTATION_DEG)] * 3

    def correlations(pose: np.ndarray, indices: np.ndarray, blur: float, edges) -> np.ndarray:
        offset, rotation = pose[:3], pose[3:]
        return np.array([
            float(np.mean(edges[k] * edge_image(renderer.render(joints[i], offset, rotation),
                                                blur)))
            for k, i in enumerate(indices)
        ])  # fmt: skip

    try:
        pose = np.zeros(6)
        evaluations = 0
        for blur in config.blur_px:
            edges = [edge_image(frames[i], blur) for i in fitted]

            def loss(x, blur=blur, edges=edges):
                return -float(correlations(x, fitted, blur, edges).mean())

            simplex = np.vstack([pose, pose + np.diag(step)])
            result = minimize(
                loss, pose, method="Nelder-Mead", bounds=bounds,
                options={"initial_simplex": simplex, "maxfev": config.evaluations,
                         "xatol": 1e-4, "fatol": 1e-5},
            )  # fmt: skip
            pose, evaluations = np.asarray(result.x), evaluations + int(result.nfev)
            step = step / 2
        fine, fitted_edges = config.blur_px[-1], edges  # the last level's
        held_edges = [edge_image(frames[i], fine) for i in held]
        fitted_before = correlations(np.zeros(6), fitted, fine, fitted_edges).mean()
        fitted_after = correlations(pose, fitted, fine, fitted_edges).mean()
        held_before = correlations(np.zeros(6), held, fine, held_edges)
        held_after = correlations(pose, held, fine, held_edges)
    finally:
        renderer.close()
    gain_se, accepted = held_out_gain(held_after - held_before)
    return CameraPoseFit(
        offset_m=tuple(float(v) for v in pose[:3]),
        rotation_deg=tuple(float(v) for v in pose[3:]),
        fitted_before=float(fitted_before),
        fitted_after=float(fitted_after),
        held_out_before=float(held_before.mean()),
        held_out_after=float(held_after.mean()),
        held_out_gain_se=gain_se,
        frames_fitted=len(fitted),
        frames_held_out=len(held),
        evaluations=evaluations,
        accepted=accepted,
    )


def camera_projections(robot, camera, poses):
    """(K, world_T_optical) of ``camera`` (a ``CameraSpec``) moved by each (offset_m,
    rotation_deg) of ``poses``, and the resting cube's centre height: one scene for all."""
    from simreal_ros.sim.physics import ArmPhysics
    from simreal_ros.sim.rendering import CameraRenderer, ensure_headless_gl
    from simreal_ros.sim.visuals import SceneAppearance, VisualSettings

    ensure_headless_gl()
    physics = ArmPhysics(robot)
    scene = SceneAppearance(physics, camera.camera_name)
    renderer = CameraRenderer(physics, camera.camera_name, camera.width, camera.height)
    out = []
    try:
        for offset_m, rotation_deg in poses:
            scene.apply(VisualSettings(camera_offset_m=tuple(offset_m),
                                       camera_rotation_deg=tuple(rotation_deg)))  # fmt: skip
            out.append((renderer.camera_matrix(), renderer.optical_pose()))
    finally:
        renderer.close()
    return out, physics.cube_half_size


def plane_homography(matrix: np.ndarray, world_T_optical: np.ndarray, height: float):
    """The 3x3 map from (x, y, 1) on the world plane z = ``height`` to the camera's pixels."""
    rotation = world_T_optical[:3, :3].T  # world -> optical
    translation = -rotation @ world_T_optical[:3, 3]
    columns = np.column_stack([rotation[:, 0], rotation[:, 1], rotation[:, 2] * height +
                               translation])  # fmt: skip
    return matrix @ columns


def rectification(robot, camera, fit: CameraPoseFit) -> np.ndarray:
    """The homography (3x3, normalised so [2, 2] is 1) from the identified camera's pixels
    to the trained camera's, exact on the plane through the resting cube's centre (the
    table top is z = 0)."""
    trained = ((0.0,) * 3, (0.0,) * 3)
    projections, plane_height = camera_projections(
        robot, camera, [(fit.offset_m, fit.rotation_deg), trained]
    )
    (k_arm, pose_arm), (k_sim, pose_sim) = projections
    to_sim = plane_homography(k_sim, pose_sim, plane_height)
    to_arm = plane_homography(k_arm, pose_arm, plane_height)
    warp = to_sim @ np.linalg.inv(to_arm)
    return warp / warp[2, 2]


def describe_camera_pose(record) -> str:
    """One line of a fit's record (``CameraPoseFit.to_dict()``) for people."""
    offset = ", ".join(f"{100 * v:+.1f}" for v in record["offset_m"])
    rotation = ", ".join(f"{v:+.1f}" for v in record["rotation_deg"])
    return (
        f"camera pose from the frames: {offset} cm, {rotation} deg from the trained one; edge "
        f"correlation on held-out frames {record['held_out_before']:.3f} -> "
        f"{record['held_out_after']:.3f} (+-{record['held_out_gain_se']:.3f}); "
        + ("accepted: frames are warped into the trained view" if record["accepted"]
           else "not accepted: no warp")
    )  # fmt: skip
