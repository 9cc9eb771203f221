"""The screening gate in MuJoCo with the shipped reach checkpoint: sabotaged candidates
(an adapter inverting the action head; one trained on mislabelled actions) are rejected
with the numbers, an identity adapter passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from core.learner_toy import invert_layer

from simreal_ros.config_schema import from_mapping
from simreal_ros.learner import lora
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.data import collect_sim_transitions
from simreal_ros.learner.gate import screen
from simreal_ros.learner.promotion import policy_evaluator
from simreal_ros.learner.session import LearnerSession
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.torch_checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

SEEDS = list(range(100, 108))


@pytest.fixture(scope="module")
def reach(shipped_reach):
    return shipped_reach


def config(tmp_path, checkpoint, **changes):
    values = {
        "task": "reach", "checkpoint_dir": str(checkpoint),
        "store_root": str(tmp_path / "models"), "method": "bc", "screen.seeds": len(SEEDS),
        "screen.first_seed": SEEDS[0], "screen.conditions": ["train"],
        "screen.profile": "nominal", "screen.workers": 1, "promotion.ci_low": 0.5,
        "promotion.tolerance": 0.1, "sim_replay": False, "batch_size": 64,
        "updates_per_round": 200, "learning_rate": 1e-3, "learning_rate_cap": 1e-3,
    }  # fmt: skip
    values.update(changes)
    return from_mapping(LearnerConfig, values)


def save_adapter(model, base, directory):
    lora.save(model, directory)
    ckpt.write_adapter_metadata(directory, base, version=directory.name, parent_version=None)
    return directory


def test_gate_in_mujoco_rejects_sabotage_and_passes_an_identity_adapter(reach, tmp_path):
    cfg = config(tmp_path, reach)
    base = load_checkpoint(reach)
    evaluator = policy_evaluator(cfg, robot=load_robot_description())
    cache: dict = {}

    def gate(adapter_dir):
        return screen(evaluator, reach, adapter_dir, None, ["train"], SEEDS,
                      cfg.promotion.ci_low, cfg.promotion.tolerance, "nominal", cache)  # fmt: skip

    identity = save_adapter(lora.wrap(base.model.actor, rank=8, alpha=16), base, tmp_path / "id")
    passed = gate(identity)
    assert passed.promoted, passed.reason
    assert passed.results[0].baseline_success_rate >= 0.75, "the shipped policy should work"

    inverted_model = lora.wrap(base.model.actor, rank=8, alpha=16, targets=["mean_head"])
    invert_layer(inverted_model)
    inverted = gate(save_adapter(inverted_model, base, tmp_path / "inverted"))
    assert not inverted.promoted
    result = inverted.results[0]
    assert result.success_rate < result.baseline_success_rate - cfg.promotion.tolerance
    assert "rejected" in inverted.reason and f"/{len(SEEDS)}" in inverted.reason
    print("\ninverted head:", inverted.reason)


def test_a_round_on_mislabelled_actions_is_rejected_and_not_activated(reach, tmp_path):
    cfg = config(tmp_path, reach)
    base = load_checkpoint(reach)
    torch.manual_seed(0)
    real = collect_sim_transitions(
        base, "reach", 4, seed=7, profile="real_twin", noise=0.05, robot=load_robot_description()
    )
    real.sources = np.asarray(["real_twin"] * len(real))
    real.episode_success[:] = True
    real.actions = -real.actions  # a sign convention flipped somewhere in logging
    session = LearnerSession(cfg, robot=load_robot_description())
    result = session.run_round(real, policy_evaluator(cfg, robot=session.robot))
    assert not result.decision.promoted, result.decision.reason
    assert session.store.current() is None  # the base keeps running
    stored = session.store.load(result.stored.version)
    assert stored.screening["promoted"] is False and "rejected" in stored.screening["reason"]
    print("\nmislabelled actions:", result.decision.reason)
