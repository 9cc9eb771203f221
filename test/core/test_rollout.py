"""The one episode loop (``sim.rollout``) on the real MuJoCo env, in short episodes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim.expert import make_expert
from simreal_ros.sim.gym_env import ArmTaskEnv
from simreal_ros.sim.rollout import Outcome, Step, rollout

ARM = load_robot_description()


class Hold:
    """Commands the measured joints: the arm stays, the cube never moves."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def reset(self) -> None:
        self.events.append("reset")

    def act(self, observation) -> np.ndarray:
        self.events.append("act")
        return np.array(observation["joint_position"])


@pytest.fixture(scope="module")
def push_env():
    env = ArmTaskEnv(task="push", episode_seconds=0.5, robot=ARM)
    yield env
    env.close()


def test_every_step_reaches_on_step_and_the_outcome_sums_them(push_env):
    steps: list[Step] = []
    outcome = rollout(push_env, Hold(), 7, "shifted", steps.append)
    assert isinstance(outcome, Outcome)
    assert outcome.steps == len(steps) == push_env.core.max_steps == 10
    assert [s.index for s in steps] == list(range(10))
    assert (outcome.seed, outcome.condition) == (7, "shifted")
    assert outcome.info is steps[-1].info and outcome.info["condition"] == "shifted"
    assert outcome.episode_return == pytest.approx(sum(s.reward for s in steps))
    assert outcome.final_goal_distance == steps[-1].info["goal_distance"] > 0
    assert not outcome.success and not outcome.failure
    assert [s.truncated for s in steps] == [False] * 9 + [True]
    assert not any(s.terminated for s in steps)
    for before, after in itertools.pairwise(steps):  # the loop hands each on
        assert after.observation is before.next_observation
    for step in steps:  # the command was made from the observation before it
        np.testing.assert_array_equal(step.command, step.observation["joint_position"])


def test_the_actor_is_reset_once_after_the_env_and_before_its_first_command(push_env):
    actor = Hold()
    first = rollout(push_env, actor, 0, "train")
    assert actor.events == ["reset"] + ["act"] * first.steps
    rollout(push_env, actor, 1, "train")
    assert actor.events.count("reset") == 2

    class NoReset:  # reset is optional
        def act(self, observation):
            return observation["joint_position"]

    assert rollout(push_env, NoReset(), 0, "train").steps == first.steps


def test_the_same_seed_gives_the_same_commands_and_another_seed_others(push_env):
    expert = make_expert("push", push_env.unwrapped.core.robot)

    def commands(seed: int) -> np.ndarray:
        out: list[np.ndarray] = []
        rollout(push_env, expert, seed, "train", lambda s: out.append(s.command))
        return np.array(out)

    first, again, other = commands(3), commands(3), commands(4)
    np.testing.assert_array_equal(first, again)
    assert first.shape != other.shape or not np.allclose(first, other)


def test_a_success_ends_the_episode_and_is_reported():
    env = ArmTaskEnv(task="reach", episode_seconds=6.0, robot=ARM)
    try:
        steps: list[Step] = []
        outcome = rollout(
            env, make_expert("reach", env.unwrapped.core.robot), 100, "train", steps.append
        )
    finally:
        env.close()
    assert outcome.success and steps[-1].terminated and steps[-1].info["success"]
    assert outcome.steps == len(steps) < env.core.max_steps
