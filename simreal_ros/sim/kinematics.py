"""Damped-least-squares inverse kinematics of the arm's tool centre point.

Runs on a private ``MjData`` so solving never disturbs the simulation being stepped.
Used by the scripted expert and to compute the home pose; plain MuJoCo, no ROS.
"""

from __future__ import annotations

import mujoco
import numpy as np


class ArmKinematics:
    """Forward and inverse kinematics of an arm's joints (any number) for one site.

    ``tool_down`` is the orientation every planar task holds the tool in: the tool frame's
    orientation at the robot's home pose (a description's home points the tool down), so
    it holds on any arm, whatever axes its tool frame uses.
    """

    @classmethod
    def for_robot(cls, robot, model: mujoco.MjModel | None = None) -> ArmKinematics:
        """The arm joints of a ``RobotDescription`` (model: the arm's, by default)."""
        from simreal_ros.robot.model import compile_robot

        kinematics = cls(model or compile_robot(robot), robot.tool_frame, robot.arm_joint_names)
        home = np.asarray(robot.home_position, dtype=float)[list(robot.arm_indices)]
        kinematics.tool_down = kinematics.forward(home)[1]
        return kinematics

    def __init__(self, model: mujoco.MjModel, site: str, arm_joints) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self.site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
        if self.site_id < 0:
            raise ValueError(f"site {site!r} is not in the model; check the robot description.")
        self.qpos_idx = np.array([model.joint(name).qposadr[0] for name in arm_joints])
        self.dof_idx = np.array([model.joint(name).dofadr[0] for name in arm_joints])
        self.lower = np.array([model.joint(name).range[0] for name in arm_joints])
        self.upper = np.array([model.joint(name).range[1] for name in arm_joints])
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self.tool_down = self.forward(np.zeros(len(arm_joints)))[1]  # see for_robot

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position (3) and rotation matrix (3x3) for arm joint positions ``q``."""
        self.data.qpos[self.qpos_idx] = q
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[self.site_id].copy(), self.data.site_xmat[self.site_id].reshape(
            3, 3
        ).copy()

    def solve(
        self,
        target_pos: np.ndarray,
        q_init: np.ndarray,
        target_rot: np.ndarray | None = None,
        iterations: int = 30,
        damping: float = 1e-3,
        tolerance: float = 1e-4,
        rotation_weight: float = 0.3,
    ) -> tuple[np.ndarray, float]:
        """Joint positions placing the site at ``target_pos`` with ``target_rot`` (default
        ``tool_down``).

        Starts from ``q_init`` (the measured joints, so the answer is a function of the
        state) and returns (q, position error in metres). Stays inside the joint limits.
        """
        q = np.array(q_init, dtype=float)
        target_rot = self.tool_down if target_rot is None else target_rot
        model, data = self.model, self.data
        error = np.zeros(6)
        pos_err = np.inf
        for _ in range(iterations):
            data.qpos[self.qpos_idx] = q
            mujoco.mj_kinematics(model, data)
            mujoco.mj_comPos(model, data)
            pos = data.site_xpos[self.site_id]
            rot = data.site_xmat[self.site_id].reshape(3, 3)
            error[:3] = target_pos - pos
            # Small-angle rotation error: half the sum of axis cross products.
            error[3:] = 0.5 * (
                np.cross(rot[:, 0], target_rot[:, 0])
                + np.cross(rot[:, 1], target_rot[:, 1])
                + np.cross(rot[:, 2], target_rot[:, 2])
            )
            pos_err = float(np.linalg.norm(error[:3]))
            if pos_err < tolerance and np.linalg.norm(error[3:]) < 10 * tolerance:
                break
            mujoco.mj_jacSite(model, data, self._jacp, self._jacr, self.site_id)
            jac = np.vstack([self._jacp[:, self.dof_idx], self._jacr[:, self.dof_idx]])
            weights = np.array([1, 1, 1, rotation_weight, rotation_weight, rotation_weight])
            jac_w = jac * weights[:, None]
            err_w = error * weights
            dq = jac_w.T @ np.linalg.solve(jac_w @ jac_w.T + damping * np.eye(6), err_w)
            # Limit the step so a far target cannot fling the solution across a singularity.
            norm = np.linalg.norm(dq)
            if norm > 0.5:
                dq *= 0.5 / norm
            q = np.clip(q + dq, self.lower, self.upper)
        return q, pos_err
