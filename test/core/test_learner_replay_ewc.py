"""Co-training sampler honours the real:sim share; EWC reduces drift on sim data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from simreal_ros.learner import lora
from simreal_ros.learner.bc import BehaviourCloning
from simreal_ros.learner.ewc import ElasticWeightConsolidation, gaussian_policy_fisher
from simreal_ros.learner.replay import CoTrainingSampler, Transitions
from simreal_ros.training.model import Actor, Architecture

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
        ewc = ElasticWeightConsolidation(
            lora.trainable_parameters(peft_actor),
            lora.inner(peft_actor).distribution,
            torch.as_tensor(sim.obs[:64]),
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
    # The sim actions are the actor's own, so a loss-gradient (empirical) Fisher would be
    # exactly zero here and EWC a no-op; the policy's Fisher is not.
    without = _drift_after_finetuning(use_ewc=False)
    with_ewc = _drift_after_finetuning(use_ewc=True)
    assert without > 0.01, "the real data should pull the actor away from sim"
    assert with_ewc < 0.5 * without, (with_ewc, without)


def test_fisher_is_nonzero_and_finite_at_the_policys_own_actions():
    """On a checkpoint-sized actor with fresh LoRA (B = 0), where every BC residual is 0."""
    torch.manual_seed(0)
    actor = Actor(Architecture(obs_dim=36, act_dim=7))
    peft_actor = lora.wrap(actor, rank=8, alpha=16)
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(16, 36)).astype(np.float32))
    with torch.no_grad():
        own = actor(obs)
        assert torch.equal(lora.inner(peft_actor)(obs), own), "fresh LoRA must not move it"
    ewc = ElasticWeightConsolidation(
        lora.trainable_parameters(peft_actor),
        lora.inner(peft_actor).distribution,
        obs,
        weight=1.0,
        normalize=False,
    )
    values = torch.cat([f.reshape(-1) for f in ewc.fisher.values()])
    assert bool(torch.isfinite(values).all())
    # LoRA's B factors carry the Fisher at B = 0 (A's gradient is zero there by design).
    b_fisher = [f for n, f in ewc.fisher.items() if "lora_B" in n]
    assert b_fisher and all(float(f.sum()) > 0 for f in b_fisher)
    assert float(ewc.penalty().detach()) == 0.0  # at the anchor


def test_fisher_matches_the_gaussian_formula_on_a_linear_policy():
    """Mean = W x: F_W[j, i] = E[x_i^2] / sigma_j^2 exactly, plus nothing from log_std."""
    w = nn.Parameter(torch.tensor([[0.5, -1.0], [2.0, 0.0]]))
    log_std = torch.log(torch.tensor([0.5, 2.0]))
    obs = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
    fisher = gaussian_policy_fisher(
        [("w", w)], lambda x: (x @ w.T, log_std.expand(len(x), 2)), obs
    )["w"]
    expected = (obs**2).mean(0)[None, :] / torch.exp(2 * log_std)[:, None]
    torch.testing.assert_close(fisher, expected, rtol=1e-6, atol=0.0)


def test_ewc_refuses_parameters_that_do_not_move_the_policy():
    unused = nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match="Fisher has mean 0"):
        ElasticWeightConsolidation(
            [("unused", unused)],
            lambda x: (torch.zeros(len(x), 2), torch.zeros(len(x), 2)),
            torch.ones(4, 2),
            weight=1.0,
        )
