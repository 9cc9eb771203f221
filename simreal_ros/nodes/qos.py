"""The named QoS profiles of the graph; every node takes its QoS from here."""

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

# Publishers of measured state (/joint_states, /object/pose): reliable like ros2_control's
# joint_state_broadcaster, so both reliable and best-effort subscribers match.
STATE = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

# Subscribers of high-rate sensor data and publishers of camera images: newest wins.
SENSOR_DATA = qos_profile_sensor_data

# Commands to the arm and between nodes on the control path: reliable, shallow queue,
# so a stale backlog is never replayed to the arm.
COMMAND = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

# Status and events (/safety/status, /task/status, /episodes/recorded, /diagnostics).
STATUS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=50,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

# Latched state that late joiners must still get (/learner/policy_update).
LATCHED = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
