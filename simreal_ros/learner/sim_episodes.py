"""Record sim rollouts of a checkpoint as real episode bags (rosbag2, MCAP).

The bags carry the topics the graph records (/joint_states, /object/pose, /policy/action,
/forward_position_controller/commands, /task/status), written through the episodes
package's writer, so the learner and system identification read them exactly like bags
from the recorder. State messages are stamped with the sim time of the measurement. Used by
tests, the benchmark and `simreal learn --record-sim` demos where no graph is running.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from simreal_ros.episodes import messages
from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
from simreal_ros.episodes.metadata import EpisodeMetadata

TOPICS = [
    TopicSpec("/joint_states", "sensor_msgs/msg/JointState"),
    TopicSpec("/object/pose", "geometry_msgs/msg/PoseStamped"),
    TopicSpec("/policy/action", "simreal_ros/msg/PolicyAction"),
    TopicSpec("/task/status", "simreal_ros/msg/TaskStatus"),
    TopicSpec("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray"),
]
PERIOD_NS = 50_000_000


def record_rollout(
    bag_dir: str | Path,
    checkpoint,
    *,
    task: str = "push",
    seed: int = 0,
    source: str = "real_twin",
    profile: str = "real_twin",
    condition: str = "train",
    episode_seconds: float = 2.0,
    noise: float = 0.1,
    converter=None,
    episode_id: str | None = None,
    state_rate_hz: float = 20.0,
    actor=None,
    version: str | None = None,
) -> EpisodeMetadata:
    """One episode of ``checkpoint``'s actor (plus exploration noise) in sim, as a bag.

    ``state_rate_hz``: rate of /joint_states and /object/pose (the control rate, or a
    multiple of it, as the sim bridge and a joint_state_broadcaster publish faster).
    ``actor`` / ``version``: another actor on the checkpoint's spec (e.g. base + adapter).
    """
    actor = actor if actor is not None else checkpoint.model.actor
    version = version or checkpoint.version
    from simreal_ros.learner.session import make_converter
    from simreal_ros.sim.gym_env import ArmTaskEnv

    converter = converter or make_converter(checkpoint)
    names = list(checkpoint.spec.joint_names)
    env = ArmTaskEnv(task=task, profile=profile, episode_seconds=episode_seconds)
    bag_dir = Path(bag_dir)
    meta = EpisodeMetadata(
        episode_id=episode_id or bag_dir.name,
        source=source,
        profile=profile,
        condition=condition,
        task=task,
        seed=seed,
        joint_names=names,
        joint_units=list(checkpoint.spec.joint_units),
        policy_versions=[version],
    )
    recording = EpisodeRecording(bag_dir, TOPICS, meta, flush_period_s=0.05)
    recording.start()
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000_000_000_000
    success = False
    try:
        obs, _ = env.reset(seed=seed, options={"condition": condition})
        core = env.core
        measure_every = _measure_every(core, state_rate_hz)
        _send(recording, 3, t0 - 5_000_000, _status(meta, 0, obs, 0.0, False, False, False))
        _send_state(recording, t0, names, core.measure(), obs)
        step, done = 0, False
        while not done:
            t = t0 + step * PERIOD_NS
            normalized = torch.as_tensor(
                converter.normalized_observation(obs), dtype=torch.float32
            )
            with torch.no_grad():
                action = actor(normalized).numpy()
            action = np.clip(action + noise * rng.standard_normal(action.shape), -1.0, 1.0)
            command = converter.command_from_action(action, obs["joint_position"])
            intent = messages.policy_action(
                t, command, version=version, sequence=step, joint_names=names
            )
            _send(recording, 2, t, intent)
            _send(recording, 4, t, messages.float64_multi_array(command))
            if measure_every:
                timestep = core.step(command, measure_every=measure_every)
                obs, reward = timestep.observation, timestep.reward
                terminated, truncated, info = (
                    timestep.terminated,
                    timestep.truncated,
                    timestep.info,
                )
                for sample in info["measurements"]:
                    _send_state(recording, t0, names, sample, obs)
            else:
                obs, reward, terminated, truncated, info = env.step(command)
                _send_state(recording, t0, names, None, obs, t + PERIOD_NS)
            success = success or bool(info.get("success", False))
            done = bool(terminated or truncated)
            status = _status(meta, step + 1, obs, reward, success, done, bool(truncated))
            _send(recording, 3, t + 2_000_000, status)
            step += 1
    finally:
        env.close()
    return recording.stop("success" if success else "failure", success)


def _measure_every(core, state_rate_hz: float) -> int:
    """Physics steps between state messages; 0: one per control period (the observation)."""
    period_steps = core.substeps
    per_period = state_rate_hz / core.config.control_rate_hz
    if abs(per_period - 1.0) < 1e-9:
        return 0
    every = period_steps / per_period if per_period > 0 else 0.0
    if per_period < 1 or abs(every - round(every)) > 1e-9 or period_steps % round(every):
        raise ValueError(
            f"state_rate_hz={state_rate_hz:g} must be a whole multiple of the control rate "
            f"{core.config.control_rate_hz:g} Hz that divides its {period_steps} physics steps."
        )
    return round(every)


def _send_state(recording, t0: int, names, sample, obs, stamp: int | None = None) -> None:
    """/joint_states and /object/pose of one measurement; the observation then carries the
    same noisy values the messages do (as a subscriber of those topics would see)."""
    if sample is not None:
        stamp = t0 + round(sample.time * 1e9)
        obs["joint_position"] = sample.joint_position
        obs["object_position"] = sample.object_position
    state = messages.joint_state(stamp, names, obs["joint_position"], obs["joint_velocity"])
    _send(recording, 0, stamp - 2_000_000, state)  # received before the tick's action
    pose = messages.pose_stamped(stamp, obs["object_position"], obs["object_orientation"])
    _send(recording, 1, stamp - 1_000_000, pose)


def _send(recording: EpisodeRecording, index: int, t: int, data: bytes) -> None:
    if not recording.offer(index, t, data):
        raise RuntimeError("the episode writer queue is full; record fewer steps at a time.")


def _status(meta, step, obs, reward, success, done, truncated) -> bytes:
    # Header stamp 0: readers take a status's time from the bag record, not the header.
    return messages.task_status(
        0,
        episode_id=meta.episode_id,
        task=meta.task,
        condition=meta.condition,
        seed=meta.seed,
        step=step,
        goal=obs["goal_position"],
        reward=reward,
        success=success,
        done=done,
        truncated=truncated,
    )
