"""One identification from bags to files: read, fit, write (nothing is written on error)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from simreal_ros.robot.description import RobotDescription, load_robot_description
from simreal_ros.sysid.fit import DEFAULT_PARAMETERS, FitParameter, FitSettings, SysidResult
from simreal_ros.sysid.fit import identify as fit_dynamics
from simreal_ros.sysid.output import write_result
from simreal_ros.sysid.recording import read_replay_episodes
from simreal_ros.sysid.simulate import ReplaySimulator


def identify_bags(
    bags: Path | str | Sequence[Path | str],
    out_dir: Path | str,
    task: str | None = None,
    parameters: Sequence[FitParameter] = DEFAULT_PARAMETERS,
    holdout: int = 2,
    settings: FitSettings | None = None,
    robot: RobotDescription | None = None,
    max_episodes: int = 0,
    progress=None,
) -> tuple[SysidResult, Path]:
    """Identify from ``bags`` (the newest ``max_episodes`` when > 0); returns the result and
    the written profile.yaml. ``SysidInputError`` on unusable bags, before any write."""
    robot = robot or load_robot_description()
    episodes = read_replay_episodes(bags, robot, task)
    if max_episodes > 0:
        episodes = episodes[-max_episodes:]
    settings = settings or FitSettings()
    simulator = ReplaySimulator(episodes, robot, threads=settings.threads)
    result = fit_dynamics(
        episodes, parameters, holdout, settings, robot, progress=progress, simulator=simulator
    )
    return result, write_result(result, out_dir, simulator)
