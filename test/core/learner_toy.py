"""A one-dimensional reaching problem with a sim-to-real gap, for the learner's tests.

State x and goal g in [-1, 1]; the action a in [-1, 1] moves x by GAIN * (a + bias). Sim has
no bias; the "real" system drifts (bias REAL_BIAS, like an unmodelled load), so the
sim-optimal actor overshoots on it. The gap is in the dynamics only: which states are good
(near the goal) is the same, which is SGFT's premise. Reward is -|x' - g| per step,
8 steps per episode (time limit = truncation).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from simreal_ros.learner.replay import Transitions
from simreal_ros.training.model import Actor, Architecture

GAIN, REAL_BIAS, STEPS = 0.2, 0.5, 8


def step(x, a, bias: float):
    return np.clip(x + GAIN * np.clip(a + bias, -1.5, 1.5), -1.0, 1.0)


def optimal_action(obs: np.ndarray, bias: float) -> np.ndarray:
    return np.clip((obs[:, 1:2] - obs[:, 0:1]) / GAIN - bias, -1.0, 1.0)


def pretrained_actor(seed: int = 0, hidden=(64, 64)) -> Actor:
    """The 'sim policy': the actor behaviour-cloned on the sim-optimal action."""
    torch.manual_seed(seed)
    actor = Actor(Architecture(obs_dim=2, act_dim=1, actor_hidden=hidden))
    optimizer = torch.optim.Adam(actor.parameters(), lr=3e-3)
    rng = np.random.default_rng(seed)
    for _ in range(300):
        obs = rng.uniform(-1, 1, size=(128, 2)).astype(np.float32)
        target = torch.as_tensor(optimal_action(obs, 0.0) * 0.98, dtype=torch.float32)
        mean, log_std = actor.distribution(torch.as_tensor(obs))
        # SAC-pretrained actors explore a little: std about 0.2 before the tanh.
        loss = ((torch.tanh(mean) - target) ** 2).mean() + ((log_std + 1.6) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return actor


class SimCritic(nn.Module):
    """Twin Q_sim of the sim system: minus the distance after the step, over (1 - gamma)."""

    def __init__(self, gamma: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(1.0 / (1.0 - gamma)), requires_grad=False)

    def forward(self, obs, action):
        x, g = obs[:, 0], obs[:, 1]
        q = -torch.abs(torch.clamp(x + GAIN * action[:, 0], -1, 1) - g) * self.scale
        return q, q


def rollouts(policy, episodes: int, bias: float, noise: float, seed: int, source: str):
    """Transitions of ``policy`` (obs -> action array) with Gaussian exploration noise."""
    rng = np.random.default_rng(seed)
    rows = {k: [] for k in "oarnte"}
    for e in range(episodes):
        x, g = rng.uniform(-1, 1, size=2)
        for t in range(STEPS):
            obs = np.array([[x, g]], np.float32)
            a = np.clip(policy(obs)[0] + noise * rng.standard_normal(1), -1, 1)
            x2 = float(step(x, a[0], bias))
            rows["o"].append(obs[0])
            rows["a"].append(a)
            rows["r"].append(-abs(x2 - g))
            rows["n"].append([x2, g])
            rows["t"].append(t == STEPS - 1)
            rows["e"].append(f"{source}-{seed}-{e}")
            x = x2
    n = len(rows["r"])
    return Transitions(
        obs=np.asarray(rows["o"], np.float32),
        actions=np.asarray(rows["a"], np.float32),
        rewards=np.asarray(rows["r"], np.float32),
        next_obs=np.asarray(rows["n"], np.float32),
        terminals=np.zeros(n, bool),
        truncateds=np.asarray(rows["t"]),
        episode_ids=np.asarray(rows["e"]),
        sources=np.asarray([source] * n),
        interventions=np.zeros(n, bool),
        episode_success=np.ones(n, bool),
    )


@torch.no_grad()
def real_return(actor, episodes: int = 64, seed: int = 123) -> float:
    """Mean return of the deterministic actor on the real system, fixed start states."""
    rng = np.random.default_rng(seed)
    starts = rng.uniform(-1, 1, size=(episodes, 2))
    x, g = starts[:, 0].copy(), starts[:, 1]
    total = np.zeros(episodes)
    for _ in range(STEPS):
        obs = torch.as_tensor(np.stack([x, g], 1), dtype=torch.float32)
        a = actor(obs).numpy()[:, 0]
        x = step(x, a, REAL_BIAS)
        total += -np.abs(x - g)
    return float(total.mean())


@torch.no_grad()
def invert_layer(peft_model, layer: str = "mean_head") -> None:
    """Sabotage: set the LoRA update of ``layer`` to -2 W, so W + BA = -W (actions flip)."""
    module = peft_model.base_model.model.get_submodule(layer)
    weight = module.base_layer.weight  # (out, in)
    a, b = module.lora_A["default"].weight, module.lora_B["default"].weight  # (r, in), (out, r)
    rank, out = a.shape[0], weight.shape[0]
    if rank < out:
        raise ValueError(f"rank {rank} < {out} outputs: cannot express -2W exactly.")
    a.zero_()
    b.zero_()
    a[:out] = weight
    b[:, :out] = -2.0 * torch.eye(out) / module.scaling["default"]


@torch.no_grad()
def success_rate(actor, seeds, bias: float = REAL_BIAS, tolerance: float = 0.1):
    """Per-seed success of the deterministic actor: within ``tolerance`` of g at the end."""
    out = []
    for seed in seeds:
        x, g = np.random.default_rng(int(seed)).uniform(-1, 1, size=2)
        total = 0.0
        for _ in range(STEPS):
            a = actor(torch.tensor([[x, g]], dtype=torch.float32)).numpy()[0, 0]
            x = float(step(x, a, bias))
            total -= abs(x - g)
        out.append((abs(x - g) < tolerance, total))
    return out
