"""policy: lifecycle node that runs the arm policy at the control rate and hot-swaps adapters.

Transitions
    configure   load the base checkpoint and check its conventions against the robot
                description and the configured rate (a mismatch fails the transition,
                naming the field); open the adapter store; subscribe
    activate    start the control timer: every tick publishes /policy/action (a lifecycle
                publisher) from the newest /joint_states, /object/pose and /task/status goal
                (a camera policy: the newest camera frame instead of /object/pose)
    deactivate  stop the timer (nothing is published)
    cleanup     drop subscriptions and free the model

The node never imports torch or peft (numpy weights, numpy LoRA merge), so neither start-up
nor a hot swap holds the GIL for seconds of imports. Hot swap, the version cache and
~/rollback are policy/runtime.py's; a refused load or rollback keeps the running policy and
says why in the log and on /diagnostics.

A camera checkpoint (its spec has a ``camera``) makes this a camera policy: it subscribes to
the spec's image topic (the ``image_topic`` parameter must name the same one, or configure
fails) and not to /object/pose. Each tick pairs the newest frame with the newest joint
state; no frame yet, or one older than the spec's ``max_frame_age_s``, skips the tick like
a stale joint state (the safety filter holds the arm). A frame of another resolution or
encoding is refused, counted and reported (never resized). Adapters of a camera base are
camera policies too, so hot swap and rollback are unchanged.
"""

from __future__ import annotations

import os

# One OpenBLAS thread, set before numpy loads (in the node's own process): a camera policy's
# small convolution products took ~30 ms instead of ~3 ms per tick when OpenBLAS spread them
# over two cores that other processes kept busy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import State, TransitionCallbackReturn
from sensor_msgs.msg import Image, JointState

from simreal_ros.msg import PolicyAction, PolicyUpdate, TaskStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import OK, WARN, diagnostic_array
from simreal_ros.nodes.lifecycle import AutostartLifecycleNode
from simreal_ros.nodes.observation import (
    NewestFrame,
    NewestMessage,
    joint_arrays,
    observation_from_messages,
)
from simreal_ros.nodes.params import declare_config, declare_robot
from simreal_ros.nodes.runtime import run_node
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.config import PolicyNodeConfig
from simreal_ros.policy.runtime import ControlTicks, PolicyVersions, diagnostic_report
from simreal_ros.robot.joint_order import JointOrder
from simreal_ros.srv import Rollback


