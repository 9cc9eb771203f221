"""Gymnasium environment over the task environment, for training policies off ROS.

ACTION: the controller command, 7 absolute joint position targets in the robot
description's joint order (rad; m for a prismatic joint), exactly what the sim bridge and a
ros2_control forward_position_controller accept. OBSERVATION: a dict of what the arm's
topics carry (the policy spec's ``RAW_FIELDS``). Control at 20 Hz by default, physics at
500 Hz.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.robot.observation import RAW_FIELDS, field_size
from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment


class ArmTaskEnv(gym.Env):
    """``ArmTaskEnv(task="push", profile="nominal", condition="train", ...)``.

    ``reset(seed=..., options={"condition": "train" | "shifted"})`` is deterministic per
    seed. ``terminated`` is a true termination (success or cube off the table);
    ``truncated`` is the time limit. ``state_rate_hz`` (a whole multiple of the control
    rate): also measure the arm and cube at that rate within each control period, as a
    faster joint-state publisher would (``info["measurements"]``; the observation then
    carries the last measurement).
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
        state_rate_hz: float | None = None,
        *,
        robot: RobotDescription,
    ) -> None:
        super().__init__()
        core = TaskEnvironment(
            EnvironmentConfig(
                task=task,
                profile=profile,
                condition=condition,
                control_rate_hz=control_rate_hz,
                episode_seconds=episode_seconds,
                reward=reward,
                terminate_on_success=terminate_on_success,
                safety_filter=safety_filter,
            ),
            robot=robot,
        )
        self._attach(core, render_mode, camera, state_rate_hz)

    @classmethod
    def for_core(cls, core: TaskEnvironment) -> ArmTaskEnv:
        """The gymnasium interface over an existing task environment (e.g. a scenario's)."""
        env = cls.__new__(cls)
        gym.Env.__init__(env)
        env._attach(core, None, "front", None)
        return env

    def _attach(self, core, render_mode, camera, state_rate_hz) -> None:
        self.core = core
        robot = core.robot
        self.render_mode = render_mode
        self.camera = camera
        self._renderer = None
        self.measure_every = core.measure_every(state_rate_hz) if state_rate_hz else 0
        self.action_space = spaces.Box(
            low=np.asarray(robot.position_lower, dtype=np.float64),
            high=np.asarray(robot.position_upper, dtype=np.float64),
            dtype=np.float64,
        )

        def box(size: int) -> spaces.Box:
            return spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float64)

        self.observation_space = spaces.Dict(
            {field: box(field_size(field, robot.num_joints)) for field in RAW_FIELDS}
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
        step = self.core.step(action, measure_every=self.measure_every)
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
