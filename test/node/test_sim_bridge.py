"""sim_bridge in one process: topics, command rejection, services in lockstep."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.parameter import Parameter
from rostest_helpers import spin_until, wait_for_publishers, wait_for_subscribers
from sensor_msgs.msg import JointState
from simreal_ros.msg import TaskStatus
from simreal_ros.srv import GetDynamics, ResetEpisode, SetDynamics, StepSim
from std_msgs.msg import Float64MultiArray

from simreal_ros.nodes import qos
from simreal_ros.nodes.sim_bridge import COMMAND_TOPIC, SimBridgeNode


def make_bridge(context, **params) -> SimBridgeNode:
    overrides = [Parameter("autostart", value=True)]
    overrides += [Parameter(name, value=value) for name, value in params.items()]
    return SimBridgeNode(context=context, parameter_overrides=overrides)


def call(executor, client, request, timeout=10.0):
    assert client.wait_for_service(timeout_sec=timeout)
    future = client.call_async(request)
    assert spin_until(executor, future.done, timeout)
    return future.result()


@pytest.fixture
def probe(rclpy_context, executor):
    node = Node("sim_bridge_probe", context=rclpy_context)
    executor.add_node(node)
    return node


def test_free_running_bridge_publishes_joint_states_in_controller_order(executor, probe):
    from diagnostic_msgs.msg import DiagnosticArray

    bridge = make_bridge(probe.context, seed=4, diagnostics_period=0.2)
    executor.add_node(bridge)
    received: list[JointState] = []
    poses: list[PoseStamped] = []
    diagnostics: list[DiagnosticArray] = []
    probe.create_subscription(DiagnosticArray, "/diagnostics", diagnostics.append, qos.STATUS)
    probe.create_subscription(JointState, "/joint_states", received.append, qos.SENSOR_DATA)
    probe.create_subscription(PoseStamped, "/object/pose", poses.append, qos.SENSOR_DATA)
    assert spin_until(executor, lambda: len(received) >= 20 and poses, timeout=10.0)
    message = received[-1]
    assert list(message.name) == list(bridge.core.robot.joint_names)
    assert len(message.position) == len(message.velocity) == len(message.effort) == 7
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in received]
    assert all(b > a for a, b in itertools.pairwise(stamps))  # sim time moves on
    assert np.allclose(message.position, bridge.core.robot.home_position, atol=1e-2)
    assert 0.35 < poses[-1].pose.position.x < 0.6  # the cube, on the table in front

    def reported() -> dict:
        if not diagnostics:
            return {}
        return {kv.key: kv.value for kv in diagnostics[-1].status[0].values}

    assert spin_until(executor, lambda: float(reported().get("sim_rate_hz", 0)) > 0, 10.0)
    values = reported()
    assert {"real_time_factor", "command_age_s", "profile", "episode_id"} <= set(values)
    assert values["command_age_s"] == "never"


def test_wrong_size_or_non_finite_command_is_rejected_and_not_applied(executor, probe):
    bridge = make_bridge(probe.context, mode="lockstep")
    executor.add_node(bridge)
    publisher = probe.create_publisher(Float64MultiArray, COMMAND_TOPIC, qos.COMMAND)
    assert wait_for_subscribers(executor, publisher)
    step = probe.create_client(StepSim, "/sim_bridge/step")
    home = bridge.core.robot.home_position
    core = bridge.core

    # One at a time: the command QoS keeps only the newest message.
    publisher.publish(Float64MultiArray(data=[0.5] * 6))
    assert spin_until(executor, lambda: core.commands_rejected >= 1, timeout=5.0)
    publisher.publish(Float64MultiArray(data=[float("nan")] * 7))
    assert spin_until(executor, lambda: core.commands_rejected >= 2, timeout=5.0)
    call(executor, step, StepSim.Request(steps=300))
    assert np.allclose(core.physics.joint_positions(), home, atol=1e-3)
    assert core.commands_accepted == 0

    target = home + np.array([0.3, -0.2, 0.2, 0.1, 0.1, -0.2, 0.02])
    publisher.publish(Float64MultiArray(data=target.tolist()))
    assert spin_until(executor, lambda: core.commands_accepted == 1, timeout=5.0)
    response = call(executor, step, StepSim.Request(steps=1000))
    assert response.success
    assert np.allclose(core.physics.joint_positions(), target, atol=5e-3)


def test_reset_step_and_dynamics_services_in_lockstep(executor, probe):
    bridge = make_bridge(probe.context, mode="lockstep")
    executor.add_node(bridge)
    statuses: list[TaskStatus] = []
    status_sub = probe.create_subscription(TaskStatus, "/task/status", statuses.append, qos.STATUS)
    reset = probe.create_client(ResetEpisode, "/sim_bridge/reset")
    step = probe.create_client(StepSim, "/sim_bridge/step")
    set_dyn = probe.create_client(SetDynamics, "/sim_bridge/set_dynamics")
    get_dyn = probe.create_client(GetDynamics, "/sim_bridge/get_dynamics")
    core = bridge.core

    first = call(executor, reset, ResetEpisode.Request(seed=3, condition="shifted"))
    assert first.success and first.episode_id
    cube = core.physics.object_position()
    before = call(executor, step, StepSim.Request(steps=0)).sim_time
    after = call(executor, step, StepSim.Request(steps=50))
    assert after.success and after.sim_time == pytest.approx(before + 0.1)
    again = call(executor, reset, ResetEpisode.Request(seed=3, condition="shifted"))
    assert again.episode_id != first.episode_id
    assert np.array_equal(core.physics.object_position(), cube)  # same seed, same episode
    assert call(executor, step, StepSim.Request(steps=0)).sim_time >= after.sim_time  # no rewind
    bad = call(executor, reset, ResetEpisode.Request(seed=3, condition="tuesday"))
    assert not bad.success and "condition" in bad.message

    assert wait_for_publishers(executor, status_sub)
    call(executor, step, StepSim.Request(steps=100))
    assert spin_until(executor, lambda: any(s.seed == 3 for s in statuses), timeout=5.0)
    status = [s for s in statuses if s.seed == 3][-1]
    assert status.condition == "shifted" and status.task == "push"
    assert status.episode_id == again.episode_id and not status.done
    assert status.goal.x > 0.3

    ok = call(
        executor,
        set_dyn,
        SetDynamics.Request(names=["mass.cube", "latency_steps"], values=[0.4, 3.0]),
    )
    assert ok.success, ok.message
    values = call(executor, get_dyn, GetDynamics.Request())
    assert values.profile == "nominal" and not values.stand_in
    table = dict(zip(values.names, values.values, strict=True))
    assert table["mass.cube"] == pytest.approx(0.4) and table["latency_steps"] == 3.0
    refused = call(executor, set_dyn, SetDynamics.Request(names=["mass.moon"], values=[1.0]))
    assert not refused.success and "unknown dynamics parameter" in refused.message
    twin = call(executor, set_dyn, SetDynamics.Request(profile="real_twin"))
    assert twin.success
    answer = call(executor, get_dyn, GetDynamics.Request())
    assert answer.profile == "real_twin" and answer.stand_in  # the flag travels with it


def test_camera_publishes_images_with_camera_info(executor, probe):
    from sensor_msgs.msg import CameraInfo, Image

    # As `simreal up --perception marker` runs it: the camera on, the privileged pose off.
    bridge = make_bridge(
        probe.context,
        camera=True,
        camera_width=64,
        camera_height=48,
        camera_rate_hz=20.0,
        publish_object_pose=False,
    )
    executor.add_node(bridge)
    assert bridge.count_publishers("/object/pose") == 0
    assert bridge.count_publishers("/joint_states") == 1
    images: list[Image] = []
    infos: list[CameraInfo] = []
    probe.create_subscription(Image, "/camera/image_raw", images.append, qos.SENSOR_DATA)
    probe.create_subscription(CameraInfo, "/camera/camera_info", infos.append, qos.SENSOR_DATA)
    spin_until(executor, lambda: (images and infos) or bridge._camera_error, timeout=15.0)
    if not (images and infos):
        if bridge._camera_error:
            pytest.skip(f"no headless GL here: {bridge._camera_error}")
        pytest.fail("no camera image arrived")
    image = images[-1]
    assert (image.width, image.height, image.encoding) == (64, 48, "rgb8")
    assert len(image.data) == 64 * 48 * 3
    assert np.asarray(image.data, dtype=np.uint8).std() > 1.0  # a scene, not a blank frame
    assert infos[-1].k[0] > 0 and infos[-1].header.frame_id == image.header.frame_id


def test_lifecycle_deactivate_cleanup_and_restart(executor, probe):
    from rclpy.lifecycle import TransitionCallbackReturn

    bridge = make_bridge(probe.context, mode="lockstep")
    executor.add_node(bridge)
    step = probe.create_client(StepSim, "/sim_bridge/step")
    assert bridge.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    refused = call(executor, step, StepSim.Request(steps=10))
    assert not refused.success and "not active" in refused.message
    assert bridge.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
    assert bridge.core is None
    # A setting fixed at start-up is refused with the reason, never silently ignored.
    refused = bridge.set_parameters([Parameter("task", value="reach")])[0]
    assert not refused.successful and "read-only" in refused.reason.lower()
    assert bridge.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert bridge.trigger_activate() == TransitionCallbackReturn.SUCCESS
    assert bridge.core.env.task.name == "push"
    assert call(executor, step, StepSim.Request(steps=10)).success
    bridge.set_parameters([Parameter("real_time_factor", value=2.0)])  # applies at once
    assert bridge.core.real_time_factor == 2.0
    refused = bridge.set_parameters([Parameter("real_time_factor", value=-1.0)])[0]
    assert not refused.successful and "real_time_factor" in refused.reason
    assert bridge.core.real_time_factor == 2.0


def test_an_inactive_bridge_publishes_nothing_the_arm_s_drivers_would(executor, probe):
    from rclpy.lifecycle import TransitionCallbackReturn

    bridge = make_bridge(probe.context)
    executor.add_node(bridge)
    states: list[JointState] = []
    probe.create_subscription(JointState, "/joint_states", states.append, qos.SENSOR_DATA)
    assert spin_until(executor, lambda: len(states) > 5, 10.0)
    assert bridge.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    spin_until(executor, lambda: False, 0.2)  # what was in flight arrives
    count = len(states)
    bridge.core.reset(1, "train")  # emits, but the lifecycle publishers are off
    spin_until(executor, lambda: False, 0.3)
    assert len(states) == count, "an inactive sim bridge published joint states"
    assert bridge.trigger_activate() == TransitionCallbackReturn.SUCCESS
    assert spin_until(executor, lambda: len(states) > count + 5, 10.0)


def test_camera_shows_a_visual_stand_in_as_its_profile_says(executor, probe):
    """The bridge renders a profile's visual: section: its table looks as the same scene
    rendered off ROS with that profile's appearance, and unlike the nominal one."""
    from sensor_msgs.msg import Image

    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment
    from simreal_ros.sim.profiles import load_profile
    from simreal_ros.sim.rendering import CameraRenderer
    from simreal_ros.sim.visuals import NOMINAL, SceneAppearance

    def table_colour(frame: np.ndarray) -> np.ndarray:
        return frame[36:].reshape(-1, 3).astype(float).mean(0)  # the frame's near rows

    def from_bridge(profile: str) -> np.ndarray:
        bridge = make_bridge(
            probe.context, profile=profile, camera=True, camera_width=64, camera_height=48
        )
        executor.add_node(bridge)
        images: list[Image] = []
        sub = probe.create_subscription(Image, "/camera/image_raw", images.append, qos.SENSOR_DATA)
        try:
            spin_until(executor, lambda: images or bridge._camera_error, timeout=15.0)
            assert images, f"no camera image ({bridge._camera_error or 'none arrived'})"
            return table_colour(np.asarray(images[-1].data, np.uint8).reshape(48, 64, 3))
        finally:
            probe.destroy_subscription(sub)
            executor.remove_node(bridge)
            bridge.destroy_node()

    def off_ros(profile: str) -> np.ndarray:
        env = TaskEnvironment(EnvironmentConfig(profile=profile), robot=load_robot_description())
        env.reset(seed=0, condition="train")
        renderer = CameraRenderer(env.physics, "front", 64, 48)
        try:
            SceneAppearance(env.physics, "front").apply(load_profile(profile).visual or NOMINAL)
            return table_colour(renderer.render())
        finally:
            renderer.close()

    nominal, shifted = from_bridge("nominal"), from_bridge("visual_shift")
    np.testing.assert_allclose(nominal, off_ros("nominal"), atol=3.0)
    np.testing.assert_allclose(shifted, off_ros("visual_shift"), atol=3.0)
    assert np.abs(nominal - shifted).max() > 20.0
