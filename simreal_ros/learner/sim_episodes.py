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

from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.episodes.typestore import project_typestore

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
    store = project_typestore()
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
        _send(recording, 3, t0 - 5_000_000, _status(store, meta, 0, obs, 0.0, False, False, False))
        step, done = 0, False
        while not done:
            t = t0 + step * PERIOD_NS
            _send(recording, 0, t - 2_000_000, _joint_state(store, t, names, obs))
            _send(recording, 1, t - 1_000_000, _pose(store, t, obs))
            normalized = torch.as_tensor(
                converter.normalized_observation(obs), dtype=torch.float32
            )
            with torch.no_grad():
                action = checkpoint.model.actor(normalized).numpy()
            action = np.clip(action + noise * rng.standard_normal(action.shape), -1.0, 1.0)
            command = converter.command_from_action(action, obs["joint_position"])
            _send(recording, 2, t, _action(store, t, names, command, checkpoint.version, step))
            obs, reward, terminated, truncated, info = env.step(command)
            success = success or bool(info.get("success", False))
            done = bool(terminated or truncated)
            status = _status(store, meta, step + 1, obs, reward, success, done, bool(truncated))
            _send(recording, 3, t + 2_000_000, status)
            step += 1
    finally:
        env.close()
    return recording.stop("success" if success else "failure", success)


def _send(recording: EpisodeRecording, index: int, t: int, data: bytes) -> None:
    if not recording.offer(index, t, data):
        raise RuntimeError("the episode writer queue is full; record fewer steps at a time.")


def _header(store, t_ns: int, frame: str = "base"):
    T = store.types["builtin_interfaces/msg/Time"]
    return store.types["std_msgs/msg/Header"](
        stamp=T(sec=t_ns // 10**9, nanosec=t_ns % 10**9), frame_id=frame
    )


def _joint_state(store, t, names, obs) -> bytes:
    msg = store.types["sensor_msgs/msg/JointState"](
        header=_header(store, t),
        name=list(names),
        position=np.asarray(obs["joint_position"], float),
        velocity=np.asarray(obs["joint_velocity"], float),
        effort=np.zeros(0),
    )
    return store.serialize_cdr(msg, "sensor_msgs/msg/JointState")


def _pose(store, t, obs) -> bytes:
    P = store.types["geometry_msgs/msg/Point"]
    Q = store.types["geometry_msgs/msg/Quaternion"]
    p = np.asarray(obs["object_position"], float)
    w, x, y, z = np.asarray(obs["object_orientation"], float)
    msg = store.types["geometry_msgs/msg/PoseStamped"](
        header=_header(store, t),
        pose=store.types["geometry_msgs/msg/Pose"](
            position=P(x=p[0], y=p[1], z=p[2]), orientation=Q(x=x, y=y, z=z, w=w)
        ),
    )
    return store.serialize_cdr(msg, "geometry_msgs/msg/PoseStamped")


def _action(store, t, names, command, version, step) -> bytes:
    msg = store.types["simreal_ros/msg/PolicyAction"](
        header=_header(store, t),
        policy_version=version,
        sequence=step,
        joint_names=list(names),
        values=np.asarray(command, float),
        human_intervention=False,
    )
    return store.serialize_cdr(msg, "simreal_ros/msg/PolicyAction")


def _status(store, meta, step, obs, reward, success, done, truncated) -> bytes:
    g = np.asarray(obs["goal_position"], float)
    msg = store.types["simreal_ros/msg/TaskStatus"](
        header=_header(store, 0),
        episode_id=meta.episode_id,
        task=meta.task,
        condition=meta.condition,
        seed=int(meta.seed),
        step=int(step),
        goal=store.types["geometry_msgs/msg/Point"](x=g[0], y=g[1], z=g[2]),
        reward=float(reward),
        success=bool(success),
        done=bool(done),
        truncated=bool(truncated),
    )
    return store.serialize_cdr(msg, "simreal_ros/msg/TaskStatus")
