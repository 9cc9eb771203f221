"""The scripted expert as a demonstrator in the graph (sim only: it reads privileged state).

Publishes the expert's joint position targets on /policy/action, marked as a human
intervention (a demonstration) with policy version ``scripted_expert``, so demonstrations
go through the safety filter and are recorded like any action. Run it only while the
policy node is inactive (`simreal loop` deactivates the policy for demonstration episodes).
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from geometry_msgs.msg import Point, PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState

from simreal_ros.msg import PolicyAction, TaskStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.observation import joint_arrays, observation_from_messages
from simreal_ros.nodes.params import declare_robot
from simreal_ros.nodes.runtime import run_node
from simreal_ros.robot.joint_order import JointOrder
from simreal_ros.sim.expert import make_expert

EXPERT_VERSION = "scripted_expert"


class ExpertDriverNode(Node):
    def __init__(self, task: str = "push", rate_hz: float = 20.0, **kwargs) -> None:
        super().__init__("expert_driver", **kwargs)
        self.robot = declare_robot(self)
        self.expert = make_expert(task, self.robot, rate_hz)
        self._joint_order = JointOrder(self.robot.joint_names)
        self._lock = threading.Lock()
        self._joints: tuple[np.ndarray, np.ndarray] | None = None
        self._pose = PoseStamped()  # until the first pose: the cube at the origin, unrotated
        self._goal: Point | None = None
        self.enabled = False
        self._sequence = 0
        self._message = PolicyAction()
        self._message.policy_version = EXPERT_VERSION
        self._message.joint_names = list(self.robot.joint_names)
        self._message.human_intervention = True
        self._publisher = self.create_publisher(PolicyAction, "/policy/action", qos.COMMAND)
        self.create_subscription(JointState, "/joint_states", self._on_state, qos.SENSOR_DATA)
        self.create_subscription(PoseStamped, "/object/pose", self._on_pose, qos.SENSOR_DATA)
        self.create_subscription(TaskStatus, "/task/status", self._on_task, qos.STATUS)
        self.create_timer(1.0 / rate_hz, self._on_tick)

    def _on_state(self, msg: JointState) -> None:
        joints = joint_arrays(self._joint_order, msg)
        if joints is None:
            return  # not this arm's joint states: never act on them
        with self._lock:
            self._joints = joints

    def _on_pose(self, msg: PoseStamped) -> None:
        with self._lock:
            self._pose = msg

    def _on_task(self, msg: TaskStatus) -> None:
        with self._lock:
            self._goal = msg.goal

    def _on_tick(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self._joints is None or self._goal is None:
                return
            observation = observation_from_messages(self._joints, self._pose, self._goal)
        command = self.expert.act(observation)
        self._sequence += 1
        self._message.header.stamp = self.get_clock().now().to_msg()
        self._message.sequence = self._sequence
        self._message.values = [float(v) for v in command]
        self._publisher.publish(self._message)


def _enabled_expert_driver() -> ExpertDriverNode:
    node = ExpertDriverNode()
    node.enabled = True  # run as a process of its own, it demonstrates from the start
    return node


def main(args=None) -> int:
    run_node(_enabled_expert_driver, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
