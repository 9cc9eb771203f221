"""The task environment without gymnasium (the dm_control "Environment" part).

Physics + Task + dynamics profile + control rate: ``reset(seed, condition)`` and
``step(command)`` with absolute joint position targets in controller order. The gymnasium
wrapper (``simreal_ros.sim.gym_env``) and the sim bridge node both build on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from simreal_ros import config_schema
from simreal_ros.config_schema import setting
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sim.profiles import DynamicsProfile, check_profile, load_profile
from simreal_ros.sim.tasks import CONDITIONS, TASKS, Task, make_task


@dataclasses.dataclass
class EnvironmentConfig:
    task: str = setting("push", "task to run", choices=tuple(TASKS))
    profile: str = setting(
        "nominal", "dynamics profile: a shipped name (nominal, real_twin, ...) or a YAML path"
    )
    condition: str = setting("train", "start-state/goal distribution", choices=CONDITIONS)
    control_rate_hz: float = setting(20.0, "rate of commands (env steps)", low=1.0, high=500.0)
    episode_seconds: float = setting(6.0, "time limit of an episode", low=0.1, high=600.0)
    reward: str = setting("dense", "reward returned by step", choices=("dense", "sparse"))
    terminate_on_success: bool = setting(True, "end the episode as soon as the task succeeds")
    safety_filter: bool = setting(
        False,
        "pass every command through the safety filter at the filter's own rate, with its "
        "default limits, as the graph does between the policy and the arm",
    )

    def __post_init__(self) -> None:
        config_schema.validate(self)
        check_profile(self.profile)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One sample of /joint_states and /object/pose (sim time in seconds)."""

    time: float
    joint_position: np.ndarray
    joint_velocity: np.ndarray
    object_position: np.ndarray
    object_orientation: np.ndarray


@dataclasses.dataclass
class TimeStep:
    observation: dict[str, np.ndarray]
    reward: float
    success: bool
    terminated: bool  # true termination: success (if configured) or a terminal failure
    truncated: bool  # the time limit, not a true termination
    info: dict[str, Any]


def physics_for(robot: RobotDescription, profile: DynamicsProfile):
    """The physics a profile runs on: MuJoCo, or the second engine with its effects."""
    if profile.engine == "drake":
        from simreal_ros.sim.drake_physics import DrakeArmPhysics  # pydrake only here

        return DrakeArmPhysics(robot, profile.effects)
    return ArmPhysics(robot)


