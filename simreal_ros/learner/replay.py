"""Transitions in the actor's coordinates, and the co-training sampler that mixes sources.

Everything here is in the policy's normalised coordinates: observations standardised by
the checkpoint's statistics, actions in [-1, 1]. Converting recorded episodes
(``episodes.dataset.RecordedSteps``) into this form happens once, in
``learner.data.transitions_from_dataset``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import torch

# Sources that count as "real" in co-training. real_twin is the simulated stand-in for
# the arm, so it plays the part of real data in the sim-to-sim harness.
# The target domain's data: the arm, its stand-in, or (method sysid, which never trains on
# the arm's own transitions) episodes in the sim identified from them.
ARM_SOURCES = ("real", "real_twin")  # recorded on the arm or on a stand-in for it
REAL_SOURCES = (*ARM_SOURCES, "identified_sim")


@dataclasses.dataclass
class Transitions:
    """Aligned one-step transitions; row i is (obs[i], actions[i], rewards[i], next_obs[i]).

    ``terminals`` marks true terminations (no value after them); ``truncateds`` marks
    time limits and other cut-offs (the value after them is kept). The last step of every
    episode is one or the other, so no window built from these rows crosses a reset.
    """

    obs: np.ndarray  # (N, obs_dim) float32, normalised
    actions: np.ndarray  # (N, act_dim) float32 in [-1, 1]
    rewards: np.ndarray  # (N,) float32
    next_obs: np.ndarray  # (N, obs_dim) float32
    terminals: np.ndarray  # (N,) bool
    truncateds: np.ndarray  # (N,) bool
    episode_ids: np.ndarray  # (N,) str
    sources: np.ndarray  # (N,) str: sim, real_twin, real
    interventions: np.ndarray  # (N,) bool: a human took over at this step
    episode_success: np.ndarray  # (N,) bool: the episode this step belongs to succeeded
    # SGFT cache: V_sim of obs and next_obs, filled once by sgft.FrozenSimValue.
    v_sim: np.ndarray | None = None
    v_sim_next: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.rewards)
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None and len(value) != n:
                raise ValueError(
                    f"Transitions.{field.name} has {len(value)} rows but rewards has {n}; "
                    "every array needs one row per transition."
                )
        if n and self.obs.shape != self.next_obs.shape:
            raise ValueError("Transitions.obs and next_obs have different shapes.")
        for name in ("obs", "actions", "rewards", "next_obs"):
            if n and not np.all(np.isfinite(getattr(self, name))):
                raise ValueError(f"Transitions.{name} has non-finite values; clean the data.")

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def obs_dim(self) -> int:
        return int(self.obs.shape[1])

    @property
    def act_dim(self) -> int:
        return int(self.actions.shape[1])

    def subset(self, mask_or_index: np.ndarray) -> Transitions:
        values = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            values[field.name] = None if value is None else value[mask_or_index]
        return Transitions(**values)

    def real_mask(self) -> np.ndarray:
        return np.isin(self.sources, REAL_SOURCES)

    @property
    def failures(self) -> np.ndarray:
        """Terminal failures: a true termination in an episode that did not succeed."""
        return np.asarray(self.terminals, bool) & ~np.asarray(self.episode_success, bool)

    def counts_by_source(self) -> dict[str, int]:
        return dict(Counter(str(s) for s in self.sources))

    def episode_boundaries(self) -> list[tuple[str, int, int]]:
        """(episode_id, start, stop) of each contiguous episode run, in row order."""
        out: list[tuple[str, int, int]] = []
        start = 0
        for i in range(1, len(self) + 1):
            if i == len(self) or self.episode_ids[i] != self.episode_ids[start]:
                out.append((str(self.episode_ids[start]), start, i))
                start = i
        return out

    def windows(self, length: int) -> list[np.ndarray]:
        """Index windows of ``length`` consecutive steps that never cross a reset."""
        out = []
        for _, start, stop in self.episode_boundaries():
            for i in range(start, stop - length + 1):
                window = np.arange(i, i + length)
                # A termination may only be the last step of a window.
                if (
                    not self.terminals[window[:-1]].any()
                    and not self.truncateds[window[:-1]].any()
                ):
                    out.append(window)
        return out

    @staticmethod
    def concatenate(parts: list[Transitions]) -> Transitions:
        parts = [p for p in parts if len(p)]
        if not parts:
            raise ValueError("no transitions to concatenate.")
        values = {}
        for field in dataclasses.fields(Transitions):
            items = [getattr(p, field.name) for p in parts]
            values[field.name] = None if any(i is None for i in items) else np.concatenate(items)
        return Transitions(**values)


@dataclasses.dataclass
class Batch:
    """A sampled batch as tensors; ``is_real`` says which rows came from real sources."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminals: torch.Tensor  # float 0/1
    truncateds: torch.Tensor
    interventions: torch.Tensor  # float 0/1
    episode_success: torch.Tensor
    is_real: torch.Tensor  # bool
    v_sim: torch.Tensor | None
    v_sim_next: torch.Tensor | None
    index: np.ndarray  # row indices into the source buffers (real rows first)

    @property
    def failures(self) -> torch.Tensor:
        """Float 0/1: terminal failures, as ``Transitions.failures``."""
        return self.terminals * (1.0 - self.episode_success)


