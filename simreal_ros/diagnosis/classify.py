"""Classify a policy's failure mode from three evaluation sets, with the evidence.

``classify(train, shifted, replay, stats, thresholds) -> Diagnosis(label, evidence, summary)``

- ``train``, ``shifted``: ``ConditionOutcome`` (successes out of episodes, with a Wilson
  95% interval from ``simreal_ros.stats``), in training and shifted conditions;
- ``replay``: the open-loop ``ReplayResult`` (``simreal_ros.diagnosis.replay_check``) or None;
- ``stats``: ``ActionStats`` of the failing training-condition episodes (or their
  ``MotionSummary``);
- ``thresholds``: ``Thresholds`` (defaults below; every number is a parameter);
- ``sim``: optionally, the same policy's training-condition outcome in its own sim (the
  profile it was trained in): the evidence for a dynamics gap;
- ``sim_replay``: optionally, the same replay check in that sim (its teacher's
  demonstrations there, from the same starts): where a convention error must show too.

A convention label needs evidence over more than one episode, with a stated significance:
a replay failure counts only when at least two replayed episodes fail on their own and a
one-sided binomial test rejects, at ``convention_significance``, that they fail no more
often than a healthy policy's replays do (``replay_episode_null`` per episode); a
per-joint map alone decides only over ``convention_min_episodes`` replayed episodes or
more, and never against the dynamics-gap evidence below.

Rules, in order (the first that applies wins):

1. ``action_convention_mismatch``: the replay check fails. It fails when
   - the policy's commands, replayed open loop, leave the recorded trajectory by more than
     ``replay_tool_error`` beyond what the recorded commands themselves do; or
   - they reach the goal in clearly fewer episodes (``replay_goal_drop``) than the
     recorded commands, and either a per-joint map (below) blames some joint or the
     policy closed loop from the same starts falls short too (a goal it reaches closed
     loop but misses open loop on another commander's states, with nothing to explain
     it, is a property of open-loop execution, not of the convention); or
   - the training conditions fail and, on some joint, the teacher-forced commands are the
     recorded ones under a per-joint map (sign, scale, offset or another joint's steps)
     that explains that joint's steps at ``fit_r2`` and ``fit_gain`` more than as they
     are (per joint: a bug on one joint of six barely moves a pooled R², nor the tool).
     While both conditions pass, such a map is reported, not decisive (with few replayed
     episodes a healthy policy's own differences from its teacher can look like one).
   The trajectory criteria count only where the recorded commands' own replay stays
   within ``replay_tool_error`` of the recording (else this profile cannot replay them).
   The fit never vetoes a failed replay: it names the joints at fault and how, or the
   evidence says no simple per-joint map explains it (normalisation statistics,
   nonlinear or state-dependent conventions). Two exceptions, both for a failure that no
   map explains: from a policy that shows another mode's signature (rule 3 or 4), it is
   that mode (its behaviour differs from the recorded episodes': another detour, a
   blend); from a policy that passes both conditions and, closed loop from the replayed
   starts, reaches the goal wherever the recorded commands did, it is the drift of open
   loop on a slow arm that integrates a healthy student's small differences from its
   teacher, and the label follows the other rules. And whatever a map says: a replay that
   fails on the arm only, while in its own sim the policy passes and its commands replay
   within the thresholds, is the arm's dynamics (a map found there too is a sound
   policy's own difference from its teacher, not evidence). Where no per-joint fit
   blames a joint but the policy misses closed loop, from the replayed starts, goals the
   recorded commands reach, a pooled map at ``corroborated_fit_r2`` names the joints (a
   swapped wrist joint barely moves the tool in one step, so the path hides it). A
   convention is a property of the policy's commands, whatever states they are computed
   on, so it shows in its own sim as well; the arm's states (a lagging joint, a stuck
   cube) only take the policy where it differs from its teacher in ways that no
   convention explains. For the same reason, the replay in its own sim decides by the
   same criteria (a failed replay; while it fails that sim, a per-joint map) where the
   arm's replay does not: on a gapped arm its teacher rarely succeeds, so the arm's
   replay may have nothing to replay. An unexplained failure that shows there as the
   drift above (the policy passes its own sim and, closed loop, reaches every goal the
   recorded commands did) is the student's open-loop drift, on the arm too, whatever the
   arm's conditions say.
2. ``model_misspecified``: the policy passes training conditions in its own sim, which
   is the sim identified from the arm, fails some condition on the arm, and identification
   left the held-out replay error more than ``misspecified_residual`` times what
   measurement noise alone leaves: the simulator's family cannot express the arm, so more
   identification cannot close the gap; the arm's own episodes must (method cotrain).
   ``dynamics_gap``: training conditions fail on the arm while the same policy passes them
   in its own sim (its sim interval entirely above the arm's), and the replay check does
   not fail: the policy's actions are right for the sim, the arm moves differently. The
   case the loop exists for: route it to system identification and sim-side adaptation
   (``learner.adaptation``), not to a convention fix.
3. ``over_specialization``: training conditions pass (success rate >= ``pass_rate``) and
   shifted conditions fail.
4. ``mode_collapse``: training conditions fail, and at least ``collapse_share`` of the
   failing training episodes are frozen (``frozen_fraction``) or hesitant
   (``reversal_rate``).
5. ``healthy``: both conditions pass.
6. ``inconclusive``: training conditions fail without a collapse signature; the evidence
   says what was seen.

The replay check presumes the recorded episodes come from a commander the policy should
agree with (its teacher, the incumbent, the arm's own recent episodes): a healthy policy
that moves differently from them by more than the tolerances is reported as a mismatch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from simreal_ros import config_schema
from simreal_ros.config_schema import setting
from simreal_ros.diagnosis.action_stats import ActionStats, MotionSummary, summarize
from simreal_ros.diagnosis.replay_check import ReplayResult
from simreal_ros.stats import wilson_interval

LABELS = (
    "action_convention_mismatch",
    "model_misspecified",
    "dynamics_gap",
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
        0.8,
        "a sign/scale/offset/permutation explains a joint's steps at this R² or more",
        low=0.0,
    )
    fit_gain: float = setting(
        0.2, "...and explains this much more of that joint's steps than as they are", low=0.0
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
    convention_significance: float = setting(
        0.05,
        "a replay failure is a convention error only if a one-sided binomial test of its "
        "failing episodes against replay_episode_null rejects at this level",
        low=0.0,
        high=1.0,
    )
    replay_episode_null: float = setting(
        0.1,
        "share of a healthy policy's replayed episodes that may fail on their own",
        low=0.0,
        high=1.0,
    )
    convention_min_episodes: int = setting(
        3, "a per-joint map alone decides only over this many replayed episodes", low=2
    )
    misspecified_residual: float = setting(
        5.0,
        "identification that leaves the held-out replay error this many times what "
        "measurement noise alone leaves could not fit the arm (an in-family arm ends near 1)",
        low=1.0,
    )
    corroborated_fit_r2: float = setting(
        0.5,
        "where the policy also misses the goal closed loop from the replayed starts that the "
        "recorded commands reach, a pooled map explaining its steps at this R² or more (and "
        "fit_gain more than as they are) names the joints at fault",
        low=0.0,
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


def _at_fault_text(fit, names: list[str]) -> str:
    """How each joint at fault relates to the recorded steps, e.g. 'elbow_joint sign flipped'."""
    parts = []
    for name in names:
        i = fit.joint_names.index(name)
        how = []
        if fit.permutation[i] != i:
            how.append(f"follows {fit.joint_names[fit.permutation[i]]}'s steps")
        if fit.scale[i] < 0:
            how.append(f"sign flipped (x {fit.scale[i]:.2f})")
        elif abs(fit.scale[i] - 1.0) > 1e-9:
            how.append(f"x {fit.scale[i]:.2f}")
        how.append(f"offset {fit.offset[i]:+.3f}")
        gain = fit.joint_r2[i] - max(fit.joint_identity_r2[i], 0.0)
        parts.append(f"{name} {', '.join(how)} (R² {fit.joint_r2[i]:.2f}, +{gain:.2f} over as-is)")
    return "; ".join(parts)


def replay_verdict(replay: ReplayResult | None, thresholds: Thresholds) -> dict[str, Any]:
    """Whether the replay failed, which joints a per-joint map blames, and the numbers."""
    if replay is None or not replay.episodes:
        return {"checked": False, "failed": False, "systematic": False, "corroborated": False,
            "joints_at_fault": [], "episodes": 0, "closed_loop_matches": False}  # fmt: skip
    episodes = len(replay.episodes)
    goal_drop = (replay.baseline_reached - replay.reached) / episodes
    own = replay.closed_loop_reached
    failed_reasons, notes = [], []
    # The check is read only where the recorded commands themselves replay faithfully.
    informative = replay.baseline_tool_rms <= thresholds.replay_tool_error
    if not informative:
        notes.append(
            f"uninformative: the recorded commands' own replay is "
            f"{replay.baseline_tool_rms * 100:.1f} cm RMS from the recording (> "
            f"{thresholds.replay_tool_error * 100:.1f} cm), so this profile cannot replay them"
        )
    if replay.tool_rms_excess > thresholds.replay_tool_error:
        failed_reasons.append(
            f"tool path {replay.tool_rms * 100:.1f} cm RMS from the recording vs "
            f"{replay.baseline_tool_rms * 100:.1f} cm for the recorded commands "
            f"(excess {replay.tool_rms_excess * 100:.1f} cm > "
            f"{thresholds.replay_tool_error * 100:.1f} cm)"
        )
    fit = replay.fit
    at_fault = fit.faulty_joints(
        thresholds.fit_r2,
        thresholds.fit_gain,
        thresholds.scale_tolerance,
        thresholds.offset_tolerance,
    )
    # A swap has two sides: a joint blamed for following another's steps brings its cycle.
    for cycle in fit.swaps():
        if any(name in at_fault for name in cycle):
            at_fault += [name for name in cycle if name not in at_fault]
    # A joint whose small steps barely move the tool (a wrist) can hide a swap from the
    # per-joint fit and from the path; the pooled map's joint order then names it, when
    # closed loop the policy misses the goals the recorded commands reach from the same
    # starts and a joint of the swap shows it in its own steps.
    closed_loop_short = (
        own is not None
        and (replay.baseline_reached - own) / episodes > thresholds.replay_goal_drop
    )
    corroborated = bool(
        not at_fault
        and closed_loop_short
        and fit.fitted_r2 >= thresholds.corroborated_fit_r2
        and fit.fitted_r2 - max(fit.identity_r2, 0.0) >= thresholds.fit_gain
        and fit.reordered_joints(thresholds.fit_gain)
    )
    if corroborated:
        at_fault = fit.reordered_joints(thresholds.fit_gain)
        notes.append(
            f"the pooled map (fitted R² {fit.fitted_r2:.2f}, as-is "
            f"{fit.identity_r2:.2f}) reorders {', '.join(at_fault)}, and closed loop the "
            f"policy reaches the goal in {own}/{episodes} against {replay.baseline_reached}/"
            f"{episodes} for the recorded commands"
        )
    if goal_drop > thresholds.replay_goal_drop:
        text = (
            f"policy's replays reach the goal in {replay.reached}/{episodes} episodes vs "
            f"{replay.baseline_reached}/{episodes} for the recorded commands"
        )
        # Open loop on another commander's states, a correct policy can miss a goal that
        # it reaches closed loop (contact tasks, episodes that end at the tolerance); with
        # no per-joint map to explain the miss, that is not read as a convention error.
        if (
            not at_fault
            and own is not None
            and (replay.baseline_reached - own) / episodes <= thresholds.replay_goal_drop
        ):
            notes.append(
                f"{text}, but the policy closed loop from the same starts reaches it in "
                f"{own}/{episodes}: a miss of open-loop execution, not of the convention"
            )
        else:
            if own is not None:
                text += f" (and {own}/{episodes} closed loop from the same starts)"
            failed_reasons.append(text)
    measured = (
        f"{episodes} episodes: policy's commands {replay.tool_rms * 100:.1f} cm tool RMS "
        f"from the recording (recorded commands {replay.baseline_tool_rms * 100:.1f} cm), "
        f"joints {replay.joint_rms:.3f} rad RMS (recorded commands "
        f"{replay.baseline_joint_rms:.3f}); goal reached {replay.reached}/{episodes} "
        f"(recorded commands {replay.baseline_reached}/{episodes}"
        + (f", policy closed loop {own}/{episodes}" if own is not None else "")
        + ")"
    )
    # Per episode, the pooled criteria above: a missed goal counts unless the policy
    # reached it closed loop with no per-joint map to blame.
    failing = [
        e.tool_rms - e.baseline_tool_rms > thresholds.replay_tool_error
        or (
            e.baseline_reached_goal
            and not e.reached_goal
            and (bool(at_fault) or not e.closed_loop_reached_goal)
        )
        for e in replay.episodes
    ]
    count = sum(failing)
    # Closed loop from each replayed start, the goal wherever the recorded commands got it.
    closed_loop_matches = own is not None and all(
        e.closed_loop_reached_goal for e in replay.episodes if e.baseline_reached_goal
    )
    p_value = binomial_tail(count, episodes, thresholds.replay_episode_null)
    significant = count >= 2 and p_value <= thresholds.convention_significance
    if informative and failed_reasons and not significant:
        notes.append(
            f"not significant: {count} of {episodes} replayed episodes fail on their own "
            f"(one-sided binomial p = {p_value:.3f} against a healthy rate of "
            f"{thresholds.replay_episode_null:.0%}; a convention label needs at least 2 and p "
            f"<= {thresholds.convention_significance})"
        )
    failed = informative and bool(failed_reasons) and significant
    return {
        "checked": True,
        "episodes": episodes,
        "informative": informative,
        "failed": failed,
        "reasons": failed_reasons,
        "notes": notes,
        "measured": measured,
        "failing_episodes": count,
        "p_value": p_value,
        "systematic": bool(at_fault),  # a per-joint map blames some joints
        "corroborated": corroborated,  # named by the pooled joint order and closed loop
        "closed_loop_matches": closed_loop_matches,
        "joints_at_fault": at_fault,
        "at_fault": _at_fault_text(fit, at_fault),
        "fit": fit.describe(
            thresholds.scale_tolerance, thresholds.offset_tolerance, thresholds.fit_r2
        ),
        "numbers": replay.to_dict(),
    }


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): the one-sided test of k failures in n."""
    from math import comb

    if k <= 0:
        return 1.0
    return float(sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)))


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
    sim=None,
    sim_replay: ReplayResult | None = None,
    identification_residual: float | None = None,
) -> Diagnosis:
    """Label the failure mode (rules in the module docstring) and keep the evidence.
    ``identification_residual``: the identified sim's held-out replay error over what
    measurement noise alone leaves (``sysid.output.residual_over_noise``), where ``sim`` is
    that identified sim."""
    thresholds = thresholds or Thresholds()
    train = _as_outcome(train, "train")
    shifted = _as_outcome(shifted, "shifted")
    sim = None if sim is None else _as_outcome(sim, "train (own sim)")
    motion = _motion(stats, thresholds)
    verdict = replay_verdict(replay, thresholds)
    sim_verdict = None if sim_replay is None else replay_verdict(sim_replay, thresholds)
    train_pass = train.episodes > 0 and train.rate >= thresholds.pass_rate
    shifted_pass = shifted.episodes > 0 and shifted.rate >= thresholds.pass_rate
    separated = shifted.ci[1] < train.ci[0]
    evidence: dict[str, Any] = {
        "train": {**train.to_dict(), "passed": train_pass},
        "shifted": {**shifted.to_dict(), "passed": shifted_pass},
        "train_shifted_ci_separated": separated,
        "replay": verdict,
        "failing_train_motion": motion.to_dict(),
        "own_sim_train": None if sim is None else sim.to_dict(),
        "own_sim_replay": sim_verdict,
        "thresholds": dataclasses.asdict(thresholds),
    }
    lines = [
        f"train conditions: {train.text()} -> {'pass' if train_pass else 'fail'}",
        f"shifted conditions: {shifted.text()} -> {'pass' if shifted_pass else 'fail'}",
    ]
    if verdict["checked"]:
        state = "FAILS" if verdict["failed"] else "passes"
        if verdict["failed"]:
            reasons = "; ".join(verdict["reasons"])
        elif verdict["reasons"]:
            reasons = "not read: " + "; ".join(verdict["reasons"])
        else:
            reasons = "within the thresholds"
        lines.append(f"open-loop replay {state}: {reasons}")
        lines.extend(f"replay note: {note}" for note in verdict["notes"])
        lines.append(f"replay numbers ({verdict['measured']})")
        blamed = verdict["at_fault"] or "none"
        lines.append(f"action fit: {verdict['fit']}; joints a per-joint map blames: {blamed}")
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

    if sim is not None:
        lines.append(f"the same policy in its own sim, train conditions: {sim.text()}")
    if sim_verdict is not None and sim_verdict["checked"]:
        state = "FAILS" if sim_verdict["failed"] else "passes"
        blamed = sim_verdict["at_fault"] or "none"
        lines.append(
            f"open-loop replay in its own sim {state} ({sim_verdict['measured']}); joints a "
            f"per-joint map blames there: {blamed}"
        )
    collapsed = (
        not train_pass and motion.episodes and motion.collapsed_share >= thresholds.collapse_share
    )
    # The policy does the task in its own sim and fails on the arm: the arm's dynamics.
    dynamics_gap = (
        sim is not None
        and not train_pass
        and sim.episodes > 0
        and sim.rate >= thresholds.pass_rate
        and sim.ci[0] > train.ci[1]
    )
    evidence["dynamics_gap"] = bool(dynamics_gap)
    # The policy does the task where the identified sim says it should and the arm differs
    # in ways identification could not fit: more identification cannot help.
    misspecified = bool(
        identification_residual is not None
        and identification_residual > thresholds.misspecified_residual
        and sim is not None
        and sim.episodes > 0
        and sim.rate >= thresholds.pass_rate
        and not (train_pass and shifted_pass)
    )
    if identification_residual is not None:
        lines.append(
            f"identification left the held-out replay error {identification_residual:.1f}x "
            "what measurement noise alone leaves"
        )
    evidence["identification_residual"] = identification_residual
    evidence["model_misspecified"] = misspecified
    sim_pass = sim is not None and sim.episodes > 0 and sim.rate >= thresholds.pass_rate
    # Its conventions hold where they are known to: in its own sim it does the task and its
    # commands are its teacher's, so what fails on the arm only is the arm's dynamics.
    # A per-joint map in its own sim, where it passes and its replay does not fail, is a
    # sound policy's own difference from its teacher: no evidence of a convention.
    arm_only = bool(
        (verdict["failed"] or verdict["systematic"])
        and sim_pass
        and sim_verdict is not None
        and sim_verdict["checked"]
        and sim_verdict["informative"]
        and not sim_verdict["failed"]
    )
    evidence["replay_fails_only_on_arm"] = arm_only
    # A failure no per-joint map explains is either a normalisation/nonlinear convention
    # error or behaviour unlike the recorded episodes'; the other modes' signatures say which.
    # A joint order found only with the closed-loop misses defers to them the same way.
    other_mode = (train_pass and not shifted_pass) or collapsed
    mapped = (
        verdict["checked"]
        and verdict["systematic"]
        and not verdict["failed"]
        and verdict["episodes"] >= thresholds.convention_min_episodes
        and not dynamics_gap
        and not arm_only
        and not (verdict.get("corroborated") and other_mode)
    )
    # The same two rules in its own sim, where the arm's dynamics play no part.
    sim_mapped = bool(
        sim_verdict is not None
        and sim_verdict["checked"]
        and sim_verdict["systematic"]
        and not sim_verdict["failed"]
        and sim_verdict["episodes"] >= thresholds.convention_min_episodes
        and sim is not None
        and not sim_pass
    )
    unexplained = verdict["failed"] and (
        not verdict["joints_at_fault"] or verdict.get("corroborated", False)
    )
    # Closed loop it does what the recorded commands did, on the arm and from their starts.
    open_loop_drift = (
        unexplained and train_pass and shifted_pass and verdict["closed_loop_matches"]
    )
    evidence["open_loop_drift"] = bool(open_loop_drift)
    # The same drift in its own sim: it passes there and, closed loop, reaches every goal
    # the recorded commands did. Then the drift is the student's, wherever it runs.
    sim_drift = bool(
        sim_verdict is not None
        and sim_verdict["failed"]
        and not sim_verdict["joints_at_fault"]
        and sim_pass
        and sim_verdict["closed_loop_matches"]
    )
    evidence["open_loop_drift_in_own_sim"] = sim_drift
    sim_failed = bool(
        sim_verdict is not None
        and sim_verdict["failed"]
        and (sim_verdict["joints_at_fault"] or not (other_mode or sim_drift))
    )
    if open_loop_drift:
        lines.append(
            "replay not read as a convention error: no per-joint map explains it, both "
            "conditions pass, and closed loop the policy reaches the goal from every "
            "replayed start the recorded commands did (open-loop drift)"
        )
    if arm_only:
        lines.append(
            "replay not read as a convention error: it fails on the arm only; in its own sim "
            "the policy passes and its commands replay within the thresholds (a convention "
            "would show there too)"
        )
    if sim_drift and unexplained and not open_loop_drift:
        lines.append(
            "replay not read as a convention error: no per-joint map explains it, and it "
            "drifts in its own sim too, where the policy passes and closed loop reaches the "
            "goal from every replayed start the recorded commands did (open-loop drift)"
        )
    excused = other_mode or open_loop_drift or sim_drift
    # How a replay that did not make the label read, for the other labels' reasons.
    if arm_only:
        replay_read = "the open-loop replay fails on the arm only, not in its own sim"
    elif verdict["failed"] and (open_loop_drift or sim_drift):
        replay_read = "the open-loop replay drifts, and closed loop the policy reaches every goal"
    else:
        replay_read = "the replay check does not fail"
    failed = verdict["failed"] and not arm_only
    arm_evidence = (failed and not (unexplained and excused)) or (mapped and not train_pass)
    if arm_evidence or sim_failed or sim_mapped:
        # The seed's rule: a failed replay is a convention/normalisation mismatch; the fit
        # only says which joints and how, it never overrides the replay.
        label = "action_convention_mismatch"
        # The arm's evidence where it decides, else its own sim's.
        decisive, where = (verdict, "") if arm_evidence else (sim_verdict, " in its own sim")
        if decisive["joints_at_fault"]:
            how = f"joints at fault: {decisive['at_fault']}"
        else:
            how = (
                "no simple per-joint map (sign, scale, offset, joint order) explains it: "
                "a normalisation-statistics, nonlinear or state-dependent convention error"
            )
        if decisive["failed"]:
            why = "; ".join(decisive["reasons"])
        else:  # one bad joint of six moves the tool little: the fit sees it, the path not
            rate = train.rate if arm_evidence else sim.rate
            why = (
                f"the trajectory stays within tolerance, but the policy fails training "
                f"conditions{where} ({rate:.0%}) and its teacher-forced commands are the "
                "recorded ones under a per-joint map"
            )
        reason = (
            f"the policy's commands on recorded successful episodes{where} do not reproduce "
            f"them ({why}); {how}"
        )
    elif misspecified:
        label = "model_misspecified"
        reason = (
            f"passes training conditions in its own, identified sim ({sim.rate:.0%}) but not "
            f"every condition on the arm (train {train.rate:.0%}, shifted {shifted.rate:.0%}), "
            f"and identification left the held-out replay error "
            f"{identification_residual:.0f}x what measurement noise alone leaves: no "
            "parameter of the simulator fits the arm; the last mile is the arm's own episodes"
        )
    elif dynamics_gap:
        label = "dynamics_gap"
        reason = (
            f"fails training conditions on the arm ({train.rate:.0%}) but passes them in its "
            f"own sim ({sim.rate:.0%}; the intervals do not overlap) and {replay_read}: the "
            "arm's dynamics differ from the sim's; identify them and adapt in the identified sim"
        )
    elif train_pass and not shifted_pass:
        label = "over_specialization"
        reason = (
            f"passes training conditions ({train.rate:.0%}) but fails shifted ones "
            f"({shifted.rate:.0%})"
            + ("; the confidence intervals do not overlap" if separated else "")
        )
    elif collapsed:
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
        reason = "passes training and shifted conditions"
        if verdict["failed"]:
            reason += f"; {replay_read}"
        elif verdict["checked"] and verdict["informative"]:
            reason += " and the open-loop replay"
        elif verdict["checked"]:
            reason += " (the open-loop replay was not informative in this profile)"
        if mapped:  # reported, not decisive: a working policy may differ from its teacher
            reason += f"; a per-joint map blames {', '.join(verdict['joints_at_fault'])}"
    else:
        label = "inconclusive"
        seen = ["training conditions fail without frozen or hesitant motion"]
        if verdict["checked"] and not verdict["informative"]:
            seen.append("the open-loop replay was not informative in this profile")
        elif verdict["failed"]:
            seen.append(f"{replay_read}, not a convention error")
        elif verdict["checked"]:
            seen.append("the open-loop replay passes and no per-joint map explains the actions")
        reason = "; ".join(seen)
    evidence["reason"] = reason
    summary = f"diagnosis: {label} ({reason})\n" + "\n".join("  " + line for line in lines)
    return Diagnosis(label=label, evidence=evidence, summary=summary)
