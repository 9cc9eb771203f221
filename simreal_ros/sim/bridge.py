"""The sim bridge's core: paced physics, publish scheduling, episodes, commands. No ROS.

The sim_bridge node is a thin adapter around ``SimBridgeCore``: it turns messages into
calls here and turns the ``BridgeSink`` callbacks into messages.

Timing
    Physics steps at the model's timestep (500 Hz). Publish rates are per simulated
    second, so header stamps are evenly spaced in sim time. Free-running, a dedicated
    thread steps physics paced to ``real_time_factor`` (0 = as fast as possible); when
    the sim runs faster than real time, a stream also waits out its period in wall time,
    so publishing never throttles physics and subscribers never see more than the
    configured rate. Lockstep, physics advances only through ``step(n)`` and every
    sample in sim time is published (deterministic for a given seed and command sequence).
    Sim time never goes backwards: a reset continues the clock where it was.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping

import numpy as np

from simreal_ros import config_schema
from simreal_ros.config_schema import setting
from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment
from simreal_ros.sim.profiles import DynamicsProfile, check_profile
from simreal_ros.sim.tasks import CONDITIONS, TASKS


@dataclasses.dataclass
class SimBridgeConfig:
    autostart: bool = setting(False, "configure and activate at start-up")
    task: str = setting("push", "task to simulate", choices=tuple(TASKS))
    profile: str = setting(
        "nominal",
        "dynamics profile: a shipped name (nominal, randomized, real_twin) or a YAML path "
        "(real_twin is a stand-in for the physical arm, not the arm)",
    )
    condition: str = setting("train", "start-state/goal distribution", choices=CONDITIONS)
    seed: int = setting(0, "seed of the first episode (reset at activation)", low=0, high=2**31)
    mode: str = setting(
        "free_running",
        "free_running: paced physics thread; lockstep: physics advances only via ~/step",
        choices=("free_running", "lockstep"),
    )
    real_time_factor: float = setting(
        1.0,
        "sim seconds per wall second when free-running; 0 = as fast as possible",
        low=0.0,
        high=100.0,
        dynamic=True,
    )
    joint_state_rate_hz: float = setting(
        500.0, "/joint_states rate per simulated second", low=1.0, high=500.0, unit="Hz"
    )
    object_pose_rate_hz: float = setting(
        100.0, "/object/pose rate per simulated second", low=1.0, high=500.0, unit="Hz"
    )
    publish_object_pose: bool = setting(
        True,
        "publish the simulator's (privileged) /object/pose; off when a perception node "
        "publishes it from the camera (simreal up --perception marker)",
    )
    task_status_rate_hz: float = setting(
        20.0, "/task/status rate (the task's control rate)", low=1.0, high=500.0, unit="Hz"
    )
    clock_rate_hz: float = setting(
        250.0, "/clock rate per simulated second", low=1.0, high=500.0, unit="Hz"
    )
    episode_seconds: float = setting(
        6.0, "episode time limit (truncated after it)", low=0.1, high=3600.0, unit="s"
    )
    camera: bool = setting(False, "render /camera/image_raw offscreen (MUJOCO_GL=egl)")
    camera_name: str = setting(
        "front", "MJCF camera to render (front, overhead, or workspace: the marker's view)"
    )
    camera_rate_hz: float = setting(10.0, "camera frame rate", low=0.1, high=60.0, unit="Hz")
    camera_width: int = setting(320, "image width", low=16, high=1920, unit="px")
    camera_height: int = setting(240, "image height", low=16, high=1080, unit="px")
    base_frame: str = setting("base_link", "frame of poses and goals (the arm's base)")
    diagnostics_period: float = setting(1.0, "/diagnostics period", low=0.1, high=10.0, unit="s")

    def __post_init__(self) -> None:
        config_schema.validate(self)
        check_profile(self.profile)


@dataclasses.dataclass
class TaskStatusData:
    episode_id: str
    task: str
    condition: str
    seed: int
    step: int
    goal: np.ndarray
    reward: float
    success: bool
    done: bool
    truncated: bool


class BridgeSink:
    """Where the core's outputs go (the node publishes them). Stamps are sim seconds."""

    def joint_state(self, stamp: float, position, velocity, effort) -> None: ...
    def object_pose(self, stamp: float, position, orientation_wxyz) -> None: ...
    def task_status(self, stamp: float, status: TaskStatusData) -> None: ...
    def clock(self, stamp: float) -> None: ...


class _Stream:
    """One periodic output: due every ``every`` physics steps (and, when the sim runs
    faster than real time, not before ``period`` wall seconds since the last one).

    ``emit`` is what happens on the sim-time schedule; ``publish`` what the wall-clock
    gate sends when running faster than real time (the same, unless the stream has work
    that must stay on sim time, like judging the task)."""

    __slots__ = ("emit", "every", "next_wall", "period", "publish")

    def __init__(
        self,
        every: int,
        period: float,
        emit: Callable[[], None],
        publish: Callable[[], None] | None = None,
    ) -> None:
        self.every = every
        self.period = period
        self.emit = emit
        self.publish = publish or emit
        self.next_wall = 0.0


