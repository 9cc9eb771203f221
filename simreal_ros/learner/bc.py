"""Behaviour cloning of the adapter on successful episodes and human interventions.

Rows kept: every human-intervention step (a correction is a label even in a failed
episode) and every step of a successful episode; failed, uncorrected steps are dropped
unless ``bc_use_failures``. Intervention rows weigh ``bc_intervention_weight`` in the loss.
The loss is the weighted squared error of the deterministic action tanh(mean) in the
normalised action space, plus EWC if enabled.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from simreal_ros.learner import lora
from simreal_ros.learner.replay import Batch, CoTrainingSampler, Transitions


def bc_row_weights(
    data: Transitions, intervention_weight: float, use_failures: bool
) -> np.ndarray:
    weights = np.where(data.episode_success, 1.0, 1.0 if use_failures else 0.0)
    return np.where(data.interventions, intervention_weight, weights).astype(np.float32)


def bc_loss(actor, batch: Batch, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted MSE of the actor's deterministic action against the recorded action."""
    predicted = actor(batch.obs)
    per_row = ((predicted - batch.actions) ** 2).mean(-1)
    if weights is None:
        return per_row.mean()
    return (per_row * weights).sum() / weights.sum().clamp_min(1e-8)


class BehaviourCloning:
    """Trains a peft-wrapped actor; ``step`` does one update, ``train`` many."""

    def __init__(
        self,
        actor_peft,
        data: Transitions,
        *,
        learning_rate: float,
        batch_size: int,
        intervention_weight: float = 5.0,
        use_failures: bool = False,
        real_weight: float = 4.0,
        sim_weight: float = 1.0,
        sim_replay: bool = True,
        ewc=None,
        grad_clip: float = 10.0,
        weight_decay: float = 0.0,
        seed: int = 0,
    ) -> None:
        weights = bc_row_weights(data, intervention_weight, use_failures)
        keep = weights > 0
        if not keep.any():
            raise ValueError(
                "BC has nothing to clone: no successful episodes and no interventions in the "
                "data. Record successes or corrections, or set bc_use_failures."
            )
        self.data = data.subset(keep)
        self.weights = weights[keep]
        self.actor_peft = actor_peft
        self.actor = lora.inner(actor_peft)
        self.sampler = CoTrainingSampler(self.data, real_weight, sim_weight, sim_replay, seed=seed)
        params = [p for _, p in lora.trainable_parameters(actor_peft)]
        self.optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay)
        self.params = params
        self.batch_size = batch_size
        self.ewc = ewc
        self.grad_clip = grad_clip
        self.updates = 0

    def step(self) -> dict[str, float]:
        batch = self.sampler.sample(self.batch_size)
        weights = torch.as_tensor(self.weights[batch.index])
        loss = bc_loss(self.actor, batch, weights)
        total = loss
        metrics = {"bc_loss": float(loss.detach())}
        if self.ewc is not None:
            penalty = self.ewc.penalty()
            total = total + penalty
            metrics["ewc_penalty"] = float(penalty.detach())
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        self.optimizer.step()
        self.updates += 1
        metrics["loss"] = float(total.detach())
        return metrics

    def train(self, updates: int) -> dict[str, float]:
        start = time.perf_counter()
        metrics: dict[str, float] = {}
        for _ in range(updates):
            metrics = self.step()
        elapsed = max(time.perf_counter() - start, 1e-9)
        metrics["samples_per_s"] = updates * self.batch_size / elapsed
        metrics.update(self.sampler.stats())
        return metrics
