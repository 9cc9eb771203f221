"""policy node running a camera policy, in one process: frames in, actions out, fail closed.

An untrained camera checkpoint (``make_untrained_checkpoint(camera=True)``): the node pairs
the newest camera frame with the newest joint state, holds when frames stop, refuses frames
it was not trained on and refuses to configure on another image topic. The test's own
ROS_DOMAIN_ID comes from test/conftest.py; the rclpy_context and executor fixtures destroy
every node added to the executor and shut the context down, also when a test fails.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from policy_world import PolicyWorld, make_policy
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import Image, JointState
from simreal_ros.msg import PolicyUpdate, TaskStatus
from simreal_ros.srv import Rollback

from simreal_ros.adapters.store import AdapterStore
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import WARN
from simreal_ros.nodes.policy import PolicyNode
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.inference import deploy_base
from simreal_ros.policy.spec import SpecConverter
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.torch_checkpoint import load_checkpoint, make_untrained_checkpoint

ROBOT = load_robot_description()
GOAL = np.array([0.6, -0.1, 0.025])
WIDTH, HEIGHT = 96, 72  # CameraSpec()'s, which make_untrained_checkpoint(camera=True) uses
# Rows padded past 3 * width, as some drivers send them: the padding must not reach the policy.
PAD = 16
FRAME = np.random.default_rng(3).integers(0, 256, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)


@pytest.fixture
def camera_base(tmp_path):
    return make_untrained_checkpoint(
        tmp_path / "camera", ROBOT, hidden=(32, 32), version="cam-v1", camera=True
    )


def image_message(frame: np.ndarray, pad: int = PAD) -> Image:
    height, width, _ = frame.shape
    rows = np.full((height, 3 * width + pad), 255, dtype=np.uint8)
    rows[:, : 3 * width] = frame.reshape(height, -1)
    return Image(
        height=height, width=width, encoding="rgb8", step=rows.shape[1], data=rows.tobytes()
    )


class CameraWorld(PolicyWorld):
    """Test-side arm and camera: joint states, the goal and frames on timers; collects the
    node's actions and diagnostics."""

    def __init__(self, rclpy_context, executor, frame: np.ndarray = FRAME) -> None:
        super().__init__(rclpy_context, executor, "fake_camera_arm")
        self.camera = self.node.create_publisher(Image, "/camera/image_raw", qos.SENSOR_DATA)
        self.position = np.asarray(ROBOT.home_position, dtype=float) + 0.05
        self.frame_message = image_message(frame)
        self.camera_on = True  # False: the camera stops publishing
        self.node.create_timer(1.0 / 50.0, self.publish_state)
        self.node.create_timer(1.0 / 30.0, self.publish_frame)

    def observation(self, frame: np.ndarray = FRAME) -> dict:
        return {
            "joint_position": self.position,
            "joint_velocity": np.zeros(len(self.position)),
            "goal_position": GOAL,
            "image": frame,
        }

    def publish_state(self) -> None:
        js = JointState(name=list(ROBOT.joint_names), position=self.position.tolist())
        js.velocity = [0.0] * len(self.position)
        js.header.stamp = self.node.get_clock().now().to_msg()
        self.joints.publish(js)
        status = TaskStatus(task="push")
        status.goal.x, status.goal.y, status.goal.z = GOAL.tolist()
        self.status.publish(status)

    def publish_frame(self) -> None:
        if self.camera_on:
            self.camera.publish(self.frame_message)

    def policy_status(self):
        """The policy node's newest diagnostic status, with its values as a dict."""
        for array in reversed(self.diagnostics):
            for status in array.status:
                if status.name.startswith("policy"):
                    return status, {kv.key: kv.value for kv in status.values}
        return None, {}


def expected_action(base_dir, observation) -> np.ndarray:
    checkpoint = load_checkpoint(base_dir)
    fk = SpecConverter.for_robot(checkpoint.spec, ROBOT).forward_kinematics
    return deploy_base(checkpoint, fk).act(observation)


