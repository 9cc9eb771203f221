"""The one kinematics of the tool frame: forward, Jacobian and damped-least-squares IK.

Every user (the policy's observation, the safety filter's workspace check, the scripted
experts and the diagnosis) runs it on its own ``ToolKinematics``: each owns a private
``MjData``, so none disturbs a simulation being stepped or races another thread. Only
``mj_kinematics`` (and ``mj_comPos`` for the Jacobian) runs, a few microseconds. The arm's
root is attached at the world origin, so world coordinates are base-frame coordinates.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np


class ToolKinematics:
    """Kinematics of one site for joint positions ``q`` of ``joint_names`` (in that order).

    Callable: ``kinematics(q)`` is the tool position (a copy). ``tool_down`` is the
    orientation planar tasks hold the tool in: the tool frame's at the robot's home pose
    (``for_robot``), which points the tool down on any arm, whatever its frame's axes.
    """

    def __init__(self, model: mujoco.MjModel, joint_names: Sequence[str], site: str) -> None:
        self.model = model
        self.data = mujoco.MjData(model)  # private: never shared, never stepped
        self.joint_names = tuple(joint_names)
        self.site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
        if self.site_id < 0:
            raise ValueError(f"site {site!r} is not in the model; check the robot description.")
        qpos, dof = [], []
        for name in self.joint_names:
            joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if joint < 0:
                raise ValueError(
                    f"joint {name!r} is not in the robot model; the description's joint names "
                    "must match the model's."
                )
            qpos.append(int(model.jnt_qposadr[joint]))
            dof.append(int(model.jnt_dofadr[joint]))
        self.qpos_index = np.asarray(qpos, dtype=np.intp)
        self.dof_index = np.asarray(dof, dtype=np.intp)
        self.lower = np.array([model.joint(n).range[0] for n in self.joint_names])
        self.upper = np.array([model.joint(n).range[1] for n in self.joint_names])
        self._site_xpos = self.data.site_xpos[self.site_id]  # views, refreshed by FK
        self._site_xmat = self.data.site_xmat[self.site_id]
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self.tool_down = self.pose(np.zeros(len(self.joint_names)))[1]  # see for_robot

    @classmethod
    def for_robot(
        cls, robot, arm_only: bool = False, model: mujoco.MjModel | None = None
    ) -> ToolKinematics:
        """For a ``RobotDescription``: its controller joints (``arm_only``: all but the
        gripper), on its arm model unless ``model`` is given."""
        from simreal_ros.robot.model import compile_robot

        joints = robot.arm_joint_names if arm_only else robot.joint_names
        kinematics = cls(model or compile_robot(robot), joints, robot.tool_frame)
        home = np.asarray(robot.home_position, dtype=float)
        if arm_only:
            home = home[list(robot.arm_indices)]
        kinematics.tool_down = kinematics.pose(home)[1]
        return kinematics

    # ------------------------------------------------------------------ forward
    def position(self, q) -> np.ndarray:
        """Tool position for ``q`` (a view into the private data: copy it to keep it)."""
        self.data.qpos.put(self.qpos_index, q)
        mujoco.mj_kinematics(self.model, self.data)
        return self._site_xpos

    @property
    def last_position(self) -> np.ndarray:
        """The tool position at the last ``q`` given (a view: copy it to keep it)."""
        return self._site_xpos

    @property
    def last_rotation(self) -> np.ndarray:
        """The tool rotation matrix (3x3) at the last ``q`` given (a view)."""
        return self._site_xmat.reshape(3, 3)

    def __call__(self, q) -> np.ndarray:
        return self.position(q).copy()

    def pose(self, q) -> tuple[np.ndarray, np.ndarray]:
        """Tool position (3) and rotation matrix (3x3, columns the tool's axes), copies."""
        position = self.position(q).copy()
        return position, self._site_xmat.reshape(3, 3).copy()

    def jacobian(self, q) -> tuple[np.ndarray, np.ndarray]:
        """Positional and rotational Jacobians (3 x n each, joints in ``joint_names``
        order) at ``q``; the tool position is refreshed too."""
        self.position(q)
        mujoco.mj_comPos(self.model, self.data)
        mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site_id)
        return self._jacp[:, self.dof_index], self._jacr[:, self.dof_index]

    # ------------------------------------------------------------------ inverse
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
        """Joint positions placing the tool at ``target_pos`` with ``target_rot`` (default
        ``tool_down``), by damped least squares from ``q_init`` (the measured joints, so
        the answer is a function of the state). Returns (q, position error in metres);
        stays inside the joint limits."""
        target_rot = self.tool_down if target_rot is None else target_rot
        q = np.array(q_init, dtype=float)
        error = np.zeros(6)
        weights = np.array([1, 1, 1, rotation_weight, rotation_weight, rotation_weight])
        pos_err = np.inf
        for _ in range(iterations):
            jacp, jacr = self.jacobian(q)
            rot = self._site_xmat.reshape(3, 3)
            error[:3] = target_pos - self._site_xpos
            # Small-angle rotation error: half the sum of axis cross products.
            error[3:] = 0.5 * (
                np.cross(rot[:, 0], target_rot[:, 0])
                + np.cross(rot[:, 1], target_rot[:, 1])
                + np.cross(rot[:, 2], target_rot[:, 2])
            )
            pos_err = float(np.linalg.norm(error[:3]))
            if pos_err < tolerance and np.linalg.norm(error[3:]) < 10 * tolerance:
                break
            jac_w = np.vstack([jacp, jacr]) * weights[:, None]
            err_w = error * weights
            dq = jac_w.T @ np.linalg.solve(jac_w @ jac_w.T + damping * np.eye(6), err_w)
            # Limit the step so a far target cannot fling the solution across a singularity.
            norm = np.linalg.norm(dq)
            if norm > 0.5:
                dq *= 0.5 / norm
            q = np.clip(q + dq, self.lower, self.upper)
        return q, pos_err
