"""Tasks on the arm (the dm_control "Task" part): start states, goals, reward, success.

Two conditions, each a documented distribution of start states and goals, so evaluations
can tell over-specialization from general failure:

``push`` (push the cube over the table until its centre is within ``tolerance`` of the goal)
  - train:   cube centre x in [0.40, 0.55] m, y in [-0.12, 0.12] m, yaw in [-0.3, 0.3] rad;
    goal 0.08-0.16 m from the cube in any direction, kept inside x [0.35, 0.62],
    y [-0.20, 0.20].
  - shifted: cube out on the sides, x in [0.55, 0.65], |y| in [0.15, 0.25], any yaw in
    [-0.8, 0.8]; goal 0.15-0.22 m away, pointing back towards the centre line (y moves
    towards 0), kept inside x [0.35, 0.70], y [-0.30, 0.30]. No overlap with train starts.

``reach`` (bring the tool centre point within ``tolerance`` of a goal point)
  - train:   goal x in [0.35, 0.60], y in [-0.20, 0.20], z in [0.05, 0.30] m.
  - shifted: goal x in [0.60, 0.70], |y| in [0.20, 0.30], z in [0.05, 0.30] m.
  The cube rests out of the way at (0.30, ±0.30).

Every draw comes from the episode's seed, so ``initialize_episode`` is deterministic.
"""

from __future__ import annotations

import abc
import math

import numpy as np

from simreal_ros.sim.physics import ArmPhysics

CONDITIONS = ("train", "shifted")
TABLE_HALF_EXTENT = np.array([0.6, 0.7])  # table top, centred at (0.4, 0)
TABLE_CENTRE = np.array([0.4, 0.0])


def _check_condition(condition: str) -> None:
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; use one of {', '.join(CONDITIONS)}.")


class Task(abc.ABC):
    """One task: sets up an episode on a physics and judges its state."""

    name: str
    tolerance: float

    @abc.abstractmethod
    def initialize_episode(
        self, physics: ArmPhysics, rng: np.random.Generator, condition: str
    ) -> None:
        """Place the arm, cube and goal for a new episode drawn from ``rng``."""

    @abc.abstractmethod
    def goal_distance(self, physics: ArmPhysics) -> float:
        """Distance (m) of whatever must reach the goal from the goal."""

    def success(self, physics: ArmPhysics) -> bool:
        return self.goal_distance(physics) < self.tolerance

    def failure(self, physics: ArmPhysics) -> bool:
        """A terminal failure (the episode cannot be won any more): the cube fell."""
        cube = physics.object_position()
        off_table = np.any(np.abs(cube[:2] - TABLE_CENTRE) > TABLE_HALF_EXTENT)
        return bool(off_table or cube[2] < -0.05)

    @abc.abstractmethod
    def dense_reward(self, physics: ArmPhysics) -> float:
        """Shaped reward (higher is better), plus 1 when successful."""

    def sparse_reward(self, physics: ArmPhysics) -> float:
        return 1.0 if self.success(physics) else 0.0

    def reward(self, physics: ArmPhysics, kind: str = "dense") -> float:
        if kind == "dense":
            return self.dense_reward(physics)
        if kind == "sparse":
            return self.sparse_reward(physics)
        raise ValueError(f"unknown reward kind {kind!r}; use dense or sparse.")


def _rest_height(physics: ArmPhysics) -> float:
    return physics.cube_half_size


