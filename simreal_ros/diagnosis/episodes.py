"""Recorded episodes for the diagnosis: observations, commands and trajectories, per step.

``RecordedEpisode`` is one episode as the replay check needs it: the observation the
commander saw before each command (``observations[t]``), the command it sent
(``commands[t]``, absolute joint targets in controller order), and the measured
trajectory (``joint_positions``, ``tool_positions``, ``object_positions``: T+1 rows, the
start state first). Sources:

- ``record_episode(env, actor, seed, condition, forward_kinematics)``: one closed-loop
  episode in a ``TaskEnvironment`` with any ``act(observation)`` commander (a policy or an
  expert), run by the sim core's ``rollout``;
- ``record_demonstrations(task, profile, condition, seeds)``: the scripted expert's
  successful episodes (fresh demonstrations);
- ``episodes_from_bags(paths, joint_names)``: recorded episode bags, read with
  ``simreal_ros.episodes.dataset`` (successful episodes by default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.robot.observation import RAW_FIELDS


@dataclasses.dataclass
class RecordedEpisode:
    """One episode, step by step (see the module docstring)."""

    task: str
    condition: str
    seed: int | None
    source: str  # "expert", "policy" or the bag path
    observations: list[dict[str, np.ndarray]]  # T: what the commander saw before command t
    commands: np.ndarray  # (T, J) absolute joint position targets
    joint_positions: np.ndarray  # (T+1, J) measured, start state first
    tool_positions: np.ndarray  # (T+1, 3)
    object_positions: np.ndarray  # (T+1, 3)
    goal: np.ndarray  # (3,)
    success: bool
    failure: bool = False
    final_goal_distance: float = float("nan")

    @property
    def length(self) -> int:
        return len(self.commands)


def _copy_observation(observation) -> dict[str, np.ndarray]:
    return {k: np.array(observation[k], dtype=np.float64) for k in RAW_FIELDS}


def tool_positions_of(joint_positions: np.ndarray, forward_kinematics) -> np.ndarray:
    return np.array([forward_kinematics(q) for q in np.asarray(joint_positions)])


class _ResetWithEnv:
    """A diagnosis commander as a rollout actor: its ``reset`` may take the task
    environment (a scenario's demonstrator reads the episode's hidden state from it)."""

    def __init__(self, actor, env) -> None:
        self.actor, self.env = actor, env

    def reset(self) -> None:
        reset = getattr(self.actor, "reset", None)
        if reset is not None:
            try:
                reset(self.env)
            except TypeError:
                reset()

    def act(self, observation) -> np.ndarray:
        return self.actor.act(observation)


def record_episode(
    env,
    actor,
    seed: int,
    condition: str,
    forward_kinematics,
    task: str | None = None,
    source: str = "policy",
) -> RecordedEpisode:
    """One closed-loop episode in a ``TaskEnvironment``; ``actor`` has ``act(observation)``
    (and optionally ``reset(env)``, called after the env reset)."""
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.sim.rollout import rollout

    observations, commands = [], []
    positions, objects = [], []

    def record(step) -> None:
        if step.index == 0:
            positions.append(np.array(step.observation["joint_position"], dtype=np.float64))
            objects.append(np.array(step.observation["object_position"], dtype=np.float64))
        observations.append(_copy_observation(step.observation))
        commands.append(step.command.copy())
        positions.append(np.array(step.next_observation["joint_position"], dtype=np.float64))
        objects.append(np.array(step.next_observation["object_position"], dtype=np.float64))

    outcome = rollout(ArmTaskEnv.for_core(env), _ResetWithEnv(actor, env), seed, condition, record)
    joints = np.array(positions)
    return RecordedEpisode(
        task=task or env.task.name,
        condition=condition,
        seed=int(seed),
        source=source,
        observations=observations,
        commands=np.array(commands),
        joint_positions=joints,
        tool_positions=tool_positions_of(joints, forward_kinematics),
        object_positions=np.array(objects),
        goal=np.array(observations[0]["goal_position"], dtype=np.float64),
        success=outcome.success,
        failure=outcome.failure,
        final_goal_distance=outcome.final_goal_distance,
    )


def record_demonstrations(
    task: str,
    profile: str = "nominal",
    condition: str = "train",
    seeds: Iterable[int] = range(10),
    control_rate_hz: float = 20.0,
    successful_only: bool = True,
    expert=None,
    *,
    robot: RobotDescription,
) -> list[RecordedEpisode]:
    """Scripted-expert episodes of ``robot`` in ``profile`` (the successful ones by
    default)."""
    from simreal_ros.diagnosis.scenarios import make_demonstrator, make_environment
    from simreal_ros.robot.kinematics import ToolKinematics

    env = make_environment(task, profile, condition, control_rate_hz, robot=robot)
    expert = expert or make_demonstrator(task, control_rate_hz, robot=robot)
    fk = ToolKinematics.for_robot(robot)
    out = []
    for seed in seeds:
        episode = record_episode(env, expert, seed, condition, fk, task=task, source="expert")
        if episode.success or not successful_only:
            out.append(episode)
    return out


def episodes_from_bags(
    paths: Path | str | Sequence[Path | str],
    joint_names: Sequence[str],
    task: str = "",
    successful_only: bool = True,
    *,
    robot: RobotDescription,
) -> list[RecordedEpisode]:
    """Episodes of ``robot`` from recorded bags (rosbag2/MCAP), one ``RecordedEpisode`` per
    bag (``joint_names``: the order the bags' joint states are read in).

    Uses ``simreal_ros.episodes.dataset`` for reading and aligning: observation t is the
    state the action t was computed from; the last state is ``next_obs`` of the last step.
    """
    from simreal_ros.episodes.dataset import EpisodeFilter, find_bags, read_episode
    from simreal_ros.episodes.dataset import read_episode_metadata as read_bag_metadata
    from simreal_ros.robot.kinematics import ToolKinematics

    fk = ToolKinematics.for_robot(robot)
    where = EpisodeFilter(outcomes=("success",) if successful_only else ())
    out = []
    for bag in find_bags(paths):
        meta = read_bag_metadata(bag)
        if meta is None or not where.accepts(meta):
            continue
        data = read_episode(bag, joint_names, meta=meta)
        if len(data) == 0:
            continue
        rows = [{k: data.obs[k][i] for k in RAW_FIELDS} for i in range(len(data))]
        if any(not np.all(np.isfinite(np.concatenate(list(r.values())))) for r in rows):
            continue  # a bag without object pose or goal cannot be replayed
        last = {k: data.next_obs[k][-1] for k in RAW_FIELDS}
        joints = np.array([r["joint_position"] for r in rows] + [last["joint_position"]])
        objects = np.array([r["object_position"] for r in rows] + [last["object_position"]])
        out.append(
            RecordedEpisode(
                task=meta.task or task,
                condition=meta.condition or "train",
                seed=None,  # replayed from the recorded start state, not a seed
                source=str(bag),
                observations=rows,
                commands=np.asarray(data.actions, dtype=np.float64),
                joint_positions=joints,
                tool_positions=tool_positions_of(joints, fk),
                object_positions=objects,
                goal=np.asarray(rows[0]["goal_position"], dtype=np.float64),
                success=meta.outcome == "success" or bool(meta.success),
            )
        )
    return out
