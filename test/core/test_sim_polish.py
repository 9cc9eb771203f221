"""The RL polish (learner/sim_polish.py): its update rule on a one-step task with a known
best action, and its gate (the sim replaced by recorded outcomes: a unit test of the gate,
not of the sim)."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from simreal_ros.learner import lora, sim_polish
from simreal_ros.learner.adaptation import (
    AdaptationSettings,
    EpisodeData,
    StandInProfileError,
    actor_numpy_state,
)
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import Actor, Architecture

OBS, ACT = 4, 2
BEST = np.array([0.5, -0.3], np.float32)  # the reward's best action, in every state


def small_actor(seed: int = 0):
    torch.manual_seed(seed)
    return lora.wrap(Actor(Architecture(OBS, ACT, (32, 32), (32, 32))), 4, 8)


def bandit_episodes(count: int, labels: np.ndarray, seed: int = 0) -> list[EpisodeData]:
    """One-step episodes: random states, random actions, reward -|a - BEST|^2."""
    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(count):
        obs = rng.normal(size=(1, OBS)).astype(np.float32)
        action = rng.uniform(-1, 1, size=(1, ACT)).astype(np.float32)
        reward = -((action - BEST) ** 2).sum(-1).astype(np.float32)
        episodes.append(EpisodeData(
            seed=i, condition="train", success=False, steps=1, obs=obs,
            labels=labels.reshape(1, ACT).astype(np.float32), actions=action, rewards=reward,
            next_obs=obs.copy(), terminals=np.ones(1, bool), truncateds=np.zeros(1, bool),
        ))  # fmt: skip
    return episodes


def distance_to(actor_peft, target: np.ndarray, seed: int = 1) -> float:
    obs = torch.as_tensor(np.random.default_rng(seed).normal(size=(256, OBS)), dtype=torch.float32)
    with torch.no_grad():
        return float((lora.inner(actor_peft)(obs) - torch.as_tensor(target)).norm(dim=-1).mean())


def polish_on_bandit(labels: np.ndarray) -> tuple[float, float, dict]:
    actor_peft = small_actor()
    settings = sim_polish.PolishSettings(batch_size=64, critic_hidden=(64, 64),
                                         learning_rate=1e-3)  # fmt: skip
    learner = sim_polish.PolishLearner(actor_peft, lora.merged(actor_peft), OBS, ACT,
                                       settings, seed=0)  # fmt: skip
    learner.set_data(bandit_episodes(600, labels))
    before = distance_to(actor_peft, BEST)
    learner.train(300)  # the critic first fits the reward
    metrics = learner.train(300)
    return before, distance_to(actor_peft, BEST), metrics


def test_a_better_teacher_is_imitated_and_the_policy_moves_toward_the_best_action():
    before, after, metrics = polish_on_bandit(BEST)
    assert after < 0.5 * before, (before, after)
    # The critic values the teacher's label over the anchor's action almost everywhere.
    assert metrics["teacher_preferred"] > 0.8


def test_a_worse_teacher_is_not_imitated_and_the_critic_still_leads_to_the_best_action():
    before, after, metrics = polish_on_bandit(-BEST)  # the teacher's label is the worst
    assert metrics["teacher_preferred"] < 0.2
    assert after < 0.5 * before, (before, after)


def fake_sim(winner: str):
    """``run_map`` stand-in: exploring episodes give bandit data; in the gate the policy
    named ``winner`` ("before": the first state the gate sees) succeeds, the other not."""
    seen: list[dict] = []

    def run_map(fn, jobs, workers, executor=None, label=""):
        if label.startswith("polish gate"):
            first = jobs[0].actor_state
            out = []
            for job in jobs:
                is_before = all(np.array_equal(job.actor_state[k], first[k]) for k in first)
                success = is_before == (winner == "before")
                out.append(EpisodeData(job.seed, job.condition, success, 0,
                                       np.zeros((0, OBS)), np.zeros((0, ACT))))  # fmt: skip
            return out
        seen.append(label)
        return bandit_episodes(len(jobs), BEST, seed=len(seen))

    return run_map


@pytest.mark.parametrize("winner", ["before", "after"])
def test_the_gate_keeps_the_polish_only_where_it_beats_the_dagger_student(monkeypatch, winner):
    robot = load_robot_description()
    checkpoint = types.SimpleNamespace(
        arch=Architecture(OBS, ACT), spec=types.SimpleNamespace(task="push")
    )
    monkeypatch.setattr(sim_polish, "run_map", fake_sim(winner))
    actor_peft = small_actor()
    start = actor_numpy_state(lora.merged(actor_peft))
    settings = sim_polish.PolishSettings(rounds=2, episodes=50, gate_episodes=8,
                                         batch_size=32, critic_hidden=(32, 32))  # fmt: skip
    result = sim_polish.polish(
        actor_peft, "unused", checkpoint, "randomized", (1.0, 1.0, (0.1,)),
        AdaptationSettings(workers=1), settings, robot,
    )  # fmt: skip
    end = actor_numpy_state(lora.merged(actor_peft))
    unchanged = all(np.array_equal(start[k], end[k]) for k in start)
    assert len(result["history"]) == 2
    if winner == "before":
        assert not result["kept"] and unchanged
        assert result["metrics"]["adapt_polish_before"] == 1.0
    else:
        assert result["kept"] and not unchanged
        assert result["metrics"]["adapt_polish_after"] == 1.0


def test_the_polish_refuses_a_stand_in_profile():
    checkpoint = types.SimpleNamespace(arch=Architecture(OBS, ACT))
    with pytest.raises(StandInProfileError):
        sim_polish.polish(
            small_actor(), "unused", checkpoint, "real_twin", (1.0, 1.0, (0.1,)),
            AdaptationSettings(workers=1), sim_polish.PolishSettings(rounds=1),
            load_robot_description(),
        )  # fmt: skip


def test_a_sim_episode_records_its_transitions_and_explores_only_when_asked():
    """Real MuJoCo episodes of the shipped push policy in the prior's sim: the polish's
    data line up step by step, and the exploration noise changes what is sent."""
    from simreal_ros.learner.adaptation import EpisodeJob, run_episode
    from simreal_ros.policy import checkpoint as ckpt
    from simreal_ros.robot.description import robot_reference
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    checkpoint_dir = str(ckpt.shipped_checkpoint("push"))
    actor = load_checkpoint(checkpoint_dir).model.actor
    state = {k: v.detach().numpy().copy() for k, v in actor.state_dict().items()}
    robot = load_robot_description()

    def episode(exploration: float) -> EpisodeData:
        job = EpisodeJob(
            checkpoint_dir, "randomized", "push", 4242, "train", (1.0, 1.0, (0.1,)), state,
            0.0, robot_reference(robot.source), exploration=exploration,
        )  # fmt: skip
        return run_episode(job)

    calm, noisy = episode(0.0), episode(0.3)
    for data in (calm, noisy):
        n = data.steps
        assert n > 10 and len(data.actions) == len(data.rewards) == len(data.next_obs) == n
        np.testing.assert_array_equal(data.next_obs[:-1], data.obs[1:])
        assert np.all(np.abs(data.actions) <= 1.0) and np.all(np.isfinite(data.rewards))
        assert data.terminals[-1] or data.truncateds[-1]
        assert not (data.terminals[:-1].any() or data.truncateds[:-1].any())
    # The same start (same seed, same first state); the noise moves the first action.
    np.testing.assert_array_equal(calm.obs[0], noisy.obs[0])
    assert np.abs(calm.actions[0] - noisy.actions[0]).max() > 0.05
