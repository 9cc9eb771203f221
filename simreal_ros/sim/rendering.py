"""Offscreen camera rendering of the arm scene (for /camera/image_raw and gym render).

MuJoCo picks its GL backend from MUJOCO_GL when it is first imported: ``egl`` (GPU or
Mesa's EGL) or ``osmesa`` (pure software, needs libosmesa6). Set it before anything imports
mujoco; ``ensure_headless_gl()`` does so if nothing chose a backend yet.
"""

from __future__ import annotations

import math
import os

import numpy as np


def ensure_headless_gl(default: str = "egl") -> str:
    """Choose a headless GL backend unless the user already chose one."""
    return os.environ.setdefault("MUJOCO_GL", default)


def headless_gl_problem() -> str:
    """Why offscreen rendering cannot work in this process, or "" if it can be tried.

    MuJoCo fixes its GL backend at import; GLFW without a display fails, and creating it
    off the main thread can hang, so refuse up front instead.
    """
    try:
        from mujoco import gl_context
    except ImportError:
        gl_context = None
    context = getattr(gl_context, "GLContext", None)
    backend = context.__module__ if context is not None else "none"
    if backend.endswith("glfw") and not os.environ.get("DISPLAY"):
        return (
            "MuJoCo was imported with its GLFW backend and there is no display: set "
            "MUJOCO_GL=egl (or osmesa with libosmesa6) before anything imports mujoco"
        )
    if backend == "none":
        return "MuJoCo has no GL backend here (MUJOCO_GL disables it); set MUJOCO_GL=egl"
    return ""


class CameraRenderer:
    """Renders one named camera of an ``ArmPhysics`` to an RGB uint8 array (H, W, 3)."""

    def __init__(self, physics, camera: str = "front", width: int = 320, height: int = 240):
        import mujoco

        self.physics = physics
        self.camera = camera
        self.camera_id = mujoco.mj_name2id(physics.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if self.camera_id < 0:
            names = [physics.model.camera(i).name for i in range(physics.model.ncam)]
            raise ValueError(f"no camera {camera!r} in the model; cameras: {', '.join(names)}.")
        self.width, self.height = width, height
        problem = headless_gl_problem()
        if problem:
            raise RuntimeError(f"offscreen rendering unavailable: {problem}.")
        try:
            self._renderer = mujoco.Renderer(physics.model, height=height, width=width)
        except Exception as error:  # the GL backend is missing or misconfigured
            raise RuntimeError(
                f"offscreen rendering failed with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} "
                f"({error}); set MUJOCO_GL=egl (or osmesa with libosmesa6 installed) before "
                "starting, or turn the camera off."
            ) from error

    def render(self, data=None) -> np.ndarray:
        """Draw the physics' current state, or ``data`` (an MjData snapshot of the model)."""
        self._renderer.update_scene(self.physics.data if data is None else data, self.camera_id)
        return self._renderer.render()

    def intrinsics(self) -> tuple[float, float, float, float]:
        """Pinhole fx, fy, cx, cy in pixels (square pixels, from the camera's fovy)."""
        fovy = math.radians(float(self.physics.model.cam_fovy[self.camera_id]))
        focal = 0.5 * self.height / math.tan(0.5 * fovy)
        return focal, focal, 0.5 * (self.width - 1), 0.5 * (self.height - 1)

    def camera_matrix(self) -> np.ndarray:
        """The intrinsics as OpenCV's 3x3 K (CameraInfo's ``k``)."""
        fx, fy, cx, cy = self.intrinsics()
        return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])

    def optical_pose(self, data=None) -> np.ndarray:
        """``world_T_optical`` (4x4): the camera's optical frame (z forward, x right, y down,
        OpenCV's and ROS's ``*_optical_frame``) in the world, which is the arm's base frame.
        MuJoCo's camera frame looks along -z with y up: x kept, y and z flipped."""
        data = self.physics.data if data is None else data
        pose = np.eye(4)
        pose[:3, :3] = data.cam_xmat[self.camera_id].reshape(3, 3) * [1.0, -1.0, -1.0]
        pose[:3, 3] = data.cam_xpos[self.camera_id]
        return pose

    def close(self) -> None:
        self._renderer.close()
