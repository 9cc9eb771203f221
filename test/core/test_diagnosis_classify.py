"""classify(), action statistics and the convention fit on hand-built evidence."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from simreal_ros.diagnosis.action_stats import action_statistics, summarize
from simreal_ros.diagnosis.classify import ConditionOutcome, Thresholds, classify
from simreal_ros.diagnosis.replay_check import (
    ConventionFit,
    EpisodeReplay,
    ReplayResult,
    fit_action_convention,
)

JOINTS = tuple(f"j{i}" for i in range(7))
DT = 0.05


def _stats(kind: str, steps: int = 40):
    """ActionStats of a synthetic episode: moving, frozen or dithering tool."""
    goal = np.array([0.5, 0.2, 0.1])
    start = np.array([0.5, -0.2, 0.1])
    tool = [start]
    for t in range(steps):
        if kind == "moving":
            step = np.array([0.0, 0.4 / steps, 0.0])
        elif kind == "frozen":
            step = np.array([0.0, 0.05 / steps, 0.0]) if t < 3 else np.zeros(3)
        else:  # dithering: back and forth
            step = np.array([0.0, 0.01 if t % 2 == 0 else -0.01, 0.0])
        tool.append(tool[-1] + step)
    tool = np.array(tool)
    q = np.zeros((steps + 1, 7))
    q[:, 0] = tool[:, 1]  # joints follow the tool (enough for the statistics)
    commands = q[:-1] + (0.2 if kind == "frozen" else 0.0)  # frozen: pushing, not moving
    return action_statistics(commands, q, tool, goal, DT)


def _replay(
    tool_rms: float,
    fit: ConventionFit,
    reached: int = 4,
    closed_loop: int | None = None,
    baseline_tool: float = 0.001,
) -> ReplayResult:
    own = [None if closed_loop is None else i < closed_loop for i in range(4)]
    rows = [
        EpisodeReplay(
            "expert",
            i,
            20,
            tool_rms,
            tool_rms * 3,
            0.0,
            i < reached,
            baseline_tool,
            0.002,
            0.0,
            True,
            own[i],
        )
        for i in range(4)
    ]
    return ReplayResult("nominal", rows, fit)


def _fit(scale=1.0, permutation=(0, 1, 2), fitted=0.99, identity=0.98, offset=0.0):
    """Every joint alike: the same scale, offset, R² and as-is R²."""
    n = len(permutation)
    return ConventionFit(
        ["j0", "j1", "j2"][:n], identity, fitted, list(permutation), [scale] * n,
        [offset] * n, [fitted] * n, 100, [identity] * n,
    )  # fmt: skip


def test_action_statistics_tell_moving_frozen_and_dithering_apart():
    moving, frozen, dither = _stats("moving"), _stats("frozen"), _stats("dither")
    assert moving.frozen_fraction == 0.0 and moving.reversal_rate == 0.0
    assert moving.progress == pytest.approx(1.0, abs=1e-6)
    assert moving.tool_travel == pytest.approx(0.4, abs=1e-6)
    assert frozen.frozen_fraction > 0.9 and frozen.blocked_fraction > 0.9
    assert frozen.progress < 0.2
    assert dither.reversal_rate > 0.9 and dither.frozen_fraction == 0.0
    summary = summarize([moving, frozen, dither])
    assert (summary.frozen_episodes, summary.hesitant_episodes) == (1, 1)
    assert summary.collapsed_episodes == 2


def test_action_statistics_refuse_bad_shapes():
    with pytest.raises(ValueError, match="positions"):
        action_statistics(np.zeros((5, 7)), np.zeros((3, 7)), np.zeros((6, 3)), np.zeros(3), DT)
    with pytest.raises(ValueError, match="dt"):
        action_statistics(np.zeros((5, 7)), np.zeros((6, 7)), np.zeros((6, 3)), np.zeros(3), 0)


def test_fit_finds_scale_permutation_and_nothing_in_blends():
    rng = np.random.default_rng(0)
    recorded = rng.normal(0, 0.05, (200, 7))
    recorded[:, 6] = 0.0  # the gripper does not move
    scaled = fit_action_convention(recorded, 0.5 * recorded, JOINTS)
    assert scaled.common_scale() == pytest.approx(0.5, abs=1e-6)
    assert scaled.is_systematic_error() and "x 0.50" in scaled.describe()
    swapped = recorded[:, [0, 2, 1, 3, 4, 5, 6]]
    perm = fit_action_convention(recorded, swapped, JOINTS)
    assert perm.swaps() == [("j1", "j2")] and perm.is_systematic_error()
    same = fit_action_convention(recorded, recorded + rng.normal(0, 0.002, recorded.shape), JOINTS)
    assert not same.permuted and not same.is_systematic_error()
    assert "match the recorded ones" in same.describe()
    # Blending two modes: half the steps follow the recording, half are averaged away.
    blended = recorded.copy()
    blended[::2] = rng.normal(0, 0.05, blended[::2].shape)
    blend = fit_action_convention(recorded, blended, JOINTS)
    assert not blend.is_systematic_error()


def test_fit_judges_each_joint_so_one_flipped_joint_is_not_diluted():
    rng = np.random.default_rng(1)
    recorded = rng.normal(0, 0.05, (300, 7))
    recorded[:, 6] = 0.0
    policy = recorded + rng.normal(0, 0.01, recorded.shape)  # a close, healthy imitation
    healthy = fit_action_convention(recorded, policy, JOINTS)
    assert healthy.faulty_joints() == []
    flipped = policy.copy()
    flipped[:, 3] *= -1.0
    fit = fit_action_convention(recorded, flipped, JOINTS)
    assert fit.faulty_joints() == ["j3"] and "sign flipped on j3" in fit.describe()
    assert fit.fitted_r2 - fit.identity_r2 > 0.2  # pooled, one of six joints: still seen
    offset = policy.copy()
    offset[:, [1, 4]] += 0.08
    assert fit_action_convention(recorded, offset, JOINTS).faulty_joints() == ["j1", "j4"]


def test_failed_replay_is_a_mismatch_even_when_the_pooled_fit_gain_is_small():
    """The veto case: replay 1/4 against 4/4, the fit names the joints at fault, but its
    pooled R² gain (+0.19) is under fit_gain. The failed replay decides the label."""
    names = ["j0", "j1", "j2", "j3", "j4", "j5"]
    fit = ConventionFit(
        names, 0.70, 0.89, list(range(6)), [1.0, 1.0, -1.0, 1.0, 1.0, 1.0],
        [0.0] * 6, [0.95, 0.9, 0.95, 0.9, 0.9, 0.9], 200,
        [0.93, 0.88, -2.9, 0.9, 0.88, 0.89],
    )  # fmt: skip
    assert fit.fitted_r2 - fit.identity_r2 < Thresholds().fit_gain
    replay = _replay(0.004, fit, reached=1, closed_loop=1)  # tool within tolerance
    d = classify((3, 10), (1, 10), replay, [], Thresholds())
    assert d.label == "action_convention_mismatch", d.summary
    assert d.evidence["replay"]["failed"] and d.evidence["replay"]["joints_at_fault"] == ["j2"]
    assert "reach the goal in 1/4" in d.evidence["reason"] and "j2" in d.evidence["reason"]
    # Without any per-joint map it is still the mismatch; the evidence says so.
    unexplained = _fit(scale=0.6, fitted=0.3, identity=0.2)
    for train in ((3, 10), (9, 10)):
        d = classify(train, (9, 10), _replay(0.03, unexplained, reached=0), [], Thresholds())
        assert d.label == "action_convention_mismatch", d.summary
        assert "no simple per-joint map" in d.evidence["reason"]
        assert d.evidence["replay"]["joints_at_fault"] == []


def test_classify_convention_mismatch_from_fit_or_trajectory():
    ok = ConditionOutcome("train", 9, 10)
    fit = _fit(scale=0.5, identity=-1.0)
    d = classify(ok, (9, 10), _replay(0.03, fit, reached=0), [], Thresholds())
    assert d.label == "action_convention_mismatch"
    assert "x 0.50" in d.summary and d.evidence["replay"]["failed"]
    assert d.evidence["replay"]["joints_at_fault"] == ["j0", "j1", "j2"]
    # The trajectory within tolerance, every joint's steps halved, training fails: the
    # fit decides. While both conditions pass the map is reported, not decisive.
    d = classify((3, 10), (9, 10), _replay(0.002, fit), [], Thresholds())
    assert d.label == "action_convention_mismatch"
    assert "per-joint map" in d.evidence["reason"]
    d = classify(ok, (9, 10), _replay(0.002, fit), [], Thresholds())
    assert d.label == "healthy" and "per-joint map blames j0" in d.evidence["reason"]
    # Healthy differences from the recording (a map that barely beats the identity).
    near = _fit(scale=0.9, fitted=0.95, identity=0.9, offset=0.02)
    assert classify(ok, (9, 10), _replay(0.002, near), [], Thresholds()).label == "healthy"


def test_goal_missed_only_open_loop_is_not_a_mismatch():
    near = _fit()
    # Open loop 2/4 vs 4/4, but closed loop from the same starts 4/4: open-loop artefact.
    d = classify((9, 10), (9, 10), _replay(0.004, near, reached=2, closed_loop=4), [])
    assert d.label == "healthy", d.summary
    assert not d.evidence["replay"]["failed"] and "closed loop" in d.evidence["replay"]["notes"][0]
    d = classify((9, 10), (9, 10), _replay(0.004, near, reached=1, closed_loop=1), [])
    assert d.label == "action_convention_mismatch"
    # The same miss on two episodes of four is not significant (p = 0.052 > 0.05).
    d = classify((9, 10), (9, 10), _replay(0.004, near, reached=2, closed_loop=1), [])
    assert d.label == "healthy" and "not significant" in " ".join(d.evidence["replay"]["notes"])


def test_one_replayed_episode_never_makes_a_convention_label():
    """The issue's case: one replayed episode and a per-joint map, training failing."""
    fit = _fit(scale=0.5, identity=-1.0)
    one = _replay(0.03, fit, reached=0)
    one.episodes = one.episodes[:1]
    d = classify((3, 10), (1, 10), one, [], Thresholds())
    assert d.label != "action_convention_mismatch", d.summary
    assert d.evidence["replay"]["p_value"] == pytest.approx(0.1)


