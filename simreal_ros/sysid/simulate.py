"""Replay recorded commands in MuJoCo under candidate dynamics, many candidates at once.

``ReplaySimulator(episodes).errors(candidates)`` -> per candidate and episode, the
trajectory error (``TrajectoryError``) of replaying the episode's commands open loop
from its measured start state.

The replay follows the controller interface of ``ArmPhysics``: a command received at
time c is tracked from the first physics step that starts at or after c, ``latency_steps``
later, clipped to the joint limits; before the first command the arm tracks
``initial_command``. Candidates run in ``mujoco.rollout`` (C threads, one model per
candidate), so a population costs one call per episode.

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
from collections.abc import Mapping, Sequence

import mujoco
import numpy as np
from mujoco import rollout

from simreal_ros.robot.description import RobotDescription
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sysid.recording import ReplayEpisode

JOINT_SCALE = 0.01  # rad (m for a prismatic gripper joint)
OBJECT_SCALE = 0.01  # m
_STATE_SPEC = mujoco.mjtState.mjSTATE_FULLPHYSICS
# Applied by the replay itself (latency) or estimated from residuals (noise), not the model.
_NOT_IN_MODEL = ("latency_steps", "obs_noise")


@dataclasses.dataclass(frozen=True)
class TrajectoryError:
    loss: float  # the normalised mean squared error above
    joint_rms: float  # rad, over joints and samples
    object_rms: float  # m, over axes and samples with a pose (NaN without)


@dataclasses.dataclass
class _Prepared:
    episode: ReplayEpisode
    steps: int
    command_index: np.ndarray  # (steps,) index into commands, -1 for the initial command
    commands: np.ndarray  # (C + 1, J): the initial command first, clipped
    measured_step: np.ndarray  # (T',) state index after which each measurement is taken
    measured_rows: np.ndarray  # (T',) rows of the episode's measurements used
    initial_state: np.ndarray


class ReplaySimulator:
    """Replays ``episodes`` under candidate dynamics (names of the profile vocabulary)."""

    def __init__(
        self,
        episodes: Sequence[ReplayEpisode],
        robot: RobotDescription | None = None,
        threads: int = 2,
    ) -> None:
        if not episodes:
            raise ValueError("no episodes to replay.")
        self.reference = ArmPhysics(robot)
        self.robot = self.reference.robot
        self.threads = max(1, int(threads))
        self.datas = [mujoco.MjData(self.reference.model) for _ in range(self.threads)]
        self._pool: list[ArmPhysics] = []
        self.episodes = list(episodes)
        self._prepared = [self._prepare(e) for e in self.episodes]

    @property
    def timestep(self) -> float:
        return self.reference.timestep

    def _prepare(self, episode: ReplayEpisode) -> _Prepared:
        physics, dt = self.reference, self.reference.timestep
        steps = max(1, int(np.ceil(episode.duration / dt - 1e-9)))
        apply_step = np.ceil(episode.command_times / dt - 1e-6).astype(int)
        step_starts = np.arange(steps)
        command_index = np.searchsorted(apply_step, step_starts, side="right") - 1
        commands = np.vstack([episode.initial_command, episode.commands])
        commands = np.clip(commands, physics.ctrl_lower, physics.ctrl_upper)
        measured = np.rint(episode.state_times / dt).astype(int)
        rows = np.flatnonzero((measured >= 1) & (measured <= steps))
        physics.reset(
            joint_positions=episode.joint_positions[0],
            cube_position=episode.object_positions[0] if episode.has_object else None,
        )
        data = physics.data
        data.qvel[physics.dof_idx] = episode.joint_velocities[0]
        if episode.has_object:
            q = physics.cube_qpos
            data.qpos[q + 3 : q + 7] = episode.start_object_orientation
        mujoco.mj_forward(physics.model, data)
        state = np.empty(mujoco.mj_stateSize(physics.model, _STATE_SPEC))
        mujoco.mj_getState(physics.model, data, state, _STATE_SPEC)
        return _Prepared(
            episode=episode,
            steps=steps,
            command_index=command_index,
            commands=commands,
            measured_step=measured[rows] - 1,
            measured_rows=rows,
            initial_state=state,
        )

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

    def _controls(self, prepared: _Prepared, latency: int) -> np.ndarray:
        index = prepared.command_index
        if latency > 0:
            index = np.concatenate([np.full(min(latency, len(index)), -1), index[:-latency]])
        targets = prepared.commands[index + 1]
        control = np.empty((len(index), self.reference.model.nu))
        control[:, self.reference.actuator_idx] = targets
        return control

    def trajectories(
        self, candidates: Sequence[Mapping[str, float]], episode: int, models=None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Simulated (joint positions, object positions) at the episode's measured states,
        per candidate: arrays (P, T', J) and (P, T', 3)."""
        prepared = self._prepared[episode]
        models = models or self._models(candidates)
        controls = np.stack(
            [self._controls(prepared, int(c.get("latency_steps", 0))) for c in candidates]
        )
        states, _ = rollout.rollout(
            models,
            self.datas,
            np.tile(prepared.initial_state, (len(candidates), 1)),
            controls,
            persistent_pool=True,
        )
        ref = self.reference
        qpos = states[:, prepared.measured_step, 1 : 1 + ref.model.nq]
        joints = qpos[:, :, ref.qpos_idx]
        objects = qpos[:, :, ref.cube_qpos : ref.cube_qpos + 3]
        return joints, objects

    def errors(
        self, candidates: Sequence[Mapping[str, float]], episodes: Sequence[int] | None = None
    ) -> list[list[TrajectoryError]]:
        """``errors[c][i]``: candidate c replaying episode ``episodes[i]`` (default all)."""
        chosen = range(len(self._prepared)) if episodes is None else episodes
        out: list[list[TrajectoryError]] = [[] for _ in candidates]
        models = self._models(candidates)
        for e in chosen:
            joints, objects = self.trajectories(candidates, e, models)
            for c in range(len(candidates)):
                out[c].append(self._error(e, joints[c], objects[c]))
        return out

    def residuals(self, values: Mapping[str, float], episode: int) -> np.ndarray:
        """Measured minus simulated, (T', J + 3) (object columns NaN without a pose)."""
        joints, objects = self.trajectories([values], episode)
        prepared = self._prepared[episode]
        rows = prepared.measured_rows
        measured_q = prepared.episode.joint_positions[rows]
        measured_p = prepared.episode.object_positions[rows]
        return np.hstack([measured_q - joints[0], measured_p - objects[0]])

    def _error(self, episode: int, joints: np.ndarray, objects: np.ndarray) -> TrajectoryError:
        prepared = self._prepared[episode]
        rows = prepared.measured_rows
        dq = joints - prepared.episode.joint_positions[rows]
        dp = objects - prepared.episode.object_positions[rows]
        with_pose = np.isfinite(dp).all(axis=1)
        if not np.isfinite(dq).all() or not np.isfinite(dp[with_pose]).all():
            return TrajectoryError(float("inf"), float("inf"), float("inf"))
        joint_terms = ((dq / JOINT_SCALE) ** 2).sum(axis=1)
        object_terms = np.where(with_pose, ((np.nan_to_num(dp) / OBJECT_SCALE) ** 2).sum(1), 0.0)
        width = dq.shape[1] + np.where(with_pose, 3, 0)
        loss = float(np.mean((joint_terms + object_terms) / width))
        object_rms = float(np.sqrt(np.mean(dp[with_pose] ** 2))) if with_pose.any() else np.nan
        return TrajectoryError(loss, float(np.sqrt(np.mean(dq**2))), object_rms)


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
