"""Gymnasium environment over the task environment, for training policies off ROS.

ACTION: the controller command, 7 absolute joint position targets in the robot
description's joint order (rad; m for a prismatic joint), exactly what the sim bridge and a
ros2_control forward_position_controller accept. OBSERVATION: a dict of what the arm's
topics carry (see ``OBSERVATION_KEYS``). Control at 20 Hz by default, physics at 500 Hz.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment


class ArmTaskEnv(gym.Env):
    """``ArmTaskEnv(task="push", profile="nominal", condition="train", ...)``.

    ``reset(seed=..., options={"condition": "train" | "shifted"})`` is deterministic per
    seed. ``terminated`` is a true termination (success or cube off the table);
    ``truncated`` is the time limit.
    """

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        task: str = "push",
        profile: str = "nominal",
        condition: str = "train",
        control_rate_hz: float = 20.0,
        episode_seconds: float = 6.0,
        reward: str = "dense",
        terminate_on_success: bool = True,
        render_mode: str | None = None,
        camera: str = "front",
        safety_filter: bool = False,
    ) -> None:
        super().__init__()
        self.core = TaskEnvironment(
            EnvironmentConfig(
                task=task,
                profile=profile,
                condition=condition,
                control_rate_hz=control_rate_hz,
                episode_seconds=episode_seconds,
                reward=reward,
                terminate_on_success=terminate_on_success,
                safety_filter=safety_filter,
            )
        )
        robot = self.core.robot
        self.render_mode = render_mode
        self.camera = camera
        self._renderer = None
        self.action_space = spaces.Box(
            low=np.asarray(robot.position_lower, dtype=np.float64),
            high=np.asarray(robot.position_upper, dtype=np.float64),
            dtype=np.float64,
        )

        def box(size: int) -> spaces.Box:
            return spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float64)

        self.observation_space = spaces.Dict(
            {
                "joint_position": box(robot.num_joints),
                "joint_velocity": box(robot.num_joints),
                "object_position": box(3),
                "object_orientation": box(4),
                "goal_position": box(3),
            }
        )

    @property
    def physics(self):
        return self.core.physics

    @property
    def task(self):
        return self.core.task

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31))
        condition = (options or {}).get("condition")
        observation = self.core.reset(seed=seed, condition=condition)
        info = {"condition": self.core.condition, "seed": seed, "profile": self.core.profile.name}
        return observation, info

    def step(self, action):
        step = self.core.step(action)
        return step.observation, step.reward, step.terminated, step.truncated, step.info

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            from simreal_ros.sim.rendering import CameraRenderer

            self._renderer = CameraRenderer(self.physics, camera=self.camera)
        return self._renderer.render()

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
