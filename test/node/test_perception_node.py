"""perception node in one process: rendered camera frames in, /object/pose out, and
nothing out for a hidden marker, a stale frame or another camera's frame."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.parameter import Parameter
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import CameraInfo, Image

from simreal_ros import resources
from simreal_ros.nodes import qos
from simreal_ros.nodes.perception import PerceptionNode
from simreal_ros.perception import SIM_CAMERA, SIM_CAMERA_CALIBRATION, SIM_CAMERA_SIZE
from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sim.rendering import CameraRenderer, ensure_headless_gl

FRAME = f"{SIM_CAMERA}_camera_optical_frame"


@pytest.fixture(scope="module")
def camera():
    """The sim scene's workspace camera over the simreal_arm scene at home."""
    ensure_headless_gl()
    physics = ArmPhysics(load_robot_description("simreal_arm"))
    physics.reset(cube_position=np.array([0.52, 0.04, 0.025]), cube_yaw=0.25)
    renderer = CameraRenderer(physics, SIM_CAMERA, *SIM_CAMERA_SIZE)
    yield physics, renderer
    renderer.close()


class Camera:
    """Test side: publishes frames as a camera driver does, collects poses and diagnostics."""

    def __init__(self, context, executor, renderer) -> None:
        self.node = Node("test_camera", context=context)
        executor.add_node(self.node)
        self.executor = executor
        self.image_pub = self.node.create_publisher(Image, "/camera/image_raw", qos.SENSOR_DATA)
        self.info_pub = self.node.create_publisher(
            CameraInfo, "/camera/camera_info", qos.SENSOR_DATA
        )
        self.poses: list[PoseStamped] = []
        self.node.create_subscription(PoseStamped, "/object/pose", self.poses.append, qos.STATE)
        self.diagnostics: list[DiagnosticArray] = []
        self.node.create_subscription(
            DiagnosticArray, "/diagnostics", self.diagnostics.append, qos.STATUS
        )
        self.info = CameraInfo(width=renderer.width, height=renderer.height)
        self.info.header.frame_id = FRAME
        self.info.distortion_model = "plumb_bob"
        self.info.d = [0.0] * 5
        self.info.k = renderer.camera_matrix().ravel().tolist()

    def frame(self, pixels: np.ndarray, age_s: float = 0.0, frame_id: str = FRAME) -> Image:
        image = Image(height=pixels.shape[0], width=pixels.shape[1], encoding="rgb8")
        image.step = 3 * image.width
        image.data = pixels.tobytes()
        image.header.frame_id = frame_id
        stamp = self.node.get_clock().now() - Duration(seconds=age_s)
        image.header.stamp = stamp.to_msg()
        return image

    def send_info(self, perception: PerceptionNode) -> None:
        def taken() -> bool:
            self.info_pub.publish(self.info)
            return spin_until(self.executor, lambda: perception._info is not None, 0.3)

        assert spin_until(self.executor, taken, 10.0), "the node never took camera_info"

    def send(self, perception: PerceptionNode, image: Image) -> None:
        """Publish until the node has taken the frame (best effort: a sample may drop)."""
        frames = perception.counters.frames

        def taken() -> bool:
            if perception.counters.frames > frames:
                return True
            self.image_pub.publish(image)
            return spin_until(self.executor, lambda: perception.counters.frames > frames, 0.3)

        assert spin_until(self.executor, taken, 10.0), "the node never took the frame"


def make_perception(context, executor, **params) -> PerceptionNode:
    extrinsic = str(resources.data_path("config", SIM_CAMERA_CALIBRATION))
    overrides = [Parameter("extrinsic_file", value=extrinsic), Parameter("max_age", value=0.5)]
    overrides += [Parameter(name, value=value) for name, value in params.items()]
    node = PerceptionNode(context=context, parameter_overrides=overrides)
    executor.add_node(node)
    return node


def test_a_seen_marker_gives_the_cube_pose_and_a_hidden_one_nothing(
    rclpy_context, executor, camera
):
    physics, renderer = camera
    perception = make_perception(rclpy_context, executor, diagnostics_period=0.1)
    test = Camera(rclpy_context, executor, renderer)
    assert wait_for_subscribers(executor, test.image_pub)
    test.send_info(perception)
    seen = renderer.render()
    image = test.frame(seen)
    test.send(perception, image)
    assert spin_until(executor, lambda: test.poses, 5.0)
    pose = test.poses[-1]
    assert pose.header.frame_id == "base_link"
    assert pose.header.stamp == image.header.stamp  # the image's own stamp, never a newer one
    p, q = pose.pose.position, pose.pose.orientation
    assert np.linalg.norm([p.x, p.y, p.z] - physics.object_position()) < 0.005
    assert abs(np.dot([q.w, q.x, q.y, q.z], physics.object_orientation())) > 0.99985  # 2 deg

    # Hidden (the cube turned over: its marker faces the table): nothing is published.
    top = physics.data.qpos[physics.cube_qpos + 3 : physics.cube_qpos + 7].copy()
    physics.data.qpos[physics.cube_qpos + 3 : physics.cube_qpos + 7] = [0.0, 1.0, 0.0, 0.0]
    mujoco.mj_forward(physics.model, physics.data)
    hidden = renderer.render()
    physics.data.qpos[physics.cube_qpos + 3 : physics.cube_qpos + 7] = top
    mujoco.mj_forward(physics.model, physics.data)
    test.send(perception, test.frame(hidden))
    # A stale frame (older than max_age on the node's clock) and another camera's: nothing.
    test.send(perception, test.frame(seen, age_s=2.0))
    test.send(perception, test.frame(seen, frame_id="front_camera_optical_frame"))
    spin_until(executor, lambda: len(test.poses) > 1, 0.3)  # anything in flight lands
    assert len(test.poses) == 1, "published a pose for a frame it must refuse"
    counters = perception.counters
    assert (counters.poses, counters.lost, counters.stale, counters.refused) == (1, 1, 1, 1)
    assert "front_camera_optical_frame" in counters.last_error

    def reported() -> dict:
        mine = [s for d in test.diagnostics for s in d.status if s.name == "perception: marker"]
        return {kv.key: kv.value for kv in mine[-1].values} if mine else {}

    assert spin_until(executor, lambda: reported().get("frames") == "4", 5.0)
    values = reported()
    assert values["detection_rate"] == "0.250" and "latency_p50_ms" in values
    assert "front_camera_optical_frame" in values["last_error"]


def test_an_extrinsic_in_another_frame_than_the_poses_is_refused(rclpy_context, executor):
    with pytest.raises(ValueError, match="base_T_camera is in frame 'base_link', but poses"):
        make_perception(rclpy_context, executor, base_frame="world")
