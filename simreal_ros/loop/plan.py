"""Choose the next round's data collection from the last evaluation and diagnosis."""

from __future__ import annotations

import dataclasses

from simreal_ros.loop.state import ConditionScore


@dataclasses.dataclass(frozen=True)
class CollectionPlan:
    episodes: dict[str, int]
    expert_demos: int
    reason: str


def plan_collection(
    diagnosis: str,
    train: ConditionScore | None,
    shifted: ConditionScore | None,
    episodes: int,
    expert_demos: int = 0,
) -> CollectionPlan:
    """Aim the next ``episodes`` at the failures.

    - over-specialization: all collection in the shifted condition;
    - a dynamics gap: all in the training condition, for identification (sim-side
      adaptation covers the shifted starts in the identified sim);
    - a misspecified model: split by failures, as below (the last mile trains on the
      running version's own arm episodes);
    - mode collapse: expert demonstrations (where the method uses them) plus the training
      condition, where the policy already fails;
    - otherwise: split by failure counts, so the condition failing more gets more data,
      with at least one episode for any condition that failed at all.
    """
    if episodes < 0 or expert_demos < 0:
        raise ValueError("episode counts must not be negative.")
    if diagnosis == "over_specialization":
        return CollectionPlan(
            {"train": 0, "shifted": episodes}, 0, "over-specialized: collect in shifted"
        )
    if diagnosis == "dynamics_gap":
        return CollectionPlan(
            {"train": episodes, "shifted": 0},
            0,
            "dynamics gap: train episodes for identification (adaptation covers shifted in sim)",
        )
    if diagnosis == "model_misspecified":
        split = plan_collection("", train, shifted, episodes).episodes
        return CollectionPlan(
            split, 0, "model misspecified: the running version's own arm episodes, split by "
            "failures, for the last mile",
        )  # fmt: skip
    if diagnosis == "mode_collapse":
        return CollectionPlan(
            {"train": episodes, "shifted": 0},
            expert_demos,
            "mode collapse on training conditions: expert demonstrations and train episodes",
        )
    fail_train = (train.episodes - train.successes) if train else 1
    fail_shifted = (shifted.episodes - shifted.successes) if shifted else 1
    total = fail_train + fail_shifted
    if total == 0:
        half = episodes // 2
        return CollectionPlan(
            {"train": episodes - half, "shifted": half}, 0, "no failures: keep both conditions"
        )
    shifted_share = round(episodes * fail_shifted / total)
    if fail_shifted and not shifted_share and episodes > 1:
        shifted_share = 1
    if fail_train and shifted_share == episodes and episodes > 1:
        shifted_share = episodes - 1
    return CollectionPlan(
        {"train": episodes - shifted_share, "shifted": shifted_share},
        0,
        f"split by failures (train {fail_train}, shifted {fail_shifted})",
    )


# Seed layout of a run: each run seed owns a block of RUN_BLOCK seeds, each round a
# ROUND_BLOCK inside it, each purpose of a round a PURPOSE_BLOCK inside that. The off-ROS
# check's seeds sit above the last round's block, so no round ever collects (and so
# trains on) them, and every run's block ends before the next run seed's begins.
RUN_BLOCK = 1_000_003
ROUND_BLOCK = 10_000
PURPOSE_BLOCK = 1_000
CHECK_OFFSET = 900_000
CHECK_CAPACITY = RUN_BLOCK - CHECK_OFFSET
MAX_ROUND_INDEX = CHECK_OFFSET // ROUND_BLOCK - 1
# The purposes' slots in a round's block.
COLLECTION_SLOT = {"train": 0, "shifted": 1}
EVALUATION_SLOT = {"train": 2, "shifted": 3}
DEMONSTRATION_SLOT = 5
DIAGNOSIS_SLOT = 6  # the running version's; the rolled-back candidate's is the next one


@dataclasses.dataclass(frozen=True)
class RoundSeeds:
    """Every seed one round of the loop uses, from the run's seed and the round's index.

    Episode seeds come as lists of ``count`` consecutive seeds; the evaluation seeds are
    the same for any version that plays them (the arm decision pairs on them), and the
    check's are the same in every round (a low-noise comparison across rounds).
    """

    run_seed: int
    index: int

    def __post_init__(self) -> None:
        if self.run_seed < 0:
            raise ValueError(f"run seed {self.run_seed} must not be negative.")
        if not 0 <= self.index <= MAX_ROUND_INDEX:
            raise ValueError(f"round {self.index} is outside 0..{MAX_ROUND_INDEX}.")

    def _slot(self, slot: int, count: int) -> list[int]:
        if not 0 <= count <= PURPOSE_BLOCK:
            raise ValueError(f"{count} seeds do not fit a purpose's {PURPOSE_BLOCK}.")
        start = self.run_seed * RUN_BLOCK + self.index * ROUND_BLOCK + slot * PURPOSE_BLOCK
        return list(range(start, start + count))

    def collection(self, condition: str, count: int) -> list[int]:
        return self._slot(COLLECTION_SLOT[condition], count)

    def evaluation(self, condition: str, count: int) -> list[int]:
        return self._slot(EVALUATION_SLOT[condition], count)

    def demonstrations(self, count: int) -> list[int]:
        """The scripted expert's demonstrations (in the training condition)."""
        return self._slot(DEMONSTRATION_SLOT, count)

    def diagnosis(self, count: int, candidate: bool = False) -> list[int]:
        """The diagnosis's replay demonstrations, of the running version or of a
        rolled-back candidate."""
        return self._slot(DIAGNOSIS_SLOT + int(candidate), count)

    def check(self, count: int) -> list[int]:
        """The off-ROS check's seeds: the same in every round of the run."""
        if not 0 <= count <= CHECK_CAPACITY:
            raise ValueError(f"{count} check seeds do not fit the check's {CHECK_CAPACITY}.")
        start = self.run_seed * RUN_BLOCK + CHECK_OFFSET
        return list(range(start, start + count))

    @property
    def arm_decision(self) -> int:
        """The seed of the arm decision's bootstrap resampling."""
        return self.run_seed + self.index
