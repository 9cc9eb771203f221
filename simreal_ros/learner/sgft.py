"""SGFT: reward shaping by a frozen sim value function, and horizon-indexed critic targets.

SGFT is Simulation-Guided Fine-Tuning (Yin, Westenbroek et al., ICLR 2025, arXiv
2502.02705). Where the paper and its released code leave a point open, this module
chooses:
- V_sim(s) = min(Q1, Q2)(s, mu_sim(s)) of the pretrained (sim) critics at the sim actor's
  mean action, optionally averaged over a few sampled actions. Deterministic, frozen
  (a private copy with requires_grad off, evaluated under no_grad), cached per transition.
- r~ = scale * (r + gamma * (1 - terminal) * V_sim(s') - V_sim(s)). V_sim(s') is dropped
  at a true termination and kept at a time-limit truncation. ``scale`` is a constant fixed
  once from sim statistics, never a running normaliser.
- A terminal failure (the cube off the table) leads to an absorbing state of value
  ``failure_value`` (every method, see ``with_failure_value``): r becomes
  r + gamma * failure_value there. With V = 0 after a failure and negative dense rewards,
  r - V_sim(s) at a failure would be the largest shaped reward there is, and short
  horizons would learn to fail fast. The auto value (``auto_failure_value``) makes the
  failing step's r + gamma * failure_value no larger than the worst r + gamma * V_sim(s')
  of any step in the data, so on that data failing is never the best shaped reward.
  Shaping and the horizon identities hold unchanged with r replaced by that reward.
- Horizon H: a critic Q(s, a, k), k = 1..H (one output head per k), trained on
  r~ + gamma * (1 - terminal) * (Q_targ(s', a', k-1) - alpha * log pi(a'|s')), with
  Q(., ., 0) = 0; the k = 1 target is r~ alone (no bootstrap and no entropy bonus), so
  H = 1 is exactly regression on r~. The actor maximises Q(s, pi(s), H).
  H = None (infinite) is one self-bootstrapping head: SAC on r~.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

# The sim actor's deterministic action, and the twin critics' (Q1, Q2) at (obs, action).
MeanAction = Callable[[nn.Module, torch.Tensor], torch.Tensor]
TwinQ = Callable[[nn.Module, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


# ---------------------------------------------------------------- shaping (numpy, exact)
def shape_rewards(
    rewards: np.ndarray,
    v_sim: np.ndarray,
    v_sim_next: np.ndarray,
    terminals: np.ndarray,
    gamma: float,
    scale: float = 1.0,
) -> np.ndarray:
    """r~ = scale * (r + gamma * (1 - terminal) * V_sim(s') - V_sim(s))."""
    keep = 1.0 - np.asarray(terminals, dtype=np.float64)
    shaped = (
        np.asarray(rewards, np.float64)
        + gamma * keep * np.asarray(v_sim_next, np.float64)
        - np.asarray(v_sim, np.float64)
    )
    return (scale * shaped).astype(np.float32)


def auto_failure_value(rewards: np.ndarray, values: np.ndarray | None, gamma: float) -> float:
    """The auto ``failure_value`` from a dataset's rewards and V_sim values (of its states
    and next states): min(0, r_min / (1 - gamma), V_min - (r_max - r_min) / gamma).

    The last term is what makes failing never the best: for any failing step,
    r_f + gamma * failure_value <= r_max + gamma * V_min - (r_max - r_min)
    = r_min + gamma * V_min <= r + gamma * V(s') of any other step (V(s') = 0 after a
    success is >= gamma * V_min too, as V_min <= 0). The second keeps it no better than the
    worst reward forever when V_sim is unknown."""
    if len(rewards) == 0:
        raise ValueError("auto failure_value needs transitions to bound the reward from.")
    r_min, r_max = float(np.min(rewards)), float(np.max(rewards))
    worst = min(0.0, r_min / (1.0 - gamma))
    if values is not None and len(values):
        v_min = min(0.0, float(np.min(values)))
        worst = min(worst, v_min - (r_max - r_min) / gamma)
    return worst


def with_failure_value(
    rewards: np.ndarray, failures: np.ndarray, gamma: float, failure_value: float
) -> np.ndarray:
    """r + gamma * failure_value at terminal failures, r elsewhere."""
    return (
        np.asarray(rewards, np.float64) + gamma * failure_value * np.asarray(failures, np.float64)
    ).astype(np.float32)


def discounted_sum(values: np.ndarray, gamma: float) -> float:
    return float(sum(v * gamma**i for i, v in enumerate(np.asarray(values, np.float64))))


def telescoped_window_return(
    rewards: np.ndarray, v_first: float, v_after_last: float, terminal_last: bool, gamma: float
) -> float:
    """What the discounted shaped rewards of an H-step window must sum to:
    sum_i gamma^i r_i + gamma^H (1 - terminal) V_sim(s_H) - V_sim(s_0)."""
    h = len(rewards)
    tail = 0.0 if terminal_last else gamma**h * v_after_last
    return discounted_sum(rewards, gamma) + tail - v_first


def fixed_reward_scale(
    rewards: np.ndarray,
    v_sim: np.ndarray | None,
    v_sim_next: np.ndarray | None,
    terminals: np.ndarray,
    gamma: float,
    floor: float = 1e-3,
) -> float:
    """1 / std of the unscaled training reward on SIM transitions, computed once per run:
    of r~ when V_sim is given (SGFT), else of r itself (RL), so every method trains on a
    unit-scale reward and trades entropy against it alike."""
    if v_sim is None or v_sim_next is None:
        training = np.asarray(rewards, np.float64)
    else:
        training = shape_rewards(rewards, v_sim, v_sim_next, terminals, gamma, 1.0)
    if len(training) < 2:
        return 1.0
    return float(1.0 / max(float(np.std(training)), floor))


# ---------------------------------------------------------------- frozen V_sim
def frozen_copy(module: nn.Module) -> nn.Module:
    """A private copy in eval mode with every weight's requires_grad off."""
    copied = copy.deepcopy(module).eval()
    for p in copied.parameters():
        p.requires_grad_(False)
    return copied


class FrozenSimValue:
    """V_sim(s) from a private, frozen copy of the pretrained actor and critics.

    ``mean_action(actor, obs)`` gives the actor's deterministic action; ``sample_action``
    (optional) a stochastic one; ``twin_q(critic, obs, action)`` gives (Q1, Q2). Nothing
    outside can reach the copies, and they are evaluated under no_grad, so V_sim cannot
    drift while the adapter trains.
    """

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        mean_action: MeanAction,
        twin_q: TwinQ,
        sample_action: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
        action_samples: int = 0,
        seed: int = 0,
    ) -> None:
        if action_samples and sample_action is None:
            raise ValueError("action_samples > 0 needs a sample_action function.")
        self._actor = frozen_copy(actor)
        self._critic = frozen_copy(critic)
        self._mean_action = mean_action
        self._sample_action = sample_action
        self._twin_q = twin_q
        self.action_samples = action_samples
        self._generator = torch.Generator().manual_seed(seed)
        self._fingerprint = self.fingerprint()

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor | np.ndarray, chunk: int = 4096) -> np.ndarray:
        obs_t = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        out = []
        for start in range(0, len(obs_t), chunk):
            o = obs_t[start : start + chunk]
            if self.action_samples:
                # Seeded, so the cached value of a transition is reproducible.
                state = torch.random.get_rng_state()
                seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self._generator))
                torch.random.manual_seed(seed)
                try:
                    values = torch.stack(
                        [
                            self._min_q(o, self._sample_action(self._actor, o))
                            for _ in range(self.action_samples)
                        ]
                    ).mean(0)
                finally:
                    torch.random.set_rng_state(state)
            else:
                values = self._min_q(o, self._mean_action(self._actor, o))
            out.append(values.reshape(-1))
        if not out:
            return np.zeros(0, dtype=np.float32)
        return torch.cat(out).numpy().astype(np.float32)

    def _min_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        q1, q2 = self._twin_q(self._critic, obs, action)
        return torch.minimum(q1.reshape(-1), q2.reshape(-1))

    def fingerprint(self) -> str:
        """SHA-256 over every weight of the frozen copies."""
        digest = hashlib.sha256()
        for module in (self._actor, self._critic):
            for name, tensor in sorted(module.state_dict().items()):
                digest.update(name.encode())
                digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def check_frozen(self) -> None:
        if self.fingerprint() != self._fingerprint:
            raise RuntimeError("V_sim's weights changed; it must stay frozen during fine-tuning.")

    def annotate(self, transitions) -> None:
        """Cache V_sim(s) and V_sim(s') on every row (once per transition)."""
        transitions.v_sim = self(transitions.obs)
        transitions.v_sim_next = self(transitions.next_obs)


