"""What a stand-in rounds experiment is: the arms compared (``Experiment``) and the settings
every job shares (``RoundsConfig``). Apart from the round loop (``stand_in_rounds``) and the
summary (``stand_in_summary``), which both read them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from simreal_ros.config_schema import shared_setting, validate
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.methods import method_traits

# LearnerConfig fields that differ per job by construction, not per arm.
PER_JOB_FIELDS = ("seed", "store_root")


@dataclasses.dataclass(frozen=True)
class Experiment:
    """The arms compared and the claim they test."""

    # Arm name -> the LearnerConfig fields it sets (None: no training). Nothing else may
    # differ between arms, so a difference in outcome belongs to these fields alone.
    arms: Mapping[str, Mapping[str, Any] | None]
    labels: Mapping[str, str]
    reference: str = "rl_ft"  # every compared arm is paired against it
    primary: str = "sgft_h1"  # the comparison the claim is about, when it ran
    ratio_target: float = 3.0  # reference/arm episodes to target, at the CI's lower bound
    minutes_target: float = 5.0  # the arm's simulated minutes of stand-in data to target

    @property
    def arm_fields(self) -> tuple[str, ...]:
        return tuple(sorted({k for row in self.arms.values() if row for k in row}))

    @property
    def shaped_arms(self) -> tuple[str, ...]:
        """The SGFT arms: those whose reward V_sim shapes."""
        return tuple(m for m, o in self.arms.items() if o and method_traits(o["method"]).shaped)

    @property
    def compared_arms(self) -> tuple[str, ...]:
        """The arms compared against the reference: those that bring sim knowledge to the
        stand-in's episodes (a reward V_sim shapes, or an update in the identified sim)."""
        return tuple(
            m
            for m, o in self.arms.items()
            if o
            and m != self.reference
            and (method_traits(o["method"]).shaped
                 or method_traits(o["method"]).trains_in == "identified_sim")
        )  # fmt: skip

    def trains(self, arm: str) -> bool:
        return self.arms[arm] is not None


@dataclasses.dataclass(frozen=True)
class RoundsConfig:
    checkpoint: str
    # The arm, as ``robot_reference`` names it (a job's worker loads it); required for rounds.
    robot: str = ""
    task: str = "push"
    condition: str = "train"
    profile: str = "real_twin"
    seeds: int = 5
    first_seed: int = 0
    methods: tuple[str, ...] = ()
    episodes_per_round: int = 5
    max_rounds: int = 8
    updates_per_round: int = shared_setting(LearnerConfig, "updates_per_round", 300)
    eval_episodes: int = 30
    eval_first_seed: int = 900_000
    target: float = 0.8
    # > 0: explore with N(0, noise) around the mean action (normalised units) instead of
    # the policy's own capped distribution (the learner's rule, the default).
    noise: float = 0.0
    bc_demos: int = 0
    sim_episodes: int = shared_setting(LearnerConfig, "sim_episodes", 10)
    episode_seconds: float = 6.0
    workers: int = 2
    # auto: fit V_sim in sim when the base's critics were never trained (fit_sim_critic).
    fit_v_sim: str = "auto"
    fit_v_sim_updates: int = 2000
    # LearnerConfig fields changed from the learner's defaults for every arm.
    learner_overrides: tuple[tuple[str, str], ...] = ()
    bootstrap_resamples: int = 10_000
    bootstrap_seed: int = 0
    # Wall-clock end (epoch s; 0 = none): jobs start no new round after it (flagged).
    deadline: float = 0.0

    def __post_init__(self) -> None:
        validate(self)  # the learner settings it carries, in the learner's own ranges

    @property
    def episode_budget(self) -> int:
        return self.episodes_per_round * self.max_rounds

    @property
    def evaluation_seeds(self) -> list[int]:
        """One fixed list for every method, round and seed: a paired comparison."""
        return [self.eval_first_seed + i for i in range(self.eval_episodes)]

    def collection_seeds(self, seed: int, round_index: int) -> list[int]:
        """Start states of a round's collection: (seed, round) only, never the method, so
        every arm meets the same states."""
        base = 10_000_000 * (seed + 1) + 1_000 * round_index
        return list(range(base, base + self.episodes_per_round))

    def demo_seeds(self, seed: int, round_index: int) -> list[int]:
        base = 10_000_000 * (seed + 1) + 1_000 * round_index + 500
        return list(range(base, base + self.bc_demos))
