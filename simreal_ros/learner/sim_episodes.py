"""Record sim rollouts of a checkpoint as real episode bags (rosbag2, MCAP).

The bags carry the topics the graph records (/joint_states, /object/pose, /policy/action,
/task/status), written through the episodes package's writer, so the learner reads them
exactly like bags from the recorder. Used by tests, the benchmark and `simreal learn
--record-sim` demos where no graph is running.
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
) -> EpisodeMetadata:
    """One episode of ``checkpoint``'s actor (plus exploration noise) in sim, as a bag."""
    from simreal_ros.learner.trainer import make_converter
    from simreal_ros.sim.env import ArmTaskEnv

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
        policy_versions=[checkpoint.version],
    )
    recording = EpisodeRecording(bag_dir, TOPICS, meta, flush_period_s=0.05)
    recording.start()
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000_000_000_000
    success = False
    try:
        obs, _ = env.reset(seed=seed, options={"condition": condition})
        _send(recording, 3, t0 - 5_000_000, _status(meta, 0, obs, 0.0, False, False, False))
        step, done = 0, False
        while not done:
            t = t0 + step * PERIOD_NS
            state = messages.joint_state(t, names, obs["joint_position"], obs["joint_velocity"])
            _send(recording, 0, t - 2_000_000, state)
            pose = messages.pose_stamped(t, obs["object_position"], obs["object_orientation"])
            _send(recording, 1, t - 1_000_000, pose)
            normalized = torch.as_tensor(
                converter.normalized_observation(obs), dtype=torch.float32
            )
            with torch.no_grad():
                action = checkpoint.model.actor(normalized).numpy()
            action = np.clip(action + noise * rng.standard_normal(action.shape), -1.0, 1.0)
            command = converter.command_from_action(action, obs["joint_position"])
            intent = messages.policy_action(
                t, command, version=checkpoint.version, sequence=step, joint_names=names
            )
            _send(recording, 2, t, intent)
            obs, reward, terminated, truncated, info = env.step(command)
            success = success or bool(info.get("success", False))
            done = bool(terminated or truncated)
            status = _status(meta, step + 1, obs, reward, success, done, bool(truncated))
            _send(recording, 3, t + 2_000_000, status)
            step += 1
    finally:
        env.close()
    return recording.stop("success" if success else "failure", success)


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
