"""The arm's topics as the observation dict a policy or expert acts on.

/joint_states (reordered to controller order), /object/pose and the task's goal from
/task/status become the dict of the policy spec's ``RAW_FIELDS``, the same dict the sim
env returns; the policy node and the expert driver both build it here.
"""

from __future__ import annotations

import numpy as np

from simreal_ros.robot.joint_order import JointOrder


def joint_arrays(joint_order: JointOrder, msg) -> tuple[np.ndarray, np.ndarray] | None:
    """A JointState's positions and velocities in controller order (zero velocities when it
    carries none); None when it lacks one of the arm's joints."""
    position = joint_order.reorder(msg.name, msg.position)
    if position is None:
        return None
    velocity = joint_order.reorder(msg.name, msg.velocity)
    return position, np.zeros(len(position)) if velocity is None else velocity


def observation_from_messages(
    joints: tuple[np.ndarray, np.ndarray], object_pose, goal
) -> dict[str, np.ndarray]:
    """``joints`` from ``joint_arrays``, the cube's PoseStamped and the goal Point."""
    p, o = object_pose.pose.position, object_pose.pose.orientation
    return {
        "joint_position": np.asarray(joints[0], dtype=np.float64),
        "joint_velocity": np.asarray(joints[1], dtype=np.float64),
        "object_position": np.array([p.x, p.y, p.z]),
        "object_orientation": np.array([o.w, o.x, o.y, o.z]),
        "goal_position": np.array([goal.x, goal.y, goal.z]),
    }