def batch_from(transitions: Transitions, index: np.ndarray, is_real: np.ndarray) -> Batch:
    def tensor(a):
        return torch.as_tensor(np.asarray(a), dtype=torch.float32)

    t = transitions
    return Batch(
        obs=tensor(t.obs[index]),
        actions=tensor(t.actions[index]),
        rewards=tensor(t.rewards[index]),
        next_obs=tensor(t.next_obs[index]),
        terminals=tensor(t.terminals[index]),
        truncateds=tensor(t.truncateds[index]),
        interventions=tensor(t.interventions[index]),
        episode_success=tensor(t.episode_success[index]),
        is_real=torch.as_tensor(is_real, dtype=torch.bool),
        v_sim=None if t.v_sim is None else tensor(t.v_sim[index]),
        v_sim_next=None if t.v_sim_next is None else tensor(t.v_sim_next[index]),
        index=index,
    )


class CoTrainingSampler:
    """Draws batches with a fixed real:sim share, so real data is weighted up on purpose.

    Each batch holds round(B * w_real / (w_real + w_sim)) real rows and the rest sim rows,
    each drawn uniformly (with replacement) within its source. With sim replay off, or no
    sim data, every row is real. Optional per-row weights (e.g. BC's intervention weight)
    bias the draw within a source.
    """

    def __init__(
        self,
        data: Transitions,
        real_weight: float = 4.0,
        sim_weight: float = 1.0,
        sim_replay: bool = True,
        seed: int = 0,
        row_weights: np.ndarray | None = None,
    ) -> None:
        real = data.real_mask()
        self.data = data
        self.real_weight, self.sim_weight, self.sim_replay = real_weight, sim_weight, sim_replay
        self.real_index = np.flatnonzero(real)
        self.sim_index = np.flatnonzero(~real) if sim_replay else np.array([], dtype=np.int64)
        if len(self.real_index) == 0 and len(self.sim_index) == 0:
            raise ValueError("the co-training sampler has no transitions to draw from.")
        total = real_weight + (sim_weight if len(self.sim_index) else 0.0)
        if len(self.real_index) == 0:
            self.real_fraction = 0.0
        elif total <= 0:
            raise ValueError("real_weight and sim_weight are both 0; give one a positive value.")
        else:
            self.real_fraction = real_weight / total
        self.rng = np.random.default_rng(seed)
        self._probs = {}
        if row_weights is not None:
            for name, index in (("real", self.real_index), ("sim", self.sim_index)):
                w = np.asarray(row_weights, dtype=np.float64)[index]
                if len(index) and w.sum() > 0:
                    self._probs[name] = w / w.sum()
        self.drawn = Counter()

    def split(self, batch_size: int) -> tuple[int, int]:
        n_real = round(batch_size * self.real_fraction)
        return n_real, batch_size - n_real

    def sample_index(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        n_real, n_sim = self.split(batch_size)
        real = (
            self.rng.choice(self.real_index, n_real, p=self._probs.get("real")) if n_real else []
        )
        sim = self.rng.choice(self.sim_index, n_sim, p=self._probs.get("sim")) if n_sim else []
        index = np.concatenate([np.asarray(real, np.int64), np.asarray(sim, np.int64)])
        is_real = np.zeros(len(index), dtype=bool)
        is_real[:n_real] = True
        self.drawn["real"] += n_real
        self.drawn["sim"] += n_sim
        return index, is_real

    def sample(self, batch_size: int) -> Batch:
        index, is_real = self.sample_index(batch_size)
        return batch_from(self.data, index, is_real)

    def stats(self) -> dict[str, float]:
        return {
            "real_rows": float(len(self.real_index)),
            "sim_rows": float(len(self.sim_index)),
            "real_fraction_target": self.real_fraction,
            "drawn_real": float(self.drawn["real"]),
            "drawn_sim": float(self.drawn["sim"]),
        }
