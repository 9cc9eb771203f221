"""Synthetic episode bags written through the real bag writer (tests, benchmarks, demos).

The messages are what the graph publishes (JointState at 100 Hz, PolicyAction, TaskStatus,
SafetyStatus, object pose, takeovers at a 20 Hz tick), so readers see real rosbag2 files.
"""

from __future__ import annotations

import numpy as np

from simreal_ros.episodes import messages
from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
from simreal_ros.episodes.frames import FrameCompression
from simreal_ros.episodes.metadata import EpisodeMetadata

JOINTS = [f"joint{i}" for i in range(7)]
TOPICS = [
    TopicSpec("/joint_states", "sensor_msgs/msg/JointState", reliable=False),
    TopicSpec("/policy/action", "simreal_ros/msg/PolicyAction"),
    TopicSpec("/task/status", "simreal_ros/msg/TaskStatus"),
    TopicSpec("/safety/status", "simreal_ros/msg/SafetyStatus"),
    TopicSpec("/object/pose", "geometry_msgs/msg/PoseStamped"),
    TopicSpec("/operator/takeover", "simreal_ros/msg/PolicyAction"),
]
INDEX = {spec.topic: i for i, spec in enumerate(TOPICS)}
CAMERA_TOPICS = [
    TopicSpec("/joint_states", "sensor_msgs/msg/JointState", reliable=False),
    TopicSpec("/policy/action", "simreal_ros/msg/PolicyAction"),
    TopicSpec("/camera/image_raw", "sensor_msgs/msg/Image", reliable=False),
    TopicSpec("/camera/camera_info", "sensor_msgs/msg/CameraInfo", reliable=False),
]


def joint_state(t_ns: int, position, names=JOINTS) -> bytes:
    position = np.asarray(position, float)
    return messages.joint_state(t_ns, names, position, position * 0.1)


def policy_action(t_ns, values, version="v1", seq=0, human=False, names=()) -> bytes:
    return messages.policy_action(
        t_ns, values, version=version, sequence=seq, joint_names=names, human=human
    )


def task_status(
    t_ns, step, reward, done=False, success=False, goal=(0.5, 0.1, 0.0), episode_id="ep"
) -> bytes:
    return messages.task_status(
        t_ns,
        episode_id=episode_id,
        task="push",
        condition="train",
        seed=1,
        step=step,
        goal=goal,
        reward=reward,
        success=success,
        done=done,
    )


def safety_status(t_ns, n_interventions, excess=0.5) -> bytes:
    velocity_clamp = {
        "limit": "velocity",
        "joint": "joint0",
        "requested": 2.0,
        "allowed": 1.5,
        "excess": excess,
    }
    return messages.safety_status(
        t_ns,
        state=1 if n_interventions else 0,
        interventions=[velocity_clamp] * n_interventions,
        limited_joints=["joint0"] * n_interventions,
        policy_version="v1",
    )


def object_pose(t_ns, xyz) -> bytes:
    return messages.pose_stamped(t_ns, xyz)


def write_episode(
    bag_dir,
    steps=10,
    episode_id="ep",
    source="sim",
    condition="train",
    done_at=None,
    outcome="success",
    takeover_at=(),
    interventions_at=(),
    close=True,
    stale_done=False,
):
    """A push episode at 20 Hz with 5 joint states per tick; returns (recording, sent).

    ``sent`` maps each topic to the serialized messages offered, in order. With
    ``close=False`` the bag is flushed but left open (what a killed recorder leaves behind).
    """
    meta = EpisodeMetadata(
        episode_id=episode_id,
        source=source,
        condition=condition,
        joint_names=list(JOINTS),
        joint_units=["rad"] * len(JOINTS),
    )
    rec = EpisodeRecording(bag_dir, TOPICS, meta, flush_period_s=0.05)
    rec.start()
    sent: dict[str, list[bytes]] = {t.topic: [] for t in TOPICS}
    t0 = 1_700_000_000_000_000_000
    period = 50_000_000

    def send(topic, t, data):
        sent[topic].append(data)
        if not rec.offer(INDEX[topic], t, data):
            raise RuntimeError("synthetic episode: the writer queue was full")

    for step in range(steps):
        t = t0 + step * period
        for k in range(5):
            send("/joint_states", t + k * 10_000_000 - 40_000_000, joint_state(t, [step] * 7))
        send("/object/pose", t - 1_000, object_pose(t, (0.4 + step * 0.01, 0.0, 0.02)))
        if step in takeover_at:
            send("/operator/takeover", t - 500, policy_action(t, [-1.0] * 7, "", human=True))
        send("/policy/action", t, policy_action(t, [step + 0.5] * 7, f"v{1 + step // 5}", step))
        if step in interventions_at:
            send("/safety/status", t + 1_000, safety_status(t, 2))
        done = done_at is not None and step == done_at
        if step == 0 and stale_done:  # the previous episode's last status, delivered late
            send("/task/status", t + 1_500, task_status(t, 99, 0.0, True, True, episode_id="old"))
        status = task_status(t, step + 1, -float(step), done, done, episode_id=episode_id)
        send("/task/status", t + 2_000, status)
    if close:
        rec.stop(outcome, outcome == "success")
    else:
        rec.flush()
    return rec, sent


def write_camera_episode(
    bag_dir,
    ticks,
    frames,
    image_compression: FrameCompression | None,
    episode_id: str = "cam",
):
    """A camera episode: a joint state and an action stamped at each of ``ticks`` (ns,
    received at their stamps; positions = tick index) and the camera's ``frames`` as
    (stamp, receive time, RGB uint8 array) with a CameraInfo each. Messages are offered in
    receive-time order; returns the stopped recording."""
    meta = EpisodeMetadata(
        episode_id=episode_id, joint_names=list(JOINTS), joint_units=["rad"] * len(JOINTS)
    )
    rec = EpisodeRecording(
        bag_dir, CAMERA_TOPICS, meta, flush_period_s=0.05, image_compression=image_compression
    )
    offers = []
    for step, t in enumerate(ticks):
        offers.append((t, 0, joint_state(t, [step] * 7)))
        offers.append((t, 1, policy_action(t, [step + 0.5] * 7, seq=step)))
    for stamp, received, pixels in frames:
        height, width = pixels.shape[:2]
        offers.append((received, 2, messages.image(stamp, pixels)))
        info = messages.camera_info(stamp, width, height, 100.0, 100.0, width / 2, height / 2)
        offers.append((received, 3, info))
    rec.start()
    for received, index, data in sorted(offers, key=lambda offer: offer[:2]):
        if not rec.offer(index, received, data):
            raise RuntimeError("synthetic camera episode: a queue was full")
    rec.stop("success", True)
    return rec