def topics(node: PolicyNode) -> set[str]:
    return {subscription.topic_name for subscription in node._subscriptions_}


def test_fresh_frames_and_joint_states_give_the_core_policys_commands(
    rclpy_context, executor, camera_base, tmp_path
):
    world = CameraWorld(rclpy_context, executor)
    node = make_policy(rclpy_context, executor, checkpoint=str(camera_base), autostart=True)
    assert node.versions.active_version == "cam-v1"
    # The camera replaces the cube's pose: no /object/pose subscription.
    assert "/camera/image_raw" in topics(node) and "/object/pose" not in topics(node)
    assert wait_for_subscribers(executor, world.camera)
    assert spin_until(executor, lambda: len(world.actions) >= 5, 15.0), node.statistics()
    action = world.actions[-1]
    assert action.policy_version == "cam-v1"
    # The numbers of the core policy on the same joints, goal and frame (row padding dropped).
    np.testing.assert_allclose(
        action.values, expected_action(camera_base, world.observation()), atol=1e-9
    )
    # Another frame, another action: the node acts on what the camera sees.
    other = FRAME[::-1].copy()
    expected_other = expected_action(camera_base, world.observation(other))
    assert not np.allclose(expected_other, action.values, atol=1e-6)
    world.frame_message = image_message(other)
    assert spin_until(
        executor,
        lambda: np.allclose(world.actions[-1].values, expected_other, atol=1e-9),
        10.0,
    )
    statistics = node.statistics()
    assert statistics["refused_frames"] == 0 and statistics["frames_received"] > 0
    # A state checkpoint still reads the cube's pose and no camera (unchanged behaviour).
    state = make_untrained_checkpoint(tmp_path / "state", ROBOT, hidden=(32, 32))
    state_node = PolicyNode(
        context=rclpy_context,
        parameter_overrides=[Parameter("checkpoint", value=str(state))],
    )
    try:
        assert state_node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert "/object/pose" in topics(state_node)
        assert "/camera/image_raw" not in topics(state_node)
        assert "frame_age_ms" not in state_node.statistics()
    finally:
        state_node.destroy_node()


def test_commands_stop_when_frames_stop_and_diagnostics_count_stale_frames(
    rclpy_context, executor, camera_base
):
    world = CameraWorld(rclpy_context, executor)
    node = make_policy(
        rclpy_context,
        executor,
        checkpoint=str(camera_base),
        autostart=True,
        diagnostics_period=0.2,
    )
    assert spin_until(executor, lambda: len(world.actions) >= 5, 15.0), node.statistics()
    world.camera_on = False
    # The joints stay fresh; only the frames age past max_frame_age_s (0.15 s).
    assert spin_until(executor, lambda: node.statistics()["stale_frames"] >= 3, 10.0)
    spin_until(executor, lambda: False, 0.2)  # let in-flight actions land
    acted = len(world.actions)
    assert spin_until(executor, lambda: node.statistics()["stale_frames"] >= 10, 10.0)
    assert len(world.actions) == acted, "acted on a stale camera frame"
    statistics = node.statistics()
    assert statistics["joint_state_age_ms"] < 500.0  # the joint states kept coming
    assert statistics["frame_age_ms"] > 150.0
    assert statistics["skipped_stale_observation"] >= statistics["stale_frames"] - 1

    def reports_stale() -> bool:
        status, values = world.policy_status()
        return (
            status is not None
            and int(values.get("stale_frames", "0")) >= 3
            and "no fresh camera frame" in status.message
        )

    assert spin_until(executor, reports_stale, 5.0), world.policy_status()
    # The camera returns: so do the commands.
    world.camera_on = True
    assert spin_until(executor, lambda: len(world.actions) > acted + 2, 10.0)


