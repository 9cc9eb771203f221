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
