"""Co-training sampler honours the real:sim share; EWC reduces drift on sim data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simreal_ros.learner import lora
from simreal_ros.learner.bc import BehaviourCloning, bc_loss
from simreal_ros.learner.ewc import ElasticWeightConsolidation
from simreal_ros.learner.replay import CoTrainingSampler, Transitions, batch_from
from simreal_ros.policy.model import Actor, Architecture

EWC_WEIGHT = 500.0


def make_transitions(n, source, obs=None, actions=None, success=True, seed=0, episode="e"):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32) if obs is None else obs
    actions = (
        rng.uniform(-0.9, 0.9, size=(n, 2)).astype(np.float32) if actions is None else actions
    )
    truncateds = np.zeros(n, bool)
    truncateds[-1] = True
    return Transitions(
        obs=obs,
        actions=actions,
        rewards=np.zeros(n, np.float32),
        next_obs=obs,
        terminals=np.zeros(n, bool),
        truncateds=truncateds,
        episode_ids=np.asarray([episode] * n),
        sources=np.asarray([source] * n),
        interventions=np.zeros(n, bool),
        episode_success=np.full(n, success),
    )


@pytest.mark.parametrize(("real_weight", "sim_weight", "expected"), [(4, 1, 0.8), (1, 1, 0.5)])
def test_co_training_ratio_is_honoured_in_every_batch(real_weight, sim_weight, expected):
    data = Transitions.concatenate(
        [make_transitions(30, "real"), make_transitions(500, "sim", seed=1, episode="s")]
    )
    sampler = CoTrainingSampler(data, real_weight, sim_weight, sim_replay=True, seed=0)
    for _ in range(20):
        batch = sampler.sample(50)
        real_rows = int(batch.is_real.sum())
        assert real_rows == round(50 * expected)
        # Rows marked real really come from real sources, and vice versa.
        assert set(data.sources[batch.index[batch.is_real.numpy()]]) == {"real"}
        assert set(data.sources[batch.index[~batch.is_real.numpy()]]) == {"sim"}
    stats = sampler.stats()
    assert stats["drawn_real"] / (stats["drawn_real"] + stats["drawn_sim"]) == pytest.approx(
        expected
    )


def test_real_twin_counts_as_real_and_sim_replay_off_draws_only_real():
    data = Transitions.concatenate(
        [make_transitions(10, "real_twin"), make_transitions(100, "sim", seed=1, episode="s")]
    )
    sampler = CoTrainingSampler(data, 1, 1, sim_replay=False, seed=0)
    batch = sampler.sample(64)
    assert bool(batch.is_real.all())
    assert set(data.sources[batch.index]) == {"real_twin"}


def test_sampler_refuses_empty_data_with_a_clear_message():
    data = make_transitions(5, "sim")
    with pytest.raises(ValueError, match="no transitions"):
        CoTrainingSampler(data, 1, 1, sim_replay=False)


def _drift_after_finetuning(use_ewc: bool) -> float:
    """Fine-tune on real data that contradicts sim; measure how far sim actions move."""
    torch.manual_seed(0)
    actor = Actor(Architecture(obs_dim=4, act_dim=2, actor_hidden=(32, 32)))
    rng = np.random.default_rng(0)
    sim_obs = rng.normal(size=(256, 4)).astype(np.float32)
    with torch.no_grad():
        sim_actions = actor(torch.as_tensor(sim_obs)).numpy()
    sim = make_transitions(256, "sim", obs=sim_obs, actions=sim_actions, seed=1, episode="s")
    real_obs = rng.normal(size=(64, 4)).astype(np.float32)
    real = make_transitions(
        64, "real", obs=real_obs, actions=np.full((64, 2), 0.8, np.float32), seed=2
    )
    peft_actor = lora.wrap(actor, rank=4, alpha=8)
    ewc = None
    if use_ewc:
        inner = lora.inner(peft_actor)
        ewc = ElasticWeightConsolidation(
            lora.trainable_parameters(peft_actor),
            lambda i: bc_loss(inner, batch_from(sim, np.arange(i * 8, i * 8 + 8), np.zeros(8))),
            samples=32,
            weight=EWC_WEIGHT,
        )
    trainer = BehaviourCloning(
        peft_actor, real, learning_rate=3e-3, batch_size=32, sim_replay=False, ewc=ewc, seed=0
    )
    trainer.train(150)
    with torch.no_grad():
        after = lora.inner(peft_actor)(torch.as_tensor(sim_obs)).numpy()
    return float(np.mean((after - sim_actions) ** 2))


def test_ewc_reduces_drift_on_sim_data():
    without = _drift_after_finetuning(use_ewc=False)
    with_ewc = _drift_after_finetuning(use_ewc=True)
    assert without > 0.01, "the real data should pull the actor away from sim"
    assert with_ewc < 0.5 * without, (with_ewc, without)
