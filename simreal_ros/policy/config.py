"""Settings of the policy node (declared once; the node turns them into ROS parameters)."""

from __future__ import annotations

import dataclasses

from simreal_ros.config_schema import setting, validate

# Exploration std cap (normalised action units), shared by the learner's own collection and
# the policy node's collection episodes, so both explore alike.
EXPLORATION_STD_MAX = 0.1


@dataclasses.dataclass
class PolicyNodeConfig:
    checkpoint: str = setting(
        "",
        "Base checkpoint directory; empty means the shipped checkpoints/<task>",
    )
    task: str = setting(
        "push",
        "Task whose shipped checkpoint is used when checkpoint is empty",
        choices=("push", "reach"),
    )
    control_rate_hz: float = setting(
        0.0,
        "Control rate; 0 means the checkpoint's rate (any other value must equal it)",
        low=0.0,
        high=1000.0,
        unit="Hz",
    )
    max_observation_age: float = setting(
        0.5,
        "Skip a tick when the newest joint state or object pose is older than this (the "
        "safety watchdog then holds position)",
        low=0.001,
        high=60.0,
        unit="s",
    )
    image_topic: str = setting(
        "",
        "A camera policy's image topic (sensor_msgs/Image); empty: the checkpoint's "
        "(spec.camera.image_topic). Any other value fails configure: remap the camera "
        "driver's topic instead. Unused by a state policy",
    )
    adapter_store: str = setting(
        "",
        "The learner's adapter store (its store_root): its versions are preloaded at "
        "configure, and ~/rollback follows and updates its active.json; empty: no store, "
        "promoted updates still hot-swap but ~/rollback is refused",
    )
    diagnostics_period: float = setting(
        1.0, "Period of /diagnostics", low=0.05, high=60.0, unit="s"
    )
    autostart: bool = setting(False, "Configure and activate at start-up")
    explore: bool = setting(
        False,
        "Sample actions from the policy's own tanh-Gaussian (its std capped at "
        "exploration_std_max) instead of its mean: on for data-collection episodes, off "
        "for evaluation and deployment",
        dynamic=True,
    )
    exploration_std_max: float = setting(
        EXPLORATION_STD_MAX,
        "Cap on the exploration std, in normalised action units (0: uncapped); the learner's "
        "exploration_std_max, so the arm explores like the learner's own collection",
        low=0.0,
        high=10.0,
        dynamic=True,
    )

    def __post_init__(self) -> None:
        validate(self)
