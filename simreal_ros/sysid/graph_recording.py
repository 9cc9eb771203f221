"""Record episode bags THROUGH THE GRAPH on a known dynamics profile (for recovery checks).

``record_through_graph(profile, data_dir, episodes)`` starts the sim graph as separate
processes over DDS, as `simreal up` runs it: the sim bridge on ``profile`` (a YAML path),
the safety filter, the shipped policy and the recorder (on the sim clock, so command
receive times and state stamps share one clock), then drives ``episodes`` episodes with
`simreal trials` and stops everything, also on error. Returns the recorded bag
directories. Used by bench/sysid.py and test/graph/test_sysid_graph.py; no rclpy here.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from simreal_ros.episodes.dataset import find_bags
from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv

SIM_TIME = ["-p", "use_sim_time:=true"]


class GraphRecordingError(RuntimeError):
    """A node of the recording graph did not start or the trials failed; the message
    carries the tail of its output."""


def record_through_graph(
    profile: str | Path,
    data_dir: str | Path,
    episodes: int,
    *,
    seed: int = 0,
    episode_seconds: float = 4.0,
    condition: str = "train",
    state_rate_hz: float = 100.0,
    start_timeout: float = 120.0,
    env: dict[str, str] | None = None,
) -> list[Path]:
    """``episodes`` episodes of the shipped push policy in the sim graph on ``profile``."""
    data_dir = Path(data_dir)
    env = env or graph_environment()
    nodes = {
        "sim_bridge": (
            python_module_argv(
                "simreal_ros.nodes.sim_bridge",
                [
                    "-p",
                    "autostart:=true",
                    "-p",
                    f"profile:={profile}",
                    "-p",
                    f"episode_seconds:={episode_seconds}",
                    "-p",
                    f"joint_state_rate_hz:={state_rate_hz}",
                    "-p",
                    f"object_pose_rate_hz:={state_rate_hz}",
                ],
            ),
            "active: episode",
        ),
        "safety": (
            python_module_argv(
                "simreal_ros.nodes.safety",
                ["-p", "autostart:=true", "-p", "allow_resync:=true", *SIM_TIME],
            ),
            "safety",
        ),
        "recorder": (
            python_module_argv(
                "simreal_ros.nodes.recorder",
                ["-p", f"data_dir:={data_dir}", "-p", "min_free_disk_mb:=0.0", *SIM_TIME],
            ),
            "recorder ready",
        ),
        "policy": (
            python_module_argv(
                "simreal_ros.nodes.policy",
                ["-p", "autostart:=true", "-p", "task:=push", *SIM_TIME],
            ),
            "active: publishing",
        ),
    }
    processes: list[NodeProcess] = []
    trials = None
    try:
        for name, (argv, _) in nodes.items():
            processes.append(NodeProcess(name, argv, env))
        for process, (_, ready) in zip(processes, nodes.values(), strict=True):
            if not process.wait_for_output(ready, start_timeout):
                raise GraphRecordingError(
                    f"{process.name} did not start:\n{process.output()[-3000:]}"
                )
        trials = NodeProcess(
            "trials",
            [sys.executable, "-m", "simreal_ros.cli.main", "trials",
             "--episodes", str(episodes), "--timeout", str(episode_seconds + 6.0),
             "--seed", str(seed), "--condition", condition],
            env,
        )  # fmt: skip
        deadline = time.monotonic() + episodes * (episode_seconds + 20.0) + 60.0
        while trials.returncode is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if trials.returncode != 0:
            raise GraphRecordingError(
                f"simreal trials ended with {trials.returncode}:\n{trials.output()[-3000:]}"
            )
    finally:
        for process in [trials, *reversed(processes)]:
            if process is not None:
                process.stop()
    return find_bags(data_dir)
