"""The learner's sim data (``learner.data``): rollouts as Transitions, with common random
numbers per episode seed, on the real MuJoCo env."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simreal_ros.learner.data import (
    ActionRuleActor,
    expert_actions,
    policy_actions,
    rollout_transitions,
)
from simreal_ros.policy.spec import SpecConverter, default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim.expert import make_expert
from simreal_ros.sim.gym_env import ArmTaskEnv
from simreal_ros.training.model import ActorCritic, Architecture


@pytest.fixture(scope="module")
def setup():
    robot = load_robot_description()
    spec = default_spec(robot, "push")
    torch.manual_seed(0)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (32, 32), (32, 32)))
    env = ArmTaskEnv(task="push", episode_seconds=0.5, robot=robot)
    yield env, SpecConverter.for_robot(spec, robot), model.actor
    env.close()


def test_episodes_under_a_sampling_policy_repeat_per_seed_and_leave_torch_alone(setup):
    env, converter, actor = setup
    act = policy_actions(actor, None, 0.5)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first, episodes = rollout_transitions(env, converter, [5, 6], "train", act)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's RNG is left as it was
    again, _ = rollout_transitions(env, converter, [6, 5], "train", act)
    other, _ = rollout_transitions(env, converter, [7], "train", act)
    assert episodes == [("ep-5", 10, False), ("ep-6", 10, False)]
    assert len(first) == 20 and list(first.truncateds).count(True) == 2
    # Common random numbers: a seed's episode draws the same actions whatever ran before.
    np.testing.assert_array_equal(first.actions[:10], again.actions[10:])
    np.testing.assert_array_equal(first.actions[10:], again.actions[:10])
    assert not np.allclose(first.actions[:10], other.actions)
    # Each row's next observation is the next row's observation within an episode.
    np.testing.assert_allclose(first.next_obs[:9], first.obs[1:10], rtol=0, atol=1e-6)


def test_expert_actions_record_what_the_arm_received(setup):
    env, converter, _ = setup
    expert = make_expert("push", env.unwrapped.core.robot)
    data, _ = rollout_transitions(
        env, converter, [1], "train", expert_actions(expert, converter), source="real_twin"
    )
    assert set(data.sources) == {"real_twin"} and np.all(np.abs(data.actions) <= 1.0)
    observation, _ = env.reset(seed=1, options={"condition": "train"})
    actor = ActionRuleActor(converter, expert_actions(expert, converter), None)
    command = actor.act(observation)
    # The rule saw the normalised observation; the recorded action is the command sent.
    np.testing.assert_allclose(actor.normalized, data.obs[0], rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        converter.action_from_command(command, observation["joint_position"]),
        data.actions[0],
        rtol=0,
        atol=1e-6,
    )
