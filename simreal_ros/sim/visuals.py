"""How the scene looks to a camera: lighting, colours and the camera's pose.

``VisualSettings`` is one appearance of the scene (the nominal one is the scene file's);
``apply_visuals`` writes it into a MuJoCo model (and the camera's pose into its data), so
the next render shows it. Physics never reads any of these fields: an episode's dynamics
are the same under every appearance.

``VisualRandomization`` is the camera policy's pretraining range: each episode draws one
appearance uniformly inside it. A visual stand-in (a profile's ``visual:`` section) is a
fixed appearance, and a stand-in's is chosen outside these ranges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

TABLE_GEOM = "table"
CUBE_GEOMS = ("cube_geom",)
LIGHT = "top"


@dataclasses.dataclass(frozen=True)
class VisualSettings:
    """One appearance; every field's default is the scene file's own value."""

    light_diffuse: float = 0.7  # the directional light's diffuse intensity (grey)
    light_ambient: float = 0.0
    light_tint: tuple[float, float, float] = (1.0, 1.0, 1.0)  # per-channel gain on the light
    light_tilt: tuple[float, float] = (0.0, 0.0)  # x, y of the light's direction (z is -1)
    table_rgb: tuple[float, float, float] = (0.55, 0.45, 0.35)
    cube_rgb: tuple[float, float, float] = (0.85, 0.2, 0.2)
    camera_offset_m: tuple[float, float, float] = (0.0, 0.0, 0.0)  # in the world frame
    camera_rotation_deg: tuple[float, float, float] = (0.0, 0.0, 0.0)  # about the camera's x, y, z

    def __post_init__(self) -> None:
        for name, size in (
            ("light_tint", 3),
            ("light_tilt", 2),
            ("table_rgb", 3),
            ("cube_rgb", 3),
            ("camera_offset_m", 3),
            ("camera_rotation_deg", 3),
        ):
            value = getattr(self, name)
            if len(value) != size or not all(np.isfinite(value)):
                raise ValueError(f"visual.{name} = {value!r}; give {size} finite numbers.")
        for name in ("light_tint", "table_rgb", "cube_rgb"):
            if not all(0.0 <= v <= 1.0 for v in getattr(self, name)):
                raise ValueError(f"visual.{name} = {getattr(self, name)!r}; each in [0, 1].")
        for name in ("light_diffuse", "light_ambient"):
            if not 0.0 <= getattr(self, name) <= 2.0:
                raise ValueError(f"visual.{name} = {getattr(self, name)!r}; in [0, 2].")
        if max(abs(v) for v in self.camera_offset_m) > 0.2:
            raise ValueError("visual.camera_offset_m: at most 0.2 m per axis.")
        if max(abs(v) for v in self.camera_rotation_deg) > 20.0:
            raise ValueError("visual.camera_rotation_deg: at most 20 degrees per axis.")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VisualSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"visual: unknown field(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}."
            )
        values: dict[str, Any] = {}
        for name, value in data.items():
            values[name] = (
                tuple(float(v) for v in value) if isinstance(value, list | tuple) else float(value)
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }


NOMINAL = VisualSettings()


@dataclasses.dataclass(frozen=True)
class VisualRandomization:
    """Pretraining ranges, uniform per episode (each a half-width around the nominal)."""

    light_diffuse: tuple[float, float] = (0.45, 1.0)
    light_ambient: tuple[float, float] = (0.0, 0.25)
    light_tint: float = 0.1  # each channel's gain in [1 - this, 1]
    light_tilt: float = 0.3
    table_rgb: float = 0.1
    cube_rgb: float = 0.1
    camera_offset_m: float = 0.01
    camera_rotation_deg: float = 1.5

    def sample(self, rng: np.random.Generator) -> VisualSettings:
        def around(center, half: float) -> tuple[float, ...]:
            values = np.asarray(center) + rng.uniform(-half, half, len(center))
            return tuple(float(v) for v in np.clip(values, 0.0, 1.0))

        return VisualSettings(
            light_diffuse=float(rng.uniform(*self.light_diffuse)),
            light_ambient=float(rng.uniform(*self.light_ambient)),
            light_tint=tuple(float(v) for v in rng.uniform(1.0 - self.light_tint, 1.0, 3)),
            light_tilt=tuple(float(v) for v in rng.uniform(-self.light_tilt, self.light_tilt, 2)),
            table_rgb=around(NOMINAL.table_rgb, self.table_rgb),
            cube_rgb=around(NOMINAL.cube_rgb, self.cube_rgb),
            camera_offset_m=tuple(
                float(v) for v in rng.uniform(-self.camera_offset_m, self.camera_offset_m, 3)
            ),
            camera_rotation_deg=tuple(
                float(v)
                for v in rng.uniform(-self.camera_rotation_deg, self.camera_rotation_deg, 3)
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }


@dataclasses.dataclass(frozen=True)
class VisualJitter:
    """Small draws around one identified appearance (``centre``), uniform per episode:
    adaptation renders the identified scene and its neighbourhood, not one exact look. The
    cube's colour, which identification does not see, keeps the pretraining's range."""

    centre: VisualSettings
    light: float = 0.1  # relative, on the diffuse and ambient intensities
    tint: float = 0.05
    tilt: float = 0.1
    table_rgb: float = 0.05
    cube_rgb: float = VisualRandomization.cube_rgb
    camera_offset_m: float = 0.005
    camera_rotation_deg: float = 0.5

    def sample(self, rng: np.random.Generator) -> VisualSettings:
        c = self.centre

        def around(center, half: float, low=0.0, high=1.0) -> tuple[float, ...]:
            values = np.asarray(center) + rng.uniform(-half, half, len(center))
            return tuple(float(v) for v in np.clip(values, low, high))

        return VisualSettings(
            light_diffuse=float(np.clip(c.light_diffuse * rng.uniform(1 - self.light,
                                                                      1 + self.light), 0, 2)),
            light_ambient=float(np.clip(c.light_ambient * rng.uniform(1 - self.light,
                                                                      1 + self.light), 0, 2)),
            light_tint=around(c.light_tint, self.tint),
            light_tilt=around(c.light_tilt, self.tilt, -5.0, 5.0),
            table_rgb=around(c.table_rgb, self.table_rgb),
            cube_rgb=around(NOMINAL.cube_rgb, self.cube_rgb),
            camera_offset_m=around(c.camera_offset_m, self.camera_offset_m, -0.2, 0.2),
            camera_rotation_deg=around(c.camera_rotation_deg, self.camera_rotation_deg,
                                       -20.0, 20.0),
        )  # fmt: skip


class SceneAppearance:
    """Applies ``VisualSettings`` to one physics' model, remembering the scene's own camera
    pose so offsets never accumulate."""

    def __init__(self, physics, camera: str) -> None:
        import mujoco

        model = physics.model
        self.physics = physics
        self.camera_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if self.camera_id < 0:
            raise ValueError(f"no camera {camera!r} in the scene.")
        if model.cam_bodyid[self.camera_id] != 0:
            raise ValueError(f"camera {camera!r} moves with a body; only fixed cameras jitter.")
        self.light_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_LIGHT, LIGHT)
        self.table_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, TABLE_GEOM)
        self.cube_ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in CUBE_GEOMS]
        if min(self.light_id, self.table_id, *self.cube_ids) < 0:
            raise ValueError("the scene lacks the light, table or cube the visuals change.")
        self.camera_pos = model.cam_pos[self.camera_id].copy()
        self.camera_mat = _quat_to_mat(model.cam_quat[self.camera_id])

    def apply(self, settings: VisualSettings) -> None:
        import mujoco

        model, data = self.physics.model, self.physics.data
        tint = np.asarray(settings.light_tint)
        _set(model, "light_diffuse", self.light_id, settings.light_diffuse * tint)
        _set(model, "light_ambient", self.light_id, settings.light_ambient * tint)
        direction = np.array([*settings.light_tilt, -1.0])
        direction /= np.linalg.norm(direction)
        _set(model, "light_dir", self.light_id, direction)
        data.light_xdir[self.light_id] = direction  # a world light's, as kinematics would set
        model.geom_rgba[self.table_id, :3] = settings.table_rgb
        for geom in self.cube_ids:
            model.geom_rgba[geom, :3] = settings.cube_rgb
        rotation = self.camera_mat @ _rotation_xyz(np.radians(settings.camera_rotation_deg))
        position = self.camera_pos + np.asarray(settings.camera_offset_m)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, rotation.reshape(-1))
        model.cam_pos[self.camera_id] = position
        model.cam_quat[self.camera_id] = quat
        # A fixed camera's world pose is its model pose; set it now so the next render
        # shows it without a physics step.
        data.cam_xpos[self.camera_id] = position
        data.cam_xmat[self.camera_id] = rotation.reshape(-1)


def _set(model, field: str, index: int, value) -> None:
    getattr(model, field)[index] = value


def _quat_to_mat(quat) -> np.ndarray:
    import mujoco

    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, np.asarray(quat, dtype=np.float64))
    return mat.reshape(3, 3)


def _rotation_xyz(angles) -> np.ndarray:
    """Rotation about the camera's own x, then y, then z (small jitter angles, radians)."""
    ax, ay, az = angles
    rx = np.array([[1, 0, 0], [0, np.cos(ax), -np.sin(ax)], [0, np.sin(ax), np.cos(ax)]])
    ry = np.array([[np.cos(ay), 0, np.sin(ay)], [0, 1, 0], [-np.sin(ay), 0, np.cos(ay)]])
    rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
    return rx @ ry @ rz


