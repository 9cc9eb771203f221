"""RL polish in the identified simulator: let the adapted student go past its teacher.

DAgger (``adaptation.dagger``) caps the student at its scripted teacher, or below it: the
teacher switches mode at thresholds of a few millimetres, and a smooth student averages
across those edges (docs/results.md). This stage optimises the task's reward instead of
the imitation error, from the DAgger student, in the same adaptation profile:

- data: the student's own episodes in the identified sim, exploring with Gaussian noise of
  a fixed std (``exploration``, TD3's 0.1 in the action's [-1, 1] units), the teacher
  taking a share of the steps (so the critic has seen its actions), every visited state
  labelled by the teacher as in DAgger;
- critic: twin Q networks with LayerNorm after every hidden layer (``sgft.HorizonCritic``,
  the learner's fresh critic), TD3 targets (the smaller twin at the target actor's
  smoothed action), at one update per new transition or more;
- actor: the deterministic policy gradient, scaled by the batch's mean |Q| (TD3+BC's
  normalisation, so the pull is the same whatever the reward's scale), plus a behaviour
  term toward whichever of the teacher's label and the DAgger student's action the critic
  values more at that state (the Q filter of Nair et al. 2018): the student keeps its
  teacher where the teacher is better and stays near itself elsewhere, anchored to the
  policy being improved, never to the base.

A gate decides: the polished student and the DAgger student run the same seeds in the
identified sim; the polished one stands only if it succeeds more often. Otherwise the
DAgger student's weights come back. Nothing here reads a stand-in profile.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from simreal_ros.learner import lora
from simreal_ros.learner.adaptation import (
    AdaptationSettings,
    EpisodeData,
    actor_numpy_state,
    episode_jobs,
    model_profile,
    run_episode,
    run_map,
)
from simreal_ros.learner.sgft import HorizonCritic, critic_targets, frozen_copy
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.training.model import soft_update


@dataclasses.dataclass(frozen=True)
class PolishSettings:
    """The polish's budget and its fixed rules (the learner's ``adapt.polish_*`` fill it)."""

    rounds: int = 0  # 0: no polish
    episodes: int = 64  # exploring sim episodes per round
    updates_per_transition: float = 1.0  # the update-to-data ratio
    gate_episodes: int = 48  # per policy, the same seeds for both (0: no gate)
    exploration: float = 0.1
    teacher_share: float = 0.2  # steps the teacher takes, so the critic sees its actions
    batch_size: int = 256
    gamma: float = 0.98
    tau: float = 0.005
    learning_rate: float = 3e-4
    behaviour_weight: float = 1.0
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    critic_hidden: tuple[int, ...] = (256, 256)


class PolishLearner:
    """TD3 with a Q-filtered behaviour term on ``actor_peft``'s LoRA weights (in place)."""

    def __init__(self, actor_peft, anchor: nn.Module, obs_dim: int, act_dim: int,
                 settings: PolishSettings, seed: int = 0) -> None:  # fmt: skip
        torch.manual_seed(seed)
        self.settings = settings
        self.actor_peft = actor_peft
        self.actor = lora.inner(actor_peft)
        self.anchor = frozen_copy(anchor)
        self.target_actor = frozen_copy(self.actor)
        self.critic = HorizonCritic(obs_dim, act_dim, None, settings.critic_hidden, True)
        self.target_critic = frozen_copy(self.critic)
        self.actor_params = [p for _, p in lora.trainable_parameters(actor_peft)]
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=settings.learning_rate)
        self.critic_optimizer = torch.optim.Adam(
            self.critic.parameters(), lr=settings.learning_rate
        )
        self.rng = np.random.default_rng(seed)
        self.columns: dict[str, torch.Tensor] = {}
        self.reward_scale = 1.0

    def set_data(self, episodes: Sequence[EpisodeData]) -> None:
        """Every transition so far (the buffer keeps all of them; the sim is cheap)."""
        kept = [e for e in episodes if e.steps]
        names = ("obs", "actions", "rewards", "next_obs", "terminals", "labels")
        self.columns = {
            name: torch.as_tensor(np.concatenate([getattr(e, name) for e in kept]))
            for name in names
        }
        self.columns["terminals"] = self.columns["terminals"].float()
        std = float(self.columns["rewards"].std())
        self.reward_scale = 1.0 / std if std > 1e-8 else 1.0

    def __len__(self) -> int:
        return len(self.columns.get("rewards", ()))

    def update(self) -> dict[str, float]:
        s = self.settings
        index = torch.as_tensor(self.rng.integers(0, len(self), s.batch_size))
        obs, actions, rewards, next_obs, terminals, labels = (
            self.columns[n][index]
            for n in ("obs", "actions", "rewards", "next_obs", "terminals", "labels")
        )
        with torch.no_grad():
            noise = (torch.randn_like(actions) * s.target_noise).clamp(
                -s.target_noise_clip, s.target_noise_clip
            )
            next_action = (self.target_actor(next_obs) + noise).clamp(-1.0, 1.0)
            t1, t2 = self.target_critic(next_obs, next_action)
            target = critic_targets(rewards * self.reward_scale, terminals,
                                    torch.minimum(t1, t2), torch.zeros_like(rewards), s.gamma,
                                    0.0, None)  # fmt: skip
        q1, q2 = self.critic(obs, actions)
        critic_loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        nn.utils.clip_grad_norm_(self.critic.parameters(), 10.0)
        self.critic_optimizer.step()

        action = self.actor(obs)
        q = self.critic(obs, action)[0]
        with torch.no_grad():
            anchored = self.anchor(obs)
            both = torch.minimum(*self.critic(obs.repeat(2, 1), torch.cat([labels, anchored])))
            teacher_q, anchor_q = both.chunk(2)
            keep_teacher = (teacher_q > anchor_q).float()
            behaviour_target = keep_teacher * labels + (1.0 - keep_teacher) * anchored
            q_scale = q.abs().mean().clamp_min(1e-6)
        behaviour = (action - behaviour_target).pow(2).sum(-1).mean()
        actor_loss = -q.mean() / q_scale + s.behaviour_weight * behaviour
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        nn.utils.clip_grad_norm_(self.actor_params, 10.0)
        self.actor_optimizer.step()
        soft_update(self.target_critic, self.critic, s.tau)
        soft_update(self.target_actor, self.actor, s.tau)
        return {
            "critic_loss": float(critic_loss.detach()),
            "q_mean": float(q.detach().mean()),
            "behaviour": float(behaviour.detach()),
            "teacher_preferred": float(keep_teacher.mean()),
        }

    def train(self, updates: int) -> dict[str, float]:
        self.actor_peft.train()
        sums: dict[str, float] = {}
        for _ in range(updates):
            for key, value in self.update().items():
                sums[key] = sums.get(key, 0.0) + value
        return {k: v / max(1, updates) for k, v in sums.items()}