class PolicyNode(AutostartLifecycleNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("policy", **kwargs)
        self.config: PolicyNodeConfig = declare_config(
            self, PolicyNodeConfig, apply=self._apply_config
        )
        self._explore_rng = np.random.default_rng()
        self.robot = declare_robot(self)
        # The base, the adapter store and the merged versions (policy/runtime.py).
        self.versions = PolicyVersions(self.robot, warn=self.get_logger().warning)
        # Newest observations (deserialized at the tick, once; reordered to controller order).
        self._forget_observations()
        self._joint_order = JointOrder(self.robot.joint_names)
        self._timer = None
        self.ticks = ControlTicks()
        self.stale_frames = 0  # ticks a camera policy skipped for want of a fresh frame
        self._subscriptions_ = []
        self._action_pub = None
        self._action = PolicyAction(joint_names=list(self.robot.joint_names))
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        # Steady clock: diagnostics keep flowing while sim time is paused (lockstep).
        self._diag_timer = self.create_timer(
            self.config.diagnostics_period,
            self._publish_diagnostics,
            clock=Clock(clock_type=ClockType.STEADY_TIME),
        )
        group = MutuallyExclusiveCallbackGroup()  # a rollback waits on the loader thread
        self.create_service(Rollback, "~/rollback", self._on_rollback, callback_group=group)
        self.autostart(self.config.autostart)

    def _apply_config(self, config: PolicyNodeConfig) -> None:
        if config.explore != self.config.explore:
            self.get_logger().info(f"exploration {'on' if config.explore else 'off'}")
        self.config = config

    # --- lifecycle -------------------------------------------------------------------

    def _checkpoint_dir(self) -> Path:
        if self.config.checkpoint:
            return Path(self.config.checkpoint).expanduser()
        return ckpt.shipped_checkpoint(self.config.task)

    def on_configure(self, state: State) -> TransitionCallbackReturn:
        rate = self.config.control_rate_hz or None
        try:  # any failure here is said in the log and on /diagnostics, never dropped
            directory = self._checkpoint_dir()
            self.versions.configure(directory, rate, self.config.adapter_store)
            camera = self.versions.checkpoint.spec.camera
            if camera is not None:
                # A node wired to another camera than it was trained on must not start.
                camera.check_topic(self.config.image_topic or camera.image_topic)
        except Exception as error:
            self.versions.release()  # a refused camera topic: drop the loaded base too
            self.versions.last_error = f"configure refused: {error}"
            self.get_logger().error(self.versions.last_error)
            self._publish_diagnostics()
            return TransitionCallbackReturn.FAILURE
        if self.versions.last_error:  # the store's current version fell back to the base
            self.get_logger().error(self.versions.last_error)
        checkpoint = self.versions.checkpoint
        self.ticks.period_ns = round(1e9 / checkpoint.spec.control_rate_hz)
        action = (PolicyAction, "/policy/action", qos.COMMAND)
        self._action_pub = self.create_lifecycle_publisher(*action)
        newest = [
            (JointState, "/joint_states", self._joints, qos.SENSOR_DATA),
            (TaskStatus, "/task/status", self._status, qos.STATUS),
        ]
        camera = checkpoint.spec.camera
        if camera is None:  # a camera policy sees the cube in its frames
            newest.append((PoseStamped, "/object/pose", self._object, qos.SENSOR_DATA))
        self._subscriptions_ = [self.create_subscription(*topic, raw=True) for topic in newest]
        if camera is not None:
            self._frame = NewestFrame(camera)
            image = (Image, camera.image_topic, self._on_frame, qos.SENSOR_DATA)
            self._subscriptions_.append(self.create_subscription(*image))
        updates = (PolicyUpdate, "/learner/policy_update", self._on_policy_update, qos.LATCHED)
        self._subscriptions_.append(self.create_subscription(*updates))
        self.get_logger().info(f"configured: running {self.versions.summary()}")
        return super().on_configure(state)

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        period_ns = self.ticks.period_ns
        if self.versions.checkpoint is None or period_ns <= 0:
            self.versions.last_error = "activate refused: not configured (no checkpoint)."
            self._say(False, self.versions.last_error)
            return TransitionCallbackReturn.FAILURE
        self.ticks.start(self.get_clock().now().nanoseconds)
        self._timer = self.create_timer(period_ns / 1e9, self._on_tick)
        what = f"publishing /policy/action at {1e9 / period_ns:g} Hz"
        self.get_logger().info(f"active: {what}, running {self.versions.source}")
        return super().on_activate(state)  # enables the lifecycle publisher

    def _halt(self) -> None:
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None

    def _release(self) -> None:
        self._halt()
        for subscription in self._subscriptions_:
            self.destroy_subscription(subscription)
        self._subscriptions_ = []
        if self._action_pub is not None:
            self.destroy_lifecycle_publisher(self._action_pub)
            self._action_pub = None
        self._action = PolicyAction(joint_names=list(self.robot.joint_names))
        self.versions.release()
        self._forget_observations()

    def _forget_observations(self) -> None:
        self._joints = NewestMessage(JointState)
        self._object = NewestMessage(PoseStamped)
        self._status = NewestMessage(TaskStatus)
        self._frame: NewestFrame | None = None  # a camera policy's, from configure
        self._frame_error_logged = ""

    def destroy_node(self) -> None:
        self.versions.shutdown()
        super().destroy_node()

    # --- observations and the control tick ---------------------------------------------

    def _joint_arrays(self, msg: JointState) -> tuple[np.ndarray, np.ndarray] | None:
        arrays = joint_arrays(self._joint_order, msg)
        missing = [] if arrays is not None else self._joint_order.index(msg.name)[1]
        if missing:
            self.get_logger().error(
                f"/joint_states lacks joint(s) {missing}; the policy needs all of "
                f"{list(self.robot.joint_names)}. Ignoring these messages.",
                throttle_duration_sec=5.0,
            )
        return arrays

    def _on_frame(self, msg: Image) -> None:
        frame = self._frame
        if frame is None:
            return
        frame(msg)
        if frame.error and frame.error != self._frame_error_logged:  # once per reason
            self._frame_error_logged = frame.error
            self.get_logger().error(f"camera frame refused, the policy holds: {frame.error}")

    def _on_tick(self) -> None:
        policy = self.versions.running  # one read: a swap lands between ticks, not inside
        if policy is None or self._action_pub is None:
            return
        ticks = self.ticks
        sequence = ticks.next_sequence(self.get_clock().now().nanoseconds)
        frame = self._frame
        joint_msg, status_msg = self._joints.read(), self._status.read()
        object_msg = self._object.read() if frame is None else None
        joints = None if joint_msg is None else self._joint_arrays(joint_msg)
        have_all = joints is not None and status_msg is not None
        now = time.monotonic()
        if frame is None:
            have_all = have_all and object_msg is not None
            # The older of the joints and the cube's pose: a perception node that loses the
            # marker stops publishing, and the arm must not act on its last pose.
            age_s = now - min(self._joints.received, self._object.received)
        else:
            age_s = now - self._joints.received
        if not ticks.observations_ready(have_all, age_s, self.config.max_observation_age):
            return
        # The camera fails closed the same way: no frame yet or a stale one skips the tick.
        if frame is not None and not ticks.observations_ready(
            frame.received > 0.0, frame.age_s(now), frame.camera.max_frame_age_s
        ):
            self.stale_frames += 1
            return
        image = None if frame is None else frame.image
        observation = observation_from_messages(joints, object_msg, status_msg.goal, image)
        start = time.perf_counter()
        config = self.config  # one read: a parameter change lands between ticks
        try:
            rng = self._explore_rng if config.explore else None
            target = policy.act(observation, config.exploration_std_max, rng)
        except ValueError as error:
            ticks.act_errors += 1
            self.get_logger().error(f"no action this tick: {error}", throttle_duration_sec=2.0)
            return
        ticks.inference_us.append((time.perf_counter() - start) * 1e6)
        msg = self._action  # one message, refilled: publish() serializes it at once
        msg.header.stamp, msg.policy_version = joint_msg.header.stamp, policy.version
        msg.sequence, msg.values = sequence, target.tolist()
        self._action_pub.publish(msg)

    # --- versions: hot swap and rollback -----------------------------------------------

    def _on_policy_update(self, msg: PolicyUpdate) -> None:
        if not msg.promoted:
            self.get_logger().info(f"candidate {msg.version} not promoted: {msg.reason}")
            return
        if self.versions.active_version == msg.version:
            return  # a latched update we already run
        self.get_logger().info(f"loading promoted adapter {msg.version} from {msg.adapter_path}")
        loading = self.versions.announce(msg.version, msg.adapter_path, msg.checksum)
        loading.add_done_callback(self._finish_swap)

    def _finish_swap(self, future: Future) -> None:
        self._say(*self.versions.finish_swap(future))

    def _say(self, done: bool, message: str) -> None:
        # rclpy refuses two severities from one call site: two calls.
        if done:
            self.get_logger().info(message)
        else:
            self.get_logger().error(message)

    def _on_rollback(self, request: Rollback.Request, response: Rollback.Response):
        response.success, response.message = self.versions.rollback_request(request.version)
        self._say(response.success, response.message)
        response.active_version = self.versions.active_version
        return response

    # --- diagnostics -------------------------------------------------------------------

    def statistics(self) -> dict[str, float]:
        now = time.monotonic()
        frame = self._frame
        if frame is None:
            cube = {"object_pose_age_ms": self._object.age_ms(now)}
        else:  # a camera policy reads no cube pose
            cube = {
                "frame_age_ms": frame.age_ms(now),
                "stale_frames": self.stale_frames,
                "frames_received": frame.frames,
                "refused_frames": frame.refused,
            }
        return {
            **self.ticks.statistics(),
            "joint_state_age_ms": self._joints.age_ms(now),
            **cube,
            "task_status_age_ms": self._status.age_ms(now),
            "swaps": self.versions.swaps,
        }

    def _publish_diagnostics(self) -> None:
        configured = self.versions.checkpoint is not None
        state = "active" if self._timer else ("configured" if configured else "unconfigured")
        healthy, message, values = diagnostic_report(state, self.versions, self.statistics())
        frame = self._frame
        if frame is not None:
            values["frame_error"] = frame.error
            max_age_s, now = frame.camera.max_frame_age_s, time.monotonic()
            if frame.error:  # the camera is wired wrong: say so, the policy holds
                healthy = False
                message = f"camera frames refused ({frame.refused}): {frame.error}"
            elif state == "active" and frame.age_s(now) > max_age_s:
                healthy = False
                newest = f"{frame.age_ms(now):.0f} ms old" if frame.received else "none yet"
                message = (
                    f"no fresh camera frame on {frame.camera.image_topic} (newest: {newest}; "
                    f"max {max_age_s * 1000:.0f} ms): the policy holds the arm"
                )
            if self.versions.last_error:  # a refused load or rollback is said first
                message = self.versions.last_error
        level = OK if healthy else WARN
        name = "policy: inference"
        self._diag_pub.publish(
            diagnostic_array(self, name, self.robot.name, level, message, values)
        )


def main(args=None) -> None:
    run_node(PolicyNode, args)


if __name__ == "__main__":
    main()
