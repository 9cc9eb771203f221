"""Safety filter core: joint and workspace limits, input checks, watchdog. No ROS imports."""

from simreal_ros.safety.config import ALL_REASONS, SafetyConfig
from simreal_ros.safety.filter import (
    ESTOP,
    HOLDING,
    LIMITED,
    PASS,
    STATE_NAMES,
    Intervention,
    SafetyFilter,
    TickResult,
)
from simreal_ros.safety.limits import JointLimits, MotionLimiter, limits_from_description
from simreal_ros.safety.watchdog import Watchdog
from simreal_ros.safety.workspace import Workspace

__all__ = [
    "ALL_REASONS",
    "ESTOP",
    "HOLDING",
    "LIMITED",
    "PASS",
    "STATE_NAMES",
    "Intervention",
    "JointLimits",
    "MotionLimiter",
    "SafetyConfig",
    "SafetyFilter",
    "TickResult",
    "Watchdog",
    "Workspace",
    "limits_from_description",
]
