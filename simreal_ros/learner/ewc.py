"""Elastic weight consolidation: a quadratic pull towards the sim solution, per parameter.

The diagonal Fisher is estimated once, from SIM transitions, as the mean squared gradient
of the loss the caller gives (by default the actor's behaviour-cloning loss on sim
actions, i.e. the empirical Fisher of a fixed-variance Gaussian policy). The penalty is
weight/2 * sum_i F_i (theta_i - theta*_i)^2 over the trainable parameters, so weights the
sim data depends on move least.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn


class ElasticWeightConsolidation:
    def __init__(
        self,
        parameters: Iterable[tuple[str, nn.Parameter]],
        loss_on_sample: Callable[[int], torch.Tensor],
        samples: int,
        weight: float,
        normalize: bool = True,
    ) -> None:
        """``loss_on_sample(i)`` returns the loss of sim sample i (one row, or a small batch).

        ``normalize`` scales the Fisher to mean 1 so ``weight`` means the same across models.
        """
        self.weight = float(weight)
        self.named = [(n, p) for n, p in parameters if p.requires_grad]
        if not self.named:
            raise ValueError("EWC needs trainable parameters; none require grad.")
        self.anchor = {n: p.detach().clone() for n, p in self.named}
        fisher = {n: torch.zeros_like(p) for n, p in self.named}
        for i in range(samples):
            for _, p in self.named:
                p.grad = None
            loss_on_sample(i).backward()
            for n, p in self.named:
                if p.grad is not None:
                    fisher[n] += p.grad.detach() ** 2
        for _, p in self.named:
            p.grad = None
        for n in fisher:
            fisher[n] /= max(samples, 1)
        if normalize:
            total = sum(float(f.sum()) for f in fisher.values())
            count = sum(f.numel() for f in fisher.values())
            mean = total / max(count, 1)
            if mean > 0:
                for n in fisher:
                    fisher[n] /= mean
        self.fisher = fisher

    def penalty(self) -> torch.Tensor:
        total = torch.zeros(())
        for n, p in self.named:
            total = total + (self.fisher[n] * (p - self.anchor[n]) ** 2).sum()
        return 0.5 * self.weight * total

    def stats(self) -> dict[str, float]:
        return {
            "ewc_weight": self.weight,
            "ewc_fisher_mean": float(
                sum(float(f.sum()) for f in self.fisher.values())
                / max(sum(f.numel() for f in self.fisher.values()), 1)
            ),
            "ewc_penalty": float(self.penalty().detach()),
        }