def test_a_dynamics_gap_is_named_and_wins_over_a_map_on_a_passing_replay():
    fit = _fit(scale=0.5, identity=-1.0)
    # Fails on the arm, 19/20 in its own sim, the replay passes but a map blames joints.
    d = classify((2, 20), (0, 20), _replay(0.002, fit), [], Thresholds(), sim=(19, 20))
    assert d.label == "dynamics_gap", d.summary
    assert "identify" in d.evidence["reason"] and d.evidence["dynamics_gap"]
    # Without the sim evidence the map still decides (a convention bug).
    assert classify((2, 20), (0, 20), _replay(0.002, fit), []).label == (
        "action_convention_mismatch"
    )
    # A significantly failed replay is a convention error whatever the sim says.
    failed = _replay(0.03, _fit(scale=-1.0, identity=-3.0), reached=0, closed_loop=0)
    assert classify((2, 20), (0, 20), failed, [], sim=(19, 20)).label == (
        "action_convention_mismatch"
    )
    # Failing in its own sim as well is no dynamics gap.
    assert classify((2, 20), (0, 20), None, [], sim=(3, 20)).label == "inconclusive"


def test_replay_the_profile_cannot_reproduce_is_not_read():
    near = _fit()
    replay = _replay(0.06, near, reached=0, baseline_tool=0.04)
    d = classify((9, 10), (9, 10), replay, [], Thresholds())
    assert d.label == "healthy" and not d.evidence["replay"]["informative"]
    assert "not informative" in d.evidence["reason"]
    # ...but the teacher-forced fit needs no sim: a per-joint map still fails it.
    d = classify((3, 10), (9, 10), _replay(0.06, _fit(scale=-1.0, identity=-3.0), 0, None,
                                           0.04), [])  # fmt: skip
    assert d.label == "action_convention_mismatch"


