"""Actor and twin critics (SAC style) over normalised observations and [-1, 1] actions.

Every Linear layer has a stable name LoRA can target: the actor's ``trunk.0``,
``trunk.2``, ``mean_head`` (and ``log_std_head``, used only when sampling), the critics'
``q1.0``/``q1.2``/``q1.4`` and ``q2.*``. ``ACTOR_LORA_TARGETS`` is the default target set.

A camera policy (``Architecture.encoder`` set) is ``CameraActor``: a small CNN
(``encoder.0``/``.2``/``.4``, Conv2d) ending in a spatial softmax, whose keypoints join the
normalised proprioception in the same trunk and heads. Its ``object_head`` predicts the
cube's position on the table (x, y) from the keypoints: an auxiliary target in pretraining
(the sim knows the pose), and a read-out for diagnosis; the action never uses it. It has no
critic.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from simreal_ros.policy.spec import LOG_STD_MAX, LOG_STD_MIN

ACTOR_LORA_TARGETS = ("trunk.0", "trunk.2", "mean_head")
ENCODER_LORA_TARGETS = ("encoder.0", "encoder.2", "encoder.4")


@dataclasses.dataclass(frozen=True)
class EncoderArchitecture:
    """The camera policy's CNN: one Conv2d per entry (ReLU between), 'same'-style padding
    (kernel // 2), then a spatial softmax giving two coordinates per final channel."""

    height: int
    width: int
    channels: tuple[int, ...] = (16, 32, 16)
    kernels: tuple[int, ...] = (5, 3, 3)
    strides: tuple[int, ...] = (2, 1, 1)

    def __post_init__(self) -> None:
        if not len(self.channels) == len(self.kernels) == len(self.strides) >= 1:
            raise ValueError(
                "architecture.encoder: channels, kernels and strides differ in length."
            )
        if min(self.height, self.width, *self.channels, *self.kernels, *self.strides) < 1:
            raise ValueError("architecture.encoder: every size must be positive.")
        if any(k % 2 == 0 for k in self.kernels):
            raise ValueError("architecture.encoder: kernels must be odd.")

    @property
    def feature_dim(self) -> int:
        return 2 * self.channels[-1]

    def to_dict(self) -> dict[str, Any]:
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EncoderArchitecture:
        return cls(
            height=int(data["height"]),
            width=int(data["width"]),
            channels=tuple(int(c) for c in data["channels"]),
            kernels=tuple(int(k) for k in data["kernels"]),
            strides=tuple(int(s) for s in data["strides"]),
        )


@dataclasses.dataclass(frozen=True)
class Architecture:
    obs_dim: int
    act_dim: int
    actor_hidden: tuple[int, ...] = (256, 256)
    critic_hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    encoder: EncoderArchitecture | None = None  # a camera policy's CNN

    def to_dict(self) -> dict[str, Any]:
        out = {
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "actor_hidden": list(self.actor_hidden),
            "critic_hidden": list(self.critic_hidden),
            "activation": self.activation,
        }
        if self.encoder is not None:
            out["encoder"] = self.encoder.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Architecture:
        if data.get("activation", "relu") != "relu":
            raise ValueError(f"architecture.activation = {data['activation']!r}; only relu.")
        return cls(
            obs_dim=int(data["obs_dim"]),
            act_dim=int(data["act_dim"]),
            actor_hidden=tuple(int(h) for h in data["actor_hidden"]),
            critic_hidden=tuple(int(h) for h in data["critic_hidden"]),
            encoder=EncoderArchitecture.from_dict(data["encoder"]) if "encoder" in data else None,
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

    def __init__(self, arch: Architecture, input_dim: int | None = None) -> None:
        super().__init__()
        self.arch = arch
        sizes = [arch.obs_dim if input_dim is None else input_dim, *arch.actor_hidden]
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


def spatial_softmax(maps: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, 2C): each channel's expected (x, y) in [-1, 1] under the softmax
    of its map, x along the width; the numpy twin is ``policy.camera.spatial_softmax``."""
    batch, channels, height, width = maps.shape
    weights = torch.softmax(maps.reshape(batch, channels, height * width), dim=-1)
    weights = weights.reshape(batch, channels, height, width)
    xs = torch.linspace(-1.0, 1.0, width, dtype=maps.dtype)
    ys = torch.linspace(-1.0, 1.0, height, dtype=maps.dtype)
    x = (weights.sum(2) * xs).sum(-1)
    y = (weights.sum(3) * ys).sum(-1)
    return torch.stack([x, y], dim=-1).reshape(batch, 2 * channels)


class CameraActor(Actor):
    """The actor over (normalised proprioception, normalised image (B, 3, H, W))."""

    def __init__(self, arch: Architecture) -> None:
        if arch.encoder is None:
            raise ValueError("a camera actor needs architecture.encoder.")
        encoder = arch.encoder
        super().__init__(arch, input_dim=arch.obs_dim + encoder.feature_dim)
        layers: list[nn.Module] = []
        in_channels = 3
        for i, (c, k, s) in enumerate(
            zip(encoder.channels, encoder.kernels, encoder.strides, strict=True)
        ):
            if i:
                layers.append(nn.ReLU())
            layers.append(nn.Conv2d(in_channels, c, k, stride=s, padding=k // 2))
            in_channels = c
        self.encoder = nn.Sequential(*layers)
        self.object_head = nn.Linear(encoder.feature_dim, 2)  # the cube's (x, y), normalised

    def features(self, image: torch.Tensor) -> torch.Tensor:
        return spatial_softmax(self.encoder(image))

    def forward(self, obs: torch.Tensor, image: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.act_from_features(obs, self.features(image))

    def act_from_features(self, obs: torch.Tensor, keypoints: torch.Tensor) -> torch.Tensor:
        """The deterministic action from proprioception and the encoder's keypoints."""
        return torch.tanh(self.mean_head(self.trunk(torch.cat([obs, keypoints], dim=-1))))


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
        self.actor = Actor(arch) if arch.encoder is None else CameraActor(arch)
        # A camera policy is distilled, not trained by RL: it has no value function.
        self.critic = TwinCritic(arch) if arch.encoder is None else None

    @torch.no_grad()
    def v_sim(self, obs: torch.Tensor, samples: int = 0) -> torch.Tensor:
        """V_sim(s) = min(Q1, Q2)(s, a) at the actor's mean action (learner/sgft.py's choice).

        ``samples`` > 0 averages the min over that many sampled actions instead.
        Deterministic and gradient-free: SGFT uses it as a frozen potential.
        """
        if self.critic is None:
            raise ValueError("this policy has no critic (a camera policy); V_sim needs one.")
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
