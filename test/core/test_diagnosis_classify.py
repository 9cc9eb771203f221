"""classify(), action statistics and the convention fit on hand-built evidence."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from simreal_ros.diagnosis.action_stats import action_statistics, summarize
from simreal_ros.diagnosis.classify import ConditionOutcome, Thresholds, classify
from simreal_ros.diagnosis.replay import (
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


def _replay(tool_rms: float, fit: ConventionFit, reached: int = 4) -> ReplayResult:
    rows = [
        EpisodeReplay(
            "expert", i, 20, tool_rms, tool_rms * 3, 0.0, i < reached, 0.001, 0.002, 0.0, True
        )
        for i in range(4)
    ]
    return ReplayResult("nominal", rows, fit)


def _fit(scale=1.0, permutation=(0, 1, 2), fitted=0.99, identity=0.98, offset=0.0):
    n = len(permutation)
    return ConventionFit(
        ["j0", "j1", "j2"][:n], identity, fitted, list(permutation), [scale] * n,
        [offset] * n, [fitted] * n, 100,
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


def test_classify_convention_mismatch_needs_failed_replay_and_systematic_fit():
    ok = ConditionOutcome("train", 9, 10)
    fit = _fit(scale=0.5, identity=-1.0)
    d = classify(ok, (9, 10), _replay(0.03, fit, reached=0), [], Thresholds())
    assert d.label == "action_convention_mismatch"
    assert "x 0.50" in d.summary and d.evidence["replay"]["failed"]
    # Same failed replay, but no systematic explanation: not a convention mismatch.
    unexplained = _fit(scale=0.6, fitted=0.3, identity=0.2)
    d = classify(ok, (9, 10), _replay(0.03, unexplained, reached=0), [], Thresholds())
    assert d.label == "healthy" and "no scale/offset/permutation" in d.evidence["reason"]
    d = classify((3, 10), (9, 10), _replay(0.03, unexplained, reached=0), [], Thresholds())
    assert d.label == "inconclusive"
    # Systematic-looking fit but the replay passes: conditions decide.
    d = classify(ok, (9, 10), _replay(0.002, fit), [], Thresholds())
    assert d.label == "healthy"


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