def test_classify_over_specialization_mode_collapse_and_healthy():
    good_replay = _replay(0.002, _fit())
    d = classify((10, 10), (1, 10), good_replay, [], Thresholds())
    assert d.label == "over_specialization"
    assert d.evidence["train_shifted_ci_separated"] is True
    assert "10/10" in d.summary and "1/10" in d.summary
    collapsed = [_stats("frozen"), _stats("dither"), _stats("frozen")]
    d = classify((2, 10), (1, 10), good_replay, collapsed, Thresholds())
    assert d.label == "mode_collapse"
    assert d.evidence["failing_train_motion"]["frozen_episodes"] == 2
    # Failing training conditions while moving purposefully: no collapse signature.
    d = classify((2, 10), (1, 10), good_replay, [_stats("moving")] * 3, Thresholds())
    assert d.label == "inconclusive"
    assert classify((10, 10), (9, 10), good_replay, [], Thresholds()).label == "healthy"
    # Evaluation results with .successes and .episodes (e.g. the loop's scores) work too.
    scores = [
        SimpleNamespace(successes=10, episodes=10),
        SimpleNamespace(successes=2, episodes=10),
    ]
    assert classify(*scores, good_replay, []).label == "over_specialization"
    # The thresholds are parameters: a stricter pass rate turns 9/10 into a failure.
    strict = Thresholds(pass_rate=0.95)
    assert classify((10, 10), (9, 10), good_replay, [], strict).label == "over_specialization"


