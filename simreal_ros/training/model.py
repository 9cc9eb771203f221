"""Actor and twin critics (SAC style) over normalised observations and [-1, 1] actions.

Every Linear layer has a stable name LoRA can target: the actor's ``trunk.0``,
``trunk.2``, ``mean_head`` (and ``log_std_head``, used only when sampling), the critics'
``q1.0``/``q1.2``/``q1.4`` and ``q2.*``. ``ACTOR_LORA_TARGETS`` is the default target set.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from simreal_ros.policy.spec import LOG_STD_MAX, LOG_STD_MIN

ACTOR_LORA_TARGETS = ("trunk.0", "trunk.2", "mean_head")


@dataclasses.dataclass(frozen=True)
class Architecture:
    obs_dim: int
    act_dim: int
    actor_hidden: tuple[int, ...] = (256, 256)
    critic_hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"

    def to_dict(self) -> dict[str, Any]:
        return {
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "actor_hidden": list(self.actor_hidden),
            "critic_hidden": list(self.critic_hidden),
            "activation": self.activation,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Architecture:
        if data.get("activation", "relu") != "relu":
            raise ValueError(f"architecture.activation = {data['activation']!r}; only relu.")
        return cls(
            obs_dim=int(data["obs_dim"]),
            act_dim=int(data["act_dim"]),
            actor_hidden=tuple(int(h) for h in data["actor_hidden"]),
            critic_hidden=tuple(int(h) for h in data["critic_hidden"]),
        )


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """Gaussian policy squashed by tanh; the deterministic action is tanh(mean)."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.arch = arch
        sizes = [arch.obs_dim, *arch.actor_hidden]
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.ReLU()]
        self.trunk = nn.Sequential(*layers)
        self.mean_head = nn.Linear(sizes[-1], arch.act_dim)
        self.log_std_head = nn.Linear(sizes[-1], arch.act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action in [-1, 1] (what deployment runs)."""
        return torch.tanh(self.mean_head(self.trunk(obs)))

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(obs)
        log_std = self.log_std_head(features).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return self.mean_head(features), log_std

    def explore(self, obs: torch.Tensor, std_max: float = 0.0) -> torch.Tensor:
        """An exploratory action from the policy's own tanh-Gaussian, its std capped at
        ``std_max`` (0: uncapped)."""
        mean, log_std = self.distribution(obs)
        std = log_std.exp()
        if std_max > 0:
            std = std.clamp(max=std_max)
        return torch.tanh(mean + std * torch.randn_like(mean))

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised tanh-Gaussian sample and its log-probability."""
        mean, log_std = self.distribution(obs)
        std = log_std.exp()
        noise = torch.randn_like(mean)
        pre_tanh = mean + std * noise
        action = torch.tanh(pre_tanh)
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # tanh change of variables, numerically stable form.
        log_prob -= (2 * (math.log(2) - pre_tanh - nn.functional.softplus(-2 * pre_tanh))).sum(-1)
        return action, log_prob


class TwinCritic(nn.Module):
    """Two independent Q(s, a) networks; the min of the two curbs overestimation."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        sizes = [arch.obs_dim + arch.act_dim, *arch.critic_hidden, 1]
        self.q1 = _mlp(sizes)
        self.q2 = _mlp(sizes)

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


class ActorCritic(nn.Module):
    """The pretrained policy and its value function, as one checkpointable unit."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.arch = arch
        self.actor = Actor(arch)
        self.critic = TwinCritic(arch)

    @torch.no_grad()
    def v_sim(self, obs: torch.Tensor, samples: int = 0) -> torch.Tensor:
        """V_sim(s) = min(Q1, Q2)(s, a) at the actor's mean action (learner/sgft.py's choice).

        ``samples`` > 0 averages the min over that many sampled actions instead.
        Deterministic and gradient-free: SGFT uses it as a frozen potential.
        """
        if samples <= 0:
            q1, q2 = self.critic(obs, self.actor(obs))
            return torch.minimum(q1, q2)
        total = torch.zeros(obs.shape[:-1], dtype=obs.dtype)
        for _ in range(samples):
            action, _ = self.actor.sample(obs)
            q1, q2 = self.critic(obs, action)
            total += torch.minimum(q1, q2)
        return total / samples


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging: each target weight moves ``tau`` of the way to its source's."""
    for t, p in zip(target.parameters(), source.parameters(), strict=True):
        t.mul_(1.0 - tau).add_(p.detach(), alpha=tau)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
