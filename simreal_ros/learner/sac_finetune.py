"""Off-policy actor-critic fine-tuning (SAC) of the LoRA actor: RL and SGFT in one code path.

- ``shaping=False, horizon=None``: plain SAC on the real reward, warm-started from the
  pretrained actor (+ LoRA) and, by default, the pretrained critics. This is the baseline
  SGFT has to beat.
- ``shaping=True``: the reward is r~ from the frozen V_sim (cached on the transitions) and
  the critic is horizon-indexed (see ``sgft``); H = None is SAC on r~.

What every method shares, so a comparison measures the method and nothing else (the
session passes the same settings to all): the reward scale rule (``reward_scale``, unit
std of the method's own training reward on sim), the terminal failure value, the entropy
treatment (``entropy_backup``: off by default, so entropy is only the actor's
alpha * log pi term), the co-training sampler, the update budget and the trust region.

The actor is ``inner(actor_peft)``, an ``Actor`` with LoRA layers: ``sample(obs)`` gives a
reparameterised tanh-Gaussian action and its log-probability.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch import nn

from simreal_ros.learner import lora
from simreal_ros.learner.bc import bc_loss
from simreal_ros.learner.replay import Batch, CoTrainingSampler, Transitions
from simreal_ros.learner.sgft import actor_head, critic_targets, frozen_copy
from simreal_ros.training.model import soft_update


class ColumnCritic(nn.Module):
    """Makes a critic that returns (B,) Q values return (B, 1), like one horizon head.

    ``scale``: the training reward's scale, so a critic pretrained on the unscaled reward
    starts at the value of the scaled one (Q is linear in the reward).
    """

    def __init__(self, critic: nn.Module, scale: float = 1.0) -> None:
        super().__init__()
        self.critic = critic
        self.scale = float(scale)

    def forward(self, obs: torch.Tensor, action: torch.Tensor):
        q1, q2 = self.critic(obs, action)
        return self.scale * q1.reshape(len(obs), -1), self.scale * q2.reshape(len(obs), -1)


class ActorCriticFineTuner:
    def __init__(
        self,
        actor_peft,
        critic: nn.Module,
        data: Transitions,
        *,
        gamma: float,
        horizon: int | None,
        shaping: bool,
        reward_scale: float = 1.0,
        actor_learning_rate: float = 3e-4,
        critic_learning_rate: float = 3e-4,
        batch_size: int = 128,
        tau: float = 0.005,
        entropy_alpha: float = 0.05,
        auto_entropy: bool = True,
        real_weight: float = 4.0,
        sim_weight: float = 1.0,
        sim_replay: bool = True,
        ewc=None,
        bc_regulariser: float = 0.0,
        critic_warmup: int = 0,
        grad_clip: float = 10.0,
        seed: int = 0,
        extra_batches=None,
        base_actor: nn.Module | None = None,
        anchor_weight: float = 0.0,
        failure_value: float = 0.0,
        entropy_backup: bool = False,
    ) -> None:
        if shaping and (data.v_sim is None or data.v_sim_next is None):
            raise ValueError("SGFT shaping needs V_sim cached on the transitions (annotate).")
        if horizon is not None and horizon < 1:
            raise ValueError(f"horizon {horizon}: use H >= 1, or None for infinite.")
        self.data = data
        self.gamma = gamma
        self.horizon = horizon
        self.shaping = shaping
        self.reward_scale = reward_scale
        self.batch_size = batch_size
        self.tau = tau
        self.ewc = ewc
        self.bc_regulariser = bc_regulariser
        self.critic_warmup = critic_warmup
        self.grad_clip = grad_clip
        if anchor_weight > 0 and base_actor is None:
            raise ValueError("anchor_weight > 0 needs the base actor to anchor to.")
        self.anchor_weight = anchor_weight
        self.failure_value = float(failure_value)
        self.entropy_backup = entropy_backup
        self.base_actor = None
        if base_actor is not None and anchor_weight > 0:
            self.base_actor = frozen_copy(base_actor)
        self.actor_peft = actor_peft
        self.actor = lora.inner(actor_peft)
        self.critic = critic
        self.target_critic = frozen_copy(critic)  # moved only by Polyak averaging
        self.sampler = CoTrainingSampler(data, real_weight, sim_weight, sim_replay, seed=seed)
        self.extra_batches = extra_batches  # e.g. model rollouts: callable(n) -> Batch | None
        self.actor_params = [p for _, p in lora.trainable_parameters(actor_peft)]
        self.critic_params = [p for p in critic.parameters() if p.requires_grad]
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=actor_learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic_params, lr=critic_learning_rate)
        self.auto_entropy = auto_entropy
        self.log_alpha = torch.tensor(math.log(max(entropy_alpha, 1e-8)), requires_grad=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=actor_learning_rate)
        self.target_entropy = -float(data.act_dim)
        self.updates = 0

    def set_data(self, data: Transitions, seed: int = 0) -> None:
        """New round: same networks and optimisers, the grown dataset."""
        if self.shaping and (data.v_sim is None or data.v_sim_next is None):
            raise ValueError("SGFT shaping needs V_sim cached on the transitions (annotate).")
        cfg = self.sampler
        self.data = data
        self.sampler = CoTrainingSampler(
            data, cfg.real_weight, cfg.sim_weight, cfg.sim_replay, seed=seed
        )

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.exp().detach())

    def training_rewards(self, batch: Batch) -> torch.Tensor:
        rewards = batch.rewards + self.gamma * self.failure_value * batch.failures
        if not self.shaping:
            return rewards * self.reward_scale
        keep = 1.0 - batch.terminals
        shaped = rewards + self.gamma * keep * batch.v_sim_next - batch.v_sim
        return shaped * self.reward_scale

    def step(self) -> dict[str, float]:
        batch = self.sampler.sample(self.batch_size)
        if self.extra_batches is not None:
            extra = self.extra_batches(self.batch_size)
            if extra is not None:
                batch = concatenate_batches(batch, extra)
        rewards = self.training_rewards(batch)
        alpha = self.alpha
        # Critic.
        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(batch.next_obs)
            t1, t2 = self.target_critic(batch.next_obs, next_action)
            targets = critic_targets(
                rewards,
                batch.terminals,
                torch.minimum(t1, t2),
                next_log_prob,
                self.gamma,
                alpha if self.entropy_backup else 0.0,
                self.horizon,
            )
        q1, q2 = self.critic(batch.obs, batch.actions)
        critic_loss = ((q1 - targets) ** 2).mean() + ((q2 - targets) ** 2).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        if self.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.critic_params, self.grad_clip)
        self.critic_optimizer.step()
        metrics = {
            "critic_loss": float(critic_loss.detach()),
            "q_mean": float(q1.detach()[:, -1].mean()),
            "reward_mean": float(rewards.mean()),
            "alpha": alpha,
        }
        # Actor (after the critic has had ``critic_warmup`` updates to fit).
        if self.updates >= self.critic_warmup:
            metrics.update(self._actor_step(batch, alpha))
        soft_update(self.target_critic, self.critic, self.tau)
        self.updates += 1
        metrics["loss"] = metrics["critic_loss"] + metrics.get("actor_loss", 0.0)
        return metrics

    def _actor_step(self, batch: Batch, alpha: float) -> dict[str, float]:
        action, log_prob = self.actor.sample(batch.obs)
        q1, q2 = self.critic(batch.obs, action)
        q = actor_head(torch.minimum(q1, q2), self.horizon)
        actor_loss = (alpha * log_prob - q).mean()
        total = actor_loss
        metrics = {
            "actor_loss": float(actor_loss.detach()),
            "entropy": float(-log_prob.detach().mean()),
        }
        if self.base_actor is not None:
            # Trust region to the sim policy. The Q term is divided by the mean norm of its
            # action-gradient, so it pulls with unit strength whatever the reward's scale,
            # offset or the critic's form; the anchor 2 * w * (pi(s) - pi_base(s)) balances
            # it where the deterministic action is about 1 / (2 w) from the base actor's.
            # With a few hundred real transitions the critic's action-gradient is
            # unreliable away from the data; unanchored, one round moved the action by
            # about half its range.
            (gradient,) = torch.autograd.grad(q.sum(), action, retain_graph=True)
            q_scale = gradient.detach().norm(dim=-1).mean().clamp_min(1e-6)
            with torch.no_grad():
                base_action = self.base_actor(batch.obs)
            drift = (self.actor(batch.obs) - base_action).pow(2).sum(-1).mean()
            total = actor_loss / q_scale + self.anchor_weight * drift
            metrics["anchor_drift"] = float(drift.detach())
            metrics["q_scale"] = float(q_scale)
        if self.bc_regulariser > 0:
            keep = batch.is_real & ((batch.interventions > 0) | (batch.episode_success > 0))
            if keep.any():
                term = bc_loss(self.actor, batch, keep.float())
                total = total + self.bc_regulariser * term
                metrics["bc_loss"] = float(term.detach())
        if self.ewc is not None:
            penalty = self.ewc.penalty()
            total = total + penalty
            metrics["ewc_penalty"] = float(penalty.detach())
        self.actor_optimizer.zero_grad(set_to_none=True)
        total.backward()
        if self.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.actor_params, self.grad_clip)
        self.actor_optimizer.step()
        if self.auto_entropy:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()
        return metrics

    def train(self, updates: int) -> dict[str, float]:
        start = time.perf_counter()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for _ in range(updates):
            for key, value in self.step().items():
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
        elapsed = max(time.perf_counter() - start, 1e-9)
        metrics = {k: sums[k] / counts[k] for k in sums}
        metrics["samples_per_s"] = updates * self.batch_size / elapsed
        metrics.update(self.sampler.stats())
        return metrics


def concatenate_batches(a: Batch, b: Batch) -> Batch:
    def cat(x, y):
        if x is None or y is None:
            return None
        return torch.cat([x, y])

    return Batch(
        obs=cat(a.obs, b.obs),
        actions=cat(a.actions, b.actions),
        rewards=cat(a.rewards, b.rewards),
        next_obs=cat(a.next_obs, b.next_obs),
        terminals=cat(a.terminals, b.terminals),
        truncateds=cat(a.truncateds, b.truncateds),
        interventions=cat(a.interventions, b.interventions),
        episode_success=cat(a.episode_success, b.episode_success),
        is_real=cat(a.is_real, b.is_real),
        v_sim=cat(a.v_sim, b.v_sim),
        v_sim_next=cat(a.v_sim_next, b.v_sim_next),
        index=np.concatenate([a.index, np.full(len(b.index), -1)]),
    )