class SimBridgeCore:
    def __init__(self, config: SimBridgeConfig, sink: BridgeSink, robot) -> None:
        """``robot``: the arm's description (a ``RobotDescription``)."""
        self.config = config
        self.sink = sink
        self.env = TaskEnvironment(
            EnvironmentConfig(
                task=config.task,
                profile=config.profile,
                condition=config.condition,
                control_rate_hz=config.task_status_rate_hz,
                episode_seconds=config.episode_seconds,
            ),
            robot=robot,
        )
        self.physics = self.env.physics
        self.robot = self.env.robot
        self.lock = threading.RLock()  # guards physics and episode state
        dt = self.physics.timestep

        def every(rate: float) -> int:
            return max(1, round(1.0 / (rate * dt)))

        self._streams = [
            _Stream(
                every(config.joint_state_rate_hz),
                1 / config.joint_state_rate_hz,
                self._emit_joint_state,
            ),
            _Stream(
                every(config.object_pose_rate_hz),
                1 / config.object_pose_rate_hz,
                self._emit_object_pose,
            ),
            _Stream(
                every(config.task_status_rate_hz),
                1 / config.task_status_rate_hz,
                self._emit_task_status,
                self._publish_task_status,
            ),
            _Stream(every(config.clock_rate_hz), 1 / config.clock_rate_hz, self.emit_clock),
        ]
        self._task_every = self._streams[2].every
        self.total_steps = 0  # physics steps since start, across episodes
        self._time_offset = 0.0  # sim time of the current episode's start
        self.episode_id = ""
        self.episode_steps = 0
        self._done = False
        self._truncated = False
        self._success = False
        self._reward = 0.0
        self.max_episode_steps = round(config.episode_seconds / dt)
        self.paused = False
        self.real_time_factor = config.real_time_factor
        # Command bookkeeping (wall clock, for the command-age diagnostic).
        self.last_command_wall: float | None = None
        self.commands_accepted = 0
        self.commands_rejected = 0
        # Rate measurement for diagnostics.
        self._rate_window = (time.monotonic(), 0, 0.0)
        # CPU seconds the physics thread has used (stepping and publishing), for benches.
        self.physics_thread_cpu = 0.0
        self.measured_step_rate = 0.0
        self.measured_rtf = 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._pace_reset = True

    # ----------------------------------------------------------------- episodes
    @property
    def sim_time(self) -> float:
        return self._time_offset + self.physics.time

    @property
    def episode_start_time(self) -> float:
        """Sim time of the last reset: the new episode's messages are stamped at or after it."""
        return self._time_offset

    def reset(self, seed: int | None = None, condition: str = "", episode_id: str = "") -> str:
        """Start a new episode; returns its id. Raises ValueError on a bad condition."""
        seed = self.config.seed if seed is None else int(seed)
        with self.lock:
            offset = self.sim_time
            self.env.reset(seed=seed, condition=condition or None)
            self._time_offset = offset
            self.episode_id = episode_id or f"{self.config.task}-{seed}-{uuid.uuid4().hex[:8]}"
            self.episode_steps = 0
            self._done = self._truncated = self._success = False
            self._reward = self.env.task.reward(self.physics)
            self._pace_reset = True
            self._emit_all()
        return self.episode_id

    def submit_command(self, values) -> None:
        """Apply absolute joint targets (controller order) now; ValueError if malformed."""
        try:
            command = self.physics.validate_command(values)
        except ValueError:
            self.commands_rejected += 1
            raise
        with self.lock:
            self.physics.set_command(command)
        self.commands_accepted += 1
        self.last_command_wall = time.monotonic()

    def set_dynamics(self, profile: str = "", values: Mapping[str, float] | None = None) -> None:
        with self.lock:
            self.env.set_dynamics(profile, values)

    def get_dynamics(self) -> tuple[DynamicsProfile, dict[str, float]]:
        """The profile in force (its name and stand-in flag travel with it) and its values."""
        with self.lock:
            return self.env.profile, self.physics.get_dynamics()

    # ---------------------------------------------------------------- stepping
    def step(self, n: int) -> None:
        """Advance ``n`` physics steps, emitting every output due in sim time."""
        streams = self._streams
        remaining = int(n)
        while remaining > 0:
            chunk = remaining
            for stream in streams:
                chunk = min(chunk, stream.every - self.total_steps % stream.every)
            with self.lock:
                self.physics.step(chunk)
                self.total_steps += chunk
                self.episode_steps += chunk
                remaining -= chunk
                for stream in streams:
                    if self.total_steps % stream.every == 0:
                        stream.emit()

    def step_faster_than_real_time(self, n: int) -> None:
        """Advance ``n`` steps, then publish each output whose wall-clock period has
        passed: running faster than real time, subscribers still see at most the
        configured rates, and publishing costs physics almost nothing.

        The task is still judged at its own rate in sim time, published or not, exactly
        as in lockstep and off ROS: a success between two published statuses (a cube
        pushed through the goal) counts, and an episode's end is published at once."""
        now = time.monotonic()
        task_every = self._task_every
        with self.lock:
            remaining = int(n)
            while remaining > 0:
                chunk = min(remaining, task_every - self.total_steps % task_every)
                self.physics.step(chunk)
                self.total_steps += chunk
                self.episode_steps += chunk
                remaining -= chunk
                if self.total_steps % task_every == 0:
                    ended = self._done or self._truncated
                    self._update_task()
                    if not ended and (self._done or self._truncated):
                        self._publish_task_status()
            for stream in self._streams:
                if now >= stream.next_wall:
                    # Keep the average rate (catch up one late period), never burst more.
                    stream.next_wall = max(stream.next_wall + stream.period, now - stream.period)
                    stream.publish()

    def _update_task(self) -> None:
        task, physics = self.env.task, self.physics
        self._success = task.success(physics)
        self._reward = task.reward(physics)
        if not self._done and not self._truncated:
            if self._success or task.failure(physics):
                self._done = True
            elif self.episode_steps >= self.max_episode_steps:
                self._truncated = True

    def _emit_all(self) -> None:
        for stream in self._streams:
            stream.emit()

    def _emit_joint_state(self) -> None:
        physics = self.physics
        self.sink.joint_state(
            self.sim_time,
            physics.measured_joint_positions(),
            physics.joint_velocities(),
            physics.joint_efforts(),
        )

    def _emit_object_pose(self) -> None:
        physics = self.physics
        self.sink.object_pose(
            self.sim_time, physics.measured_object_position(), physics.object_orientation()
        )

    def task_status(self) -> TaskStatusData:
        env = self.env
        return TaskStatusData(
            episode_id=self.episode_id,
            task=self.config.task,
            condition=env.condition,
            seed=-1 if env.seed is None else env.seed,
            step=self.episode_steps // self._task_every,
            goal=self.physics.goal(),
            reward=float(self._reward),
            success=bool(self._success),
            done=self._done,
            truncated=self._truncated,
        )

    def _emit_task_status(self) -> None:
        self._update_task()
        self._publish_task_status()

    def _publish_task_status(self) -> None:
        self.sink.task_status(self.sim_time, self.task_status())

    def emit_clock(self) -> None:
        self.sink.clock(self.sim_time)

    # ----------------------------------------------------------- free running
    def start(self) -> None:
        """Start the free-running physics thread (no-op in lockstep mode)."""
        if self.config.mode != "free_running" or self._thread is not None:
            return
        self._stop.clear()
        self._pace_reset = True
        self._thread = threading.Thread(target=self._run, name="sim-physics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def set_paused(self, paused: bool) -> None:
        self.paused = bool(paused)
        self._pace_reset = True

    def _run(self) -> None:
        dt = self.physics.timestep
        # Step one joint-state period at a time, then sleep to the real-time schedule.
        block = self._streams[0].every
        wall_start, sim_start = time.monotonic(), self.total_steps
        while not self._stop.is_set():
            if self.paused:
                self._stop.wait(0.01)
                continue
            rtf = self.real_time_factor
            if self._pace_reset:
                wall_start, sim_start = time.monotonic(), self.total_steps
                self._pace_reset = False
            if rtf <= 0.0:
                # About half a millisecond of stepping between looks at the wall clock.
                chunk = min(50, max(5, round(self.measured_step_rate * 5e-4)))
                self.step_faster_than_real_time(chunk)
            elif rtf > 1.0:
                self.step_faster_than_real_time(block)
            else:
                self.step(block)
            self._measure()
            self.physics_thread_cpu = time.thread_time()
            if rtf > 0.0:
                due = wall_start + (self.total_steps - sim_start) * dt / rtf
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -1.0:
                    # Stalled over a second (an overloaded machine): drop the backlog rather
                    # than race through it; shorter stalls are caught up.
                    self._pace_reset = True

    def _measure(self) -> None:
        start_wall, start_steps, _ = self._rate_window
        now = time.monotonic()
        if now - start_wall >= 1.0:
            rate = (self.total_steps - start_steps) / (now - start_wall)
            self.measured_step_rate = rate
            self.measured_rtf = rate * self.physics.timestep
            self._rate_window = (now, self.total_steps, 0.0)

    def command_age(self) -> float:
        """Wall seconds since the last accepted command (inf if none yet)."""
        if self.last_command_wall is None:
            return math.inf
        return time.monotonic() - self.last_command_wall
