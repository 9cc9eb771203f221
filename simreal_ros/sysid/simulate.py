"""Replay recorded commands in MuJoCo under candidate dynamics, many candidates at once.

``ReplaySimulator(episodes, robot, segment_ticks=N).errors(candidates)`` -> per candidate and
episode, the trajectory error (``TrajectoryError``) of replaying the episode's commands.

Short-horizon replay (multiple shooting), the default: the episode is cut into segments of
``segment_ticks`` control ticks; each segment restarts the simulation from the recorded
state at its start (joint positions and velocities, the object's pose, and the object's
linear and angular velocity estimated from the recorded poses around that instant) and is
scored against the recording up to the next restart. Through contact a whole-episode
replay diverges chaotically (a millimetre early becomes centimetres later), which makes
the error surface over cube mass and friction flat or noisy; a segment is short enough
that its error varies smoothly with the parameters. ``segment_ticks=0`` replays the whole
episode open loop from its first state: the final check of a fit.

Why 10 ticks (0.5 s at the 20 Hz control rate) by default: a segment must be longer than
the largest latency searched (50 steps, 0.1 s) plus the arm's response to a command
(position servo settling, about 0.1-0.2 s at nominal gains, longer at a low gain), so
latency and gain show inside each segment; and it must be short against the time in which
a pushed cube's contact history diverges (about a second in whole-episode replays).

The replay follows the controller interface of ``ArmPhysics``: a command received at
time c is tracked from the first physics step that starts at or after c, ``latency_steps``
later, clipped to the joint limits; before the first command the arm tracks
``initial_command``. A command still waiting out the latency at a segment's start is
applied when it falls due, as on the arm. All segments of all episodes and all candidates
run in one ``mujoco.rollout`` call (one model per candidate).

The error, per measured state (``/joint_states`` stamp), averaged over the episode::

    e = (sum_j ((q_sim_j - q_meas_j) / JOINT_SCALE)^2
         + sum_k ((p_sim_k - p_meas_k) / OBJECT_SCALE)^2) / (J + 3)

with the object terms only where a pose was recorded. JOINT_SCALE 0.01 rad and
OBJECT_SCALE 0.01 m weigh a centimetre of cube error like 0.01 rad of joint error (about
a centimetre at the arm's reach). The sim's observation noise is not simulated: noise is
estimated from the residuals (``noise_estimate``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import mujoco
import numpy as np
from mujoco import rollout

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sim.environment import EnvironmentConfig
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sysid.recording import ReplayEpisode

JOINT_SCALE = 0.01  # rad (m for a prismatic gripper joint)
OBJECT_SCALE = 0.01  # m
DEFAULT_SEGMENT_TICKS = 10
# The object's velocity at a restart: a line through the poses within this of it; the
# wide window when the recorded poses are noisy (their own white-noise estimate above
# NOISY_POSE_M), else the narrow one (less bias where a push starts or ends).
VELOCITY_WINDOW_S = (0.01, 0.03)
NOISY_POSE_M = 2e-4
_STATE_SPEC = mujoco.mjtState.mjSTATE_FULLPHYSICS
# Applied by the replay itself (latency) or estimated from residuals (noise), not the model.
_NOT_IN_MODEL = ("latency_steps", "obs_noise")


@dataclasses.dataclass(frozen=True)
class TrajectoryError:
    loss: float  # the normalised mean squared error above
    joint_rms: float  # rad, over joints and samples
    object_rms: float  # m, over axes and samples with a pose (NaN without)


@dataclasses.dataclass
class _Segment:
    start_step: int  # physics step at which it restarts from the recording
    rows: np.ndarray  # measurements it is scored on
    offsets: np.ndarray  # index of each measurement in the segment's rollout output
    state: np.ndarray  # the recorded state it restarts from


@dataclasses.dataclass
class _Prepared:
    episode: ReplayEpisode
    steps: int
    command_index: np.ndarray  # (steps,) index into commands, -1 for the initial command
    commands: np.ndarray  # (C + 1, J): the initial command first, clipped
    whole: _Segment  # the whole episode from its first state
    segments: list[_Segment]  # the short-horizon replay's restarts

    @property
    def measured_rows(self) -> np.ndarray:
        return self.whole.rows


def object_velocity(
    episode: ReplayEpisode, row: int, window: float = VELOCITY_WINDOW_S[0]
) -> tuple[np.ndarray, np.ndarray]:
    """Linear (world) and angular (body frame, as MuJoCo's free joint) velocity of the
    object at measurement ``row``, from the recorded poses within ``window`` s: a
    least-squares line (noise averages out), and the rotation between the window's ends."""
    t = episode.state_times
    near = np.flatnonzero(
        (np.abs(t - t[row]) <= window + 1e-9) & np.isfinite(episode.object_positions).all(axis=1)
    )
    linear, angular = np.zeros(3), np.zeros(3)
    if len(near) < 2 or np.ptp(t[near]) <= 0:
        return linear, angular
    linear = np.polyfit(t[near], episode.object_positions[near], 1)[0]
    quats = episode.object_orientations
    if quats is not None and np.isfinite(quats[[near[0], near[-1]]]).all():
        first, last = (quats[i] / np.linalg.norm(quats[i]) for i in (near[0], near[-1]))
        mujoco.mju_subQuat(angular, last, first)
        angular /= t[near[-1]] - t[near[0]]
    return linear, angular


class ReplaySimulator:
    """Replays ``episodes`` under candidate dynamics (names of the profile vocabulary)."""

    def __init__(
        self,
        episodes: Sequence[ReplayEpisode],
        robot: RobotDescription,
        threads: int = 2,
        segment_ticks: int = DEFAULT_SEGMENT_TICKS,
    ) -> None:
        if not episodes:
            raise ValueError("no episodes to replay.")
        if segment_ticks < 0:
            raise ValueError(f"segment_ticks = {segment_ticks}; give 0 (whole episodes) or more.")
        self.reference = ArmPhysics(robot)
        self.robot = self.reference.robot
        self.threads = max(1, int(threads))
        self.datas = [mujoco.MjData(self.reference.model) for _ in range(self.threads)]
        self._pool: list[ArmPhysics] = []
        self.episodes = list(episodes)
        self.segment_ticks = int(segment_ticks)
        # Ticks of the task's control rate (the policy's), not of the command stream: a
        # safety filter may republish commands faster.
        tick_steps = max(1, round(1.0 / (EnvironmentConfig().control_rate_hz * self.timestep)))
        self.segment_steps = self.segment_ticks * tick_steps
        self._prepared = [self._prepare(e) for e in self.episodes]
        self.replayed_steps = 0  # physics steps simulated so far (for the benchmark)

    @property
    def timestep(self) -> float:
        return self.reference.timestep

    def segment_count(self, episodes: Sequence[int] | None = None) -> int:
        chosen = range(len(self._prepared)) if episodes is None else episodes
        return sum(len(self._prepared[e].segments) for e in chosen)

    def _state_at(self, episode: ReplayEpisode, row: int) -> np.ndarray:
        physics = self.reference
        pose = episode.object_positions[row]
        has_pose = bool(np.isfinite(pose).all())
        physics.reset(
            joint_positions=episode.joint_positions[row],
            cube_position=pose if has_pose else None,
        )
        data = physics.data
        data.qvel[physics.dof_idx] = episode.joint_velocities[row]
        model = physics.model
        for follower, leader, _, ratio in physics._mirrored:  # a gripper's coupled finger
            dof = {int(model.jnt_qposadr[j]): int(model.jnt_dofadr[j]) for j in range(model.njnt)}
            data.qvel[dof[follower]] = ratio * data.qvel[dof[leader]]
        if has_pose:
            q, v = physics.cube_qpos, physics.cube_dof
            quats = episode.object_orientations
            quat = (
                quats[row]
                if quats is not None and np.isfinite(quats[row]).all()
                else episode.start_object_orientation
            )
            data.qpos[q + 3 : q + 7] = quat / np.linalg.norm(quat)
            if row > 0:  # the first state is at rest, as a reset leaves it
                linear, angular = object_velocity(episode, row, self._window(episode))
                data.qvel[v : v + 3] = linear
                data.qvel[v + 3 : v + 6] = angular
        mujoco.mj_forward(physics.model, data)
        state = np.empty(mujoco.mj_stateSize(physics.model, _STATE_SPEC))
        mujoco.mj_getState(physics.model, data, state, _STATE_SPEC)
        return state

    def _window(self, episode: ReplayEpisode) -> float:
        noise = noise_estimate([episode.object_positions])
        narrow, wide = VELOCITY_WINDOW_S
        return wide if np.isfinite(noise) and noise > NOISY_POSE_M else narrow

    def _prepare(self, episode: ReplayEpisode) -> _Prepared:
        physics, dt = self.reference, self.reference.timestep
        steps = max(1, int(np.ceil(episode.duration / dt - 1e-9)))
        apply_step = np.ceil(episode.command_times / dt - 1e-3).astype(int)
        step_starts = np.arange(steps)
        command_index = np.searchsorted(apply_step, step_starts, side="right") - 1
        commands = np.vstack([episode.initial_command, episode.commands])
        commands = np.clip(commands, physics.ctrl_lower, physics.ctrl_upper)
        measured = np.rint(episode.state_times / dt).astype(int)
        rows = np.flatnonzero((measured >= 1) & (measured <= steps))
        whole = _Segment(0, rows, measured[rows] - 1, self._state_at(episode, 0))
        segments = [whole]
        if self.segment_steps > 0:
            segments = []
            for boundary in range(0, steps, self.segment_steps):
                start_row = int(np.argmin(np.abs(measured - boundary)))
                start = int(measured[start_row])
                end = min(start + self.segment_steps, steps)
                inside = np.flatnonzero((measured > start) & (measured <= end))
                if start >= steps or not len(inside):
                    continue
                state = self._state_at(episode, start_row)
                segments.append(_Segment(start, inside, measured[inside] - start - 1, state))
        return _Prepared(episode, steps, command_index, commands, whole, segments)

    def _models(self, candidates: Sequence[Mapping[str, float]]) -> list[mujoco.MjModel]:
        while len(self._pool) < len(candidates):
            self._pool.append(ArmPhysics(self.robot))
        models = []
        for physics, values in zip(self._pool, candidates, strict=False):
            physics.restore_nominal()
            model_values = {k: v for k, v in values.items() if k not in _NOT_IN_MODEL}
            if model_values:
                physics.set_dynamics(model_values)
            models.append(physics.model)
        return models

    def _controls(self, prepared: _Prepared, latency: float) -> np.ndarray:
        """The actuator targets per physics step after ``latency`` steps. A fractional
        latency (only the least-squares refinement asks for one: the arm's is whole) blends
        the two whole ones around it, so the replay error varies smoothly with it and a
        Gauss-Newton step can move it together with the gains it trades against."""
        whole = math.floor(latency)
        share = latency - whole
        targets = self._delayed(prepared, whole)
        if share > 1e-9:
            targets = (1.0 - share) * targets + share * self._delayed(prepared, whole + 1)
        control = np.empty((len(targets), self.reference.model.nu))
        control[:, self.reference.actuator_idx] = targets
        return control

    @staticmethod
    def _delayed(prepared: _Prepared, latency: int) -> np.ndarray:
        index = prepared.command_index
        if latency > 0:
            index = np.concatenate([np.full(min(latency, len(index)), -1), index[:-latency]])
        return prepared.commands[index + 1]

    def _rollout(self, candidates, models, jobs: list[tuple[int, _Segment]], length: int):
        """Roll every (episode, segment) job out under every candidate; the simulated
        (joint positions, object positions) at each job's measurements, [candidate][job]."""
        nu = self.reference.model.nu
        count = len(candidates) * len(jobs)
        initial = np.empty((count, len(jobs[0][1].state)))
        control = np.empty((count, length, nu))
        batch_models = []
        n = 0
        for values, model in zip(candidates, models, strict=True):
            latency = max(0.0, float(values.get("latency_steps", 0)))
            full = {}
            for episode, segment in jobs:
                if episode not in full:
                    full[episode] = self._controls(self._prepared[episode], latency)
                piece = full[episode][segment.start_step : segment.start_step + length]
                control[n, : len(piece)] = piece
                control[n, len(piece) :] = piece[-1]
                initial[n] = segment.state
                batch_models.append(model)
                n += 1
        states, _ = rollout.rollout(
            batch_models, self.datas, initial, control, persistent_pool=True
        )
        self.replayed_steps += count * length
        ref = self.reference
        out: list[list[tuple[np.ndarray, np.ndarray]]] = []
        n = 0
        for _ in candidates:
            row = []
            for _, segment in jobs:
                qpos = states[n, segment.offsets, 1 : 1 + ref.model.nq]
                row.append((qpos[:, ref.qpos_idx], qpos[:, ref.cube_qpos : ref.cube_qpos + 3]))
                n += 1
            out.append(row)
        return out

    def _simulate(self, candidates, episodes: Sequence[int], whole: bool):
        """Per candidate, per episode: the simulated joint and object positions at the
        episode's scored measurements (rows, concatenated over its segments)."""
        models = self._models(candidates)
        result = [[None] * len(episodes) for _ in candidates]
        if whole or self.segment_steps <= 0:
            for i, e in enumerate(episodes):
                prepared = self._prepared[e]
                sims = self._rollout(candidates, models, [(e, prepared.whole)], prepared.steps)
                for c in range(len(candidates)):
                    result[c][i] = sims[c][0]
            return result
        jobs = [(e, s) for e in episodes for s in self._prepared[e].segments]
        sims = self._rollout(candidates, models, jobs, self.segment_steps)
        for c in range(len(candidates)):
            k = 0
            for i, e in enumerate(episodes):
                count = len(self._prepared[e].segments)
                parts = sims[c][k : k + count]
                k += count
                result[c][i] = (
                    np.concatenate([p[0] for p in parts]),
                    np.concatenate([p[1] for p in parts]),
                )
        return result

    def scored_rows(self, episode: int, whole: bool = False) -> np.ndarray:
        prepared = self._prepared[episode]
        if whole or self.segment_steps <= 0:
            return prepared.whole.rows
        return np.concatenate([s.rows for s in prepared.segments])

    def trajectories(
        self, candidates: Sequence[Mapping[str, float]], episode: int, models=None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Simulated whole-episode (joint positions, object positions) at the episode's
        measured states, per candidate: arrays (P, T', J) and (P, T', 3)."""
        sims = self._simulate(candidates, [episode], whole=True)
        return np.stack([s[0][0] for s in sims]), np.stack([s[0][1] for s in sims])

    def errors(
        self,
        candidates: Sequence[Mapping[str, float]],
        episodes: Sequence[int] | None = None,
        whole: bool = False,
    ) -> list[list[TrajectoryError]]:
        """``errors[c][i]``: candidate c replaying episode ``episodes[i]`` (default all),
        in segments (``whole``: open loop from the first state)."""
        chosen = list(range(len(self._prepared)) if episodes is None else episodes)
        sims = self._simulate(candidates, chosen, whole)
        return [
            [self._error(self.scored_rows(e, whole), e, *sims[c][i]) for i, e in enumerate(chosen)]
            for c in range(len(candidates))
        ]

    def segment_losses(
        self, candidates: Sequence[Mapping[str, float]], episodes: Sequence[int] | None = None
    ) -> np.ndarray:
        """(candidates, segments) losses, the segments of ``episodes`` in order (whole
        episodes when ``segment_ticks`` is 0)."""
        chosen = list(range(len(self._prepared)) if episodes is None else episodes)
        if self.segment_steps <= 0:
            errors = self.errors(candidates, chosen, whole=True)
            return np.array([[e.loss for e in row] for row in errors])
        jobs = [(e, s) for e in chosen for s in self._prepared[e].segments]
        sims = self._rollout(candidates, self._models(candidates), jobs, self.segment_steps)
        return np.array(
            [
                [self._error(s.rows, e, *sims[c][k]).loss for k, (e, s) in enumerate(jobs)]
                for c in range(len(candidates))
            ]
        )

    def segment_residuals(
        self, candidates: Sequence[Mapping[str, float]], episodes: Sequence[int]
    ) -> np.ndarray:
        """(candidates, residuals): every scaled residual of the segments of ``episodes``,
        weighted so that a row's sum of squares is the mean of ``segment_losses`` (the
        vector a least-squares step works on). A replay that blows up gives a large,
        finite residual, so a step into it is refused rather than breaking the solver."""
        jobs = [(e, s) for e in episodes for s in self._prepared[e].segments]
        sims = self._rollout(candidates, self._models(candidates), jobs, self.segment_steps)
        parts = []
        for c in range(len(candidates)):
            row = []
            for k, (e, s) in enumerate(jobs):
                block, width, _, _ = self._scaled_errors(s.rows, e, *sims[c][k])
                block *= (1.0 / np.sqrt(width * len(s.rows) * len(jobs)))[:, None]
                row.append(np.where(np.isfinite(block), block, 1e3).ravel())
            parts.append(np.concatenate(row))
        return np.stack(parts)

    def residuals(
        self, values: Mapping[str, float], episode: int, whole: bool = False
    ) -> list[np.ndarray]:
        """Simulated minus recorded, unscaled, one (T_s, J + 3) array per segment, rows in
        time (object columns NaN without a pose): the series ``noise_estimate`` reads."""
        joints, objects = self._simulate([values], [episode], whole)[0][0]
        prepared = self._prepared[episode]
        segments = [prepared.whole] if whole or self.segment_steps <= 0 else prepared.segments
        out, k = [], 0
        for segment in segments:
            rows = segment.rows
            _, _, dq, dp = self._scaled_errors(
                rows, episode, joints[k : k + len(rows)], objects[k : k + len(rows)]
            )
            k += len(rows)
            out.append(np.hstack([dq, dp]))
        return out

    def _scaled_errors(self, rows, episode: int, joints: np.ndarray, objects: np.ndarray):
        """Simulated minus recorded at ``rows``: the scaled block (T, J + 3) (joints /
        JOINT_SCALE, object / OBJECT_SCALE, zero where the recording has no pose), each
        row's width (the terms it scores), and the unscaled joint and object errors (NaN
        rows where the recording has no pose). The one definition of the error that the
        loss, the least-squares residuals and the noise estimate share."""
        recorded = self._prepared[episode].episode
        dq = joints - recorded.joint_positions[rows]
        dp = objects - recorded.object_positions[rows]
        with_pose = np.isfinite(recorded.object_positions[rows]).all(axis=1)
        scaled_p = np.where(with_pose[:, None], dp / OBJECT_SCALE, 0.0)
        width = dq.shape[1] + np.where(with_pose, 3, 0)
        return np.hstack([dq / JOINT_SCALE, scaled_p]), width, dq, dp

    def _error(self, rows, episode: int, joints: np.ndarray, objects: np.ndarray):
        block, width, dq, dp = self._scaled_errors(rows, episode, joints, objects)
        if not np.isfinite(block).all():
            return TrajectoryError(float("inf"), float("inf"), float("inf"))
        loss = float(np.mean((block**2).sum(axis=1) / width))
        posed = dp[np.isfinite(dp).all(axis=1)]  # a finite block: NaN only without a pose
        object_rms = float(np.sqrt(np.mean(posed**2))) if len(posed) else np.nan
        return TrajectoryError(loss, float(np.sqrt(np.mean(dq**2))), object_rms)


def object_travel(episodes: Sequence[ReplayEpisode]) -> float:
    """The farthest the object moved from its start in any episode (m; 0 without poses)."""
    travel = 0.0
    for e in episodes:
        poses = e.object_positions[np.isfinite(e.object_positions).all(axis=1)]
        if len(poses):
            travel = max(travel, float(np.linalg.norm(poses - poses[0], axis=1).max()))
    return travel


def noise_estimate(residuals: Sequence[np.ndarray]) -> float:
    """Std of white measurement noise in residual series (rows in time, columns channels).

    The second difference of white noise n has variance 6 var(n), while that of a smooth
    model error shrinks with the sampling interval to the fourth power; the median
    absolute value (x 1.4826, Gaussian) keeps the rare impacts and contact switches, which
    are not smooth, from counting as noise.
    """
    values = []
    for r in residuals:
        second = np.diff(np.asarray(r, dtype=float), n=2, axis=0)
        values.append(np.abs(second[np.isfinite(second)]))
    pooled = np.concatenate(values) if values else np.array([])
    if pooled.size == 0:
        return float("nan")
    return float(1.4826 * np.median(pooled) / np.sqrt(6.0))
