"""Arm messages -> the observation dict (``nodes.observation``), shared by the policy node
and the expert driver."""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import Point, PoseStamped
from sensor_msgs.msg import JointState

from simreal_ros.nodes.observation import joint_arrays, observation_from_messages
from simreal_ros.robot.joint_order import JointOrder
from simreal_ros.robot.observation import RAW_FIELDS

NAMES = ("a", "b", "c")


def test_joint_states_are_reordered_and_missing_velocities_are_zero():
    order = JointOrder(NAMES)
    msg = JointState(name=["c", "a", "b"], position=[3.0, 1.0, 2.0], velocity=[0.3, 0.1, 0.2])
    position, velocity = joint_arrays(order, msg)
    np.testing.assert_array_equal(position, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(velocity, [0.1, 0.2, 0.3])
    _, velocity = joint_arrays(order, JointState(name=list(NAMES), position=[1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(velocity, np.zeros(3))
    assert joint_arrays(order, JointState(name=["a", "b"], position=[1.0, 2.0])) is None


def test_the_observation_has_the_spec_layout_with_the_quaternion_w_first():
    pose = PoseStamped()
    pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = 0.4, -0.1, 0.025
    q = pose.pose.orientation
    q.x, q.y, q.z, q.w = 0.0, 0.0, 0.6, 0.8
    joints = (np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.2, 0.3]))
    observation = observation_from_messages(joints, pose, Point(x=0.5, y=0.2, z=0.1))
    assert tuple(observation) == RAW_FIELDS
    np.testing.assert_array_equal(observation["joint_position"], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(observation["joint_velocity"], [0.1, 0.2, 0.3])
    np.testing.assert_array_equal(observation["object_position"], [0.4, -0.1, 0.025])
    np.testing.assert_array_equal(observation["object_orientation"], [0.8, 0.0, 0.0, 0.6])
    np.testing.assert_array_equal(observation["goal_position"], [0.5, 0.2, 0.1])
    unposed = observation_from_messages(joints, PoseStamped(), Point())
    np.testing.assert_array_equal(unposed["object_orientation"], [1.0, 0.0, 0.0, 0.0])
