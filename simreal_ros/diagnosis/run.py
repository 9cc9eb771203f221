"""Run the three evaluation sets for a policy and classify its failure mode.

``diagnose(source, task, profile, episodes, seed, workers, bags=None, robot=arm) -> Diagnosis``

1. training conditions: ``episodes`` closed-loop episodes (seeds ``seed``..), success and
   per-episode action statistics;
2. shifted conditions: the same seeds in the shifted condition;
3. the open-loop replay check on successful recorded episodes: the bags under ``bags``
   (read with ``simreal_ros.episodes.dataset``) or, by default (and when the bags hold no
   successful episode), fresh scripted-expert demonstrations in the same profile (seeds
   from ``seed + 100000``).

With ``own_sim`` (a profile that is not a stand-in: the sim where the policy's teacher is
the reference, ``scenarios.teacher_sim``), the same policy also runs there: the training
conditions on the same seeds and the replay check on fresh scripted demonstrations there,
the evidence for ``dynamics_gap`` and for a convention error the arm's replay cannot show.

Then ``classify`` (``simreal_ros.diagnosis.classify``) labels the result. ``source`` is a
``PolicySource`` (checkpoint directory + optional peft adapter, or in-memory actor
weights; see ``simreal_ros.training.evaluate``), built with ``build_policy`` in every
worker process. ``task`` defaults to the checkpoint's. The episodes and the replay run
on a ``simreal_ros.executor`` executor: the one given, else a local one of ``workers``
processes (1: this process). ``real_twin`` is a simulated stand-in for the arm.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from simreal_ros.diagnosis.action_stats import ActionStats, action_statistics
from simreal_ros.diagnosis.classify import ConditionOutcome, Diagnosis, Thresholds, classify
from simreal_ros.diagnosis.episodes import RecordedEpisode
from simreal_ros.diagnosis.replay_check import ReplayResult, replay_check
from simreal_ros.diagnosis.scenarios import check_task
from simreal_ros.executor import SimExecutor, make_executor, split_evenly
from simreal_ros.robot.description import robot_reference
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sim.profiles import check_profile, is_stand_in
from simreal_ros.training.evaluate import PolicySource, build_policy

REPLAY_SEED_OFFSET = 100_000  # demonstration seeds, apart from the evaluation seeds


@dataclasses.dataclass
class EpisodeOutcome:
    seed: int
    condition: str
    success: bool
    failure: bool
    length: int
    final_goal_distance: float
    stats: ActionStats


def _episodes(
    source: PolicySource,
    task: str,
    profile: str,
    condition: str,
    seeds: Sequence[int],
    robot: RobotDescription,
) -> list[EpisodeOutcome]:
    import torch

    torch.set_num_threads(1)
    from simreal_ros.diagnosis.episodes import record_episode
    from simreal_ros.diagnosis.scenarios import make_environment
    from simreal_ros.robot.kinematics import ToolKinematics

    policy = build_policy(source, robot=robot)
    rate = policy.converter.spec.control_rate_hz
    env = make_environment(task, profile, condition, rate, robot=robot)
    fk = ToolKinematics.for_robot(robot)
    out = []
    for seed in seeds:
        episode = record_episode(env, policy, seed, condition, fk, task=task)
        stats = action_statistics(
            episode.commands,
            episode.joint_positions,
            episode.tool_positions,
            episode.goal,
            1.0 / rate,
            object_positions=episode.object_positions if task == "push" else None,
        )
        out.append(
            EpisodeOutcome(
                seed=int(seed),
                condition=condition,
                success=episode.success,
                failure=episode.failure,
                length=episode.length,
                final_goal_distance=episode.final_goal_distance,
                stats=stats,
            )
        )
    return out


def _replay(
    source: PolicySource,
    task: str,
    profile: str,
    seeds: Sequence[int],
    bags: str | None,
    recorded: Sequence[RecordedEpisode] | None,
    robot: RobotDescription,
) -> tuple[ReplayResult | None, str]:
    """The replay check and where its episodes came from."""
    import torch

    torch.set_num_threads(1)
    from simreal_ros.diagnosis.episodes import episodes_from_bags

    policy = build_policy(source, robot=robot)
    spec = policy.converter.spec
    episodes: list[RecordedEpisode] = []
    origin = ""
    if recorded:
        episodes = [e for e in recorded if e.success]
        origin = f"{len(recorded)} given episodes"
    elif bags:
        episodes = episodes_from_bags(bags, spec.joint_names, task=task, robot=robot)
        origin = f"bags in {bags}"
    if not episodes:
        # Nothing usable given (e.g. a round without a success): scripted demonstrations.
        note = f" (no successful episode in {origin})" if origin else ""
        origin = f"{len(seeds)} scripted demonstrations{note}"
        replay = scripted_replay(policy, task, profile, seeds, robot=robot)
        return replay, origin + ("" if replay else ", none successful")
    return replay_check(policy, episodes, profile, task=task, robot=robot), origin


def scripted_replay(
    policy, task: str, profile: str, seeds: Sequence[int], *, robot: RobotDescription
) -> ReplayResult | None:
    """The replay check in ``profile`` on fresh demonstrations there by the teacher
    ``policy``'s version learned from (``version_demonstrator``); None: none succeeded."""
    from simreal_ros.diagnosis.episodes import record_demonstrations
    from simreal_ros.diagnosis.scenarios import version_demonstrator

    episodes = record_demonstrations(
        task, profile, "train", list(seeds), policy.converter.spec.control_rate_hz,
        expert=version_demonstrator(policy, task, robot=robot), robot=robot,
    )  # fmt: skip
    if not episodes:
        return None
    return replay_check(policy, episodes, profile, task=task, robot=robot)


