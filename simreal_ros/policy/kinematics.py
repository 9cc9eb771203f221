"""Forward kinematics of the robot model: joint positions -> tool centre point.

The tool position is observable on any arm (measured joints plus the robot model), so a
policy may use it without privileged simulator state. MuJoCo's ``mj_kinematics`` costs a
few microseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ForwardKinematics:
    """Callable: joint positions (controller order) -> ``ee_site`` position in the base frame."""

    def __init__(self, description: Any) -> None:
        import mujoco

        self._mujoco = mujoco
        self.model = mujoco.MjModel.from_xml_path(str(description.mjcf_path))
        self.data = mujoco.MjData(self.model)
        self.qpos_addr = []
        for name in description.joint_names:
            joint_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if joint_id < 0:
                raise ValueError(
                    f"joint {name!r} is not in the MJCF model {description.mjcf_path}."
                )
            self.qpos_addr.append(int(self.model.jnt_qposadr[joint_id]))
        self.qpos_addr = np.asarray(self.qpos_addr)
        self.site_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, description.ee_site)
        if self.site_id < 0:
            raise ValueError(f"site {description.ee_site!r} is not in the MJCF model.")
        base = getattr(description, "base_body", None)
        self.base_id = (
            mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, base) if base else -1
        )

    def __call__(self, joint_position: np.ndarray) -> np.ndarray:
        self.data.qpos[self.qpos_addr] = joint_position
        self._mujoco.mj_kinematics(self.model, self.data)
        position = self.data.site_xpos[self.site_id].copy()
        if self.base_id >= 0:
            # Express in the base body's frame when the base is not the world origin.
            rotation = self.data.xmat[self.base_id].reshape(3, 3)
            position = rotation.T @ (position - self.data.xpos[self.base_id])
        return position
