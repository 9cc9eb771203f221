"""The loop's diagnosis on gapped stand-ins (a dynamics gap, no convention bug): never
action_convention_mismatch, on several seeds and on a gap of another kind; a real
convention bug on the gapped arm still is one (test_diagnosis_convention_matrix.py covers
the bugs on the arm's own model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from simreal_ros.diagnosis.induced_failures import convention_bug_checkpoint
from simreal_ros.loop.diagnose_round import diagnose_round
from simreal_ros.loop.state import ConditionScore
from simreal_ros.policy.checkpoint import shipped_checkpoint
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.evaluate import PolicySource, build_policy, evaluate_policy

# Not a shipped stand-in: a slow arm on a sticky table with a heavy cube, where the
# nominal teacher's demonstrations and the policy's commands part on the arm's states.
STICKY_GAP = Path(__file__).resolve().parents[2] / "bench" / "profiles" / "gap_sticky.yaml"


def _diagnose(checkpoint: str, profile: str, first_seed: int, replay_first: int):
    torch.set_num_threads(1)
    arm = load_robot_description("simreal_arm")
    scores = []
    for condition in ("train", "shifted"):
        result = evaluate_policy(
            checkpoint, profile, condition, list(range(first_seed, first_seed + 10)), robot=arm
        )
        scores.append(ConditionScore.of(condition, [r.success for r in result.records]))
    policy = build_policy(PolicySource(checkpoint), robot=arm)
    out = diagnose_round(
        [], scores, policy, "push", profile, list(range(replay_first, replay_first + 3)),
        robot=arm,
    )  # fmt: skip
    return scores, out


@pytest.mark.parametrize("first_seed", [920000, 921000, 922000])
def test_the_stand_in_gap_is_not_a_convention_mismatch(first_seed):
    scores, out = _diagnose(str(shipped_checkpoint("push")), "real_twin", first_seed,
                            first_seed + 500)  # fmt: skip
    assert scores[0].successes <= 5  # the stand-in breaks the policy (the premise)
    assert out["label"] == "dynamics_gap", out["summary"]


# Replay starts on which the arm's replay alone failed, with and without a per-joint map.
@pytest.mark.parametrize("replay_first", [930500, 930510, 930560])
def test_a_gap_of_another_kind_is_not_a_convention_mismatch(replay_first):
    scores, out = _diagnose(str(shipped_checkpoint("push")), str(STICKY_GAP), 930000, replay_first)
    assert scores[0].successes <= 5, scores  # the gap breaks the policy
    assert out["label"] == "dynamics_gap", out["summary"]
    assert out["evidence"]["replay_fails_only_on_arm"], out["summary"]


def test_a_convention_bug_on_the_gapped_arm_is_still_a_mismatch(tmp_path):
    """The nominal teacher rarely succeeds on the stand-in, so the arm replays little; the
    bug shows in the policy's own sim."""
    bugged = convention_bug_checkpoint(
        shipped_checkpoint("push"), tmp_path / "bug", "sign", (1, 2)
    )
    _, out = _diagnose(str(bugged), "real_twin", 940000, 940500)
    assert out["label"] == "action_convention_mismatch", out["summary"]
    assert "in its own sim" in out["summary"], out["summary"]


def test_simreal_diagnose_takes_the_policys_own_sim(tmp_path, capsys):
    """`simreal diagnose --own-sim` gives the command line the loop's evidence: the base on
    the stand-in is a dynamics gap, a convention bug there a mismatch from its own sim."""
    from simreal_ros.cli.main import main
    from simreal_ros.diagnosis.run import diagnose

    torch.set_num_threads(1)
    out = tmp_path / "base.json"
    common = ["--dynamics-profile", "real_twin", "--episodes", "10", "--seed", "940000",
              "--replay-episodes", "3", "--workers", "1"]  # fmt: skip
    assert main(["diagnose", "--checkpoint", str(shipped_checkpoint("push")), *common,
                 "--own-sim", "auto", "--json", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert result["label"] == "dynamics_gap", result["summary"]
    assert result["evidence"]["own_sim"] == "randomized"
    bugged = convention_bug_checkpoint(
        shipped_checkpoint("push"), tmp_path / "bug", "sign", (1, 2)
    )
    arm = load_robot_description("simreal_arm")
    kwargs = dict(profile="real_twin", episodes=10, seed=940000, replay_episodes=3, robot=arm)
    result = diagnose(str(bugged), own_sim="randomized", **kwargs)
    assert result.label == "action_convention_mismatch", result.summary
    assert "in its own sim" in result.evidence["reason"], result.summary
    with pytest.raises(ValueError, match="is the profile diagnosed"):
        diagnose(str(bugged), own_sim="real_twin", **kwargs)
    with pytest.raises(ValueError, match="is a stand-in for the arm"):
        diagnose(str(bugged), own_sim=str(STICKY_GAP), **kwargs)
