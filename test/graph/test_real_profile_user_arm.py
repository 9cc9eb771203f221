"""The real profile drives a user's own arm: `simreal up --graph real` plus the stand-in.

A user's arm (not a shipped one: 4 joints, no gripper, its own joint names, a body as
tool frame) is written here, a tiny checkpoint is pretrained for it with the CLI, and the
graph runs as separate processes over DDS with the stand-in arm where the user's
ros2_control drivers would be. This test plays perception (/object/pose) and the operator
(/task/status). Nothing here publishes /clock or any sim bridge topic.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rostest_helpers import spin_until, wait_for_subscribers
from user_arm import HOME, VELOCITY_LIMITS, joint_names, write_user_arm

from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv

# Serial: it waits on the policy's first actions after a pretraining in the same
# process; `make test` runs it alone after the rest.
pytestmark = [pytest.mark.graph, pytest.mark.serial]

JOINTS = joint_names("desk_arm")
COMMAND_TOPIC = "/forward_position_controller/commands"
# What only the sim bridge publishes or serves (DESIGN.md); none of it may exist here.
SIM_ONLY_TOPICS = ("/clock", "/camera/image_raw", "/camera/camera_info")


@pytest.fixture(scope="module")
def user_arm(tmp_path_factory) -> Path:
    return write_user_arm(
        tmp_path_factory.mktemp("desk_arm"), tool_as_body=True, nested_limits=True
    )


@pytest.fixture(scope="module")
def user_checkpoint(user_arm, tmp_path_factory) -> Path:
    """A tiny push checkpoint pretrained for the user's arm with the CLI (a few seconds)."""
    out = tmp_path_factory.mktemp("desk_arm_checkpoint") / "push"
    argv = [
        sys.executable, "-m", "simreal_ros.cli.main", "--robot", str(user_arm),
        "pretrain", "--task", "push", "--out", str(out), "--steps", "20",
        "--demo-episodes", "4", "--dagger-iterations", "1", "--dagger-episodes", "2",
        "--bc-steps", "20", "--save-every", "10", "--no-progress",
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        argv, env=graph_environment(), capture_output=True, text=True, timeout=240, check=False
    )
    print(f"pretrained for the user's arm in {time.monotonic() - started:.1f} s")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (out / "policy.json").is_file(), result.stdout[-3000:]
    return out


@pytest.fixture
def processes():
    """Processes a test starts; each is stopped (SIGINT, then harder) even on failure."""
    started: list[NodeProcess] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            process.stop()


def stand_in(user_arm: Path, *parameters: str) -> NodeProcess:
    ros_args = ["-p", f"robot:={user_arm}"]
    for parameter in parameters:
        ros_args += ["-p", parameter]
    argv = python_module_argv("simreal_ros.nodes.stand_in_arm", ros_args)
    return NodeProcess("stand_in_arm", argv, graph_environment())


def wait(executor, condition, timeout: float, *watched: NodeProcess) -> bool:
    """Spin until ``condition()``; give up early when a watched process has exited."""
    spin_until(
        executor,
        lambda: condition() or any(p.returncode is not None for p in watched),
        timeout,
    )
    return bool(condition())


# A publisher's endpoint can be discovered before its node's name (which DDS carries on
# a separate discovery topic); until then rclpy reports this placeholder.
UNKNOWN_NODE = "_NODE_NAME_UNKNOWN_"


def publisher_nodes(node, topic: str) -> list[str]:
    return sorted(info.node_name for info in node.get_publishers_info_by_topic(topic))


def named_publishers(executor, node, topic: str, timeout: float = 10.0) -> list[str]:
    """The publishers' node names once discovery has named every one (or after timeout)."""
    spin_until(executor, lambda: UNKNOWN_NODE not in publisher_nodes(node, topic), timeout)
    return publisher_nodes(node, topic)


