"""Optional short model-based rollouts for SGFT (config ``model_rollouts``; off by default).

A small MLP learns the real system's one-step change of the (normalised) observation and
its reward from real transitions. From real start states it rolls the current actor
forward ``rollout_length`` steps; those synthetic transitions (source "model", never
terminal, truncated at the rollout's end, V_sim cached) are mixed into each SGFT batch at
``rollout_fraction``. Short rollouts keep model error from compounding; V_sim supplies the
value beyond them, which is SGFT's H-step idea applied to imagined steps.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from simreal_ros.learner.replay import Batch, Transitions, batch_from


class DynamicsModel(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...] = (256, 256)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        inputs = obs_dim + act_dim
        for width in hidden:
            layers += [nn.Linear(inputs, width), nn.ReLU()]
            inputs = width
        layers.append(nn.Linear(inputs, obs_dim + 1))
        self.net = nn.Sequential(*layers)
        self.obs_dim = obs_dim

    def forward(self, obs: torch.Tensor, action: torch.Tensor):
        out = self.net(torch.cat([obs, action], dim=-1))
        return obs + out[:, : self.obs_dim], out[:, self.obs_dim]


class ModelRollouts:
    def __init__(
        self, obs_dim: int, act_dim: int, hidden=(256, 256), learning_rate: float = 1e-3, seed=0
    ) -> None:
        self.model = DynamicsModel(obs_dim, act_dim, hidden)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=learning_rate)
        self.rng = np.random.default_rng(seed)
        self.data: Transitions | None = None

    def fit(self, real: Transitions, updates: int, batch_size: int = 128) -> float:
        """Train on real transitions (rows that end in a true termination carry no next
        state worth predicting and are skipped). Returns the last loss."""
        rows = np.flatnonzero(~real.terminals)
        if len(rows) == 0:
            raise ValueError("no non-terminal real transitions to fit a dynamics model on.")
        loss = torch.zeros(())
        for _ in range(updates):
            index = self.rng.choice(rows, min(batch_size, len(rows)))
            obs = torch.as_tensor(real.obs[index])
            next_obs, reward = self.model(obs, torch.as_tensor(real.actions[index]))
            loss = ((next_obs - torch.as_tensor(real.next_obs[index])) ** 2).mean() + (
                (reward - torch.as_tensor(real.rewards[index])) ** 2
            ).mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def rollout(
        self, actor, real: Transitions, starts: int, length: int, v_sim=None
    ) -> Transitions:
        """``starts`` rollouts of ``length`` steps of ``actor.sample`` from real states."""
        obs = torch.as_tensor(real.obs[self.rng.choice(len(real), starts)])
        parts = {k: [] for k in ("o", "a", "r", "n")}
        for _ in range(length):
            action, _ = actor.sample(obs)
            next_obs, reward = self.model(obs, action)
            for key, value in zip("oarn", (obs, action, reward, next_obs), strict=True):
                parts[key].append(value.numpy())
            obs = next_obs
        n = starts * length
        truncated = np.zeros((length, starts), bool)
        truncated[-1] = True
        ids = np.tile(np.arange(starts), length).astype(str)
        data = Transitions(
            obs=np.concatenate(parts["o"]).astype(np.float32),
            actions=np.concatenate(parts["a"]).astype(np.float32),
            rewards=np.concatenate(parts["r"]).astype(np.float32),
            next_obs=np.concatenate(parts["n"]).astype(np.float32),
            terminals=np.zeros(n, bool),
            truncateds=truncated.reshape(-1),
            episode_ids=np.char.add("model-", ids),
            sources=np.asarray(["model"] * n),
            interventions=np.zeros(n, bool),
            episode_success=np.zeros(n, bool),
        )
        if v_sim is not None:
            v_sim.annotate(data)
        self.data = data
        return data

    def batches(self, fraction: float):
        """``extra_batches`` for the fine-tuner: fraction * B model rows per batch."""

        def extra(batch_size: int) -> Batch | None:
            if self.data is None or len(self.data) == 0:
                return None
            n = max(1, round(batch_size * fraction))
            index = self.rng.integers(0, len(self.data), n)
            return batch_from(self.data, index, np.ones(n, bool))

        return extra
