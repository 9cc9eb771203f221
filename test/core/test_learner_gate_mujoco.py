"""The broken_only gate on real MuJoCo screening (shipped reach checkpoint, behind the
safety filter): the evidence it needs is measured by ``evaluate_policy`` and each kind
of breakage is rejected by its own check, while an identity adapter passes."""

from __future__ import annotations

import pytest
import torch
from core.learner_toy import invert_layer

from simreal_ros.config_schema import from_mapping
from simreal_ros.learner import lora
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.gate import screen
from simreal_ros.learner.promotion import gate_settings, policy_evaluator
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.torch_checkpoint import load_checkpoint

ARM = load_robot_description()

pytestmark = pytest.mark.slow
torch.set_num_threads(1)
SEEDS = list(range(100, 106))


@pytest.fixture(scope="module")
def reach(shipped_reach):
    return shipped_reach


def adapter(base, directory, sabotage=None):
    model = lora.wrap(base.model.actor, rank=8, alpha=16, targets=["mean_head"])
    if sabotage is not None:
        with torch.no_grad():
            sabotage(model)
    lora.save(model, directory)
    ckpt.write_adapter_metadata(directory, base, version=directory.name, parent_version=None)
    return directory


def scale_head(factor):
    def sabotage(model):
        invert_layer(model)  # W + BA = -W, then scale the update to W + BA = factor W
        module = model.base_model.model.get_submodule("mean_head")
        module.lora_B["default"].weight.mul_((factor - 1.0) / -2.0)

    return sabotage


def test_each_breakage_is_rejected_by_its_check_and_an_identity_adapter_passes(reach, tmp_path):
    cfg = from_mapping(LearnerConfig, {
        "task": "reach", "checkpoint_dir": str(reach), "store_root": str(tmp_path / "m"),
        "screen": {"profile": "randomized", "workers": 1, "conditions": ["train"]},
    })  # fmt: skip
    assert cfg.promotion.rule == "broken_only" and cfg.promotion.ci_low == 0.0  # the defaults
    base = load_checkpoint(reach)
    evaluator, cache = policy_evaluator(cfg, robot=load_robot_description()), {}

    def gate(directory):
        return screen(
            evaluator, reach, directory, None, ["train"], SEEDS, cfg.promotion.ci_low,
            cfg.promotion.tolerance, cfg.screen.profile, cache, gate_settings(cfg),
        )  # fmt: skip

    identity = gate(adapter(base, tmp_path / "identity"))
    assert identity.promoted, identity.reason
    result = identity.results[0]
    assert result.divergence == pytest.approx(0.0, abs=1e-9)
    assert 0.0 < result.intervention_rate < cfg.promotion.max_intervention_rate
    assert result.saturated_share < 0.05 and result.nonfinite_steps == 0

    inverted = gate(adapter(base, tmp_path / "inverted", invert_layer))
    assert not inverted.promoted and not inverted.results[0].passed_divergence, inverted.reason
    assert "mean |action - base action|" in inverted.reason

    saturated = gate(adapter(base, tmp_path / "saturated", scale_head(50.0)))
    assert not saturated.promoted and not saturated.results[0].passed_actions, saturated.reason
    assert "at the tanh bound" in saturated.reason

    for decision in (inverted, saturated):
        print("\n", decision.reason)


def test_non_finite_actions_are_counted_and_the_arm_held(reach):
    """Non-finite adapter weights are refused at load (lora_merge); a finite network can
    still output NaN (an overflow): the episode counts it and holds the arm."""
    import dataclasses

    import numpy as np

    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.training.evaluate import PolicySource, build_policy, evaluate_episode

    policy = build_policy(PolicySource(str(reach)), robot=load_robot_description())
    actor = policy.actor

    def sometimes_nan(obs):
        action = actor(obs)
        return np.full_like(action, np.nan) if obs[0] > 0 else action

    broken = dataclasses.replace(policy, actor=sometimes_nan)
    env = ArmTaskEnv(task="reach", profile="randomized", safety_filter=True, robot=ARM)
    try:
        records = [evaluate_episode(env, broken, seed, "train") for seed in SEEDS[:3]]
    finally:
        env.close()
    assert sum(r.nonfinite_steps for r in records) > 0
    assert all(np.isfinite(r.episode_return) for r in records)
