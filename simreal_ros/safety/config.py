"""Safety filter configuration: declared once, validated at construction.

Limits left empty come from the robot description (the hardware's values). A configured
limit may only tighten the hardware's: a value above it is refused at start, naming the
joint, the value and the hardware limit. Settings whose change at run time would loosen
safety are fixed at start-up (the node declares them as read-only ROS parameters).
"""

from __future__ import annotations

import dataclasses

from simreal_ros.config_schema import setting, validate

# Reasons an intervention can have (SafetyIntervention.limit). Motion limits first, then
# refused input, then the watchdog, the e-stop and the filter's own failure.
MOTION_LIMITS = (
    "position",
    "velocity",
    "acceleration",
    "jerk",
    "tracking_error",
    "workspace",
    "keep_out",
)
COMMAND_REFUSALS = (
    "non_finite",
    "wrong_size",
    "joint_order",
    "stale_command",
    "out_of_order",
    "before_resync",
)
STATE_REFUSALS = (
    "state_non_finite",
    "state_wrong_size",
    "state_joint_missing",
    "state_out_of_order",
    "stale_state",
)
OTHER_REASONS = ("estop", "disengaged", "exception")
ALL_REASONS = MOTION_LIMITS + COMMAND_REFUSALS + STATE_REFUSALS + OTHER_REASONS


