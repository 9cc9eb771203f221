"""perception: the cube's pose on /object/pose from a camera that sees its marker.

Subscribes /camera/image_raw (rgb8, bgr8 or mono8) and /camera/camera_info (sensor-data
QoS); for each image, ``MarkerPoseEstimator`` (simreal_ros.perception.markers) finds the
marker with the newest camera_info's intrinsics, and the node publishes the cube's centre
as geometry_msgs/PoseStamped on /object/pose in the arm's base frame, stamped with the
image's stamp. The camera's extrinsic comes from the calibration YAML ``extrinsic_file``.

Fails closed: a frame without the marker, one older than ``max_age`` on the node's clock
(sim time in sim) when its pose is ready, one in another camera's frame than the
extrinsic's, or one that cannot be read publishes nothing (the policy node then finds
/object/pose stale and skips its ticks; the safety filter holds the arm), and the reason
goes to /diagnostics (detection rate, latency, last error). An old pose is never sent
with a new stamp.
"""

from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.time import Time
from sensor_msgs.msg import CameraInfo, Image

from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import OK, WARN, diagnostic_array
from simreal_ros.nodes.params import declare_config
from simreal_ros.nodes.runtime import run_node
from simreal_ros.perception.markers import (
    MarkerConfig,
    MarkerPoseEstimator,
    PerceptionCounters,
    grayscale,
    image_array,
    intrinsics_problem,
    load_extrinsic,
)


class PerceptionNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("perception", **kwargs)
        self.config: MarkerConfig = declare_config(self, MarkerConfig)
        extrinsic = load_extrinsic(self.config.extrinsic_file)  # ValueError says what to fix
        if extrinsic.parent_frame != self.config.base_frame:
            raise ValueError(
                f"{self.config.extrinsic_file}: base_T_camera is in frame "
                f"{extrinsic.parent_frame!r}, but poses are published in base_frame "
                f"{self.config.base_frame!r}; calibrate against the arm's base frame."
            )
        self.estimator = MarkerPoseEstimator(self.config, extrinsic)
        self.counters = PerceptionCounters()
        self._info: CameraInfo | None = None
        self._pose = PoseStamped()
        self._pose.header.frame_id = self.config.base_frame
        self._pose_pub = self.create_publisher(PoseStamped, "/object/pose", qos.STATE)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        self.create_subscription(CameraInfo, "/camera/camera_info", self._on_info, qos.SENSOR_DATA)
        self.create_subscription(Image, "/camera/image_raw", self._on_image, qos.SENSOR_DATA)
        # Steady clock: diagnostics keep flowing while sim time is paused.
        self.create_timer(
            self.config.diagnostics_period,
            self._publish_diagnostics,
            clock=Clock(clock_type=ClockType.STEADY_TIME),
        )
        self.get_logger().info(
            f"perception ready: marker {self.config.dictionary} id {self.config.marker_id} "
            f"({self.config.marker_size:g} m) seen by {extrinsic.child_frame}, poses in "
            f"{self.config.base_frame}"
        )

    def _on_info(self, msg: CameraInfo) -> None:
        self._info = msg

    def _on_image(self, msg: Image) -> None:
        start = time.perf_counter()
        outcome, reason = self._pose_from(msg)
        if outcome == "pose":
            self._pose_pub.publish(self._pose)
        elif outcome != "lost":
            self.get_logger().warn(f"no pose: {reason}", throttle_duration_sec=5.0)
        self.counters.count(outcome, reason, time.perf_counter() - start)

    def _pose_from(self, msg: Image) -> tuple[str, str]:
        """(outcome, reason): fill ``self._pose`` from the frame, or say why not."""
        info = self._info
        if info is None:
            return "refused", "no /camera/camera_info yet"
        expected = self.estimator.extrinsic.child_frame
        if msg.header.frame_id != expected:
            return "refused", (
                f"image in frame {msg.header.frame_id!r}, the extrinsic is for {expected!r}"
            )
        if (info.width, info.height) != (msg.width, msg.height):
            return "refused", (
                f"camera_info is for {info.width}x{info.height}, the image is "
                f"{msg.width}x{msg.height}"
            )
        problem = intrinsics_problem(info.distortion_model, info.k, info.d)
        if problem:
            return "refused", problem
        try:
            pixels = image_array(msg.data, msg.width, msg.height, msg.step, msg.encoding)
            gray = grayscale(pixels, msg.encoding)
        except ValueError as error:
            return "refused", str(error)
        detection = self.estimator.estimate(gray, info.k, info.d)
        if detection.pose is None:
            return "lost", detection.reason
        # The age when the pose would go out: detection time counts against it.
        age = (self.get_clock().now() - Time.from_msg(msg.header.stamp)).nanoseconds * 1e-9
        if abs(age) > self.config.max_age:
            side = "old" if age > 0 else "ahead of the node's clock"
            return "stale", f"frame {abs(age):.3f} s {side} (max_age {self.config.max_age:g} s)"
        pose = self._pose
        pose.header.stamp = msg.header.stamp
        p, q = pose.pose.position, pose.pose.orientation
        p.x, p.y, p.z = (float(v) for v in detection.pose.position)
        q.w, q.x, q.y, q.z = (float(v) for v in detection.pose.orientation_wxyz)
        return "pose", ""

    def _publish_diagnostics(self) -> None:
        healthy, message, values = self.counters.report()
        self._diag_pub.publish(
            diagnostic_array(
                self,
                "perception: marker",
                self.estimator.extrinsic.child_frame,
                OK if healthy else WARN,
                message,
                values,
            )
        )


def main(args=None) -> None:
    run_node(PerceptionNode, args)


if __name__ == "__main__":
    main()
