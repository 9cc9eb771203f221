"""The diagnosis over convention bugs built into copies of the shipped reach checkpoint.

A representative subset of ``bench/diagnosis_matrix.py`` (every bug kind, single and
several joints, nominal and the real_twin stand-in): each must be labelled
``action_convention_mismatch`` and, for action-side bugs, blame exactly the bug's
joints; the shipped checkpoint itself must stay healthy.
"""

from __future__ import annotations

import pytest
import torch

from simreal_ros.diagnosis.induced_failures import BugCase
from simreal_ros.diagnosis.run import diagnose
from simreal_ros.policy.checkpoint import shipped_checkpoint
from simreal_ros.robot.description import load_robot_description

pytestmark = pytest.mark.skipif(
    not (shipped_checkpoint("reach") / "policy.json").is_file(),
    reason="needs the shipped reach checkpoint",
)

# Closed loop compensates: both conditions pass, the tool path stays within tolerance,
# and the per-joint map that blames the right joints is reported but not decisive.
KNOWN_MISS = "a bug the policy compensates closed loop is reported, not labelled"

CASES = [
    BugCase("reach", "sign", (2,)),
    BugCase("reach", "sign", (1, 2)),
    pytest.param(
        BugCase("reach", "offset", (3,)),
        marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISS),
    ),
    BugCase("reach", "offset", (1, 2)),
    pytest.param(
        BugCase("reach", "scale", (1, 2), 0.3),
        marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISS),
    ),
    BugCase("reach", "scale", (1,), 1.8),
    BugCase("reach", "permutation", (0, 3)),
    BugCase("reach", "permutation", (2, 3)),
    BugCase("reach", "obs_mean", (1, 2)),
    BugCase("reach", "sign", (2,), profile="real_twin"),
    # A base and a wrist joint swapped: the path stays within tolerance, the pooled map
    # and the closed-loop misses name it.
    BugCase("push", "permutation", (0, 5)),
]


def _diagnose(case: BugCase, tmp_path):
    torch.set_num_threads(1)
    checkpoint = case.build(tmp_path / "bug")
    return diagnose(str(checkpoint), profile=case.profile, episodes=8, seed=0,
                    replay_episodes=8, robot=load_robot_description())  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: getattr(c, "name", None))
def test_convention_bug_is_a_mismatch_on_the_right_joints(case, tmp_path):
    result = _diagnose(case, tmp_path)
    assert result.label == "action_convention_mismatch", result.summary
    expected = case.expected_joints(load_robot_description().joint_names)
    if expected is not None:
        assert sorted(result.evidence["replay"]["joints_at_fault"]) == sorted(expected), (
            result.summary
        )


@pytest.mark.parametrize("profile", ["nominal", "real_twin"])
def test_shipped_policy_stays_healthy(profile, tmp_path):
    result = _diagnose(BugCase("reach", "none", profile=profile), tmp_path)
    assert result.label == "healthy", result.summary
    assert result.evidence["replay"]["joints_at_fault"] == []
    assert result.evidence["replay"]["failed"] is False
