"""Record sim rollouts of a checkpoint as real episode bags (rosbag2, MCAP).

The bags carry the topics the graph records (/joint_states, /object/pose, /policy/action,
/forward_position_controller/commands, /task/status), written through the episodes
package's writer, so the learner and system identification read them exactly like bags
from the recorder. State messages are stamped with the sim time of the measurement. Used by
tests, the benchmark and `simreal learn --record-sim` demos where no graph is running.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from simreal_ros.episodes import messages
from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.robot.description_record import RobotDescription

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
    robot: RobotDescription,
) -> EpisodeMetadata:
    """One episode of ``checkpoint``'s actor (plus exploration noise) in sim on ``robot`` (a
    ``RobotDescription``), as a bag.

    ``state_rate_hz``: rate of /joint_states and /object/pose (the control rate, or a
    multiple of it, as the sim bridge and a joint_state_broadcaster publish faster).
    ``actor`` / ``version``: another actor on the checkpoint's spec (e.g. base + adapter).
    """
    from simreal_ros.learner.data import ActionRuleActor, policy_actions
    from simreal_ros.policy.spec import SpecConverter
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.sim.rollout import rollout

    actor = actor if actor is not None else checkpoint.model.actor
    version = version or checkpoint.version
    converter = converter or SpecConverter.for_robot(checkpoint.spec, robot)
    names = list(checkpoint.spec.joint_names)
    env = ArmTaskEnv(
        task=task,
        profile=profile,
        episode_seconds=episode_seconds,
        state_rate_hz=state_rate_hz,
        robot=robot,
    )
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
    t0 = 1_700_000_000_000_000_000
    success = False

    def write(step) -> None:
        nonlocal success
        t = t0 + step.index * PERIOD_NS
        if step.index == 0:
            start = step.observation
            _send(recording, 3, t0 - 5_000_000, _status(meta, 0, start, 0.0, False, False, False))
            _send_state(recording, t0, names, start)
        intent = messages.policy_action(
            t, step.command, version=version, sequence=step.index, joint_names=names
        )
        _send(recording, 2, t, intent)
        _send(recording, 4, t, messages.float64_multi_array(step.command))
        obs = step.next_observation
        samples = step.info.get("measurements") or ()
        for sample in samples:
            _send_state(
                recording, t0 + round(sample.time * 1e9), names, dataclasses.asdict(sample)
            )
        if not samples:
            _send_state(recording, t + PERIOD_NS, names, obs)
        success = success or bool(step.info.get("success", False))
        done = step.terminated or step.truncated
        status = _status(meta, step.index + 1, obs, step.reward, success, done, step.truncated)
        _send(recording, 3, t + 2_000_000, status)

    try:
        policy = ActionRuleActor(
            converter, policy_actions(actor, noise), np.random.default_rng(seed)
        )
        rollout(env, policy, seed, condition, write)
    finally:
        env.close()
    return recording.stop("success" if success else "failure", success)


def _send_state(recording, stamp: int, names, state) -> None:
    """/joint_states and /object/pose of one measurement (an observation or a
    ``Measurement``'s fields)."""
    message = messages.joint_state(stamp, names, state["joint_position"], state["joint_velocity"])
    _send(recording, 0, stamp - 2_000_000, message)  # received before the tick's action
    pose = messages.pose_stamped(stamp, state["object_position"], state["object_orientation"])
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