def check_own_sim(own_sim: str, diagnosed: str | None = None) -> str:
    """``own_sim`` unchanged once it loads and can be a policy's own sim: not a stand-in,
    and not ``diagnosed`` (the profile playing the arm); ValueError saying what to give."""
    check_profile(own_sim)
    if own_sim == diagnosed:
        raise ValueError(
            f"own sim {own_sim!r} is the profile diagnosed; give the sim the policy was "
            "trained in, or leave it out."
        )
    if is_stand_in(own_sim):
        raise ValueError(
            f"own sim {own_sim!r} is a stand-in for the arm, not the policy's own sim; "
            "give the profile it was trained in (randomized for the shipped policies)."
        )
    return own_sim


@dataclasses.dataclass(frozen=True)
class DiagnosisJob:
    """One executor item: a condition's chunk of seeds, or (``condition`` None) the replay."""

    source: PolicySource
    task: str
    profile: str
    condition: str | None
    seeds: tuple[int, ...]
    robot: str  # the arm, as another process finds it (``robot_reference``)
    bags: str | None = None
    recorded: tuple[RecordedEpisode, ...] | None = None


def run_job(job: DiagnosisJob):
    """The executor's item function: episode outcomes, or (replay, its source)."""
    from simreal_ros.robot.description import load_robot_description

    robot = load_robot_description(job.robot)
    if job.condition is None:
        return _replay(job.source, job.task, job.profile, job.seeds, job.bags, job.recorded, robot)
    return _episodes(job.source, job.task, job.profile, job.condition, job.seeds, robot)


