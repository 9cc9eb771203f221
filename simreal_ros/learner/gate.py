"""Screening gate: a candidate runs only if sim says it is not broken.

For each screened condition (train, shifted) the candidate and the running policy play
the SAME seeds in sim. The candidate is promoted only if, in every condition,
  1. the Wilson 95% lower bound of its success rate clears ``ci_low_threshold``, and
  2. its success rate is not below the reference's by more than ``tolerance``; the
     reference is the running policy, or the base checkpoint where that screens better,
     so that a chain of promotions cannot ratchet down a tolerance at a time.
Otherwise it is rejected, and the reason carries the numbers. The evaluation itself is
injected (``Evaluator``); ``policy_evaluator`` uses the policy package's parallel,
spawned-worker evaluation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simreal_ros.stats import wilson_interval


@dataclasses.dataclass
class EvaluationSummary:
    """Outcome of a batch of sim episodes of one policy in one condition."""

    episodes: int
    successes: int
    mean_return: float
    per_seed_success: list[bool] = dataclasses.field(default_factory=list)


# (checkpoint_dir, adapter_dir or None for the base, condition, seeds) -> summary
Evaluator = Callable[[Path, Path | None, str, Sequence[int]], EvaluationSummary]


@dataclasses.dataclass
class ConditionResult:
    condition: str
    profile: str
    episodes: int
    successes: int
    success_rate: float
    ci_low: float
    ci_high: float
    mean_return: float
    baseline_episodes: int
    baseline_successes: int
    baseline_success_rate: float
    baseline_mean_return: float
    passed_ci: bool
    passed_tolerance: bool

    @property
    def passed(self) -> bool:
        return self.passed_ci and self.passed_tolerance


@dataclasses.dataclass
class GateDecision:
    promoted: bool
    reason: str
    results: list[ConditionResult]
    ci_low_threshold: float
    tolerance: float
    seeds: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "promoted": self.promoted,
            "reason": self.reason,
            "ci_low_threshold": self.ci_low_threshold,
            "tolerance": self.tolerance,
            "seeds": list(self.seeds),
            "results": [dataclasses.asdict(r) for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GateDecision:
        return cls(
            promoted=bool(data["promoted"]),
            reason=str(data["reason"]),
            results=[ConditionResult(**r) for r in data.get("results", [])],
            ci_low_threshold=float(data["ci_low_threshold"]),
            tolerance=float(data["tolerance"]),
            seeds=list(data.get("seeds", [])),
        )


def decide(
    candidate: dict[str, EvaluationSummary],
    baseline: dict[str, EvaluationSummary],
    ci_low_threshold: float,
    tolerance: float,
    profile: str = "",
    seeds: Sequence[int] = (),
) -> GateDecision:
    """Apply the promotion rule to screening numbers (no evaluation happens here)."""
    if not candidate:
        raise ValueError("no screening results: screen at least one condition.")
    results, failures = [], []
    for condition, cand in candidate.items():
        if condition not in baseline:
            raise ValueError(f"no running-policy results for condition {condition!r}.")
        base = baseline[condition]
        if cand.episodes <= 0:
            raise ValueError(f"condition {condition!r}: the candidate played no episodes.")
        rate = cand.successes / cand.episodes
        base_rate = base.successes / base.episodes if base.episodes else 0.0
        low, high = wilson_interval(cand.successes, cand.episodes)
        result = ConditionResult(
            condition=condition,
            profile=profile,
            episodes=cand.episodes,
            successes=cand.successes,
            success_rate=rate,
            ci_low=low,
            ci_high=high,
            mean_return=cand.mean_return,
            baseline_episodes=base.episodes,
            baseline_successes=base.successes,
            baseline_success_rate=base_rate,
            baseline_mean_return=base.mean_return,
            passed_ci=low >= ci_low_threshold,
            passed_tolerance=rate >= base_rate - tolerance - 1e-12,
        )
        results.append(result)
        if not result.passed_ci:
            failures.append(
                f"{condition}: success {cand.successes}/{cand.episodes} = {rate:.2f}, Wilson 95% "
                f"CI [{low:.2f}, {high:.2f}], lower bound below {ci_low_threshold:.2f}"
            )
        if not result.passed_tolerance:
            failures.append(
                f"{condition}: success {rate:.2f} is worse than the reference policy's "
                f"{base_rate:.2f} (the better of the running version and the base) by more "
                f"than {tolerance:.2f} on the same seeds"
            )
    summary = "; ".join(
        f"{r.condition} {r.successes}/{r.episodes} (CI [{r.ci_low:.2f}, {r.ci_high:.2f}], "
        f"running {r.baseline_successes}/{r.baseline_episodes})"
        for r in results
    )
    if failures:
        reason = "rejected: " + "; ".join(failures) + "."
    else:
        reason = f"promoted: {summary}; every CI lower bound >= {ci_low_threshold:.2f}."
    return GateDecision(
        promoted=not failures,
        reason=reason,
        results=results,
        ci_low_threshold=ci_low_threshold,
        tolerance=tolerance,
        seeds=list(seeds),
    )


def screen(
    evaluator: Evaluator,
    checkpoint_dir: Path,
    candidate_adapter: Path,
    running_adapter: Path | None,
    conditions: Sequence[str],
    seeds: Sequence[int],
    ci_low_threshold: float,
    tolerance: float,
    profile: str = "",
    baseline_cache: dict[tuple, EvaluationSummary] | None = None,
) -> GateDecision:
    """Evaluate candidate and reference policy on the same seeds, then ``decide``.

    The reference is the running policy or, where it screens better, the base checkpoint.
    ``baseline_cache`` avoids re-screening them every round: it is keyed by (adapter,
    condition, seeds).
    """
    candidate, baseline = {}, {}
    cache = baseline_cache if baseline_cache is not None else {}

    def reference(adapter: Path | None, condition: str) -> EvaluationSummary:
        key = (str(adapter), condition, tuple(seeds))
        if key not in cache:
            cache[key] = evaluator(checkpoint_dir, adapter, condition, seeds)
        return cache[key]

    for condition in conditions:
        candidate[condition] = evaluator(checkpoint_dir, candidate_adapter, condition, seeds)
        baseline[condition] = reference(running_adapter, condition)
        if running_adapter is not None:
            # The tolerance is against the better of the running version and the base, so
            # that promotions cannot ratchet down a tolerance's worth at a time.
            base = reference(None, condition)
            if _rate(base) > _rate(baseline[condition]):
                baseline[condition] = base
    return decide(candidate, baseline, ci_low_threshold, tolerance, profile, seeds)


def _rate(summary: EvaluationSummary) -> float:
    return summary.successes / summary.episodes if summary.episodes else 0.0
