"""stand_in_arm: a position-controlled arm stand-in for the ``real`` profile.

Like ros2_control's mock_components GenericSystem behind a joint_state_broadcaster and a
forward_position_controller: consumes /forward_position_controller/commands
(std_msgs/Float64MultiArray, one absolute position per controller joint, controller order)
and publishes /joint_states (the description's joint names, positions, velocities, a
wall-clock stamp) at ``rate_hz``. Each joint follows its target as a first-order lag
capped at its velocity limit, inside its position limits (``robot/stand_in_arm.py``).

It publishes nothing else: no /clock, no /object/pose, no /task/status, no camera. It is
neither the physical arm nor the MuJoCo sim bridge; run it where the user's ros2_control
drivers would run, to try the real-profile graph without hardware:

    simreal --robot PATH up --graph real
    python -m simreal_ros.nodes.stand_in_arm --ros-args -p robot:=PATH

A bad command (wrong size, non-finite value) is logged, throttled, and ignored: the joints
keep following the previous targets, and the node keeps running.
"""

from __future__ import annotations

import time

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from simreal_ros.nodes import qos
from simreal_ros.nodes.params import declare_config, declare_robot
from simreal_ros.nodes.runtime import run_node
from simreal_ros.robot.stand_in_arm import StandInArm, StandInArmConfig

COMMAND_TOPIC = "/forward_position_controller/commands"
JOINT_STATE_TOPIC = "/joint_states"
# A tick later than this (a stalled process) moves the joints by this much time at most,
# as a drive's own loop would have kept running; the velocity cap holds either way.
MAX_STEP_SECONDS = 0.5


class StandInArmNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("stand_in_arm", **kwargs)
        self.robot = declare_robot(self)
        self.config: StandInArmConfig = declare_config(self, StandInArmConfig)
        self.arm = StandInArm(self.robot, time_constant=self.config.time_constant)
        self.commands_accepted = 0
        self.commands_refused = 0
        self.commands_clipped = 0
        msg = JointState()
        msg.name = list(self.robot.joint_names)
        zeros = [0.0] * self.robot.num_joints
        msg.position, msg.velocity = list(zeros), list(zeros)
        self._joint_msg = msg
        # The message keeps its buffers; each tick overwrites them in place through numpy.
        self._views = [
            np.frombuffer(buffer, dtype=np.float64) for buffer in (msg.position, msg.velocity)
        ]
        self._wall = Clock(clock_type=ClockType.SYSTEM_TIME)
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._last_tick = time.monotonic()
        self._publisher = self.create_publisher(JointState, JOINT_STATE_TOPIC, qos.STATE)
        self.create_subscription(Float64MultiArray, COMMAND_TOPIC, self._on_command, qos.COMMAND)
        # Steady time: the stand-in runs in wall time whatever use_sim_time says.
        self.create_timer(1.0 / self.config.rate_hz, self._on_tick, clock=self._steady)
        self._publish()  # the home pose, at once
        self.get_logger().info(
            f"stand-in arm (not the physical arm, not the sim bridge) for "
            f"{self.robot.name!r}: {self.robot.num_joints} joints "
            f"({', '.join(self.robot.joint_names)}), time constant "
            f"{self.config.time_constant:g} s; {JOINT_STATE_TOPIC} at "
            f"{self.config.rate_hz:g} Hz, following {COMMAND_TOPIC}"
        )

    def _on_command(self, msg: Float64MultiArray) -> None:
        try:
            clipped = self.arm.command(msg.data)
        except ValueError as error:
            self.commands_refused += 1
            self.get_logger().error(
                f"command ignored ({self.commands_refused} so far), holding the previous "
                f"targets: {error}",
                throttle_duration_sec=2.0,
            )
            return
        except Exception as error:  # never let a message take the arm's node down
            self.commands_refused += 1
            self.get_logger().error(
                f"command ignored, holding the previous targets: {error!r}",
                throttle_duration_sec=2.0,
            )
            return
        if self.commands_accepted == 0:
            self.get_logger().info(f"first command on {COMMAND_TOPIC}: following it")
        self.commands_accepted += 1
        if clipped:
            self.commands_clipped += 1
            self.get_logger().warning(
                "command beyond the position limits: clipped to them "
                f"({self.commands_clipped} so far)",
                throttle_duration_sec=5.0,
            )

    def _on_tick(self) -> None:
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        if dt > 0.0:
            self.arm.advance(min(dt, MAX_STEP_SECONDS))
        self._publish()

    def _publish(self) -> None:
        msg = self._joint_msg
        msg.header.stamp = self._wall.now().to_msg()
        self._views[0][:] = self.arm.positions
        self._views[1][:] = self.arm.velocities
        self._publisher.publish(msg)


def main(args=None) -> None:
    run_node(StandInArmNode, args)


if __name__ == "__main__":
    main()
