"""Diagnosis of one loop round from its stand-in evaluation (interim: rates only)."""

from __future__ import annotations

from typing import Any

from simreal_ros.loop.state import ConditionScore


def diagnose_round(
    record, scores: list[ConditionScore], checkpoint: str, config
) -> dict[str, Any]:
    by_condition = {score.condition: score for score in scores}
    train, shifted = by_condition.get("train"), by_condition.get("shifted")
    label = "healthy"
    if train and train.rate < 0.5:
        label = "mode_collapse"
    elif train and shifted and shifted.rate + 0.3 < train.rate:
        label = "over_specialization"
    summary = ", ".join(f"{s.condition} {s.successes}/{s.episodes}" for s in scores)
    return {"label": label, "summary": summary}
