"""The scripted expert publishes demonstrations on /policy/action only while enabled."""

import numpy as np
import rclpy
from geometry_msgs.msg import PoseStamped
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import JointState
from simreal_ros.msg import PolicyAction, TaskStatus

from simreal_ros.nodes import qos
from simreal_ros.nodes.expert_driver import EXPERT_VERSION, ExpertDriverNode


def test_expert_acts_on_the_graph_state_only_when_enabled(rclpy_context, executor):
    expert = ExpertDriverNode(task="reach", context=rclpy_context)
    probe = rclpy.create_node("probe", context=rclpy_context)
    executor.add_node(expert)
    executor.add_node(probe)
    actions: list[PolicyAction] = []
    probe.create_subscription(PolicyAction, "/policy/action", actions.append, qos.COMMAND)
    states = probe.create_publisher(JointState, "/joint_states", qos.STATE)
    poses = probe.create_publisher(PoseStamped, "/object/pose", qos.STATE)
    tasks = probe.create_publisher(TaskStatus, "/task/status", qos.STATUS)
    for publisher in (states, poses, tasks):
        assert wait_for_subscribers(executor, publisher)
    robot = expert.robot
    state = JointState(name=list(robot.joint_names), position=list(robot.home_position))
    status = TaskStatus()
    tool = expert.expert.tool_position(np.asarray(robot.home_position))
    status.goal.x, status.goal.y, status.goal.z = (tool + np.array([0.05, 0.0, 0.0])).tolist()

    def publish_state():
        states.publish(state)
        poses.publish(PoseStamped())
        tasks.publish(status)
        return False

    spin_until(executor, publish_state, 0.5)
    assert actions == [], "the expert acted while disabled"
    expert.enabled = True
    assert spin_until(executor, lambda: publish_state() or len(actions) >= 3, 10.0)
    action = actions[-1]
    assert action.policy_version == EXPERT_VERSION and action.human_intervention
    assert list(action.joint_names) == list(robot.joint_names)
    command = np.array(action.values)
    # Toward the goal: the commanded tool position moves in +x from home.
    commanded_tool = expert.expert.tool_position(command)
    assert commanded_tool[0] > tool[0] + 1e-3

    # Joint states of another arm, or of only part of this one, are ignored, never acted on.
    before = expert._joints[0].copy()
    names = list(robot.joint_names)
    for foreign in (
        JointState(name=["a", "b"], position=[1.0, 1.0]),
        JointState(name=names[:1], position=[1.0]),
        JointState(name=names, position=[1.0] * (len(names) - 1)),
    ):
        expert._on_state(foreign)
        assert np.array_equal(expert._joints[0], before), foreign.name
    # Joints the controller does not drive (a broadcaster publishes them all) are skipped,
    # as the policy and the safety filter skip them.
    expert._on_state(JointState(name=["extra", *names], position=[9.0, *before]))
    assert np.array_equal(expert._joints[0], before)
    # The same arm's joints in another order are taken, mapped by name.
    expert._on_state(JointState(name=names[::-1], position=list(range(len(names)))[::-1]))
    assert np.array_equal(expert._joints[0], np.arange(len(names), dtype=float))
