"""End-effector workspace check by forward kinematics of the robot's MuJoCo model.

The checker owns a private ``MjData``: nothing else steps or reads it, so it never races
the simulation and needs no lock. Only ``mj_kinematics`` runs (no collision, no dynamics).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _box_text(lower: Sequence[float], upper: Sequence[float]) -> str:
    return "[" + ", ".join(f"{lo:g}..{hi:g}" for lo, hi in zip(lower, upper, strict=True)) + "]"


class Workspace:
    """Tool centre point inside a box and outside keep-out boxes (base frame, metres)."""

    def __init__(
        self,
        mjcf_path: str | Path,
        joint_names: Sequence[str],
        site: str,
        lower: Sequence[float],
        upper: Sequence[float],
        keep_out: Sequence[Sequence[float]] = (),
    ) -> None:
        import mujoco  # imported here: limits-only users need not load MuJoCo

        self._mujoco = mujoco
        path = Path(mjcf_path)
        if not path.is_file():
            raise ValueError(f"workspace check: robot model {path} does not exist.")
        self.model = mujoco.MjModel.from_xml_path(str(path))
        self.data = mujoco.MjData(self.model)  # private copy, never shared
        addresses = []
        for name in joint_names:
            joint_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if joint_id < 0:
                raise ValueError(
                    f"workspace check: joint {name!r} is not in the robot model {path}; the "
                    "description's joint names must match the MJCF."
                )
            addresses.append(int(self.model.jnt_qposadr[joint_id]))
        self._qpos_address = np.asarray(addresses, dtype=np.intp)
        site_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, site)
        if site_id < 0:
            raise ValueError(f"workspace check: site {site!r} is not in the robot model {path}.")
        self.site = site
        self._site_xpos = self.data.site_xpos[site_id]  # a view, refreshed by mj_kinematics
        self.lower = tuple(float(x) for x in lower)
        self.upper = tuple(float(x) for x in upper)
        if len(self.lower) != 3 or len(self.upper) != 3:
            raise ValueError("workspace box corners need x, y and z each.")
        for axis, lo, hi in zip("xyz", self.lower, self.upper, strict=True):
            if not lo < hi:
                raise ValueError(
                    f"workspace box: {axis} lower {lo:g} is not below {axis} upper {hi:g}; "
                    "swap them."
                )
        boxes = []
        for index, box in enumerate(keep_out):
            box = tuple(float(x) for x in box)
            if len(box) != 6:
                raise ValueError(f"keep-out box {index} needs 6 numbers, got {len(box)}.")
            for axis in range(3):
                if not box[axis] < box[axis + 3]:
                    raise ValueError(
                        f"keep-out box {index}: {'xyz'[axis]} min {box[axis]:g} is not below "
                        f"{'xyz'[axis]} max {box[axis + 3]:g}."
                    )
            boxes.append(box)
        self.keep_out = tuple(boxes)

    def ee_position(self, q: np.ndarray) -> np.ndarray:
        """Tool centre point for joint positions ``q`` (a view; copy it to keep it)."""
        self.data.qpos.put(self._qpos_address, q)
        self._mujoco.mj_kinematics(self.model, self.data)
        return self._site_xpos

    def violation(self, q: np.ndarray) -> tuple[str, float]:
        """("", 0) inside; else ("workspace", distance outside) or ("keep_out", depth)."""
        x, y, z = self.ee_position(q).tolist()
        lo, hi = self.lower, self.upper
        if not (lo[0] <= x <= hi[0] and lo[1] <= y <= hi[1] and lo[2] <= z <= hi[2]):
            dx = max(lo[0] - x, x - hi[0], 0.0)
            dy = max(lo[1] - y, y - hi[1], 0.0)
            dz = max(lo[2] - z, z - hi[2], 0.0)
            return "workspace", (dx * dx + dy * dy + dz * dz) ** 0.5
        for box in self.keep_out:
            if box[0] < x < box[3] and box[1] < y < box[4] and box[2] < z < box[5]:
                depth = min(x - box[0], box[3] - x, y - box[1], box[4] - y, z - box[2], box[5] - z)
                return "keep_out", depth
        return "", 0.0

    def require_inside(self, q: np.ndarray, pose_name: str) -> None:
        """Refuse a configuration whose box or keep-outs exclude a pose (e.g. home)."""
        limit, excess = self.violation(q)
        if not limit:
            return
        point = ", ".join(f"{v:.3f}" for v in self._site_xpos)
        if limit == "workspace":
            raise ValueError(
                f"the workspace box {_box_text(self.lower, self.upper)} excludes the {pose_name} "
                f"pose: its tool centre point ({point}) is {excess:.3f} m outside; widen "
                "workspace_lower/workspace_upper."
            )
        raise ValueError(
            f"a keep-out box contains the {pose_name} pose's tool centre point ({point}), "
            f"{excess:.3f} m deep; move or shrink keep_out_boxes."
        )