class PushTask(Task):
    """Push the cube to a goal on the table."""

    name = "push"

    def __init__(self, tolerance: float = 0.04) -> None:
        self.tolerance = tolerance

    def initialize_episode(self, physics, rng, condition):
        _check_condition(condition)
        z = _rest_height(physics)
        if condition == "train":
            cube = np.array([rng.uniform(0.40, 0.55), rng.uniform(-0.12, 0.12)])
            yaw = rng.uniform(-0.3, 0.3)
            box_low, box_high = np.array([0.35, -0.20]), np.array([0.62, 0.20])
            goal = None
            for _ in range(100):
                angle = rng.uniform(-math.pi, math.pi)
                distance = rng.uniform(0.08, 0.16)
                candidate = cube + distance * np.array([math.cos(angle), math.sin(angle)])
                if np.all(candidate >= box_low) and np.all(candidate <= box_high):
                    goal = candidate
                    break
        else:
            side = rng.choice([-1.0, 1.0])
            cube = np.array([rng.uniform(0.55, 0.65), side * rng.uniform(0.15, 0.25)])
            yaw = rng.uniform(-0.8, 0.8)
            box_low, box_high = np.array([0.35, -0.30]), np.array([0.70, 0.30])
            goal = None
            for _ in range(100):
                # Towards the centre line: the y step has the sign opposite to the cube's y.
                angle = -side * rng.uniform(0.25 * math.pi, 0.75 * math.pi)
                distance = rng.uniform(0.15, 0.22)
                candidate = cube + distance * np.array([math.cos(angle), math.sin(angle)])
                if np.all(candidate >= box_low) and np.all(candidate <= box_high):
                    goal = candidate
                    break
        if goal is None:  # practically unreachable; keep the episode valid anyway
            goal = np.clip(cube + np.array([0.1, 0.0]), box_low, box_high)
        physics.reset(
            cube_position=np.array([cube[0], cube[1], z]),
            cube_yaw=float(yaw),
            goal=np.array([goal[0], goal[1], z]),
            noise_seed=int(rng.integers(2**31)),
        )

    def goal_distance(self, physics):
        return float(np.linalg.norm(physics.object_position()[:2] - physics.goal()[:2]))

    def dense_reward(self, physics):
        cube = physics.object_position()
        tool = physics.ee_position()
        to_goal = self.goal_distance(physics)
        to_cube = float(np.linalg.norm(tool - cube))
        # Bring the tool to the cube, then the cube to the goal.
        return -2.0 * to_goal - 0.5 * max(0.0, to_cube - 0.05) + self.sparse_reward(physics)


class ReachTask(Task):
    """Bring the tool centre point to a goal point above the table."""

    name = "reach"

    def __init__(self, tolerance: float = 0.03) -> None:
        self.tolerance = tolerance

    # A goal the tool starts this close to is solved before the first step: no episode.
    MIN_START_DISTANCE_TOLERANCES = 2.0
    MAX_DRAWS = 100

    def initialize_episode(self, physics, rng, condition):
        _check_condition(condition)
        for _ in range(self.MAX_DRAWS):
            if condition == "train":
                goal = np.array(
                    [rng.uniform(0.35, 0.60), rng.uniform(-0.20, 0.20), rng.uniform(0.05, 0.30)]
                )
            else:
                side = rng.choice([-1.0, 1.0])
                goal = np.array(
                    [
                        rng.uniform(0.60, 0.70),
                        side * rng.uniform(0.20, 0.30),
                        rng.uniform(0.05, 0.30),
                    ]
                )
            cube_y = -0.30 if goal[1] >= 0 else 0.30
            physics.reset(
                cube_position=np.array([0.30, cube_y, _rest_height(physics)]),
                goal=goal,
                noise_seed=int(rng.integers(2**31)),
            )
            if self.goal_distance(physics) > self.MIN_START_DISTANCE_TOLERANCES * self.tolerance:
                return
        raise RuntimeError(
            f"no reach goal at least {self.MIN_START_DISTANCE_TOLERANCES:g} tolerances from the "
            f"start in {self.MAX_DRAWS} draws; the goal region lies around the start pose."
        )

    def goal_distance(self, physics):
        return float(np.linalg.norm(physics.ee_position() - physics.goal()))

    def dense_reward(self, physics):
        return -self.goal_distance(physics) + self.sparse_reward(physics)


TASKS = {"push": PushTask, "reach": ReachTask}


def make_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; use one of {', '.join(TASKS)}.")
    return TASKS[name]()
