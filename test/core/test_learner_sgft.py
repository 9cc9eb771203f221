"""SGFT shaping and horizon-indexed critic targets against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simreal_ros.learner.replay import Transitions
from simreal_ros.learner.sgft import (
    FrozenSimValue,
    HorizonCritic,
    SimAdvantageCritic,
    ValueExploitMonitor,
    auto_failure_value,
    critic_targets,
    fixed_reward_scale,
    shape_rewards,
    telescoped_window_return,
    with_failure_value,
)
from simreal_ros.training.model import ActorCritic, Architecture

GAMMA = 0.9


def test_shaping_matches_hand_computed_values():
    r = np.array([1.0, -0.5, 2.0])
    v = np.array([3.0, 4.0, 1.0])
    v_next = np.array([4.0, 1.0, 7.0])
    terminal = np.array([False, False, True])
    shaped = shape_rewards(r, v, v_next, terminal, GAMMA, scale=2.0)
    # r + 0.9 * V(s') - V(s), V(s') dropped at the termination, then times 2.
    expected = 2.0 * np.array([1.0 + 0.9 * 4.0 - 3.0, -0.5 + 0.9 * 1.0 - 4.0, 2.0 - 1.0])
    np.testing.assert_allclose(shaped, expected, rtol=1e-6)


def test_terminal_masks_next_value_but_truncation_keeps_it():
    data = _chain([0.0, 0.0], values=[1.0, 2.0, 5.0], terminal_last=True)
    shaped = shape_rewards(data.rewards, data.v_sim, data.v_sim_next, data.terminals, GAMMA)
    assert shaped[-1] == pytest.approx(0.0 - 2.0)  # V(s') = 0 after a true termination
    cut = _chain([0.0, 0.0], values=[1.0, 2.0, 5.0], terminal_last=False)
    shaped = shape_rewards(cut.rewards, cut.v_sim, cut.v_sim_next, cut.terminals, GAMMA)
    assert shaped[-1] == pytest.approx(0.9 * 5.0 - 2.0)  # kept at a time limit


@pytest.mark.parametrize("terminal_last", [False, True])
def test_shaped_rewards_telescope_over_a_window(terminal_last):
    rng = np.random.default_rng(3)
    rewards = rng.normal(size=6)
    values = rng.normal(size=7)
    data = _chain(rewards, values, terminal_last)
    shaped = shape_rewards(data.rewards, data.v_sim, data.v_sim_next, data.terminals, GAMMA)
    for window in data.windows(4):
        got = sum(GAMMA**i * shaped[j] for i, j in enumerate(window))
        last = window[-1]
        want = telescoped_window_return(
            data.rewards[window], values[window[0]], values[last + 1],
            bool(data.terminals[last]), GAMMA,
        )  # fmt: skip
        assert got == pytest.approx(want, abs=1e-5)


def test_shaping_telescopes_with_the_failure_value():
    """A window ending in a failure telescopes with r + gamma * failure_value as its last
    reward and nothing after it: the identity holds unchanged with the penalised reward."""
    rng = np.random.default_rng(5)
    data = _chain(rng.normal(size=6) - 1.0, rng.normal(size=7) - 3.0, terminal_last=True)
    assert data.failures[-1] and data.failures.sum() == 1  # a terminal in a failed episode
    failure_value = auto_failure_value(data.rewards, data.v_sim, GAMMA)
    rewards = with_failure_value(data.rewards, data.failures, GAMMA, failure_value)
    assert rewards[-1] == pytest.approx(data.rewards[-1] + GAMMA * failure_value)
    np.testing.assert_array_equal(rewards[:-1], data.rewards[:-1])
    shaped = shape_rewards(rewards, data.v_sim, data.v_sim_next, data.terminals, GAMMA)
    for window in data.windows(3):
        got = sum(GAMMA**i * shaped[j] for i, j in enumerate(window))
        last = window[-1]
        want = telescoped_window_return(
            rewards[window], data.v_sim[window[0]], data.v_sim_next[last],
            bool(data.terminals[last]), GAMMA,
        )  # fmt: skip
        assert got == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("seed", range(5))
def test_the_failure_value_makes_failing_never_the_best_shaped_reward(seed):
    """From the same state, a failing step's shaped reward is below every other step's in
    the data, successes included; with V = 0 after a failure it is the best there is."""
    rng = np.random.default_rng(seed)
    n = 400
    rewards = rng.uniform(-3.0, 0.0, n)
    rewards[rng.random(n) < 0.05] += 1.0  # success steps earn +1 and end
    v_next = rng.uniform(-40.0, -1.0, n)
    terminals = rng.random(n) < 0.1
    failures = terminals & (rng.random(n) < 0.5)
    assert failures.any() and (terminals & ~failures).any()
    values = np.concatenate([rng.uniform(-40.0, -1.0, n), v_next])
    failure_value = auto_failure_value(rewards, values, GAMMA)
    # The state-independent part of r~: r' + gamma * (1 - terminal) * V(s'); -V(s) is shared.
    penalised = with_failure_value(rewards, failures, GAMMA, failure_value)
    continuation = penalised + GAMMA * (~terminals) * v_next
    assert continuation[failures].max() <= continuation[~failures].min() + 1e-5
    unpenalised = rewards + GAMMA * (~terminals) * v_next
    # Without it (V = 0 after a failure) failing beats every step that carries on.
    assert unpenalised[failures].max() > unpenalised[~terminals].max()


def test_windows_never_cross_a_reset():
    a = _chain([1.0, 1.0, 1.0], [0, 0, 0, 0], terminal_last=False, episode="a")
    b = _chain([1.0, 1.0, 1.0], [0, 0, 0, 0], terminal_last=True, episode="b")
    data = Transitions.concatenate([a, b])
    windows = data.windows(2)
    assert len(windows) == 4  # 2 per 3-step episode
    for window in windows:
        assert len(set(data.episode_ids[window])) == 1


def test_horizon_one_target_is_the_shaped_reward():
    r = torch.tensor([0.5, -1.0])
    next_q = torch.tensor([[100.0], [-50.0]])  # must be ignored: no bootstrap at k = 1
    log_prob = torch.tensor([3.0, -2.0])  # and no entropy bonus
    targets = critic_targets(r, torch.zeros(2), next_q, log_prob, GAMMA, 0.2, horizon=1)
    torch.testing.assert_close(targets, r.reshape(-1, 1))


def test_horizon_three_targets_bootstrap_from_the_previous_head():
    r = torch.tensor([1.0, 2.0])
    terminal = torch.tensor([0.0, 1.0])
    next_q = torch.tensor([[10.0, 20.0, 30.0], [10.0, 20.0, 30.0]])
    log_prob = torch.tensor([0.5, 0.5])
    alpha = 0.2
    targets = critic_targets(r, terminal, next_q, log_prob, GAMMA, alpha, horizon=3)
    soft = lambda q: 0.9 * (q - 0.2 * 0.5)  # noqa: E731
    expected = torch.tensor(
        [[1.0, 1.0 + soft(10.0), 1.0 + soft(20.0)], [2.0, 2.0, 2.0]]  # row 2 terminates
    )
    torch.testing.assert_close(targets, expected)


def test_infinite_horizon_is_the_sac_target():
    r = torch.tensor([1.0, 2.0])
    terminal = torch.tensor([0.0, 1.0])
    next_q = torch.tensor([[10.0], [10.0]])
    log_prob = torch.tensor([0.5, 0.5])
    targets = critic_targets(r, terminal, next_q, log_prob, GAMMA, 0.2, horizon=None)
    expected = torch.tensor([[1.0 + 0.9 * (10.0 - 0.1)], [2.0]])
    torch.testing.assert_close(targets, expected)


def test_horizon_critic_has_one_head_per_step():
    critic = HorizonCritic(4, 2, horizon=3, hidden=(8,))
    q1, q2 = critic(torch.zeros(5, 4), torch.zeros(5, 2))
    assert q1.shape == (5, 3) and q2.shape == (5, 3)
    assert HorizonCritic(4, 2, horizon=None, hidden=(8,))(torch.zeros(5, 4), torch.zeros(5, 2))[
        0
    ].shape == (5, 1)


def test_v_sim_is_deterministic_frozen_and_uses_the_mean_action():
    torch.manual_seed(0)
    model = ActorCritic(
        Architecture(obs_dim=5, act_dim=2, actor_hidden=(16,), critic_hidden=(16,))
    )
    v_sim = FrozenSimValue(model.actor, model.critic, lambda a, o: a(o), lambda c, o, a: c(o, a))
    obs = torch.randn(32, 5)
    first = v_sim(obs)
    np.testing.assert_array_equal(first, v_sim(obs))
    np.testing.assert_allclose(first, model.v_sim(obs).numpy(), rtol=1e-6)
    before = v_sim.fingerprint()
    # Training the source modules (what the fine-tuner does to its own copies) must not
    # reach V_sim's private copy, and V_sim carries no gradient.
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loss = model.critic(obs, model.actor(obs))[0].sum()
    loss.backward()
    optimizer.step()
    assert v_sim.fingerprint() == before
    v_sim.check_frozen()
    np.testing.assert_array_equal(first, v_sim(obs))
    assert all(not p.requires_grad for p in v_sim._critic.parameters())


def test_v_sim_frozen_check_catches_a_change():
    model = ActorCritic(Architecture(obs_dim=3, act_dim=1, actor_hidden=(4,), critic_hidden=(4,)))
    v_sim = FrozenSimValue(model.actor, model.critic, lambda a, o: a(o), lambda c, o, a: c(o, a))
    with torch.no_grad():
        next(v_sim._critic.parameters()).add_(1.0)
    with pytest.raises(RuntimeError, match="frozen"):
        v_sim.check_frozen()


def test_reward_scale_is_fixed_from_sim_statistics():
    rng = np.random.default_rng(0)
    r, v, vn = rng.normal(size=(3, 500)) * 4.0
    terminal = np.zeros(500, bool)
    scale = fixed_reward_scale(r, v, vn, terminal, GAMMA)
    shaped = shape_rewards(r, v, vn, terminal, GAMMA, scale)
    assert np.std(shaped) == pytest.approx(1.0, rel=1e-3)


def test_monitor_flags_value_rising_while_reward_falls():
    monitor = ValueExploitMonitor(window=2)
    for i in range(2):
        monitor.add_episode(f"a{i}", rewards=[1.0, 1.0], v_sim=[0.0, 0.0], shaped=[0, 0])
    assert monitor.flag() == ""
    for i in range(2):
        monitor.add_episode(f"b{i}", rewards=[0.2, 0.2], v_sim=[3.0, 3.0], shaped=[0, 0])
    assert "V_sim rising" in monitor.flag()
    healthy = ValueExploitMonitor(window=2)
    for i in range(4):
        healthy.add_episode(f"c{i}", rewards=[i, i], v_sim=[i, i], shaped=[0, 0])
    assert healthy.flag() == ""


def _chain(rewards, values, terminal_last, episode="e"):
    """One episode: rewards[i] from s_i to s_{i+1}; values[i] = V_sim(s_i)."""
    n = len(rewards)
    values = np.asarray(values, dtype=np.float32)
    terminals = np.zeros(n, bool)
    truncateds = np.zeros(n, bool)
    (terminals if terminal_last else truncateds)[-1] = True
    obs = np.arange(n + 1, dtype=np.float32).reshape(-1, 1)
    return Transitions(
        obs=obs[:-1],
        actions=np.zeros((n, 1), np.float32),
        rewards=np.asarray(rewards, np.float32),
        next_obs=obs[1:],
        terminals=terminals,
        truncateds=truncateds,
        episode_ids=np.asarray([episode] * n),
        sources=np.asarray(["real"] * n),
        interventions=np.zeros(n, bool),
        episode_success=np.zeros(n, bool),
        v_sim=values[:-1],
        v_sim_next=values[1:],
    )


def test_sim_advantage_critic_starts_at_scale_times_q_sim_minus_v_sim():
    torch.manual_seed(0)
    model = ActorCritic(
        Architecture(obs_dim=5, act_dim=2, actor_hidden=(16,), critic_hidden=(16,))
    )
    mean, twin = (lambda a, o: a(o)), (lambda c, o, a: c(o, a))
    critic = SimAdvantageCritic(model.actor, model.critic, mean, twin, 5, 2, 3, 2.0, (8,))
    obs, action = torch.randn(16, 5), torch.rand(16, 2) * 2 - 1
    q1, q2 = critic(obs, action)
    assert q1.shape == (16, 3) and q2.shape == (16, 3)
    with torch.no_grad():
        s1, s2 = model.critic(obs, action)
        v = model.v_sim(obs)
    for head in range(3):  # every head starts at the same sim advantage
        torch.testing.assert_close(q1[:, head], 2.0 * (s1 - v))
        torch.testing.assert_close(q2[:, head], 2.0 * (s2 - v))
    # At the sim actor's own action the (pessimistic) advantage is zero.
    m1, m2 = critic(obs, model.actor(obs).detach())
    torch.testing.assert_close(torch.minimum(m1, m2), torch.zeros(16, 3), atol=1e-6, rtol=0)
    # The action-gradient is Q_sim's (the RL warm start's), scaled.
    a = action.clone().requires_grad_(True)
    critic(obs, a)[0][:, -1].sum().backward()
    b = action.clone().requires_grad_(True)
    model.critic(obs, b)[0].sum().backward()
    torch.testing.assert_close(a.grad, 2.0 * b.grad)


def test_sim_advantage_critic_trains_only_its_residual():
    torch.manual_seed(0)
    model = ActorCritic(
        Architecture(obs_dim=5, act_dim=2, actor_hidden=(16,), critic_hidden=(16,))
    )
    critic = SimAdvantageCritic(
        model.actor, model.critic, lambda a, o: a(o), lambda c, o, a: c(o, a), 5, 2, 1, 1.0, (8,)
    )
    trainable = {n for n, p in critic.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("residual") for n in trainable)
    sim_before = {k: v.clone() for k, v in critic.state_dict().items() if k.startswith("sim_")}
    optimizer = torch.optim.Adam([p for p in critic.parameters() if p.requires_grad], lr=1e-2)
    obs, action = torch.randn(64, 5), torch.rand(64, 2)
    target = 0.5 * obs[:, :1] - 0.3 * action[:, 1:]  # a smooth real correction
    first = None
    for _ in range(200):
        q1, q2 = critic(obs, action)
        loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
        first = float(loss.detach()) if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(loss.detach()) < 0.5 * first  # the residual fits the real correction
    for key, value in critic.state_dict().items():
        if key.startswith("sim_"):
            torch.testing.assert_close(value, sim_before[key])