class TaskEnvironment:
    """One arm, one task, one dynamics profile; stepped at the control rate."""

    def __init__(
        self,
        config: EnvironmentConfig | None = None,
        robot: RobotDescription | None = None,
        physics: ArmPhysics | None = None,
    ) -> None:
        if physics is None and robot is None:
            raise ValueError("give the environment its arm: robot= (or physics= built for it).")
        self.config = config or EnvironmentConfig()
        self.profile: DynamicsProfile = load_profile(self.config.profile)
        self.physics = physics or physics_for(robot, self.profile)
        self.robot = self.physics.robot
        self.task: Task = make_task(self.config.task)
        self.overrides: dict[str, float] = {}
        self.substeps = max(1, round(1.0 / (self.config.control_rate_hz * self.physics.timestep)))
        self.max_steps = max(1, round(self.config.episode_seconds * self.config.control_rate_hz))
        self.condition = self.config.condition
        self.seed: int | None = None
        self.step_index = 0
        self.dynamics: dict[str, float] = dict(self.physics.nominal_dynamics)
        self.safety = None  # the filter of the running episode, when configured
        self.safety_interventions = 0  # in the running episode
        if self.config.safety_filter:
            from simreal_ros.safety import SafetyConfig

            self._safety_config = SafetyConfig()
            ticks = self._safety_config.control_rate / self.config.control_rate_hz
            self._filter_ticks = round(ticks)
            self._filter_substeps = self.substeps // max(1, self._filter_ticks)
            if (
                abs(ticks - self._filter_ticks) > 1e-9
                or self._filter_ticks * self._filter_substeps != self.substeps
            ):
                raise ValueError(
                    f"safety_filter: the filter's {self._safety_config.control_rate:g} Hz is "
                    f"not a whole multiple of the {self.config.control_rate_hz:g} Hz control "
                    f"rate over {self.substeps} physics steps; choose rates that divide."
                )

    # ----------------------------------------------------------------- episodes
    def reset(self, seed: int | None = None, condition: str | None = None) -> dict:
        """Start an episode; the same (seed, condition) gives the same episode.

        The start state and the profile's dynamics draw come from separate streams of the
        seed, so an episode starts the same under every profile.
        """
        if condition is not None:
            if condition not in CONDITIONS:
                raise ValueError(
                    f"unknown condition {condition!r}; use one of {', '.join(CONDITIONS)}."
                )
            self.condition = condition
        if seed is None:
            seed = int(np.random.default_rng().integers(2**31))
        self.seed = int(seed)
        task_seed, dynamics_seed = np.random.SeedSequence(self.seed).spawn(2)
        self.apply_dynamics(np.random.default_rng(dynamics_seed))
        self.task.initialize_episode(
            self.physics, np.random.default_rng(task_seed), self.condition
        )
        self.step_index = 0
        if self.config.safety_filter:
            from simreal_ros.safety import SafetyFilter

            self.safety = SafetyFilter.from_description(self.robot, self._safety_config)
            self._safety_clock = 0.0
            self.safety_interventions = 0
            now = self._safety_clock
            self.safety.submit_state(self.physics.measured_joint_positions(), now, now)
        return self.observation()

    def apply_dynamics(self, rng: np.random.Generator | None = None) -> None:
        """Nominal, then the profile's draw, then explicit overrides (set_dynamics)."""
        physics = self.physics
        physics.restore_nominal()
        values = {}
        if self.profile.scale or self.profile.set:
            values = self.profile.sample(physics.nominal_dynamics, rng or np.random.default_rng(0))
        values.update(self.overrides)
        if values:
            physics.set_dynamics(values)
        self.dynamics = physics.get_dynamics()

    def set_dynamics(self, profile: str = "", values: Mapping[str, float] | None = None) -> None:
        """Switch profile and/or override named parameters; effective immediately.

        Overrides persist across resets (for system identification) until the profile
        is switched again.
        """
        if profile:
            new = load_profile(profile)
            if (new.engine, new.effects) != (self.profile.engine, self.profile.effects):
                raise ValueError(
                    f"profile {profile!r} runs on {new.engine} with its own effects, this "
                    f"environment on {self.profile.engine}: start a new one with that profile "
                    "(the sim bridge: restart it with profile:=...)."
                )
            self.profile = new
            self.overrides = {}
        if values:
            self.physics.get_dynamics(list(values))  # refuses unknown names before changing
            self.overrides.update({k: float(v) for k, v in values.items()})
        seed = 0 if self.seed is None else self.seed
        self.apply_dynamics(np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1]))

    def step(self, command, measure_every: int = 0) -> TimeStep:
        """Apply one command (an absolute target per joint) and advance one control period.

        ``measure_every`` > 0: also measure the arm and cube every that many physics steps
        within the period, as a joint-state publisher faster than the control rate would
        (``info["measurements"]``: ``Measurement`` rows; without the safety filter only).
        The observation then carries the last measurement's noisy joint and cube positions,
        as a subscriber of those topics would see them.
        """
        physics = self.physics
        measurements: list[Measurement] = []
        if self.safety is None:
            physics.set_command(command)
            if measure_every > 0:
                if self.substeps % measure_every:
                    raise ValueError(
                        f"measure_every={measure_every} does not divide the {self.substeps} "
                        "physics steps of a control period; choose a divisor."
                    )
                for _ in range(self.substeps // measure_every):
                    physics.step(measure_every)
                    measurements.append(self.measure())
            else:
                physics.step(self.substeps)
        else:
            if measure_every > 0:
                raise ValueError("measure_every needs safety_filter off.")
            self._filtered_step(command)
        self.step_index += 1
        success = self.task.success(physics)
        failure = self.task.failure(physics)
        terminated = failure or (success and self.config.terminate_on_success)
        truncated = (not terminated) and self.step_index >= self.max_steps
        observation = self.observation()
        if measurements:
            observation["joint_position"] = measurements[-1].joint_position
            observation["object_position"] = measurements[-1].object_position
        return TimeStep(
            observation=observation,
            reward=self.task.reward(physics, self.config.reward),
            success=success,
            terminated=bool(terminated),
            truncated=bool(truncated),
            info={
                "success": success,
                "failure": failure,
                "goal_distance": self.task.goal_distance(physics),
                "step": self.step_index,
                "condition": self.condition,
                "seed": self.seed,
                "profile": self.profile.name,
                "safety_interventions": self.safety_interventions,
                "measurements": measurements,
            },
        )

    def measure_every(self, state_rate_hz: float) -> int:
        """Physics steps between measurements at ``state_rate_hz`` (``step``'s
        ``measure_every``); 0 at the control rate (the observation is the measurement)."""
        period_steps = self.substeps
        per_period = state_rate_hz / self.config.control_rate_hz
        if abs(per_period - 1.0) < 1e-9:
            return 0
        every = period_steps / per_period if per_period > 0 else 0.0
        if per_period < 1 or abs(every - round(every)) > 1e-9 or period_steps % round(every):
            raise ValueError(
                f"state_rate_hz={state_rate_hz:g} must be a whole multiple of the control rate "
                f"{self.config.control_rate_hz:g} Hz that divides its {period_steps} physics "
                "steps."
            )
        return round(every)

    def _filtered_step(self, command) -> None:
        """One control period with the safety filter between the command and the arm."""
        physics, safety = self.physics, self.safety
        dt = 1.0 / self._safety_config.control_rate
        now = self._safety_clock
        safety.submit_command(np.asarray(command, dtype=float), now, now)
        for _ in range(self._filter_ticks):
            safety.submit_state(physics.measured_joint_positions(), now, now)
            result = safety.tick(now)
            if result is not None:
                physics.set_command(result.command)
                self.safety_interventions += len(result.interventions)
            physics.step(self._filter_substeps)
            now += dt
        self._safety_clock = now

    def measure(self) -> Measurement:
        """What the arm's state topics carry now, with the profile's noise, stamped."""
        physics = self.physics
        return Measurement(
            time=physics.time,
            joint_position=physics.measured_joint_positions(),
            joint_velocity=physics.joint_velocities(),
            object_position=physics.measured_object_position(),
            object_orientation=physics.object_orientation(),
        )

    def observation(self) -> dict[str, np.ndarray]:
        """What the arm's topics carry: /joint_states, /object/pose and the task's goal."""
        physics = self.physics
        return {
            "joint_position": physics.measured_joint_positions(),
            "joint_velocity": physics.joint_velocities(),
            "object_position": physics.measured_object_position(),
            "object_orientation": physics.object_orientation(),
            "goal_position": physics.goal(),
        }