def polish(
    actor_peft,
    checkpoint_dir: str,
    checkpoint,
    profile: str,
    tuning: tuple[float, float, tuple[float, ...]],
    adaptation: AdaptationSettings,
    settings: PolishSettings,
    robot: RobotDescription,
    executor: Any = None,
    progress: Callable[[str], None] | None = None,
    action_scale: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The polish's rounds on ``actor_peft`` (in place), anchored to its weights at the
    start, then the gate (``gate_episodes`` 0: none, the polish stands); the per-round
    history, whether the polish was kept, every state visited, and the metrics."""
    model_profile(profile)
    say = progress or (lambda text: None)
    started = time.time()
    before_state = actor_numpy_state(lora.merged(actor_peft))
    before_adapter = lora.adapter_state(actor_peft)
    learner = PolishLearner(actor_peft, lora.merged(actor_peft), checkpoint.arch.obs_dim,
                            checkpoint.arch.act_dim, settings, adaptation.seed + 29)  # fmt: skip
    first = adaptation.seed * 1_000_003 + 600_000
    episodes: list[EpisodeData] = []
    history = []

    def jobs(state, seeds, exploration, teacher_share):
        return episode_jobs(checkpoint_dir, checkpoint, profile, tuning, robot, state, seeds,
                            adaptation.shifted_share, action_scale, exploration,
                            adaptation.safety_filter, teacher_share)  # fmt: skip

    for r in range(settings.rounds):
        state = actor_numpy_state(lora.merged(actor_peft))
        seeds = range(first + r * settings.episodes, first + (r + 1) * settings.episodes)
        batch = run_map(run_episode, jobs(state, seeds, settings.exploration,
                                          settings.teacher_share),
                        adaptation.workers, executor, f"polish {r + 1}")  # fmt: skip
        episodes += batch
        learner.set_data(episodes)
        new = sum(e.steps for e in batch)
        metrics = learner.train(max(1, round(settings.updates_per_transition * new)))
        row = {"round": r, "success": float(np.mean([e.success for e in batch])),
               "transitions": len(learner), **metrics}  # fmt: skip
        history.append(row)
        say(
            f"adaptation: RL polish round {r + 1}/{settings.rounds}: exploring success "
            f"{row['success']:.0%}, critic {row['critic_loss']:.3f}, teacher preferred on "
            f"{row['teacher_preferred']:.0%} of states"
        )
    visited = [e.obs for e in episodes if e.steps] or [np.zeros((0, 0), np.float32)]
    out = {"history": history, "kept": bool(history), "metrics": {},
           "obs": np.concatenate(visited)}  # fmt: skip
    if not history or not settings.gate_episodes:
        return out
    after_state = actor_numpy_state(lora.merged(actor_peft))
    first = adaptation.seed * 1_000_003 + 1_100_000
    seeds = range(first, first + settings.gate_episodes)
    gate = jobs(before_state, seeds, 0.0, 0.0) + jobs(after_state, seeds, 0.0, 0.0)
    results = run_map(run_episode, gate, adaptation.workers, executor, "polish gate")
    before = sum(e.success for e in results[: len(seeds)])
    after = sum(e.success for e in results[len(seeds) :])
    out["kept"] = after > before
    if not out["kept"]:
        lora.set_adapter_weights(actor_peft, before_adapter)
    say(
        f"adaptation: RL polish {'kept' if out['kept'] else 'dropped'}: {after}/{len(seeds)} "
        f"in the identified sim against the DAgger student's {before}/{len(seeds)} "
        f"({time.time() - started:.0f} s)"
    )
    out["metrics"] = {
        "adapt_polish_before": before / len(seeds),
        "adapt_polish_after": after / len(seeds),
        "adapt_polish_kept": float(out["kept"]),
        "adapt_polish_seconds": time.time() - started,
    }
    return out
