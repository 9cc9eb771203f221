"""The arm's keep-or-roll-back decision on paired trials (no ROS, no sim)."""

from __future__ import annotations

import json

import pytest

from simreal_ros.loop.arm_decision import KEPT, LOST, UNVERIFIED, decide_on_arm


def episodes(outcomes, returns=None, condition="train", first_seed=10):
    returns = returns or [10.0 if s else -10.0 for s in outcomes]
    return [
        {"condition": condition, "seed": first_seed + k, "success": s, "episode_return": r}
        for k, (s, r) in enumerate(zip(outcomes, returns, strict=True))
    ]


def test_a_candidate_clearly_worse_on_success_is_rolled_back_with_its_numbers():
    decision = decide_on_arm(episodes([0] * 12), episodes([1] * 10 + [0] * 2), "v0002", "v0001")
    assert decision.kind == LOST and not decision.keep
    assert decision.basis == "success CI excludes 0" and decision.success_ci[1] < 0
    assert decision.pairs == 12 and decision.candidate_successes == 0
    assert "rolled back v0002 to v0001" in decision.reason and "0 vs 10" in decision.reason
    json.dumps(decision.to_dict())  # summary.json-ready


def test_a_clearly_better_candidate_is_kept():
    decision = decide_on_arm(episodes([1] * 10 + [0] * 2), episodes([0] * 12), "v2", "base")
    assert decision.kind == KEPT and decision.keep and decision.success_ci[0] > 0


def test_return_decides_when_success_cannot():
    # Nobody succeeds (a hard stand-in): the candidate's returns are lower on every seed.
    worse = decide_on_arm(
        episodes([0] * 8, [-30.0 - k for k in range(8)]),
        episodes([0] * 8, [-20.0 - k for k in range(8)]),
        "v1", "base",
    )  # fmt: skip
    assert worse.kind == LOST and worse.basis == "return CI excludes 0"
    assert worse.success_ci == (0.0, 0.0) and worse.return_ci[1] < 0


def test_pairs_are_matched_by_condition_and_seed_not_by_order():
    candidate = episodes([1, 0], condition="train") + episodes([1], condition="shifted")
    incumbent = list(reversed(episodes([1, 0], condition="train")))  # same seeds, other order
    decision = decide_on_arm(candidate, incumbent, "v1", "base")
    assert decision.pairs == 2  # the shifted episode has no partner
    assert decision.success_difference == 0.0 and decision.return_difference == 0.0


@pytest.mark.parametrize(
    ("policy", "kept"), [("point_estimate", False), ("keep", True), ("rollback", False)]
)
def test_inconclusive_handling(policy, kept):
    # One pair of four differs (the candidate lost it): no CI excludes 0.
    candidate = episodes([1, 1, 1, 0], [5.0, 1.0, -3.0, -9.0])
    incumbent = episodes([1, 1, 1, 1], [4.0, 2.0, -2.0, -4.0])
    decision = decide_on_arm(candidate, incumbent, "v1", "base", inconclusive=policy)
    assert decision.basis.startswith("inconclusive")
    assert decision.success_ci[0] < 0 <= decision.success_ci[1]
    assert decision.keep is kept and decision.kind == (KEPT if kept else LOST)


def test_an_inconclusive_tie_is_kept_by_the_point_estimate():
    same = episodes([1, 0, 1, 0])
    decision = decide_on_arm(same, same, "v1", "base")
    assert decision.keep and decision.basis == "inconclusive, point estimate"


def test_no_pairs_is_unverified_and_rolled_back_and_bad_input_is_refused():
    decision = decide_on_arm(episodes([1]), [], "v1", "base")
    assert decision.kind == UNVERIFIED and not decision.keep
    with pytest.raises(ValueError, match="inconclusive='maybe'"):
        decide_on_arm([], [], "v1", "base", inconclusive="maybe")
    with pytest.raises(ValueError, match="non-finite return"):
        decide_on_arm(episodes([1], [float("nan")]), episodes([1]), "v1", "base")
