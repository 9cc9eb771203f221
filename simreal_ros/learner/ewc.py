"""Elastic weight consolidation: a quadratic pull towards the sim solution, per parameter.

The penalty is weight/2 * sum_i F_i (theta_i - theta*_i)^2 over the trainable parameters,
so the weights the sim behaviour depends on move least.

F is the diagonal of the Fisher information of the policy's own action distribution,
computed analytically on sim observations (``gaussian_policy_fisher``). It is not the
empirical Fisher (squared gradients of a loss on recorded actions): at the policy's own
actions that residual is exactly zero, and so would the Fisher be, which is the usual
case at the start of a LoRA fine-tune (B = 0) or on the base policy's own sim rollouts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

# (mean, log_std) of the pre-tanh Gaussian for a batch of observations.
GaussianHeads = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def gaussian_policy_fisher(
    named_parameters: list[tuple[str, nn.Parameter]],
    distribution: GaussianHeads,
    observations: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Diagonal Fisher of a tanh-squashed diagonal Gaussian policy, averaged over states.

    For a diagonal Gaussian N(mu, sigma^2) the Fisher of the parameters is, exactly,
    J_mu^T Sigma^-1 J_mu + 2 J_logsigma^T J_logsigma. tanh is a bijection of the action
    space, so the squashed policy has the same Fisher. Its diagonal is the sum over action
    dimensions j of (d mu_j / d theta)^2 / sigma_j^2 + 2 (d log sigma_j / d theta)^2,
    computed here with one backward pass per state and output. It depends on the policy
    alone, never on recorded actions, so it does not vanish where the policy is exact.
    """
    fisher = {n: torch.zeros_like(p) for n, p in named_parameters}
    params = [p for _, p in named_parameters]
    for row in observations:
        mean, log_std = distribution(row.unsqueeze(0))
        # Each output scaled so that its squared gradient is its Fisher term.
        outputs = torch.cat(
            [(mean / log_std.detach().exp()).reshape(-1), (2.0**0.5) * log_std.reshape(-1)]
        )
        if not outputs.requires_grad:
            continue
        for k in range(outputs.numel()):
            grads = torch.autograd.grad(
                outputs[k], params, retain_graph=k < outputs.numel() - 1, allow_unused=True
            )
            for (n, _), g in zip(named_parameters, grads, strict=True):
                if g is not None:
                    fisher[n] += g.detach() ** 2
    for n in fisher:
        fisher[n] /= max(len(observations), 1)
    return fisher


class ElasticWeightConsolidation:
    def __init__(
        self,
        parameters: Iterable[tuple[str, nn.Parameter]],
        distribution: GaussianHeads,
        observations: torch.Tensor,
        weight: float,
        normalize: bool = True,
    ) -> None:
        """Anchor ``parameters`` at their current values, with the Fisher on ``observations``.

        ``distribution`` maps observations to the policy's (mean, log_std); it must depend on
        ``parameters``. ``normalize`` scales the Fisher to mean 1 so ``weight`` means the same
        across models.
        """
        self.weight = float(weight)
        self.named = [(n, p) for n, p in parameters if p.requires_grad]
        if not self.named:
            raise ValueError("EWC needs trainable parameters; none require grad.")
        if len(observations) == 0:
            raise ValueError("EWC needs sim observations to estimate the Fisher; none given.")
        self.anchor = {n: p.detach().clone() for n, p in self.named}
        fisher = gaussian_policy_fisher(self.named, distribution, observations)
        total = sum(float(f.sum()) for f in fisher.values())
        count = sum(f.numel() for f in fisher.values())
        mean = total / max(count, 1)
        if not (mean > 0 and torch.isfinite(torch.tensor(mean))):
            raise ValueError(
                f"EWC's Fisher has mean {mean}: the trainable parameters do not move the "
                "policy's action distribution on these observations. Check the LoRA targets."
            )
        if normalize:
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
