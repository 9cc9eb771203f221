"""Classify a policy's failure mode from three evaluation sets, with the evidence.

``classify(train, shifted, replay, stats, thresholds) -> Diagnosis(label, evidence, summary)``

- ``train``, ``shifted``: ``ConditionOutcome`` (successes out of episodes, with a Wilson
  95% interval from ``simreal_ros.stats``), in training and shifted conditions;
- ``replay``: the open-loop ``ReplayResult`` (``simreal_ros.diagnosis.replay``) or None;
- ``stats``: ``ActionStats`` of the failing training-condition episodes (or their
  ``MotionSummary``);
- ``thresholds``: ``Thresholds`` (defaults below; every number is a parameter).

Rules, in order (the first that applies wins):

1. ``action_convention_mismatch``: the replay fails (the policy's commands, replayed open
   loop, leave the recorded trajectory by more than ``replay_tool_error`` beyond what the
   recorded commands themselves do, or reach the goal in clearly fewer episodes) AND a
   systematic map (scale, offset or joint permutation) explains the policy's steps
   (``fit_r2``), while the steps as they are do not.
2. ``over_specialization``: training conditions pass (success rate >= ``pass_rate``) and
   shifted conditions fail.
3. ``mode_collapse``: training conditions fail, and at least ``collapse_share`` of the
   failing training episodes are frozen (``frozen_fraction``) or hesitant
   (``reversal_rate``).
4. ``healthy``: both conditions pass (a replay that leaves the recording without a
   systematic explanation is reported, not held against it: the policy then acts
   differently from the recorded episodes, in the right convention).
5. ``inconclusive``: training conditions fail without a collapse signature; the evidence
   says what was seen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from simreal_ros import config_schema
from simreal_ros.config_schema import setting
from simreal_ros.diagnosis.action_stats import ActionStats, MotionSummary, summarize
from simreal_ros.diagnosis.replay import ReplayResult
from simreal_ros.stats import wilson_interval

LABELS = (
    "action_convention_mismatch",
    "over_specialization",
    "mode_collapse",
    "healthy",
    "inconclusive",
)


@dataclasses.dataclass
class Thresholds:
    pass_rate: float = setting(
        0.8, "a condition passes at this success rate or more", low=0.0, high=1.0
    )
    replay_tool_error: float = setting(
        0.015,
        "replay fails when the policy's replayed tool path is this much further (RMS) from "
        "the recording than the recorded commands' replay",
        low=0.0,
        unit="m",
    )
    replay_goal_drop: float = setting(
        0.25,
        "replay fails when the policy's replays reach the goal in this share fewer "
        "episodes than the recorded commands' replays",
        low=0.0,
        high=1.0,
    )
    fit_r2: float = setting(
        0.8, "a scale/offset/permutation explains the actions at this R² or more", low=0.0
    )
    fit_gain: float = setting(
        0.2, "...and explains this much more than the actions as they are", low=0.0
    )
    scale_tolerance: float = setting(
        0.2, "a fitted scale further than this from 1 is a scale error", low=0.0
    )
    offset_tolerance: float = setting(
        0.01, "a fitted offset larger than this is an offset error", low=0.0, unit="rad"
    )
    frozen_fraction: float = setting(
        0.4, "an episode is frozen when this share of its steps stand still", low=0.0, high=1.0
    )
    reversal_rate: float = setting(
        0.25,
        "an episode is hesitant when this share of its moving steps turn back",
        low=0.0,
        high=1.0,
    )
    collapse_share: float = setting(
        0.5,
        "mode collapse needs this share of failing training episodes frozen or hesitant",
        low=0.0,
        high=1.0,
    )

    def __post_init__(self) -> None:
        config_schema.validate(self)


@dataclasses.dataclass(frozen=True)
class ConditionOutcome:
    """Successes out of episodes in one condition."""

    condition: str
    successes: int
    episodes: int

    def __post_init__(self) -> None:
        if self.episodes < 0 or not 0 <= self.successes <= max(self.episodes, 0):
            raise ValueError(
                f"{self.condition}: {self.successes} successes out of {self.episodes} "
                "episodes is impossible."
            )

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def ci(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.episodes)

    def text(self) -> str:
        low, high = self.ci
        return (
            f"{self.successes}/{self.episodes} = {self.rate:.0%} "
            f"(Wilson 95% CI {low:.0%}..{high:.0%})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "condition": self.condition,
            "successes": self.successes,
            "episodes": self.episodes,
            "success_rate": self.rate,
            "ci95": list(self.ci),
        }


@dataclasses.dataclass
class Diagnosis:
    label: str
    evidence: dict[str, Any]
    summary: str


def _as_outcome(value, condition: str) -> ConditionOutcome:
    if isinstance(value, ConditionOutcome):
        return value
    if isinstance(value, tuple | list) and len(value) == 2:
        return ConditionOutcome(condition, int(value[0]), int(value[1]))
    successes = getattr(value, "successes", None)
    episodes = getattr(value, "episodes", None)
    if successes is not None and episodes is not None:
        episodes = len(episodes) if isinstance(episodes, Sequence) else episodes
        return ConditionOutcome(condition, int(successes), int(episodes))
    raise ValueError(
        f"{condition}: give a ConditionOutcome, (successes, episodes) or an object with "
        f".successes and .episodes, not {type(value).__name__}."
    )


def replay_verdict(replay: ReplayResult | None, thresholds: Thresholds) -> dict[str, Any]:
    """Whether the replay failed, whether a convention map explains it, and the numbers."""
    if replay is None or not replay.episodes:
        return {"checked": False, "failed": False, "systematic": False}
    episodes = len(replay.episodes)
    goal_drop = (replay.baseline_reached - replay.reached) / episodes
    failed_reasons = []
    if replay.tool_rms_excess > thresholds.replay_tool_error:
        failed_reasons.append(
            f"tool path {replay.tool_rms * 100:.1f} cm RMS from the recording vs "
            f"{replay.baseline_tool_rms * 100:.1f} cm for the recorded commands "
            f"(excess {replay.tool_rms_excess * 100:.1f} cm > "
            f"{thresholds.replay_tool_error * 100:.1f} cm)"
        )
    if goal_drop > thresholds.replay_goal_drop:
        failed_reasons.append(
            f"policy's replays reach the goal in {replay.reached}/{episodes} episodes vs "
            f"{replay.baseline_reached}/{episodes} for the recorded commands"
        )
    measured = (
        f"{episodes} episodes: policy's commands {replay.tool_rms * 100:.1f} cm tool RMS "
        f"from the recording (recorded commands {replay.baseline_tool_rms * 100:.1f} cm), "
        f"joints {replay.joint_rms:.3f} rad RMS (recorded commands "
        f"{replay.baseline_joint_rms:.3f}); goal reached {replay.reached}/{episodes} "
        f"(recorded commands {replay.baseline_reached}/{episodes})"
    )
    fit = replay.fit
    systematic = fit.is_systematic_error(
        thresholds.fit_r2,
        thresholds.fit_gain,
        thresholds.scale_tolerance,
        thresholds.offset_tolerance,
    )
    return {
        "checked": True,
        "failed": bool(failed_reasons),
        "reasons": failed_reasons,
        "measured": measured,
        "systematic": systematic,
        "fit": fit.describe(
            thresholds.scale_tolerance, thresholds.offset_tolerance, thresholds.fit_r2
        ),
        "numbers": replay.to_dict(),
    }


def _motion(stats, thresholds: Thresholds) -> MotionSummary:
    if isinstance(stats, MotionSummary):
        return stats
    stats = list(stats or [])
    if any(not isinstance(s, ActionStats) for s in stats):
        raise ValueError("stats: give ActionStats of failing episodes or a MotionSummary.")
    return summarize(stats, thresholds.frozen_fraction, thresholds.reversal_rate)


def classify(
    train,
    shifted,
    replay: ReplayResult | None,
    stats,
    thresholds: Thresholds | None = None,
) -> Diagnosis:
    """Label the failure mode (rules in the module docstring) and keep the evidence."""
    thresholds = thresholds or Thresholds()
    train = _as_outcome(train, "train")
    shifted = _as_outcome(shifted, "shifted")
    motion = _motion(stats, thresholds)
    verdict = replay_verdict(replay, thresholds)
    train_pass = train.episodes > 0 and train.rate >= thresholds.pass_rate
    shifted_pass = shifted.episodes > 0 and shifted.rate >= thresholds.pass_rate
    separated = shifted.ci[1] < train.ci[0]
    evidence: dict[str, Any] = {
        "train": {**train.to_dict(), "passed": train_pass},
        "shifted": {**shifted.to_dict(), "passed": shifted_pass},
        "train_shifted_ci_separated": separated,
        "replay": verdict,
        "failing_train_motion": motion.to_dict(),
        "thresholds": dataclasses.asdict(thresholds),
    }
    lines = [
        f"train conditions: {train.text()} -> {'pass' if train_pass else 'fail'}",
        f"shifted conditions: {shifted.text()} -> {'pass' if shifted_pass else 'fail'}",
    ]
    if verdict["checked"]:
        state = "FAILS" if verdict["failed"] else "passes"
        reasons = "; ".join(verdict["reasons"]) or "within the thresholds"
        lines.append(f"open-loop replay {state}: {reasons}")
        lines.append(f"replay numbers ({verdict['measured']})")
        fit = replay.fit if replay is not None else None
        gain = fit.fitted_r2 - max(fit.identity_r2, 0.0) if fit and fit.joint_names else 0.0
        kind = (
            "a systematic convention error"
            if verdict["systematic"]
            else f"no systematic convention error (mapping gains {gain:+.2f} R²)"
        )
        lines.append(f"action fit, {kind}: {verdict['fit']}")
    else:
        lines.append("open-loop replay: not run")
    if motion.episodes:
        lines.append(
            f"failing train episodes: {motion.episodes}; frozen {motion.frozen_episodes}, "
            f"hesitant {motion.hesitant_episodes}, blocked {motion.blocked_episodes}; mean "
            f"frozen share {motion.mean_frozen_fraction:.0%}, reversal rate "
            f"{motion.mean_reversal_rate:.0%}, progress {motion.mean_progress:.0%}, "
            f"tool travel {motion.mean_tool_travel:.2f} m"
        )

    if verdict["failed"] and verdict["systematic"]:
        label = "action_convention_mismatch"
        reason = (
            "the policy's actions replayed open loop do not reproduce a successful episode, "
            f"and a systematic map explains them: {verdict['fit']}"
        )
    elif train_pass and not shifted_pass:
        label = "over_specialization"
        reason = (
            f"passes training conditions ({train.rate:.0%}) but fails shifted ones "
            f"({shifted.rate:.0%})"
            + ("; the confidence intervals do not overlap" if separated else "")
        )
    elif (
        not train_pass and motion.episodes and motion.collapsed_share >= thresholds.collapse_share
    ):
        label = "mode_collapse"
        kinds = []
        if motion.frozen_episodes:
            kinds.append(f"{motion.frozen_episodes} frozen")
        if motion.hesitant_episodes:
            kinds.append(f"{motion.hesitant_episodes} hesitant")
        if motion.blocked_episodes:
            kinds.append(f"{motion.blocked_episodes} driving into something (blocked)")
        reason = (
            f"fails even in training conditions ({train.rate:.0%}); of "
            f"{motion.episodes} failing episodes {', '.join(kinds)}"
        )
    elif train_pass and shifted_pass:
        label = "healthy"
        if verdict["failed"]:
            reason = (
                "passes training and shifted conditions; its replay leaves the recording but "
                "no scale/offset/permutation explains that (it acts differently from the "
                "recorded episodes, not in another convention)"
            )
        else:
            reason = "passes training and shifted conditions and the open-loop replay"
    else:
        label = "inconclusive"
        seen = ["training conditions fail without frozen or hesitant motion"]
        if verdict["failed"]:
            seen.append("the replay fails but no scale/offset/permutation explains it")
        reason = "; ".join(seen)
    evidence["reason"] = reason
    summary = f"diagnosis: {label} ({reason})\n" + "\n".join("  " + line for line in lines)
    return Diagnosis(label=label, evidence=evidence, summary=summary)