def test_classify_refuses_impossible_counts():
    with pytest.raises(ValueError, match="impossible"):
        classify((11, 10), (0, 10), None, [])
    with pytest.raises(ValueError, match=r"pass_rate.*maximum"):
        Thresholds(pass_rate=1.5)


def test_unexplained_replay_failure_defers_to_another_modes_signature():
    """Behaviour unlike the recorded episodes' (another detour, a blend) also fails the
    replay; with no per-joint map, the over-specialisation or collapse signature decides."""
    unexplained = _fit(scale=0.6, fitted=0.3, identity=0.2)
    failed = _replay(0.03, unexplained, reached=0, closed_loop=0)
    assert classify((10, 10), (1, 10), failed, []).label == "over_specialization"
    collapsed = [_stats("frozen"), _stats("dither"), _stats("frozen")]
    assert classify((2, 10), (1, 10), failed, collapsed).label == "mode_collapse"
    # A per-joint map on the same failure is a convention error, whatever the conditions.
    mapped = _replay(0.03, _fit(scale=-1.0, identity=-3.0), reached=0, closed_loop=0)
    assert classify((10, 10), (1, 10), mapped, []).label == "action_convention_mismatch"


def test_open_loop_drift_of_a_policy_that_passes_everything_is_not_a_mismatch():
    """The demo's adapted version on a 5x slower arm: its replay drifts 2.5 cm with no
    per-joint map to blame, while it passes both conditions and reaches the goal closed
    loop from every replayed start. Take away any one of those and it is a mismatch."""
    unexplained = _fit(scale=0.77, fitted=0.72, identity=0.65)
    drift = _replay(0.025, unexplained, reached=4, closed_loop=4)
    d = classify((8, 8), (8, 8), drift, [])
    assert d.evidence["replay"]["failed"] and d.evidence["open_loop_drift"], d.summary
    assert d.label == "healthy" and "open-loop drift" in d.summary
    assert "replay drifts" in d.evidence["reason"], d.evidence["reason"]
    assert classify((3, 8), (8, 8), drift, []).label == "action_convention_mismatch"
    missed = _replay(0.025, unexplained, reached=4, closed_loop=3)
    d = classify((8, 8), (8, 8), missed, [])
    assert d.label == "action_convention_mismatch" and not d.evidence["open_loop_drift"]
    # A per-joint map on the same drift is a convention error, whatever the conditions.
    mapped = _replay(0.025, _fit(scale=-1.0, identity=-3.0), reached=4, closed_loop=4)
    assert classify((8, 8), (8, 8), mapped, []).label == "action_convention_mismatch"


