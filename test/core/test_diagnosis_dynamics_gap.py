"""The loop's diagnosis on the real_twin stand-in (a dynamics gap, no convention bug):
never action_convention_mismatch, on several seeds; a real convention bug still is one
(test_diagnosis_convention_matrix.py covers the bugs on the arm's own model)."""

from __future__ import annotations

import pytest
import torch

from simreal_ros.loop.diagnose_round import diagnose_round
from simreal_ros.loop.state import ConditionScore
from simreal_ros.policy.checkpoint import shipped_checkpoint
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.evaluate import PolicySource, build_policy, evaluate_policy


@pytest.mark.parametrize("first_seed", [920000, 921000, 922000])
def test_the_stand_in_gap_is_not_a_convention_mismatch(first_seed):
    torch.set_num_threads(1)
    checkpoint = str(shipped_checkpoint("push"))
    arm = load_robot_description("simreal_arm")
    scores = []
    for condition in ("train", "shifted"):
        result = evaluate_policy(
            checkpoint, "real_twin", condition, list(range(first_seed, first_seed + 10)), robot=arm
        )
        scores.append(ConditionScore.of(condition, [r.success for r in result.records]))
    assert scores[0].successes <= 5  # the stand-in breaks the policy (the premise)
    policy = build_policy(PolicySource(checkpoint), robot=arm)
    out = diagnose_round(
        [], scores, policy, "push", "real_twin", list(range(first_seed + 500, first_seed + 503)),
        robot=arm,
    )  # fmt: skip
    assert out["label"] != "action_convention_mismatch", out["summary"]
    assert out["label"] == "dynamics_gap", out["summary"]
