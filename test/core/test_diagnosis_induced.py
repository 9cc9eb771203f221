"""Induced failures, each diagnosed with the right label (real policies in the real sim).

- action_convention_mismatch: the shipped reach checkpoint with its action scale halved
  in the metadata, and with the action head's rows for two joints swapped;
- healthy: the shipped reach checkpoint itself;
- over_specialization: a policy cloned from demonstrations of one detour in one
  direction round a pillar (reach_around), run in both directions;
- mode_collapse: a policy regressed with plain MSE on demonstrations that go round the
  pillar left or right (hidden coin flip): it averages the modes and stalls at the pillar.

The shipped checkpoint is used when present; otherwise a tiny one is trained here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simreal_ros.diagnosis.episodes import record_demonstrations
from simreal_ros.diagnosis.induced_failures import (
    permuted_action_checkpoint,
    perturbed_demonstrations,
    scaled_action_checkpoint,
    train_bc_checkpoint,
)
from simreal_ros.diagnosis.replay_check import replay_check
from simreal_ros.diagnosis.run import diagnose
from simreal_ros.policy.checkpoint import shipped_checkpoint
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.evaluate import PolicySource, build_policy

FIELDS = ("joint_position", "ee_position", "goal_minus_ee")
ARM = load_robot_description("simreal_arm")  # the arm the shipped checkpoints are for


@pytest.fixture(scope="module")
def reach_checkpoint(tmp_path_factory):
    torch.set_num_threads(1)
    shipped = shipped_checkpoint("reach")
    if (shipped / "policy.json").is_file():
        return shipped
    # A competent stand-in: cloned from noise-perturbed demonstrations of both conditions.
    demos = [
        *perturbed_demonstrations("reach", range(30), noise=0.05, robot=ARM),
        *perturbed_demonstrations(
            "reach", range(30), noise=0.05, condition="shifted", seed=1, robot=ARM
        ),
    ]
    out = tmp_path_factory.mktemp("reach") / "bc"
    return train_bc_checkpoint(
        out, "reach", demos, steps=1500, observation_fields=FIELDS, robot=ARM
    )


@pytest.fixture(scope="module")
def detour_demos():
    torch.set_num_threads(1)
    from simreal_ros.diagnosis.scenarios import make_environment

    demos = perturbed_demonstrations("reach_around", range(32), noise=0.06, robot=ARM)
    env = make_environment("reach_around", robot=ARM)
    sides = []
    for demo in demos:  # the hidden coin flip of each demonstration
        env.reset(seed=demo.seed, condition="train")
        sides.append(env.task.detour_side)
    assert {-1.0, 1.0} <= set(sides), "the demonstrations must contain both detours"
    return demos, sides


def test_scaled_action_normalization_is_a_convention_mismatch(reach_checkpoint, tmp_path):
    scaled = scaled_action_checkpoint(reach_checkpoint, tmp_path / "scaled", 0.5)
    result = diagnose(
        str(scaled), profile="nominal", episodes=4, seed=0, replay_episodes=4, robot=ARM
    )
    assert result.label == "action_convention_mismatch", result.summary
    assert "actions are the recorded ones x" in result.evidence["replay"]["fit"]
    # Against the unscaled policy's own fit on the same demonstrations: half the step.
    demos = record_demonstrations("reach", "nominal", "train", range(100_000, 100_004), robot=ARM)
    fits = [
        replay_check(
            build_policy(PolicySource(str(p)), robot=ARM), demos, "nominal", robot=ARM
        ).fit
        for p in (reach_checkpoint, scaled)
    ]
    base_fit, scaled_fit = (
        {n: sc for n, sc, g in zip(f.joint_names, f.scale, f.explained(), strict=True) if g}
        for f in fits
    )
    names = sorted(set(base_fit) & set(scaled_fit))
    ratio = np.array([scaled_fit[n] / base_fit[n] for n in names])
    assert len(names) >= 3 and np.allclose(ratio, 0.5, atol=0.1), dict(
        zip(names, ratio, strict=True)
    )


def test_permuted_joint_order_is_a_convention_mismatch(reach_checkpoint, tmp_path):
    order = [0, 2, 1, 3, 4, 5, 6]  # shoulder_lift and elbow outputs swapped
    permuted = permuted_action_checkpoint(reach_checkpoint, tmp_path / "permuted", order)
    result = diagnose(
        str(permuted), profile="nominal", episodes=4, seed=0, replay_episodes=4, robot=ARM
    )
    assert result.label == "action_convention_mismatch", result.summary
    assert "shoulder_lift_joint and elbow_joint swapped" in result.summary
    assert result.evidence["replay"]["numbers"]["fit"]["swaps"] == [
        ["shoulder_lift_joint", "elbow_joint"]
    ]


def test_shipped_policy_is_healthy(reach_checkpoint):
    result = diagnose(str(reach_checkpoint), profile="nominal", episodes=8, seed=0,
                      replay_episodes=4, robot=ARM)  # fmt: skip
    assert result.label == "healthy", result.summary
    assert result.evidence["replay"]["failed"] is False


def test_policy_cloned_from_one_direction_is_over_specialized(detour_demos, tmp_path):
    demos, sides = detour_demos
    one_detour = [d for d, side in zip(demos, sides, strict=True) if side > 0]
    out = train_bc_checkpoint(tmp_path / "narrow", "reach_around", one_detour,
                              hidden=(32, 32), steps=400, observation_fields=FIELDS,
                              robot=ARM)  # fmt: skip
    result = diagnose(str(out), episodes=6, seed=100, replay_episodes=4, robot=ARM)
    assert result.label == "over_specialization", result.summary
    assert result.evidence["train"]["success_rate"] >= 0.8
    assert result.evidence["shifted"]["success_rate"] < 0.5


def test_mse_on_bimodal_demonstrations_is_mode_collapse(detour_demos, tmp_path):
    demos, _ = detour_demos
    out = train_bc_checkpoint(tmp_path / "blend", "reach_around", demos,
                              hidden=(32, 32), steps=400, observation_fields=FIELDS,
                              robot=ARM)  # fmt: skip
    result = diagnose(str(out), episodes=8, seed=100, replay_episodes=4, robot=ARM)
    assert result.label == "mode_collapse", result.summary
    motion = result.evidence["failing_train_motion"]
    assert motion["frozen_episodes"] + motion["hesitant_episodes"] >= 1
    assert not result.evidence["replay"]["systematic"]


def test_replay_check_reads_recorded_bags_on_the_stand_in(reach_checkpoint, tmp_path):
    """Bags written by the episode writer (as the recorder does) drive the replay check."""
    from simreal_ros.learner.sim_episodes import record_rollout
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    base = load_checkpoint(reach_checkpoint)
    outcomes = [
        record_rollout(tmp_path / "bags" / f"ep{seed}", base, task="reach", seed=seed,
                       profile="real_twin", noise=0.0, episode_seconds=2.0,
                       robot=ARM).outcome
        for seed in range(4)
    ]  # fmt: skip
    bags = tmp_path / "bags"
    healthy = diagnose(
        str(reach_checkpoint), profile="real_twin", episodes=4, bags=bags, robot=ARM
    )
    successes = outcomes.count("success")
    assert successes >= 2 and healthy.evidence["replay"]["numbers"]["episodes"] == successes
    assert healthy.evidence["replay"]["failed"] is False, healthy.summary
    scaled = scaled_action_checkpoint(reach_checkpoint, tmp_path / "scaled", 0.5)
    result = diagnose(str(scaled), profile="real_twin", episodes=4, bags=bags, robot=ARM)
    assert result.label == "action_convention_mismatch", result.summary
    assert "actions are the recorded ones x 0." in result.evidence["replay"]["fit"]
    assert "simulated stand-in" in result.summary


def test_adapter_source_is_diagnosed_as_merged_policy(reach_checkpoint, tmp_path):
    """checkpoint + peft LoRA adapter (the learner's format) goes through build_policy: an
    adapter whose update swaps two joints' output weights is caught like a permuted head."""
    from simreal_ros.learner import lora
    from simreal_ros.policy import checkpoint as ckpt
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    base = load_checkpoint(reach_checkpoint)
    wrapped = lora.wrap(base.model.actor, rank=2, alpha=2, targets=["mean_head"])
    head = lora.inner(wrapped).mean_head
    with torch.no_grad():  # B A = (head rows 1, 2 swapped) - head: a rank-2 update
        weight = head.base_layer.weight
        u, s, vh = torch.linalg.svd(weight[[0, 2, 1, 3, 4, 5, 6]] - weight)
        head.lora_A["default"].weight.copy_(vh[:2])
        head.lora_B["default"].weight.copy_(u[:, :2] * s[:2])
    adapter = lora.save(wrapped, tmp_path / "adapter")
    ckpt.write_adapter_metadata(adapter, base, version="swap-adapter", parent_version=base.version)
    source = PolicySource(str(reach_checkpoint), adapter_dir=str(adapter), version="swap-adapter")
    result = diagnose(source, profile="nominal", episodes=4, seed=0, replay_episodes=4, robot=ARM)
    assert result.evidence["policy_version"] == "swap-adapter"
    assert result.label == "action_convention_mismatch", result.summary
    assert "shoulder_lift_joint and elbow_joint swapped" in result.summary


def test_bags_without_a_success_fall_back_to_demonstrations(reach_checkpoint, tmp_path):
    from simreal_ros.learner.sim_episodes import record_rollout
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    order = [0, 2, 1, 3, 4, 5, 6]
    broken = load_checkpoint(permuted_action_checkpoint(reach_checkpoint, tmp_path / "p", order))
    meta = record_rollout(tmp_path / "bags" / "ep0", broken, task="reach", seed=3,
                          profile="nominal", noise=0.0, episode_seconds=0.5,
                          robot=ARM)  # fmt: skip
    assert meta.outcome == "failure"
    result = diagnose(
        str(reach_checkpoint), episodes=2, bags=tmp_path / "bags", replay_episodes=2, robot=ARM
    )
    assert "no successful episode in bags" in result.evidence["replay_source"]
    assert result.evidence["replay"]["numbers"]["episodes"] >= 1
