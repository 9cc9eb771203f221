"""Diagnosis of one loop round from what the round recorded on the stand-in.

The three evaluation sets of `simreal diagnose`, taken from the round itself:
training and shifted conditions are the round's evaluation episodes (recorded through
the graph); the open-loop replay check teacher-forces the running policy on scripted
demonstrations in the stand-in's dynamics and replays its commands in sim (not on the
round's own bags: teacher-forcing a policy on what it recorded itself reproduces its
commands and proves nothing); the demonstrator is the teacher the running version learned
from (``version_demonstrator``); the motion statistics come from the failing training
episodes' bags. The dynamics-gap evidence is the same policy in its own sim, where its
teacher is the reference (``teacher_sim``: ``sim_profile`` for the base and its nominal
teacher, the identified sim for an adapted version; never the stand-in): its
training-condition success, on seeds that follow the replay seeds, and the same replay
check there from the replay seeds' starts (none where that sim cannot be read).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simreal_ros.diagnosis.action_stats import action_statistics
from simreal_ros.diagnosis.classify import ConditionOutcome, classify
from simreal_ros.diagnosis.episodes import episodes_from_bags
from simreal_ros.diagnosis.run import check_own_sim, scripted_replay
from simreal_ros.diagnosis.scenarios import teacher_sim
from simreal_ros.episodes.metadata import CONDITIONS
from simreal_ros.loop.state import ConditionScore
from simreal_ros.robot.description_record import RobotDescription

REPLAY_EPISODES = 3
SIM_EPISODES = 20


def diagnose_round(
    evaluation: Sequence[dict[str, Any]],
    scores: Sequence[ConditionScore],
    policy,
    task: str,
    profile: str,
    replay_seeds: Sequence[int],
    sim_profile: str = "randomized",
    sim_episodes: int = SIM_EPISODES,
    *,
    robot: RobotDescription,
    identifications: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """``evaluation``: the round's evaluation episodes (condition, success, bag_path);
    ``policy``: the running policy (``act(observation) -> command``), as deployed;
    ``replay_seeds``: the starts of the replay check's scripted demonstrations (the loop
    gives ``REPLAY_EPISODES``); ``robot``: the arm; ``identifications``: the run's
    identification summaries; the one that identified the policy's own sim is read."""
    bags = [Path(e["bag_path"]) for e in evaluation if e.get("bag_path")]
    recorded = episodes_from_bags(
        bags, robot.joint_names, task=task, successful_only=False, robot=robot
    )
    own_sim = teacher_sim(getattr(policy, "adapter_dir", None), sim_profile)
    replay = scripted_replay(policy, task, profile, replay_seeds, robot=robot)
    sim_replay = None
    if own_sim:
        sim_replay = scripted_replay(policy, task, own_sim, replay_seeds, robot=robot)
    sim_profile = own_sim or sim_profile
    rate = policy.converter.spec.control_rate_hz
    failing = [
        action_statistics(
            e.commands, e.joint_positions, e.tool_positions, e.goal, 1.0 / rate,
            object_positions=e.object_positions,
        )
        for e in recorded
        if e.condition == "train" and not e.success
    ]  # fmt: skip
    by_condition = {s.condition: s for s in scores}
    outcomes = [
        ConditionOutcome(c, by_condition[c].successes, by_condition[c].episodes)
        if c in by_condition
        else ConditionOutcome(c, 0, 0)
        for c in CONDITIONS
    ]
    sim = own_sim_outcome(policy, task, sim_profile, replay_seeds, sim_episodes, robot=robot)
    residual = None
    for identification in identifications if own_sim else ():
        if identification.get("profile") and _same_file(identification["profile"], own_sim):
            residual = identification.get("residual_over_noise")
    diagnosis = classify(
        outcomes[0], outcomes[1], replay, failing, sim=sim,
        sim_replay=sim_replay if sim else None, identification_residual=residual,
    )  # fmt: skip
    return {
        "label": diagnosis.label,
        "summary": diagnosis.summary.replace("\n", " | "),
        "evidence": {
            "own_sim": sim_profile,
            "replay_fails_only_on_arm": diagnosis.evidence["replay_fails_only_on_arm"],
            "identification_residual": residual,
        },
    }


def own_sim_outcome(
    policy,
    task: str,
    profile: str,
    replay_seeds: Sequence[int],
    episodes: int,
    *,
    robot: RobotDescription,
) -> ConditionOutcome | None:
    """The policy's training-condition success in its own sim on ``robot`` (None:
    ``episodes`` 0)."""
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.training.evaluate import evaluate_episode

    if episodes <= 0:
        return None
    check_own_sim(profile)
    first = (max(replay_seeds) + 1) if len(replay_seeds) else 0
    env = ArmTaskEnv(
        task=task, profile=profile, condition="train",
        control_rate_hz=policy.converter.spec.control_rate_hz, robot=robot,
    )  # fmt: skip
    try:
        records = [
            evaluate_episode(env, policy, seed, "train") for seed in range(first, first + episodes)
        ]
    finally:
        env.close()
    return ConditionOutcome("train", sum(r.success for r in records), len(records))


def _same_file(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()
