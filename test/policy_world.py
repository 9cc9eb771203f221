"""The policy node's test-side world, shared by the state and camera policy node tests: a
fake arm's publishers (joint states, task status, policy updates) and collectors of the
node's actions and diagnostics."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from simreal_ros.msg import PolicyAction, PolicyUpdate, TaskStatus

from simreal_ros.nodes import qos
from simreal_ros.nodes.policy import PolicyNode


class PolicyWorld:
    """A node named ``name`` publishing what the policy node reads and keeping every action
    (reliable, deep) and diagnostic it publishes."""

    def __init__(self, rclpy_context, executor, name: str) -> None:
        from rclpy.node import Node

        self.node = Node(name, context=rclpy_context)
        executor.add_node(self.node)
        self.joints = self.node.create_publisher(JointState, "/joint_states", qos.STATE)
        self.status = self.node.create_publisher(TaskStatus, "/task/status", qos.STATUS)
        self.updates = self.node.create_publisher(
            PolicyUpdate, "/learner/policy_update", qos.LATCHED
        )
        keep_all = QoSProfile(
            depth=5000, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
        )
        self.actions: list[PolicyAction] = []
        self.node.create_subscription(
            PolicyAction, "/policy/action", self.actions.append, keep_all
        )
        self.diagnostics: list[DiagnosticArray] = []
        self.node.create_subscription(
            DiagnosticArray, "/diagnostics", self.diagnostics.append, qos.STATUS
        )


def make_policy(rclpy_context, executor, **params) -> PolicyNode:
    overrides = [Parameter(name, value=value) for name, value in params.items()]
    node = PolicyNode(context=rclpy_context, parameter_overrides=overrides)
    executor.add_node(node)
    return node
