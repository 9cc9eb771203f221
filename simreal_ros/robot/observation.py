"""The arm's observation contract: the raw fields its topics (or the gym environment) give a
policy, in order, and the fields derived from them. The environment side owns it, as
dm_control's ``Task.observation_spec`` and LeRobot's ``Robot.observation_features`` do;
``policy.spec`` chooses a layout from these fields.
"""

from __future__ import annotations

# Raw observation fields as the arm's topics carry them (and the gym env returns them);
# JOINT_FIELDS have one value per controller joint, on any arm.
JOINT_FIELDS = ("joint_position", "joint_velocity")
RAW_FIELD_SIZES: dict[str, int | None] = {
    "joint_position": None,
    "joint_velocity": None,
    "object_position": 3,
    "object_orientation": 4,  # quaternion w, x, y, z
    "goal_position": 3,
}
# The keys of an observation dict, in this order, wherever one is built.
RAW_FIELDS: tuple[str, ...] = tuple(RAW_FIELD_SIZES)
# Fields derived from raw ones; computed by the same function everywhere.
DERIVED_FIELD_SIZES: dict[str, int] = {
    "goal_minus_object": 3,
    "ee_position": 3,  # tool centre point by forward kinematics of the robot model
    "goal_minus_ee": 3,
    "object_minus_ee": 3,
}
KINEMATIC_FIELDS = ("ee_position", "goal_minus_ee", "object_minus_ee")


def field_size(field: str, num_joints: int) -> int:
    """Values of ``field`` in an observation of an arm with ``num_joints`` joints."""
    if field in JOINT_FIELDS:
        return num_joints
    return RAW_FIELD_SIZES.get(field) or DERIVED_FIELD_SIZES[field]