def test_a_replay_failing_on_the_arm_only_is_the_arms_dynamics():
    """A gapped arm (a lagging joint, a stuck cube) takes a sound policy to states where it
    differs from its teacher, a map or not; a convention would show in its own sim too."""
    mapped = _replay(0.03, _fit(scale=-1.0, identity=-3.0), reached=0, closed_loop=0)
    unexplained = _replay(0.03, _fit(scale=0.6, fitted=0.3, identity=0.2), 0, 0)
    clean = _replay(0.002, _fit())
    for arm in (mapped, unexplained):
        d = classify((2, 20), (0, 20), arm, [], sim=(19, 20), sim_replay=clean)
        assert d.label == "dynamics_gap", d.summary
        assert d.evidence["replay_fails_only_on_arm"] and "arm only" in d.evidence["reason"]
        # The same failure in its own sim is a convention error.
        d = classify((2, 20), (0, 20), arm, [], sim=(19, 20), sim_replay=arm)
        assert d.label == "action_convention_mismatch", d.summary
        assert not d.evidence["replay_fails_only_on_arm"]
        # A per-joint map in its own sim, where the policy passes and its replay does not
        # fail, is a sound policy's own difference from its teacher: still the arm's.
        shown = _replay(0.002, _fit(scale=0.78, fitted=0.85, identity=0.4))
        d = classify((2, 20), (0, 20), arm, [], sim=(19, 20), sim_replay=shown)
        assert d.label == "dynamics_gap", d.summary
        # Failing its own sim with that map, the map decides.
        d = classify((2, 20), (0, 20), arm, [], sim=(5, 20), sim_replay=shown)
        assert d.label == "action_convention_mismatch", d.summary
        # Failing its own sim as well, the own-sim replay excuses nothing.
        d = classify((2, 20), (0, 20), arm, [], sim=(12, 20), sim_replay=clean)
        assert d.label == "action_convention_mismatch", d.summary
    # An own-sim replay that cannot reproduce its own demonstrations says nothing.
    blind = _replay(0.06, _fit(), reached=0, baseline_tool=0.04)
    d = classify((2, 20), (0, 20), mapped, [], sim=(19, 20), sim_replay=blind)
    assert d.label == "action_convention_mismatch", d.summary
    # Passing everything on the arm but the replay: healthy, with the reason.
    d = classify((20, 20), (19, 20), unexplained, [], sim=(19, 20), sim_replay=clean)
    assert d.label == "healthy" and "arm only" in d.evidence["reason"], d.summary


def test_a_convention_error_shows_in_the_policys_own_sim_when_the_arm_replays_nothing():
    """On a gapped arm its teacher rarely succeeds, so the arm's replay has little to replay;
    its own sim, where the teacher succeeds, still shows a convention error."""
    mapped = _replay(0.03, _fit(scale=-1.0, identity=-3.0), reached=0, closed_loop=0)
    d = classify((0, 20), (0, 20), None, [], sim=(0, 20), sim_replay=mapped)
    assert d.label == "action_convention_mismatch", d.summary
    assert "in its own sim" in d.evidence["reason"] and "sign flipped" in d.evidence["reason"]
    # A per-joint map that does not fail the replay decides there while it fails that sim.
    quiet = _replay(0.002, _fit(scale=-1.0, identity=-3.0))
    d = classify((0, 20), (0, 20), None, [], sim=(5, 20), sim_replay=quiet)
    assert d.label == "action_convention_mismatch", d.summary
    assert classify((0, 20), (0, 20), None, [], sim=(19, 20), sim_replay=quiet).label == (
        "dynamics_gap"
    )
    # An unexplained failure there defers to another mode's signature, as on the arm.
    unexplained = _replay(0.03, _fit(scale=0.6, fitted=0.3, identity=0.2), 0, 0)
    collapsed = [_stats("frozen"), _stats("dither"), _stats("frozen")]
    d = classify((2, 20), (1, 20), None, collapsed, sim=(4, 20), sim_replay=unexplained)
    assert d.label == "mode_collapse", d.summary
    d = classify((2, 20), (1, 20), None, [], sim=(4, 20), sim_replay=unexplained)
    assert d.label == "action_convention_mismatch", d.summary
    # Clean in its own sim and failing on the arm only: the gap.
    d = classify((0, 20), (0, 20), None, [], sim=(19, 20), sim_replay=_replay(0.002, _fit()))
    assert d.label == "dynamics_gap", d.summary


