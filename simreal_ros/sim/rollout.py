"""The one closed-loop episode loop on a gymnasium env (``ArmTaskEnv``).

``rollout(env, actor, seed, condition, on_step)`` runs one episode: reset with the seed and
condition, reset the actor, then command until the episode is terminated or truncated.
``actor.act(observation)`` gives the command (absolute joint targets, controller order);
an optional ``actor.reset()`` is called after the env reset. ``on_step`` sees every
``Step``; what a caller records (learner transitions, episode bags, diagnosis
trajectories, screening statistics) lives in its callback, never in a loop of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Step:
    """One control period: what the actor saw, what it sent, what came back."""

    index: int  # 0 for the episode's first command
    observation: dict[str, np.ndarray]  # what the actor saw before this command
    command: np.ndarray  # what the env was sent
    reward: float
    next_observation: dict[str, np.ndarray]
    terminated: bool
    truncated: bool
    info: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One episode's result."""

    seed: int
    condition: str
    steps: int
    episode_return: float
    success: bool  # the task succeeded at some step
    failure: bool  # a terminal failure (e.g. the cube off the table) at some step
    final_goal_distance: float  # NaN when the env does not report one
    info: dict[str, Any]  # the last step's


def rollout(
    env,
    actor,
    seed: int,
    condition: str,
    on_step: Callable[[Step], None] | None = None,
) -> Outcome:
    """One episode of ``actor`` on ``env`` (see the module docstring)."""
    observation, _ = env.reset(seed=int(seed), options={"condition": condition})
    reset = getattr(actor, "reset", None)
    if reset is not None:
        reset()
    steps, total, success, failure = 0, 0.0, False, False
    terminated = truncated = False
    info: dict[str, Any] = {}
    while not (terminated or truncated):
        command = np.asarray(actor.act(observation), dtype=np.float64)
        next_observation, reward, terminated, truncated, info = env.step(command)
        terminated, truncated = bool(terminated), bool(truncated)
        success = success or bool(info.get("success", False))
        failure = failure or bool(info.get("failure", False))
        total += float(reward)
        if on_step is not None:
            on_step(
                Step(
                    index=steps,
                    observation=observation,
                    command=command,
                    reward=float(reward),
                    next_observation=next_observation,
                    terminated=terminated,
                    truncated=truncated,
                    info=info,
                )
            )
        steps += 1
        observation = next_observation
    return Outcome(
        seed=int(seed),
        condition=condition,
        steps=steps,
        episode_return=total,
        success=success,
        failure=failure,
        final_goal_distance=float(info.get("goal_distance", float("nan"))),
        info=info,
    )
