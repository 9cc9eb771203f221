"""Forward kinematics of the robot model: joint positions -> tool centre point.

The tool position is observable on any arm (measured joints plus the robot model), so a
policy may use it without privileged simulator state. MuJoCo's ``mj_kinematics`` costs a
few microseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ForwardKinematics:
    """Callable: joint positions (controller order) -> tool frame position, base frame."""

    def __init__(self, description: Any) -> None:
        import mujoco

        from simreal_ros.robot.model import compile_robot, joint_address

        self._mujoco = mujoco
        self.model = compile_robot(description)  # checks the joints and the tool frame
        self.data = mujoco.MjData(self.model)
        self.qpos_addr, _ = joint_address(self.model, description.joint_names)
        self.site_id = self.model.site(description.tool_frame).id

    def __call__(self, joint_position: np.ndarray) -> np.ndarray:
        # The arm's root is attached at the world origin, so world = base frame.
        self.data.qpos[self.qpos_addr] = joint_position
        self._mujoco.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[self.site_id].copy()
