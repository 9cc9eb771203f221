"""Trial runner configuration (declared once; the node turns it into ROS parameters)."""

from __future__ import annotations

import dataclasses

from simreal_ros.config_schema import setting, validate

PROFILES = ("sim", "real")


@dataclasses.dataclass
class TrialRunnerConfig:
    profile: str = setting(
        "sim", "sim: reset through the sim bridge; real: operator", choices=PROFILES
    )
    episodes: int = setting(5, "Episodes to run", low=0, high=100000, dynamic=True)
    condition: str = setting(
        "train",
        "Start-state/goal distribution",
        choices=("train", "shifted"),
        dynamic=True,
    )
    seed: int = setting(
        0, "Seed of the first episode; episode k uses seed + k", low=0, high=2**31, dynamic=True
    )
    timeout_s: float = setting(
        30.0,
        "Give up on an episode after this long",
        low=0.1,
        high=86400.0,
        unit="s",
        dynamic=True,
    )
    task: str = setting("push", "Task label stored with each episode", dynamic=True)
    source: str = setting(
        "",
        "Source label (sim, real_twin, real); empty: real on the real profile, else from "
        "the sim bridge's dynamics profile (real_twin is a stand-in, labelled so)",
        dynamic=True,
    )
    reset_service: str = setting("/sim_bridge/reset", "ResetEpisode service of the sim bridge")
    pause_service: str = setting(
        "/sim_bridge/pause",
        "SetBool pause service: paused from before the reset until recording has started, "
        "so no step of an episode goes unrecorded (skipped when the bridge has none)",
    )
    resync_service: str = setting(
        "/safety/resync",
        "Resync service of the safety filter, called after each sim reset with the reset's "
        "stamp, so the filter starts from the new pose (empty: none)",
    )
    dynamics_service: str = setting(
        "/sim_bridge/get_dynamics", "GetDynamics service (profile label)"
    )
    start_service: str = setting("/recorder/start", "StartEpisode service of the recorder")
    stop_service: str = setting("/recorder/stop", "StopEpisode service of the recorder")
    task_status_topic: str = setting("/task/status", "TaskStatus topic")
    takeover_topic: str = setting("/operator/takeover", "Human takeover actions (PolicyAction)")
    service_timeout_s: float = setting(
        10.0, "Wait this long for a service", low=0.1, high=600.0, unit="s"
    )
    keyboard: bool = setting(
        True, "On the real profile, prompt the operator on this terminal (else only ~/label)"
    )

    def __post_init__(self) -> None:
        validate(self)
