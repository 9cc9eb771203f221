"""Screening gate: a candidate runs on the arm only if sim says it is not broken.

For each screened condition (train, shifted) the candidate and the running policy play
the SAME seeds in the screening sim (the learner's ``screen.profile``: the best model of
the arm there is, an identified profile's YAML where one exists, else ``randomized``).

Rule ``broken_only`` (the default): sim kills what is clearly broken and never certifies,
so a candidate is rejected only on evidence that it is broken, in any condition:
  1. success floor: the Wilson 95% UPPER bound of its success rate is below
     ``success_floor`` (sim is confident the rate is below the floor; a candidate that is
     merely worse than the running policy in a sim known to be misspecified passes). The
     floor is waived in a condition where the reference policy's own upper bound is below
     it too: there the model of the arm says the condition is hard for every policy, not
     that this candidate is broken (checks 2-4 still apply, and the arm decides);
  2. safety: the safety filter intervened (outside the trajectory shaping every healthy
     policy gets, see ``training.evaluate.SHAPING_LIMITS``) in more than
     ``max_intervention_rate`` of its control steps;
  3. actions: any non-finite action at all, or more than ``max_saturated_share`` of its
     action components at the tanh bound (``training.evaluate.SATURATED``);
  4. divergence: the mean |candidate action - base action| on the candidate's own visited
     states, per component in normalised action units ([-1, 1]; x the spec's action
     scale gives rad per step), above ``max_divergence``.
Optionally (``ci_low`` > 0) the Wilson LOWER bound must clear ``ci_low`` too; that one
certifies, so it is off by default.

Rule ``relative`` (strict, an option): the lower-bound check plus "not
worse than the reference by more than ``tolerance``", the reference being the running
policy or the base where that screens better (so a chain of promotions cannot ratchet
down a tolerance at a time); checks 1-4 apply as well. A strict, certifying gate is
``relative`` with ci_low 0.3, tolerance 0.1.

Otherwise the candidate is promoted; the reason carries the numbers either way. The
evaluation itself is injected (``Evaluator``); ``promotion.policy_evaluator`` uses the
policy package's parallel, spawned-worker evaluation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simreal_ros.stats import wilson_interval

RULES = ("broken_only", "relative")


@dataclasses.dataclass
class EvaluationSummary:
    """Outcome of a batch of sim episodes of one policy in one condition.

    The action evidence defaults to "none measured" (an evaluator that measures nothing
    can still be gated on success)."""

    episodes: int
    successes: int
    mean_return: float
    per_seed_success: list[bool] = dataclasses.field(default_factory=list)
    steps: int = 0
    intervened_steps: int = 0
    action_components: int = 0
    saturated_actions: int = 0
    nonfinite_steps: int = 0
    divergence: float | None = None  # None: not measured (e.g. the base itself)

    @property
    def intervention_rate(self) -> float:
        return self.intervened_steps / self.steps if self.steps else 0.0

    @property
    def saturated_share(self) -> float:
        return self.saturated_actions / self.action_components if self.action_components else 0.0


# (checkpoint_dir, adapter_dir or None for the base, condition, seeds) -> summary
Evaluator = Callable[[Path, Path | None, str, Sequence[int]], EvaluationSummary]


@dataclasses.dataclass(frozen=True)
class GateSettings:
    """The thresholds of the rule (see the module docstring); LearnerConfig sets them."""

    rule: str = "broken_only"
    success_floor: float = 0.25
    ci_low: float = 0.0
    tolerance: float = 0.1
    max_intervention_rate: float = 0.8
    max_saturated_share: float = 0.5
    max_divergence: float = 0.5

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"gate rule {self.rule!r} unknown; use one of {', '.join(RULES)}.")
        for name in ("success_floor", "ci_low", "tolerance", "max_intervention_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"gate setting {name} = {value} must lie in [0, 1].")
        if not 0.0 <= self.max_saturated_share <= 1.0 or not self.max_divergence >= 0.0:
            raise ValueError("max_saturated_share must lie in [0, 1], max_divergence >= 0.")


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
    passed_floor: bool = True
    passed_safety: bool = True
    passed_actions: bool = True
    passed_divergence: bool = True
    intervention_rate: float = 0.0
    saturated_share: float = 0.0
    nonfinite_steps: int = 0
    divergence: float | None = None
    floor_waived: bool = False  # the reference is below the floor here too

    @property
    def passed(self) -> bool:
        return (
            self.passed_ci
            and self.passed_tolerance
            and self.passed_floor
            and self.passed_safety
            and self.passed_actions
            and self.passed_divergence
        )


@dataclasses.dataclass
class GateDecision:
    promoted: bool
    reason: str
    results: list[ConditionResult]
    ci_low_threshold: float
    tolerance: float
    seeds: list[int]
    settings: GateSettings = dataclasses.field(default_factory=GateSettings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "promoted": self.promoted,
            "reason": self.reason,
            "ci_low_threshold": self.ci_low_threshold,
            "tolerance": self.tolerance,
            "seeds": list(self.seeds),
            "settings": dataclasses.asdict(self.settings),
            "results": [dataclasses.asdict(r) for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GateDecision:
        # Decisions stored before the broken_only rule have no settings: the relative rule.
        settings = data.get("settings") or {
            "rule": "relative",
            "ci_low": float(data["ci_low_threshold"]),
            "tolerance": float(data["tolerance"]),
        }
        return cls(
            promoted=bool(data["promoted"]),
            reason=str(data["reason"]),
            results=[ConditionResult(**r) for r in data.get("results", [])],
            ci_low_threshold=float(data["ci_low_threshold"]),
            tolerance=float(data["tolerance"]),
            seeds=list(data.get("seeds", [])),
            settings=GateSettings(**settings),
        )


def decide(
    candidate: dict[str, EvaluationSummary],
    baseline: dict[str, EvaluationSummary],
    ci_low_threshold: float,
    tolerance: float,
    profile: str = "",
    seeds: Sequence[int] = (),
    settings: GateSettings | None = None,
) -> GateDecision:
    """Apply the rule to screening numbers (no evaluation happens here).

    ``ci_low_threshold`` and ``tolerance`` override those of ``settings`` (default: the
    ``broken_only`` rule's defaults)."""
    if not candidate:
        raise ValueError("no screening results: screen at least one condition.")
    settings = dataclasses.replace(
        settings or GateSettings(), ci_low=float(ci_low_threshold), tolerance=float(tolerance)
    )
    relative = settings.rule == "relative"
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
        divergence = None if cand.divergence is None else float(cand.divergence)
        reference_high = (
            wilson_interval(base.successes, base.episodes)[1] if base.episodes else 1.0
        )
        waived = (
            high < settings.success_floor - 1e-12
            and reference_high < settings.success_floor - 1e-12
        )
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
            passed_ci=low >= settings.ci_low - 1e-12,
            passed_tolerance=(not relative) or rate >= base_rate - settings.tolerance - 1e-12,
            passed_floor=waived or high >= settings.success_floor - 1e-12,
            floor_waived=waived,
            passed_safety=cand.intervention_rate <= settings.max_intervention_rate,
            passed_actions=cand.nonfinite_steps == 0
            and cand.saturated_share <= settings.max_saturated_share,
            passed_divergence=divergence is None or divergence <= settings.max_divergence,
            intervention_rate=cand.intervention_rate,
            saturated_share=cand.saturated_share,
            nonfinite_steps=int(cand.nonfinite_steps),
            divergence=divergence,
        )
        results.append(result)
        failures += _failures(result, settings, cand)
    summary = "; ".join(
        f"{r.condition} {r.successes}/{r.episodes} (CI [{r.ci_low:.2f}, {r.ci_high:.2f}], "
        f"running {r.baseline_successes}/{r.baseline_episodes}"
        + (", floor waived: the reference is below it too" if r.floor_waived else "")
        + ")"
        for r in results
    )
    if failures:
        reason = f"rejected ({settings.rule}): " + "; ".join(failures) + "."
    elif relative:
        reason = (
            f"promoted (relative): {summary}; every CI lower bound >= {settings.ci_low:.2f} "
            f"and within {settings.tolerance:.2f} of the reference."
        )
    else:
        reason = (
            f"promoted (broken_only: not clearly broken, not certified): {summary}; every CI "
            f"upper bound >= {settings.success_floor:.2f}, no safety, action or divergence "
            "limit exceeded."
        )
    return GateDecision(
        promoted=not failures,
        reason=reason,
        results=results,
        ci_low_threshold=settings.ci_low,
        tolerance=settings.tolerance,
        seeds=list(seeds),
        settings=settings,
    )