def diagnose(
    source: PolicySource | str | Path,
    task: str | None = None,
    profile: str = "nominal",
    episodes: int = 20,
    seed: int = 0,
    workers: int = 1,
    bags: str | Path | None = None,
    thresholds: Thresholds | None = None,
    replay_episodes: int = 8,
    recorded: Sequence[RecordedEpisode] | None = None,
    executor: SimExecutor | None = None,
    own_sim: str | None = None,
    *,
    robot: RobotDescription,
) -> Diagnosis:
    """The three evaluation sets of ``robot`` and their classification (see the module
    docstring).

    ``recorded``: episodes to replay (``RecordedEpisode``, e.g. demonstrations of the
    policy's own training slice) instead of ``bags`` or fresh demonstrations.
    """
    check_profile(profile)
    if own_sim is not None:
        check_own_sim(own_sim, profile)
    if episodes < 1:
        raise ValueError("episodes must be at least 1 per condition.")
    if replay_episodes < 1 and not bags and not recorded:
        raise ValueError("replay_episodes must be at least 1.")
    source = source if isinstance(source, PolicySource) else PolicySource(str(source))
    policy = build_policy(source, robot=robot)
    task = check_task(task or policy.converter.spec.task)
    thresholds = thresholds or Thresholds()
    seeds = list(range(seed, seed + episodes))
    replay_seeds = list(
        range(seed + REPLAY_SEED_OFFSET, seed + REPLAY_SEED_OFFSET + replay_episodes)
    )
    bags_arg = str(bags) if bags else None
    arm = robot_reference(robot.source)
    start = time.perf_counter()
    own = executor is None
    if own:
        executor = make_executor("local", max(1, int(workers)))
    with executor if own else nullcontext(executor):
        # The replays, then each condition's seeds in one chunk per worker.
        runs = [(profile, "train"), (profile, "shifted")]
        replays = [
            DiagnosisJob(
                source, task, profile, None, tuple(replay_seeds), arm, bags_arg,
                tuple(recorded) if recorded else None,
            )
        ]  # fmt: skip
        if own_sim is not None:
            runs.append((own_sim, "train"))
            replays.append(DiagnosisJob(source, task, own_sim, None, tuple(replay_seeds), arm))
        jobs = replays + [
            DiagnosisJob(source, task, where, condition, tuple(chunk), arm)
            for where, condition in runs
            for chunk in split_evenly(seeds, executor.workers)
        ]
        outputs = executor.map(run_job, jobs, progress=f"diagnose {profile}")
    replay, replay_source = outputs[0]
    sim_replay = outputs[1][0] if own_sim is not None else None
    rows_of = {run: [] for run in runs}
    for job, rows in zip(jobs[len(replays) :], outputs[len(replays) :], strict=True):
        rows_of[job.profile, job.condition].extend(rows)
    train, shifted, *own = (
        sorted(rows_of[run], key=lambda r: seeds.index(r.seed)) for run in runs
    )
    failing = [r.stats for r in train if not r.success]
    sim = None
    if own:
        sim = ConditionOutcome("train", sum(r.success for r in own[0]), len(own[0]))
    diagnosis = classify(
        ConditionOutcome("train", sum(r.success for r in train), len(train)),
        ConditionOutcome("shifted", sum(r.success for r in shifted), len(shifted)),
        replay,
        failing,
        thresholds,
        sim=sim,
        sim_replay=sim_replay,
    )
    stand_in = " (simulated stand-in for the arm, not the arm)" if is_stand_in(profile) else ""
    replayed = len(replay.episodes) if replay else 0
    trained_for = policy.converter.spec.task
    other_task = f" (trained for {trained_for})" if trained_for != task else ""
    header = (
        f"policy {policy.version}{other_task} on {task}, profile {profile}{stand_in}; "
        f"{episodes} episodes per condition (seeds {seeds[0]}..{seeds[-1]}); replay of "
        f"{replayed} successful episodes from {replay_source}; "
        f"{time.perf_counter() - start:.1f} s"
    )
    diagnosis.summary = header + "\n" + diagnosis.summary
    diagnosis.evidence.update(
        {
            "policy_version": policy.version,
            "task": task,
            "profile": profile,
            "stand_in": is_stand_in(profile),
            "seeds": seeds,
            "replay_source": replay_source,
            "own_sim": own_sim,
            "episodes": {
                condition: [_episode_dict(r) for r in rows]
                for condition, rows in (("train", train), ("shifted", shifted))
            },
        }
    )
    return diagnosis


def _episode_dict(row: EpisodeOutcome) -> dict[str, Any]:
    out = dataclasses.asdict(row)
    out["stats"] = row.stats.to_dict()
    out["final_goal_distance"] = (
        None if not np.isfinite(row.final_goal_distance) else row.final_goal_distance
    )
    return out