def test_drift_shown_in_its_own_sim_excuses_a_version_that_fails_a_condition():
    """The adapted student on a milder arm than identified: it misses the train condition
    there, and its replay drifts on the arm and in its own sim alike, where it passes and
    reaches every goal closed loop: the student's open-loop drift, not a convention."""
    unexplained = _fit(scale=0.66, fitted=0.57, identity=0.43)
    drift = _replay(0.033, unexplained, reached=1, closed_loop=4)
    own_drift = _replay(0.02, unexplained, reached=2, closed_loop=4)
    d = classify((7, 10), (9, 10), drift, [], sim=(18, 20), sim_replay=own_drift)
    assert d.label == "inconclusive", d.summary
    assert d.evidence["open_loop_drift_in_own_sim"] and not d.evidence["open_loop_drift"]
    assert "replay drifts" in d.evidence["reason"], d.evidence["reason"]
    # Without that evidence the arm's failure stands.
    assert classify((7, 10), (9, 10), drift, [], sim=(18, 20)).label == (
        "action_convention_mismatch"
    )
    # Missing a goal closed loop in its own sim, or failing that sim, it is no drift.
    missed = _replay(0.02, unexplained, reached=2, closed_loop=3)
    d = classify((7, 10), (9, 10), drift, [], sim=(18, 20), sim_replay=missed)
    assert d.label == "action_convention_mismatch", d.summary
    d = classify((7, 10), (9, 10), drift, [], sim=(12, 20), sim_replay=own_drift)
    assert d.label == "action_convention_mismatch", d.summary
    # A per-joint map on the arm is a convention error, drift or not.
    mapped = _replay(0.033, _fit(scale=-1.0, identity=-3.0), reached=1, closed_loop=4)
    d = classify((7, 10), (9, 10), mapped, [], sim=(18, 20), sim_replay=own_drift)
    assert d.label == "action_convention_mismatch", d.summary


def test_a_map_hidden_from_the_path_is_named_when_the_policy_misses_closed_loop():
    """A base and a wrist joint swapped: the wrist's small steps keep the replayed path
    within tolerance and no single joint's fit decides, but the pooled map is that swap and
    closed loop the policy misses every goal the recorded commands reach."""
    swap = ConventionFit(
        ["j0", "j1", "j2"], 0.45, 0.68, [2, 1, 0], [1.0, 1.0, 1.0], [0.0] * 3,
        [0.3, 0.9, 0.6], 100, [0.2, 0.9, 0.1],
    )  # fmt: skip
    missed = _replay(0.007, swap, reached=4, closed_loop=0)
    d = classify((0, 10), (0, 10), missed, [])
    assert d.label == "action_convention_mismatch", d.summary
    assert sorted(d.evidence["replay"]["joints_at_fault"]) == ["j0", "j2"], d.summary
    # Reaching the goals closed loop, the same map is no evidence.
    d = classify((0, 10), (0, 10), _replay(0.007, swap, reached=4, closed_loop=4), [])
    assert d.label == "inconclusive", d.summary
    # A map below the corroborated R², or gaining too little over the steps as they are.
    weak = dataclasses.replace(swap, fitted_r2=0.45, identity_r2=0.3)
    assert classify((0, 10), (0, 10), _replay(0.007, weak, 4, 0), []).label == "inconclusive"
    flat = dataclasses.replace(swap, identity_r2=0.6)
    assert classify((0, 10), (0, 10), _replay(0.007, flat, 4, 0), []).label == "inconclusive"
    # Passing its own sim with a clean replay there, the arm's miss is the arm's dynamics.
    d = classify((0, 10), (0, 10), missed, [], sim=(19, 20), sim_replay=_replay(0.002, _fit()))
    assert d.label == "dynamics_gap", d.summary
