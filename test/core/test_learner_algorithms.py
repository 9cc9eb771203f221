"""Each fine-tuning method improves a small problem it should improve (seeded, tolerant).

The toy (test/core/learner_toy.py) has a dynamics gap only: the real system drifts, so the
sim-pretrained actor overshoots. BC learns from real demonstrations; RL and SGFT learn
from noisy rollouts of the pretrained actor on the real system (one offline round).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from core.learner_toy import (
    REAL_BIAS,
    SimCritic,
    optimal_action,
    pretrained_actor,
    real_return,
    rollouts,
)
from torch import nn

from simreal_ros.learner import lora
from simreal_ros.learner.bc import BehaviourCloning
from simreal_ros.learner.sac_finetune import ActorCriticFineTuner
from simreal_ros.learner.sgft import FrozenSimValue, HorizonCritic, SimAdvantageCritic

GAMMA = 0.9
# Pretrained about -2.13 per episode, the real optimum about -1.69 (see learner_toy).
MIN_GAIN = 0.1
# Trust region to the base actor: the toy's gap needs the action to move by about 0.5, so
# the radius 1 / (2 w) must allow that (the learner's default, 0.25, is for a policy that is
# already close).
ANCHOR = 0.5


@pytest.fixture(scope="module")
def actor():
    return pretrained_actor(hidden=(32, 32))


@pytest.fixture(scope="module")
def real_data(actor):
    def policy(obs):
        with torch.no_grad():
            return actor(torch.as_tensor(obs)).numpy()

    return rollouts(policy, 40, REAL_BIAS, noise=0.5, seed=1, source="real")


def test_bc_on_real_demonstrations_improves_the_real_return(actor):
    demos = rollouts(lambda o: optimal_action(o, REAL_BIAS), 20, REAL_BIAS, 0.0, 2, "real")
    torch.manual_seed(0)
    model = lora.wrap(actor, rank=4, alpha=8)
    BehaviourCloning(model, demos, learning_rate=3e-3, batch_size=64, sim_replay=False).train(300)
    before, after = real_return(actor), real_return(lora.inner(model))
    assert after > before + MIN_GAIN, (before, after)


@pytest.mark.parametrize(
    ("method", "horizon"), [("rl", None), ("sgft", 1), ("sgft", 3), ("sgft", None)]
)
def test_actor_critic_fine_tuning_improves_the_real_return(actor, real_data, method, horizon):
    torch.manual_seed(0)
    data = real_data.subset(np.arange(len(real_data)))  # private copy (V_sim cache)
    shaping = method == "sgft"
    if shaping:
        v_sim = FrozenSimValue(actor, SimCritic(GAMMA), lambda a, o: a(o), lambda c, o, a: c(o, a))
        v_sim.annotate(data)
    model = lora.wrap(actor, rank=4, alpha=8)
    tuner = ActorCriticFineTuner(
        model, HorizonCritic(2, 1, horizon if shaping else None, (64, 64)), data,
        gamma=GAMMA, horizon=horizon if shaping else None, shaping=shaping,
        actor_learning_rate=1e-3, critic_learning_rate=1e-3, batch_size=64,
        sim_replay=False, critic_warmup=100, entropy_alpha=0.01, seed=0,
        base_actor=actor, anchor_weight=ANCHOR,
    )  # fmt: skip
    metrics = tuner.train(500)
    assert np.isfinite(metrics["critic_loss"]) and metrics["samples_per_s"] > 0
    if shaping:
        v_sim.check_frozen()
    before, after = real_return(actor), real_return(lora.inner(model))
    assert after > before + MIN_GAIN, (method, horizon, before, after)


def test_sgft_from_the_sim_advantage_improves_the_real_return(actor, real_data):
    # Horizon 3: several heads; one head is the same code (its structure is tested in
    # test_learner_sgft.py), and each learning run here costs about a minute.
    horizon = 3
    torch.manual_seed(0)
    data = real_data.subset(np.arange(len(real_data)))
    mean, twin = (lambda a, o: a(o)), (lambda c, o, a: c(o, a))
    v_sim = FrozenSimValue(actor, SimCritic(GAMMA), mean, twin)
    v_sim.annotate(data)
    critic = SimAdvantageCritic(actor, SimCritic(GAMMA), mean, twin, 2, 1, horizon, 1.0, (64, 64))
    model = lora.wrap(actor, rank=4, alpha=8)
    tuner = ActorCriticFineTuner(
        model, critic, data, gamma=GAMMA, horizon=horizon, shaping=True,
        actor_learning_rate=1e-3, critic_learning_rate=3e-3, batch_size=64,
        sim_replay=False, entropy_alpha=0.01, seed=0, base_actor=actor, anchor_weight=ANCHOR,
    )  # fmt: skip
    # More updates than from a fresh critic: the toy's gap is in the dynamics, so the sim's
    # action ranking it starts from is wrong by construction and the residual has to undo
    # it first; the return dips on the way, so judge it past the dip. It also oscillates
    # by about 0.1 between checkpoints, and where a single checkpoint lands differs by CPU
    # (at 2000 updates: +0.09 on one Intel host, above 0.1 elsewhere), so the judge is the
    # mean of the four checkpoints from 1500 to 3000 updates (the dip ends by 1500 here).
    returns = []
    for chunk in range(6):
        tuner.train(500)
        if chunk >= 2:
            returns.append(real_return(lora.inner(model)))
    v_sim.check_frozen()
    before, after = real_return(actor), float(np.mean(returns))
    assert after > before + MIN_GAIN, (horizon, before, returns)


def test_sgft_with_short_model_rollouts_learns_the_dynamics_and_improves(actor, real_data):
    from simreal_ros.learner.dynamics_model import ModelRollouts

    torch.manual_seed(0)
    data = real_data.subset(np.arange(len(real_data)))
    v_sim = FrozenSimValue(actor, SimCritic(GAMMA), lambda a, o: a(o), lambda c, o, a: c(o, a))
    v_sim.annotate(data)
    dynamics = ModelRollouts(2, 1, hidden=(64, 64), seed=0)
    first = dynamics.fit(data, 1)
    last = dynamics.fit(data, 400, 64)
    assert last < 0.1 * first, (first, last)
    model = lora.wrap(actor, rank=4, alpha=8)
    imagined = dynamics.rollout(lora.inner(model), data, starts=32, length=2, v_sim=v_sim)
    assert len(imagined) == 64 and not imagined.terminals.any() and imagined.v_sim is not None
    assert imagined.truncateds.sum() == 32  # each rollout ends truncated, never crossing
    tuner = ActorCriticFineTuner(
        model, HorizonCritic(2, 1, 1, (64, 64)), data, gamma=GAMMA, horizon=1, shaping=True,
        actor_learning_rate=1e-3, critic_learning_rate=1e-3, batch_size=64, sim_replay=False,
        critic_warmup=100, entropy_alpha=0.01, seed=0, extra_batches=dynamics.batches(0.25),
    )  # fmt: skip
    tuner.train(500)
    before, after = real_return(actor), real_return(lora.inner(model))
    assert after > before + MIN_GAIN, (before, after)


class MisleadingCritic(nn.Module):
    """Twin critic whose action-gradient points far from the data: Q = 5 * sum(a).

    Stands in for a critic fitted on a few hundred transitions, whose gradient away from the
    data actions is unreliable; the actor chasing it is the collapse the anchor prevents.
    """

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))  # the tuner's critic optimiser needs one

    def forward(self, obs, action):
        q = 5.0 * action.sum(-1, keepdim=True) + 0.0 * self.unused
        return q, q


def _deterministic_drift(actor, model, obs) -> float:
    with torch.no_grad():
        return float((lora.inner(model)(obs) - actor(obs)).abs().mean())


def test_the_anchor_to_the_base_actor_bounds_the_drift_a_misleading_critic_causes(
    actor, real_data
):
    obs = torch.as_tensor(real_data.obs)
    drifts = {}
    for weight in (0.0, 10.0):
        torch.manual_seed(0)
        model = lora.wrap(actor, rank=4, alpha=8)
        tuner = ActorCriticFineTuner(
            model, MisleadingCritic(), real_data, gamma=GAMMA, horizon=None, shaping=False,
            actor_learning_rate=1e-3, critic_learning_rate=1e-3, batch_size=64,
            sim_replay=False, entropy_alpha=0.01, auto_entropy=False, seed=0,
            base_actor=actor, anchor_weight=weight,
        )  # fmt: skip
        metrics = tuner.train(300)
        drifts[weight] = _deterministic_drift(actor, model, obs)
        assert ("anchor_drift" in metrics) == (weight > 0)
    # Unanchored, the actor runs to the action bound; anchored, it stays near the base.
    assert drifts[0.0] > 0.3, drifts
    assert drifts[10.0] < 0.25 * drifts[0.0], drifts


def test_the_anchor_needs_a_base_actor(actor, real_data):
    model = lora.wrap(actor, rank=4, alpha=8)
    with pytest.raises(ValueError, match="base actor"):
        ActorCriticFineTuner(
            model, HorizonCritic(2, 1, None, (8,)), real_data, gamma=GAMMA, horizon=None,
            shaping=False, anchor_weight=1.0,
        )  # fmt: skip
