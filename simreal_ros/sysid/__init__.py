"""System identification: fit the simulator's dynamics to recorded episode bags.

``identify_bags(bags, out_dir)`` reads the bags (``recording``), replays their commands
under candidate dynamics (``simulate``), fits them with CMA-ES (``fit``) and writes a
profile YAML, the numbers and a plot (``output``). No rclpy.
"""

from simreal_ros.sysid.fit import identify
from simreal_ros.sysid.parameters import (
    DEFAULT_PARAMETERS,
    FitParameter,
    FitSettings,
    SysidResult,
    parse_parameters,
    per_joint_parameters,
)
from simreal_ros.sysid.recording import SysidInputError, read_replay_episodes
from simreal_ros.sysid.run import identify_bags

__all__ = [
    "DEFAULT_PARAMETERS",
    "FitParameter",
    "FitSettings",
    "SysidInputError",
    "SysidResult",
    "identify",
    "identify_bags",
    "parse_parameters",
    "per_joint_parameters",
    "read_replay_episodes",
]