class CameraObservations:
    """An ``ArmTaskEnv`` whose observations also carry ``image``: the named camera's RGB
    frame (H, W, 3) uint8, rendered after every reset and step, as the policy node pairs the
    newest frame with the newest joint state.

    ``appearance`` is a fixed ``VisualSettings`` (nominal, or a visual stand-in's), or a
    ``VisualRandomization`` or ``VisualJitter`` drawn once per episode from ``rng``.
    """

    def __init__(self, env, camera: str, width: int, height: int, appearance=NOMINAL, rng=None):
        from simreal_ros.sim.rendering import CameraRenderer, ensure_headless_gl

        ensure_headless_gl()
        self.env = env
        self.appearance = appearance
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.scene = SceneAppearance(env.physics, camera)
        self.renderer = CameraRenderer(env.physics, camera=camera, width=width, height=height)
        self.settings = NOMINAL

    def __getattr__(self, name: str):
        return getattr(self.env, name)

    def _with_image(self, observation: dict) -> dict:
        return {**observation, "image": self.renderer.render().copy()}

    def render_as(self, settings: VisualSettings) -> np.ndarray:
        """The current state under ``settings`` (a paired view of the same instant); the
        episode's own appearance is put back."""
        self.scene.apply(settings)
        try:
            return self.renderer.render().copy()
        finally:
            self.scene.apply(self.settings)

    def reset(self, *, seed=None, options=None):
        observation, info = self.env.reset(seed=seed, options=options)
        if hasattr(self.appearance, "sample"):  # a randomisation or a jitter: draw one
            self.settings = self.appearance.sample(self.rng)
        else:
            self.settings = self.appearance
        self.scene.apply(self.settings)
        return self._with_image(observation), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._with_image(observation), reward, terminated, truncated, info

    def close(self) -> None:
        self.renderer.close()
        self.env.close()