def assert_no_sim_bridge(node) -> None:
    """No /clock, no sim bridge topic, service or node anywhere in the graph."""
    topics = {name for name, _ in node.get_topic_names_and_types()}
    present = sorted(t for t in SIM_ONLY_TOPICS if t in topics or publisher_nodes(node, t))
    assert not present, f"sim-only topics in the real profile: {present}"
    services = {name for name, _ in node.get_service_names_and_types()}
    bridge = sorted(n for n in topics | services if n.startswith("/sim_bridge"))
    assert not bridge, f"sim bridge entities in the real profile: {bridge}"
    assert "sim_bridge" not in node.get_node_names()


def test_stand_in_ignores_bad_commands_and_follows_good_ones(
    user_arm, processes, rclpy_context, executor
):
    import rclpy
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import DescribeParameters
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from simreal_ros.nodes import qos

    arm = stand_in(user_arm, "rate_hz:=250", "time_constant:=0.05")  # an int for a float
    processes.append(arm)
    node = rclpy.create_node("arm_probe", context=rclpy_context)
    executor.add_node(node)
    states: list[JointState] = []
    deep = QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=500, reliability=ReliabilityPolicy.BEST_EFFORT
    )
    node.create_subscription(JointState, "/joint_states", states.append, deep)
    commands = node.create_publisher(Float64MultiArray, COMMAND_TOPIC, qos.COMMAND)

    assert wait(executor, lambda: len(states) > 5, 60.0, arm), arm.output()[-3000:]
    assert wait_for_subscribers(executor, commands, timeout=30.0), arm.output()[-3000:]
    assert all(tuple(s.name) == JOINTS for s in states)
    np.testing.assert_allclose(states[-1].position, HOME, atol=1e-12)
    assert named_publishers(executor, node, "/joint_states") == ["stand_in_arm"]

    # Rate: 250 Hz configured (the default is 100). Read from the arm's own stamps (the
    # median interval), not from arrivals in this process: a count of arrivals over a
    # second on a loaded 2-core host read 148 Hz once, and a dropped message only doubles
    # one interval.
    first = len(states)
    spin_until(executor, lambda: len(states) >= first + 100, 10.0, period=0.001)
    stamps = [s.header.stamp.sec + 1e-9 * s.header.stamp.nanosec for s in states[first:]]
    rate = 1.0 / float(np.median(np.diff(stamps)))
    print(f"stand-in /joint_states: {rate:.0f} Hz from its stamps (configured 250)")
    assert 150.0 <= rate <= 300.0

    bad = [
        list(HOME[:3]),  # one joint short: the refusal logged (the rest are throttled)
        [float("nan"), *HOME[1:]],
        [*HOME, 0.0],  # one joint too many
        [float("inf")] * 4,
    ]
    for values in bad:
        commands.publish(Float64MultiArray(data=[float(v) for v in values]))
        seen = len(states)
        assert wait(executor, lambda n=seen: len(states) > n + 10, 10.0, arm), (
            f"the stand-in stopped publishing after the bad command {values}:\n"
            + arm.output()[-3000:]
        )
    assert arm.wait_for_output("command ignored", 10.0), arm.output()[-3000:]
    assert arm.returncode is None, f"the stand-in died on a bad command:\n{arm.output()}"
    refusals = [line for line in arm.output().splitlines() if "command ignored" in line]
    # What was wrong and what to do: the count, the arm's joints, the fix.
    assert "has 3 value(s)" in refusals[0], refusals[0]
    assert ", ".join(JOINTS) in refusals[0] and "one absolute position" in refusals[0]
    assert len(refusals) < len(bad), f"refusals are not throttled: {refusals}"
    np.testing.assert_allclose(states[-1].position, HOME, atol=1e-12)  # nothing applied

    target = HOME + np.array([0.3, -0.2, 0.25, 0.1])
    commands.publish(Float64MultiArray(data=target.tolist()))
    assert spin_until(
        executor, lambda: np.max(np.abs(np.array(states[-1].position) - target)) < 1e-3, 15.0
    ), f"joints {np.round(states[-1].position, 4)} never reached {np.round(target, 4)}"
    velocities = np.array([s.velocity for s in states])
    assert np.all(np.abs(velocities) <= VELOCITY_LIMITS * (1 + 1e-9))

    # Parameters are declared with descriptors (ros2 param describe shows them).
    client = node.create_client(DescribeParameters, "/stand_in_arm/describe_parameters")
    assert client.wait_for_service(timeout_sec=10.0)
    future = client.call_async(
        DescribeParameters.Request(names=["rate_hz", "time_constant", "robot"])
    )
    assert spin_until(executor, future.done, 10.0)
    rate_hz, time_constant, robot = future.result().descriptors
    for descriptor in (rate_hz, time_constant):
        assert descriptor.type == ParameterType.PARAMETER_DOUBLE
        assert descriptor.description and descriptor.floating_point_range
        assert descriptor.read_only
    assert time_constant.floating_point_range[0].from_value > 0.0
    assert robot.read_only and "arm" in robot.description
    assert_no_sim_bridge(node)
    arm.stop()
    assert arm.returncode == 0, arm.output()[-3000:]