def test_a_frame_of_another_resolution_is_refused_and_nothing_is_sent(
    rclpy_context, executor, camera_base
):
    small = np.zeros((48, 64, 3), dtype=np.uint8)
    world = CameraWorld(rclpy_context, executor, frame=small)
    node = make_policy(
        rclpy_context,
        executor,
        checkpoint=str(camera_base),
        autostart=True,
        diagnostics_period=0.2,
    )
    assert wait_for_subscribers(executor, world.camera)
    assert spin_until(executor, lambda: node.statistics()["refused_frames"] >= 5, 10.0)
    # Joint states and the goal arrive, but no frame the policy can use: every tick holds.
    assert spin_until(executor, lambda: node.statistics()["stale_frames"] >= 10, 10.0)
    assert world.actions == [], "acted without a frame of the trained resolution"
    assert node.statistics()["frames_received"] == 0

    def reports_refusal() -> bool:
        status, values = world.policy_status()
        return status is not None and "64x48" in values.get("frame_error", "")

    assert spin_until(executor, reports_refusal, 5.0), world.policy_status()
    status, _ = world.policy_status()
    assert "camera resolution" in status.message and "96x72" in status.message
    assert status.level == WARN
    # The right camera comes back: the refusal clears and commands flow.
    world.frame_message = image_message(FRAME)
    assert spin_until(executor, lambda: len(world.actions) >= 3, 10.0)
    assert node._frame.error == ""


def test_another_image_topic_fails_configure_naming_the_checkpoints(
    rclpy_context, executor, camera_base
):
    node = make_policy(
        rclpy_context, executor, checkpoint=str(camera_base), image_topic="/camera/other"
    )
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    error = node.versions.last_error
    assert "'/camera/image_raw'" in error and "'/camera/other'" in error, error
    assert node.versions.active_version == "" and node.versions.checkpoint is None
    assert node._subscriptions_ == []


def camera_adapter(base_dir, store: AdapterStore, version: str):
    """What the learner does on a camera base: LoRA on the actor's trunk, committed."""
    from peft import LoraConfig, get_peft_model

    base = load_checkpoint(base_dir)
    torch.manual_seed(7)
    peft_actor = get_peft_model(
        copy.deepcopy(base.model.actor),
        LoraConfig(r=4, lora_alpha=8, target_modules=["trunk.0", "trunk.2", "mean_head"]),
    )
    with torch.no_grad():
        for name, parameter in peft_actor.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.3)
    with store.staging(version) as staging:
        peft_actor.save_pretrained(str(staging))
        metadata = ckpt.write_adapter_metadata(staging, base, version, base.version)
        screening = {"promoted": True, "reason": "test"}
        return store.commit(staging, version, metadata, screening, robot=ROBOT)


def test_hot_swap_and_rollback_of_a_camera_policy(rclpy_context, executor, camera_base, tmp_path):
    store = AdapterStore(tmp_path / "store")
    world = CameraWorld(rclpy_context, executor)
    node = make_policy(
        rclpy_context,
        executor,
        checkpoint=str(camera_base),
        autostart=True,
        adapter_store=str(store.root),
    )
    assert spin_until(executor, lambda: len(world.actions) >= 3, 15.0), node.statistics()
    a1 = camera_adapter(camera_base, store, "a1")
    store.activate("a1", "promoted")
    assert wait_for_subscribers(executor, world.updates)
    world.updates.publish(
        PolicyUpdate(
            version="a1",
            parent_version="cam-v1",
            adapter_path=str(a1.path),
            checksum=a1.checksum,
            promoted=True,
            method="bc",
            reason="test",
        )
    )
    assert spin_until(executor, lambda: world.actions[-1].policy_version == "a1", 20.0), (
        node.versions.last_error
    )
    swapped = world.actions[-1].values
    assert not np.allclose(swapped, expected_action(camera_base, world.observation()))
    client = world.node.create_client(Rollback, "/policy/rollback")
    assert client.wait_for_service(timeout_sec=5.0)
    future = client.call_async(Rollback.Request(version=""))
    assert spin_until(executor, future.done, 10.0)
    assert future.result().success, future.result().message
    assert spin_until(executor, lambda: world.actions[-1].policy_version == "cam-v1", 10.0)
    np.testing.assert_allclose(
        world.actions[-1].values, expected_action(camera_base, world.observation()), atol=1e-9
    )
