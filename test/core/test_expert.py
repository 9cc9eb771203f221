"""The scripted experts solve their tasks in the nominal sim (a few seeds; the >=100-seed
measurement is ``simreal expert``)."""

import numpy as np

from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim.expert import make_expert
from simreal_ros.sim.gym_env import ArmTaskEnv
from simreal_ros.sim.rollout import rollout

ARM = load_robot_description()


def test_push_expert_succeeds_on_most_train_seeds():
    env = ArmTaskEnv(task="push", robot=ARM)
    expert = make_expert("push", env.unwrapped.core.robot)
    results = [rollout(env, expert, seed, "train") for seed in range(100, 110)]
    assert sum(r.success for r in results) >= 8, results


def test_reach_expert_succeeds():
    env = ArmTaskEnv(task="reach", robot=ARM)
    expert = make_expert("reach", env.unwrapped.core.robot)
    results = [rollout(env, expert, seed, "train") for seed in range(100, 105)]
    assert sum(r.success for r in results) >= 4, results


def test_expert_actions_are_valid_commands_within_limits():
    env = ArmTaskEnv(task="push", robot=ARM)
    expert = make_expert("push", env.unwrapped.core.robot)
    observation, _ = env.reset(seed=0)
    robot = env.unwrapped.core.robot
    previous = observation["joint_position"]
    for _ in range(20):
        action = expert.act(observation)
        assert action.shape == (7,) and np.all(np.isfinite(action))
        assert np.all(action >= robot.position_lower) and np.all(action <= robot.position_upper)
        # Smooth: one control period's change stays within the velocity limits.
        assert np.all(np.abs(action - previous) <= robot.velocity_limit * 0.05 * 2)
        previous = action
        observation, *_ = env.step(action)