def test_real_profile_drives_a_user_arm_through_the_stand_in(
    user_arm, user_checkpoint, processes, rclpy_context, executor, tmp_path
):
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from simreal_ros.msg import PolicyAction, SafetyStatus, TaskStatus
    from std_msgs.msg import Float64MultiArray
    from std_srvs.srv import Trigger

    from simreal_ros.nodes import qos

    argv = [
        sys.executable, "-m", "simreal_ros.cli.main", "--robot", str(user_arm),
        "up", "--graph", "real",
        # A graph-level setting: the policy runs it and the learner fine-tunes it.
        "--checkpoint", str(user_checkpoint),
        "--set", f"policy.adapter_store={tmp_path / 'adapters'}",
        "--set", f"learner.store_root={tmp_path / 'adapters'}",
        "--set", f"recorder.data_dir={tmp_path / 'episodes'}",
    ]  # fmt: skip
    up = NodeProcess("simreal-up", argv, graph_environment())
    processes.append(up)
    arm = stand_in(user_arm)
    processes.append(arm)

    def logs() -> str:
        return (
            f"--- simreal up ---\n{up.output()[-6000:]}\n--- stand_in_arm ---\n"
            + (arm.output()[-2000:])
        )

    node = rclpy.create_node("operator_probe", context=rclpy_context)
    executor.add_node(node)
    states: list[JointState] = []
    sent: list[np.ndarray] = []
    statuses: list[SafetyStatus] = []
    actions: list[PolicyAction] = []

    def deep(reliability):
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=500, reliability=reliability)

    node.create_subscription(
        JointState, "/joint_states", states.append, deep(ReliabilityPolicy.BEST_EFFORT)
    )
    node.create_subscription(
        Float64MultiArray,
        COMMAND_TOPIC,
        lambda m: sent.append(np.array(m.data)),
        deep(ReliabilityPolicy.RELIABLE),
    )
    node.create_subscription(SafetyStatus, "/safety/status", statuses.append, qos.STATUS)
    node.create_subscription(PolicyAction, "/policy/action", actions.append, qos.COMMAND)

    # Perception and the operator, as they would run on the robot (wall-clock stamps).
    pose_pub = node.create_publisher(PoseStamped, "/object/pose", qos.STATE)
    status_pub = node.create_publisher(TaskStatus, "/task/status", qos.STATUS)
    pose = PoseStamped()
    pose.header.frame_id = "base"
    pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = 0.5, 0.0, 0.025
    pose.pose.orientation.w = 1.0
    task = TaskStatus()
    task.header.frame_id = "base"
    task.episode_id = "operator-0001"
    task.task = "push"
    task.condition = "train"
    task.seed = 0
    task.goal.x, task.goal.y, task.goal.z = 0.62, 0.12, 0.025

    def publish_task_state() -> None:
        now = node.get_clock().now().to_msg()
        pose.header.stamp = task.header.stamp = now
        task.step += 1
        pose_pub.publish(pose)
        status_pub.publish(task)

    node.create_timer(0.05, publish_task_state)  # 20 Hz, the task's control rate

    def moved() -> float:
        return float(np.max(np.abs(np.array(states[-1].position) - HOME))) if states else 0.0

    try:
        assert wait(executor, lambda: len(states) > 5, 60.0, up, arm), logs()
        assert wait(executor, lambda: len(actions) > 0, 120.0, up, arm), (
            "the policy never published /policy/action\n" + logs()
        )
        assert wait(executor, lambda: len(sent) > 10, 30.0, up, arm), (
            "the safety node never commanded the arm\n" + logs()
        )
        # Nothing moves until someone asks: the real profile's filter holds until engaged.
        spin_until(executor, lambda: False, 1.0)
        assert moved() < 1e-9, f"the arm moved {moved():.6f} rad before anyone engaged"
        assert statuses and not statuses[-1].engaged, "the filter started engaged"
        engage = node.create_client(Trigger, "/safety/engage")
        assert engage.wait_for_service(timeout_sec=10.0)
        future = engage.call_async(Trigger.Request())
        assert spin_until(executor, future.done, 10.0) and future.result().success, logs()
        assert wait(executor, lambda: moved() > 0.05, 30.0, up, arm), (
            f"the stand-in stayed at home (moved {moved():.4f} rad) though the safety node "
            f"sent {len(sent)} commands, the last {np.round(sent[-1], 4)}\n" + logs()
        )
        # Keep the loop closed a little longer, watching everything it does.
        spin_until(executor, lambda: False, 2.0)
        assert up.returncode is None and arm.returncode is None, logs()

        assert {tuple(s.name) for s in states} == {JOINTS}
        assert all(len(s.position) == len(s.velocity) == len(JOINTS) for s in states)
        assert {len(c) for c in sent} == {len(JOINTS)}, "a command not sized for the arm"
        assert {tuple(a.joint_names) for a in actions} == {JOINTS}
        # The arm followed the commands: it ends near the newest one.
        assert np.max(np.abs(np.array(states[-1].position) - sent[-1])) < 0.2

        assert statuses, "no /safety/status at all\n" + logs()
        estop = [s for s in statuses if s.estop_latched or s.state == SafetyStatus.STATE_ESTOP]
        assert not estop, f"the safety node reported an e-stop: {estop[0]}"
        refusals = {"exception", "wrong_size", "joint_order", "non_finite"}
        refusals |= {"state_non_finite", "state_wrong_size", "state_joint_missing"}
        failed = sorted(
            {i.limit for s in statuses for i in s.interventions if i.limit in refusals}
        )
        assert not failed, f"the safety node failed closed or refused input: {failed}\n" + logs()
        passing = (SafetyStatus.STATE_PASS, SafetyStatus.STATE_LIMITED)
        assert any(s.state in passing for s in statuses), "the safety node never passed"
        assert statuses[-1].engaged
        counts = {name: sum(s.state == code for s in statuses) for name, code in (
            ("pass", 0), ("limited", 1), ("holding", 2), ("estop", 3))}  # fmt: skip
        print(
            f"{len(states)} joint states, {len(actions)} actions, {len(sent)} commands; "
            f"safety states {counts}; moved up to {moved():.3f} rad from home"
        )

        # Nothing but the stand-in publishes the arm's state; the task state is ours alone.
        for topic, publisher in (
            ("/joint_states", "stand_in_arm"),
            ("/object/pose", "operator_probe"),
            ("/task/status", "operator_probe"),
        ):
            assert named_publishers(executor, node, topic) == [publisher]
        assert_no_sim_bridge(node)
        errors = [line for line in up.output().splitlines() if "[ERROR]" in line]
        assert not errors, "a node of the graph logged an error:\n" + "\n".join(errors)
        assert "[ERROR]" not in arm.output(), logs()
    finally:
        # `simreal up` stops its nodes one after the other (about 4 s here, more on a
        # loaded machine): give it the time before escalating to SIGTERM and SIGKILL.
        up.stop(timeout=30.0)
        arm.stop()
    assert up.returncode == 0, logs()
    assert arm.returncode == 0, logs()
