"""The arm's topics as the observation dict a policy or expert acts on.

/joint_states (reordered to controller order), /object/pose and the task's goal from
/task/status become the dict of the policy spec's ``RAW_FIELDS``, the same dict the sim
env returns; the policy node and the expert driver both build it here.
"""

from __future__ import annotations

import time

import numpy as np
from rclpy.serialization import deserialize_message

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


class NewestMessage:
    """A raw subscription's newest message, deserialized once when first read: at up to
    500 Hz only the newest one per control tick is ever used. Call it as the callback."""

    def __init__(self, msg_type) -> None:
        self.msg_type = msg_type
        self.received = 0.0  # time.monotonic() of the newest arrival; 0: none yet
        self._raw: bytes | None = None
        self._raw_read: bytes | None = None
        self._msg = None

    def __call__(self, raw: bytes) -> None:
        self._raw = raw
        self.received = time.monotonic()

    def read(self):
        raw = self._raw
        if raw is not None and raw is not self._raw_read:
            self._msg = deserialize_message(raw, self.msg_type)
            self._raw_read = raw
        return self._msg

    def age_ms(self, now: float) -> float:
        return (now - self.received) * 1000.0 if self.received else float("nan")