# ---------------------------------------------------------------- horizon-indexed critic
class HorizonCritic(nn.Module):
    """Twin Q networks with one output head per horizon k = 1..H (H = None: one head).

    ``layer_norm`` (the learner's fresh critics): LayerNorm after every hidden layer, which
    keeps a critic fitted at one or more updates per transition on a few thousand real
    transitions from diverging (as in RLPD / DroQ).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        horizon: int | None,
        hidden: tuple[int, ...] = (256, 256),
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        self.horizon = horizon
        heads = 1 if horizon is None else horizon
        self.q1 = _mlp(obs_dim + act_dim, hidden, heads, layer_norm)
        self.q2 = _mlp(obs_dim + act_dim, hidden, heads, layer_norm)

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return self.q1(x), self.q2(x)


class SimAdvantageCritic(nn.Module):
    """SGFT's horizon critic warm-started at the sim advantage: every head k starts at
    scale * (Q_sim(s, a) - V_sim(s)), plus a trainable residual whose output layer starts
    at zero.

    Why that start: where V_sim is the value of the policy in the real system, the k-step
    shaped return telescopes to sum_i gamma^i r_i + gamma^k V_sim(s_k) - V_sim(s), whose
    expectation is Q_sim(s, a) - V_sim(s) for every k. So the first actor gradients are the
    pretrained critic's (as in the RL fine-tuning warm start), and the residual learns
    only the real system's correction; a fresh critic fitted on a few hundred real
    transitions has an action-gradient that is mostly noise.

    The sim parts are private frozen copies (requires_grad off); gradients still flow to
    the action through Q_sim. ``mean_action(actor, obs)`` is the sim actor's deterministic
    action, ``twin_q(critic, obs, action)`` gives (Q1, Q2), each (B,) or (B, 1).
    """

    def __init__(
        self,
        sim_actor: nn.Module,
        sim_critic: nn.Module,
        mean_action: MeanAction,
        twin_q: TwinQ,
        obs_dim: int,
        act_dim: int,
        horizon: int | None,
        scale: float,
        hidden: tuple[int, ...] = (256, 256),
    ) -> None:
        super().__init__()
        self.horizon = horizon
        self.scale = float(scale)
        self.sim_actor = frozen_copy(sim_actor)
        self.sim_critic = frozen_copy(sim_critic)
        self._mean_action = mean_action
        self._twin_q = twin_q
        heads = 1 if horizon is None else horizon
        self.residual1 = _mlp(obs_dim + act_dim, hidden, heads)
        self.residual2 = _mlp(obs_dim + act_dim, hidden, heads)
        for residual in (self.residual1, self.residual2):
            nn.init.zeros_(residual[-1].weight)
            nn.init.zeros_(residual[-1].bias)

    def sim_advantage(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            m1, m2 = self._twin_q(self.sim_critic, obs, self._mean_action(self.sim_actor, obs))
            v_sim = torch.minimum(m1.reshape(-1), m2.reshape(-1))
        q1, q2 = self._twin_q(self.sim_critic, obs, action)
        return (
            self.scale * (q1.reshape(-1) - v_sim).unsqueeze(-1),
            self.scale * (q2.reshape(-1) - v_sim).unsqueeze(-1),
        )

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        a1, a2 = self.sim_advantage(obs, action)
        x = torch.cat([obs, action], dim=-1)
        return a1 + self.residual1(x), a2 + self.residual2(x)


def _mlp(
    inputs: int, hidden: tuple[int, ...], outputs: int, layer_norm: bool = False
) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(inputs, width)]
        layers += [nn.LayerNorm(width), nn.ReLU()] if layer_norm else [nn.ReLU()]
        inputs = width
    layers.append(nn.Linear(inputs, outputs))
    return nn.Sequential(*layers)


def critic_targets(
    shaped_rewards: torch.Tensor,
    terminals: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    gamma: float,
    alpha: float,
    horizon: int | None,
) -> torch.Tensor:
    """Targets for every head, shape (B, H) (or (B, 1) for H = None).

    ``next_q`` is min over the twin target critics at (s', a' ~ pi(s')), shape (B, heads).
    Head k (1-based) bootstraps from head k-1 of the next state; head 1 regresses on r~.
    """
    r = shaped_rewards.reshape(-1, 1)
    keep = (1.0 - terminals.reshape(-1, 1)) * gamma
    soft_next = next_q - alpha * next_log_prob.reshape(-1, 1)
    if horizon is None:
        return r + keep * soft_next
    if next_q.shape[1] != horizon:
        raise ValueError(f"next_q has {next_q.shape[1]} heads; horizon {horizon} needs {horizon}.")
    bootstrap = torch.zeros_like(next_q)
    bootstrap[:, 1:] = soft_next[:, :-1]  # Q(s', a', k-1); Q(., ., 0) = 0
    return r + keep * bootstrap


def actor_head(q: torch.Tensor, horizon: int | None) -> torch.Tensor:
    """The head the actor maximises: Q(s, a, H), or the only head for H = None."""
    return q[:, -1]


# ---------------------------------------------------------------- watching for exploits
class ValueExploitMonitor:
    """Per-episode r, V_sim and r~; flags V_sim rising while the real reward falls.

    That pattern means the actor is finding states V_sim over-rates (sim-model errors),
    not better behaviour; a round that shows it is worth a look before promotion.
    """

    def __init__(self, window: int = 5) -> None:
        self.window = window
        self.episodes: list[dict[str, float | str]] = []

    def add_episode(self, episode_id: str, rewards, v_sim, shaped) -> dict[str, float | str]:
        row = {
            "episode_id": episode_id,
            "return": float(np.sum(rewards)),
            "mean_reward": float(np.mean(rewards)) if len(rewards) else 0.0,
            "mean_v_sim": float(np.mean(v_sim)) if len(v_sim) else 0.0,
            "shaped_return": float(np.sum(shaped)),
        }
        self.episodes.append(row)
        return row

    def flag(self) -> str:
        """Empty when fine; otherwise a sentence with the numbers."""
        if len(self.episodes) < 2 * self.window:
            return ""
        old = self.episodes[-2 * self.window : -self.window]
        new = self.episodes[-self.window :]

        def mean(rows, key):
            return float(np.mean([r[key] for r in rows]))

        dv = mean(new, "mean_v_sim") - mean(old, "mean_v_sim")
        dr = mean(new, "mean_reward") - mean(old, "mean_reward")
        if dv > 0 and dr < 0:
            return (
                f"V_sim rising (+{dv:.4g} per step) while real reward falls ({dr:.4g} per step) "
                f"over the last {self.window} episodes: the actor may be exploiting V_sim errors."
            )
        return ""
