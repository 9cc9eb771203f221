"""One identification from bags to files: read, fit, write (nothing is written on error)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sysid.fit import identify as fit_dynamics
from simreal_ros.sysid.model_selection import parameterisations, select_parameterisation
from simreal_ros.sysid.output import prior_ranges, write_result
from simreal_ros.sysid.parameters import FitParameter, FitSettings, SysidResult
from simreal_ros.sysid.recording import read_replay_episodes
from simreal_ros.sysid.simulate import ReplaySimulator


def identify_bags(
    bags: Path | str | Sequence[Path | str],
    out_dir: Path | str,
    task: str | None = None,
    parameters: Sequence[FitParameter] | None = None,
    holdout: int = 2,
    settings: FitSettings | None = None,
    *,
    robot: RobotDescription,
    max_episodes: int = 0,
    progress=None,
) -> tuple[SysidResult, Path]:
    """Identify from ``bags`` (the newest ``max_episodes`` when > 0); returns the result and
    the written profile.yaml, for ``robot`` (the arm that recorded them).
    ``SysidInputError`` on unusable bags, before any write.
    ``parameters`` None: choose among ``parameterisations`` by held-out error first."""
    started = time.monotonic()
    episodes = read_replay_episodes(bags, robot, task)
    if max_episodes > 0:
        episodes = episodes[-max_episodes:]
    settings = settings or FitSettings()
    simulator = ReplaySimulator(
        episodes, robot, threads=settings.threads, segment_ticks=settings.segment_ticks
    )
    start, model, table = None, "", []
    if parameters is None:
        options = parameterisations(robot.joint_names, simulator.reference.nominal_dynamics)
        model, start, table = select_parameterisation(
            episodes, options, holdout, settings, simulator, progress
        )
        parameters = options[model]
    result = fit_dynamics(
        episodes, parameters, holdout, settings, robot, progress=progress, simulator=simulator,
        start=start, prior=prior_ranges(parameters),
    )  # fmt: skip
    result.model, result.model_selection = model, table
    if table:
        result.evaluations += sum(row["replays"] for row in table)
    result.seconds = time.monotonic() - started
    result.replayed_steps = simulator.replayed_steps
    return result, write_result(result, out_dir, simulator)