def _failures(r: ConditionResult, s: GateSettings, cand: EvaluationSummary) -> list[str]:
    """Why one condition failed, each with its numbers."""
    counts = f"{r.successes}/{r.episodes}"
    ci = f"Wilson 95% CI [{r.ci_low:.2f}, {r.ci_high:.2f}]"
    out = []
    if not r.passed_floor:
        out.append(
            f"{r.condition}: success {counts}, {ci}: even the upper bound is below the floor "
            f"{s.success_floor:.2f} (clearly broken in sim)"
        )
    if not r.passed_ci:
        out.append(
            f"{r.condition}: success {counts} = {r.success_rate:.2f}, {ci}, lower bound below "
            f"{s.ci_low:.2f}"
        )
    if not r.passed_tolerance:
        out.append(
            f"{r.condition}: success {counts} = {r.success_rate:.2f} is worse than the "
            f"reference policy's {r.baseline_success_rate:.2f} (the better of the running "
            f"version and the base) by more than {s.tolerance:.2f} on the same seeds"
        )
    if not r.passed_safety:
        out.append(
            f"{r.condition} ({counts}): the safety filter intervened in "
            f"{cand.intervened_steps}/{cand.steps} steps = {r.intervention_rate:.2f}, above "
            f"{s.max_intervention_rate:.2f}"
        )
    if r.nonfinite_steps:
        out.append(
            f"{r.condition} ({counts}): {r.nonfinite_steps} step(s) with non-finite actions"
        )
    elif not r.passed_actions:
        out.append(
            f"{r.condition} ({counts}): {r.saturated_share:.2f} of the action components at "
            f"the tanh bound, above {s.max_saturated_share:.2f}"
        )
    if not r.passed_divergence:
        out.append(
            f"{r.condition} ({counts}): mean |action - base action| {r.divergence:.3f} "
            f"(normalised units) on its own states, above {s.max_divergence:.3f}"
        )
    return out


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
    settings: GateSettings | None = None,
) -> GateDecision:
    """Evaluate candidate and reference policy on the same seeds, then ``decide``.

    The reference is the running policy or, where it screens better, the base checkpoint
    (the relative rule judges against it; broken_only only reports it).
    ``baseline_cache`` avoids re-screening them every round: it is keyed by (adapter,
    condition, seeds, profile).
    """
    candidate, baseline = {}, {}
    cache = baseline_cache if baseline_cache is not None else {}

    def reference(adapter: Path | None, condition: str) -> EvaluationSummary:
        key = (str(adapter), condition, tuple(seeds), profile)  # the profile may change
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
    return decide(candidate, baseline, ci_low_threshold, tolerance, profile, seeds, settings)


def _rate(summary: EvaluationSummary) -> float:
    return summary.successes / summary.episodes if summary.episodes else 0.0