@dataclasses.dataclass
class SafetyConfig:
    """Settings of the safety filter and the safety node."""

    autostart: bool = setting(
        False,
        "Configure and activate at start-up (the graph's lifecycle manager does it there)",
    )
    require_engage: bool = setting(
        False,
        "Hold the arm until ~/engage is called (or a trial starts an episode): nothing moves "
        "until someone asks. The real profile sets it; the sim profile starts engaged",
    )
    engage_at_start: bool = setting(
        False,
        "Come up engaged even with require_engage (an unattended rig that is meant to move "
        "as soon as fresh actions arrive)",
    )
    engage_after_command_loss: bool = setting(
        False,
        "When the command watchdog trips (the policy went silent or died), disengage: the "
        "arm stays held after fresh actions return, until an operator calls ~/engage",
    )
    verbose_log: bool = setting(
        False,
        "Log every state change (false: at most one line a second, with the reason and the "
        "count; /safety/status always carries every change)",
    )
    brake_timeout: float = setting(
        2.0,
        "On deactivation, brake to rest within the limits for at most this long before "
        "the command output stops (the arm's controller then holds the last command)",
        low=0.0,
        high=30.0,
        unit="s",
    )
    control_rate: float = setting(
        100.0,
        "Rate of the command published to the arm; also the dt of every limit",
        low=1.0,
        high=2000.0,
        unit="Hz",
    )
    position_margin: float = setting(
        0.02,
        "Margin kept inside each joint's hard position limits (except margin_exempt_joints)",
        low=0.0,
        high=1.0,
        unit="rad or m",
    )
    margin_exempt_joints: list = setting(
        [],
        "More joints whose hard limits are their working range, so no margin is kept; the "
        "robot description's gripper_joint always is (a gripper must close fully)",
    )
    position_margins: list = setting(
        [],
        "Per-joint position margins in controller order, overriding position_margin "
        "(empty: use position_margin)",
        low=0.0,
        unit="rad or m",
    )
    limit_scale: float = setting(
        1.0,
        "Fraction of the hardware velocity, acceleration and jerk limits enforced",
        low=0.01,
        high=1.0,
    )
    velocity_limits: list = setting(
        [],
        "Per-joint velocity limits in controller order (empty: the description's, scaled)",
        low=0.0,
        unit="rad/s or m/s",
    )
    acceleration_limits: list = setting(
        [],
        "Per-joint acceleration limits (empty: the description's, scaled)",
        low=0.0,
        unit="rad/s^2 or m/s^2",
    )
    jerk_limits: list = setting(
        [],
        "Per-joint jerk limits (empty: the description's, scaled); jerk yields to "
        "position, velocity and acceleration when they conflict",
        low=0.0,
        unit="rad/s^3 or m/s^3",
    )
    tracking_error_limit: float = setting(
        0.3,
        "Largest distance between the command and the measured joint position, so a lagging "
        "or blocked arm is never commanded far away (0 disables the check)",
        low=0.0,
        high=10.0,
        unit="rad or m",
    )
    command_timeout: float = setting(
        0.25,
        "A policy action older than this (by its stamp) is refused; with none fresher the "
        "watchdog holds",
        low=0.001,
        high=10.0,
        unit="s",
    )
    state_timeout: float = setting(
        0.25,
        "With no joint state fresher than this the watchdog holds",
        low=0.001,
        high=10.0,
        unit="s",
    )
    check_stamps: bool = setting(
        True,
        "Judge input age by header stamps (true) or by arrival time (false, for senders "
        "whose clock differs from this node's)",
    )
    allow_resync: bool = setting(
        False,
        "Honour ~/resync: restart the commanded trajectory at rest at the next measured "
        "state. Only for a simulated arm, which jumps to a new start pose on an episode "
        "reset; on a physical arm it would be an instant stop, so it is refused there",
    )
    workspace_check: bool = setting(
        True,
        "Keep the tool centre point inside the workspace box and out of the keep-out boxes "
        "(forward kinematics of the robot's MuJoCo model)",
    )
    workspace_lower: list = setting(
        [],
        "Lower corner x, y, z of the workspace box, base frame (empty: the description's)",
        unit="m",
    )
    workspace_upper: list = setting(
        [],
        "Upper corner x, y, z of the workspace box, base frame (empty: the description's)",
        unit="m",
    )
    keep_out_boxes: list = setting(
        [],
        "Boxes the tool centre point must stay out of, 6 numbers each: "
        "x_min, y_min, z_min, x_max, y_max, z_max (base frame)",
        unit="m",
    )
    workspace_tolerance: float = setting(
        0.001,
        "How far outside the box (or into a keep-out) the tool path between two control "
        "ticks may be proved only to reach; the tool at every tick stays inside. Some slack "
        "lets the tool slide along a face it touches instead of sticking to it",
        low=0.0,
        high=0.05,
        unit="m",
    )
    workspace_slide_margin: float = setting(
        0.001,
        "A step that would leave the box first loses only its outward part, aiming this far "
        "inside the face, so the tool slides along a face instead of sticking to it "
        "(0: only scale the whole step back)",
        low=0.0,
        high=0.05,
        unit="m",
    )
    workspace_bisection_steps: int = setting(
        8,
        "Bisection steps used to scale a step back to the workspace boundary",
        low=1,
        high=30,
    )
    status_rate: float = setting(
        2.0,
        "Rate of /safety/status on ticks that changed nothing (changes are published at once)",
        low=0.1,
        high=100.0,
        unit="Hz",
    )
    diagnostics_rate: float = setting(1.0, "Rate of /diagnostics", low=0.1, high=10.0, unit="Hz")
    output_trajectory: bool = setting(
        False,
        "Also publish the command as a one-point JointTrajectory (for joint_trajectory_"
        "controller) on ~/joint_trajectory",
    )

    def __post_init__(self) -> None:
        validate(self)
        if len(self.keep_out_boxes) % 6:
            raise ValueError(
                f"SafetyConfig.keep_out_boxes has {len(self.keep_out_boxes)} numbers; give 6 "
                "per box (x_min, y_min, z_min, x_max, y_max, z_max)."
            )
        for name in ("workspace_lower", "workspace_upper"):
            if getattr(self, name) and len(getattr(self, name)) != 3:
                raise ValueError(
                    f"SafetyConfig.{name} = {getattr(self, name)!r}; give x, y, z or leave it "
                    "empty to use the robot description's box."
                )

    @property
    def dt(self) -> float:
        return 1.0 / self.control_rate
