"""sim_bridge: the MuJoCo arm and task, speaking the topics a ros2_control arm speaks.

Publishes /joint_states (controller joint order, SI units), /object/pose (unless
``publish_object_pose`` is off), /task/status, /clock and, if ``camera`` is on,
/camera/image_raw + /camera/camera_info. Consumes
/forward_position_controller/commands (std_msgs/Float64MultiArray, absolute position
targets in controller joint order) like ros2_control's forward_command_controller: a
command of the wrong size or with non-finite values is rejected with a logged error and
never applied.

Transitions
    configure   build the simulation (task, dynamics profile), publishers, services and
                the command subscription
    activate    reset the first episode (``seed``, ``condition``) and, free-running,
                start the physics thread
    deactivate  stop the physics thread; commands are refused while inactive
    cleanup     free the simulation and the ROS entities

Services: ~/reset (ResetEpisode), ~/pause (SetBool), ~/step (StepSim; lockstep or paused),
~/set_dynamics (SetDynamics), ~/get_dynamics (GetDynamics). The real_twin profile is a
stand-in for the physical arm, never the physical arm.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.lifecycle import State, TransitionCallbackReturn
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool

from simreal_ros.msg import TaskStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import OK, WARN, diagnostic_array
from simreal_ros.nodes.lifecycle import AutostartLifecycleNode
from simreal_ros.nodes.params import declare_config, declare_robot
from simreal_ros.nodes.runtime import run_node
from simreal_ros.sim.bridge import BridgeSink, SimBridgeConfig, SimBridgeCore, TaskStatusData
from simreal_ros.srv import GetDynamics, ResetEpisode, SetDynamics, StepSim

COMMAND_TOPIC = "/forward_position_controller/commands"
MAX_STEPS_PER_CALL = 500_000  # 1000 sim seconds; keeps a typo from freezing the node


def _stamp(seconds: float, stamp: Time) -> Time:
    nanoseconds = round(seconds * 1e9)
    stamp.sec, stamp.nanosec = divmod(nanoseconds, 1_000_000_000)
    return stamp


class SimBridgeNode(AutostartLifecycleNode, BridgeSink):
    def __init__(self, **kwargs) -> None:
        super().__init__("sim_bridge", **kwargs)
        self.robot = declare_robot(self)
        self.config: SimBridgeConfig = declare_config(
            self, SimBridgeConfig, apply=self._apply_config
        )
        self.core: SimBridgeCore | None = None
        self._active = False
        self._own_publishers: list = []
        self._own_services: list = []
        self._own_subscriptions: list = []
        self._camera_thread: threading.Thread | None = None
        self._camera_stop = threading.Event()
        self._camera_error = ""
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        self._diag_timer = self.create_timer(
            self.config.diagnostics_period, self._publish_diagnostics
        )
        self.autostart(self.config.autostart)

    # ------------------------------------------------------------- lifecycle
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        try:
            self.core = SimBridgeCore(self.config, self, self.robot)
        except (ValueError, OSError) as error:
            self.get_logger().error(f"configure refused: {error}")
            return TransitionCallbackReturn.FAILURE
        robot = self.core.robot
        self._joint_msg = JointState()
        self._joint_msg.name = list(robot.joint_names)
        # The message keeps its three sequence buffers; each publish overwrites them in
        # place through numpy views (no allocation on the publishing path).
        zeros = [0.0] * robot.num_joints
        msg = self._joint_msg
        msg.position, msg.velocity, msg.effort = list(zeros), list(zeros), list(zeros)
        self._joint_views = [
            np.frombuffer(buffer, dtype=np.float64)
            for buffer in (msg.position, msg.velocity, msg.effort)
        ]
        self._pose_msg = PoseStamped()
        self._pose_msg.header.frame_id = self.config.base_frame
        self._status_msg = TaskStatus()
        self._status_msg.header.frame_id = self.config.base_frame
        self._clock_msg = Clock()
        # Lifecycle publishers: what the arm's drivers publish goes out only while active.
        publisher = self.create_lifecycle_publisher
        self._joint_pub = publisher(JointState, "/joint_states", qos.STATE)
        self._status_pub = publisher(TaskStatus, "/task/status", qos.STATUS)
        self._clock_pub = publisher(Clock, "/clock", qos.STATE)
        self._own_publishers = [self._joint_pub, self._status_pub, self._clock_pub]
        self._pose_pub = None  # off: a perception node publishes /object/pose
        if self.config.publish_object_pose:
            self._pose_pub = publisher(PoseStamped, "/object/pose", qos.STATE)
            self._own_publishers.append(self._pose_pub)
        self._own_subscriptions = [
            self.create_subscription(
                Float64MultiArray, COMMAND_TOPIC, self._on_command, qos.COMMAND
            )
        ]
        self._own_services = [
            self.create_service(ResetEpisode, "~/reset", self._on_reset),
            self.create_service(SetBool, "~/pause", self._on_pause),
            self.create_service(StepSim, "~/step", self._on_step),
            self.create_service(SetDynamics, "~/set_dynamics", self._on_set_dynamics),
            self.create_service(GetDynamics, "~/get_dynamics", self._on_get_dynamics),
        ]
        if self.config.camera:
            self._image_pub = publisher(Image, "/camera/image_raw", qos.SENSOR_DATA)
            self._info_pub = publisher(CameraInfo, "/camera/camera_info", qos.SENSOR_DATA)
            self._own_publishers += [self._image_pub, self._info_pub]
        profile = self.core.env.profile
        label = " (a stand-in for the physical arm)" if profile.is_stand_in else ""
        self.get_logger().info(
            f"configured: task {self.config.task}, profile {profile.name}{label} on "
            f"{profile.engine}, "
            f"{self.config.mode}, /joint_states at {self.config.joint_state_rate_hz:g} Hz"
        )
        return super().on_configure(state)

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        assert self.core is not None
        result = super().on_activate(state)  # the publishers go live before the first reset
        if result != TransitionCallbackReturn.SUCCESS:
            return result
        self.core.reset(self.config.seed, self.config.condition)
        self._active = True
        self.core.start()
        if self.config.camera:
            self._camera_stop.clear()
            self._camera_thread = threading.Thread(
                target=self._camera_loop, name="sim-camera", daemon=True
            )
            self._camera_thread.start()
        self.get_logger().info(
            f"active: episode {self.core.episode_id}"
            + (
                f", real-time factor {self.config.real_time_factor:g}"
                if self.config.mode == "free_running"
                else ", lockstep (advance with ~/step)"
            )
        )
        return result

    def _halt(self) -> None:
        self._active = False
        if self.core is not None:
            self.core.stop()
        self._camera_stop.set()
        if self._camera_thread is not None:
            self._camera_thread.join(timeout=5.0)
            self._camera_thread = None

    def _release(self) -> None:
        self._halt()
        for subscription in self._own_subscriptions:
            self.destroy_subscription(subscription)
        for service in self._own_services:
            self.destroy_service(service)
        for publisher in self._own_publishers:
            self.destroy_lifecycle_publisher(publisher)
        self._own_publishers, self._own_services, self._own_subscriptions = [], [], []
        self.core = None

    def destroy_node(self) -> None:
        self._halt()
        super().destroy_node()

    # -------------------------------------------------- sink: core → messages
    def joint_state(self, stamp, position, velocity, effort) -> None:
        msg = self._joint_msg
        _stamp(stamp, msg.header.stamp)
        views = self._joint_views
        views[0][:], views[1][:], views[2][:] = position, velocity, effort
        self._joint_pub.publish(msg)

    def object_pose(self, stamp, position, orientation_wxyz) -> None:
        if self._pose_pub is None:
            return
        msg = self._pose_msg
        _stamp(stamp, msg.header.stamp)
        p, q = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z = float(position[0]), float(position[1]), float(position[2])
        q.w, q.x = float(orientation_wxyz[0]), float(orientation_wxyz[1])
        q.y, q.z = float(orientation_wxyz[2]), float(orientation_wxyz[3])
        self._pose_pub.publish(msg)

    def task_status(self, stamp, status: TaskStatusData) -> None:
        msg = self._status_msg
        _stamp(stamp, msg.header.stamp)
        msg.episode_id = status.episode_id
        msg.task = status.task
        msg.condition = status.condition
        msg.seed = int(status.seed)
        msg.step = int(status.step)
        msg.goal.x, msg.goal.y, msg.goal.z = (float(v) for v in status.goal)
        msg.reward = float(status.reward)
        msg.success = status.success
        msg.done = status.done
        msg.truncated = status.truncated
        self._status_pub.publish(msg)

    def clock(self, stamp) -> None:
        _stamp(stamp, self._clock_msg.clock)
        self._clock_pub.publish(self._clock_msg)

    # ------------------------------------------------------------ callbacks
    def _on_command(self, msg: Float64MultiArray) -> None:
        core = self.core
        if core is None or not self._active:
            self.get_logger().warn(
                "command ignored: sim_bridge is not active (activate it first)",
                throttle_duration_sec=1.0,
            )
            return
        try:
            core.submit_command(msg.data)
        except ValueError as error:
            self.get_logger().error(
                f"rejected command on {COMMAND_TOPIC}: {error}", throttle_duration_sec=1.0
            )

    def _on_reset(self, request, response):
        if self.core is None:
            response.success, response.message = False, "not configured; configure first"
            return response
        try:
            response.episode_id = self.core.reset(
                request.seed, request.condition, request.episode_id
            )
        except ValueError as error:
            response.success, response.message = False, str(error)
            return response
        _stamp(self.core.episode_start_time, response.stamp)
        response.success = True
        response.message = f"episode {response.episode_id} ({self.core.env.condition})"
        return response

    def _on_pause(self, request, response):
        if self.core is None:
            response.success, response.message = False, "not configured; configure first"
            return response
        self.core.set_paused(request.data)
        response.success = True
        response.message = "paused" if request.data else "running"
        return response

    def _on_step(self, request, response):
        core = self.core
        response.success = False
        if core is None or not self._active:
            response.message = "not active; activate sim_bridge first"
        elif self.config.mode == "free_running" and not core.paused:
            response.message = "free-running and not paused: pause first or use lockstep mode"
        elif request.steps > MAX_STEPS_PER_CALL:
            response.message = f"steps={request.steps} is above {MAX_STEPS_PER_CALL} per call"
        else:
            core.step(request.steps)
            core.emit_clock()  # sim-time nodes see where stepping stopped
            response.success = True
            response.message = f"stepped {request.steps}"
        response.sim_time = core.sim_time if core is not None else 0.0
        return response

    def _on_set_dynamics(self, request, response):
        if self.core is None:
            response.success, response.message = False, "not configured; configure first"
            return response
        if len(request.names) != len(request.values):
            response.success = False
            response.message = (
                f"{len(request.names)} names but {len(request.values)} values; "
                "give one value per name"
            )
            return response
        try:
            self.core.set_dynamics(
                request.profile, dict(zip(request.names, request.values, strict=True))
            )
        except ValueError as error:
            response.success, response.message = False, str(error)
            return response
        profile, _ = self.core.get_dynamics()
        response.success = True
        response.message = f"profile {profile.name}, {len(request.names)} override(s)"
        return response

    def _on_get_dynamics(self, request, response):
        if self.core is None:
            return response
        profile, values = self.core.get_dynamics()
        _stamp(self.core.sim_time, response.sim_time)
        response.profile = profile.name
        response.stand_in = profile.is_stand_in
        response.names = list(values)
        response.values = [float(v) for v in values.values()]
        return response

    def _apply_config(self, config: SimBridgeConfig) -> None:
        """The one dynamic setting, real_time_factor, applies at once."""
        self.config = config
        core = self.core
        if core is not None and core.real_time_factor != config.real_time_factor:
            core.real_time_factor = config.real_time_factor
            core.set_paused(core.paused)  # restart the pacing schedule

    # --------------------------------------------------------------- camera
    def _camera_loop(self) -> None:
        import mujoco

        from simreal_ros.sim.rendering import CameraRenderer, ensure_headless_gl

        ensure_headless_gl()
        core = self.core
        config = self.config
        try:
            renderer = CameraRenderer(
                core.physics, config.camera_name, config.camera_width, config.camera_height
            )
        except (RuntimeError, ValueError) as error:
            self._camera_error = str(error)
            self.get_logger().error(f"camera off: {error}")
            return
        visual = core.env.profile.visual
        if visual is not None:  # a visual stand-in: the scene as its profile shows it
            from simreal_ros.sim.visuals import SceneAppearance

            SceneAppearance(core.physics, config.camera_name).apply(visual)
        snapshot = mujoco.MjData(core.physics.model)
        fx, fy, cx, cy = renderer.intrinsics()
        info = CameraInfo()
        info.header.frame_id = f"{config.camera_name}_camera_optical_frame"
        info.width, info.height = config.camera_width, config.camera_height
        info.distortion_model = "plumb_bob"
        info.d = [0.0] * 5
        info.k = [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        info.p = [fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0]
        image = Image()
        image.header.frame_id = info.header.frame_id
        image.width, image.height = config.camera_width, config.camera_height
        image.encoding, image.step = "rgb8", 3 * config.camera_width
        period = 1.0 / config.camera_rate_hz
        next_frame = time.monotonic()
        try:
            while not self._camera_stop.is_set():
                with core.lock:
                    mujoco.mj_copyData(snapshot, core.physics.model, core.physics.data)
                    stamp = core.sim_time
                pixels = renderer.render(snapshot)  # outside the lock: physics keeps stepping
                _stamp(stamp, image.header.stamp)
                info.header.stamp = image.header.stamp
                image.data = pixels.tobytes()
                self._image_pub.publish(image)
                self._info_pub.publish(info)
                next_frame = max(next_frame + period, time.monotonic())
                self._camera_stop.wait(max(0.0, next_frame - time.monotonic()))
        finally:
            renderer.close()

    # ---------------------------------------------------------- diagnostics
    def _publish_diagnostics(self) -> None:
        core = self.core
        values: dict[str, str] = {}
        engine = "mujoco" if core is None else core.env.profile.engine
        if core is None:
            level, message = WARN, "unconfigured"
        else:
            target = core.real_time_factor
            age = core.command_age()
            profile = core.env.profile
            running = self._active and self.config.mode == "free_running" and not core.paused
            level, message = (
                OK,
                "running"
                if running
                else ("paused" if core.paused else ("lockstep" if self._active else "inactive")),
            )
            if running and target > 0 and core.measured_rtf < 0.9 * target:
                level = WARN
                message = f"real-time factor {core.measured_rtf:.2f} below target {target:g}"
            if self._camera_error:
                level, message = WARN, self._camera_error
            values = {
                "sim_rate_hz": f"{core.measured_step_rate:.1f}",
                "real_time_factor": f"{core.measured_rtf:.3f}",
                "real_time_factor_target": f"{target:g}",
                "command_age_s": "never" if math.isinf(age) else f"{age:.3f}",
                "commands_accepted": str(core.commands_accepted),
                "commands_rejected": str(core.commands_rejected),
                "sim_time_s": f"{core.sim_time:.3f}",
                "episode_id": core.episode_id,
                "mode": self.config.mode,
                "profile": profile.name + (" (stand-in)" if profile.is_stand_in else ""),
            }
        self._diag_pub.publish(
            diagnostic_array(self, "sim_bridge: simulation", engine, level, message, values)
        )


def main(args=None) -> None:
    run_node(SimBridgeNode, args)


if __name__ == "__main__":
    main()
