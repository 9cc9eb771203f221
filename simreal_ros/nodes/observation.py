"""The arm's topics as the observation dict a policy or expert acts on.

/joint_states (reordered to controller order), /object/pose and the task's goal from
/task/status become the dict of the policy spec's ``RAW_FIELDS``, the same dict the sim
env returns; the policy node and the expert driver both build it here. A camera policy's
dict has no cube pose but the newest camera frame (``NewestFrame``) as ``image``.
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
    joints: tuple[np.ndarray, np.ndarray], object_pose, goal, image: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """``joints`` from ``joint_arrays``, the cube's PoseStamped (None for a camera policy,
    which sees the cube only in ``image``, an (H, W, 3) uint8 RGB frame) and the goal Point."""
    observation = {
        "joint_position": np.asarray(joints[0], dtype=np.float64),
        "joint_velocity": np.asarray(joints[1], dtype=np.float64),
    }
    if object_pose is not None:
        p, o = object_pose.pose.position, object_pose.pose.orientation
        observation["object_position"] = np.array([p.x, p.y, p.z])
        observation["object_orientation"] = np.array([o.w, o.x, o.y, o.z])
    observation["goal_position"] = np.array([goal.x, goal.y, goal.z])  # RAW_FIELDS' order
    if image is not None:
        observation["image"] = image
    return observation


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


class NewestFrame:
    """A camera policy's newest frame, copied into one preallocated (H, W, 3) uint8 buffer
    (``image``). A frame of another resolution or encoding than the checkpoint's
    (``CameraSpec.check_frame``), or with too few bytes, is refused and counted, never
    resized: the buffer keeps the last good frame, which ages until the policy holds.
    Call it as the sensor_msgs/Image subscription's callback; it must not run during a
    tick (the node's default callback group is mutually exclusive)."""

    def __init__(self, camera) -> None:
        self.camera = camera
        self.image = np.zeros((camera.height, camera.width, 3), dtype=np.uint8)
        self.received = 0.0  # time.monotonic() of the newest good frame; 0: none yet
        self.frames = self.refused = 0
        self.error = ""  # why the newest frame was refused; cleared by a good one

    def __call__(self, msg) -> None:
        try:
            rows = self._pixels(msg)
        except ValueError as error:
            self.refused += 1
            self.error = str(error)
            return
        np.copyto(self.image, rows)
        self.received = time.monotonic()
        self.frames += 1
        self.error = ""

    def _pixels(self, msg) -> np.ndarray:
        """A view of the frame's pixels as (H, W, 3) (rows may be padded to ``step``)."""
        camera = self.camera
        camera.check_frame(msg.width, msg.height, msg.encoding)
        row_bytes = 3 * camera.width
        data = np.frombuffer(msg.data, dtype=np.uint8)
        if msg.step < row_bytes or data.size < msg.step * camera.height:
            raise ValueError(
                f"camera frame: {data.size} bytes with step {msg.step} cannot hold "
                f"{camera.height} rows of {row_bytes} bytes ({camera.encoding}); the camera "
                "driver sends broken frames."
            )
        rows = data[: msg.step * camera.height].reshape(camera.height, msg.step)
        return rows[:, :row_bytes].reshape(camera.height, camera.width, 3)

    def age_s(self, now: float) -> float:
        return now - self.received if self.received else float("inf")

    def age_ms(self, now: float) -> float:
        return (now - self.received) * 1000.0 if self.received else float("nan")
