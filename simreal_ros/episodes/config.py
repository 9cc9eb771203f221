"""Recorder configuration (declared once; the recorder node turns it into ROS parameters)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from simreal_ros.config_schema import setting, validate
from simreal_ros.episodes.bag_writer import TopicSpec
from simreal_ros.episodes.frames import (
    CAMERA_INFO_TYPE,
    FORMATS,
    IMAGE_TYPE,
    FrameCompression,
    camera_info_topic,
)
from simreal_ros.episodes.metadata import SOURCES
from simreal_ros.episodes.typestore import full_type_name

# Types of the graph's topics (DESIGN.md); other topics need "topic=package/msg/Type".
KNOWN_TOPIC_TYPES = {
    "/joint_states": "sensor_msgs/msg/JointState",
    "/policy/action": "simreal_ros/msg/PolicyAction",
    "/operator/takeover": "simreal_ros/msg/PolicyAction",
    "/safety/status": "simreal_ros/msg/SafetyStatus",
    "/forward_position_controller/commands": "std_msgs/msg/Float64MultiArray",
    "/object/pose": "geometry_msgs/msg/PoseStamped",
    "/task/status": "simreal_ros/msg/TaskStatus",
    "/camera/image_raw": IMAGE_TYPE,
    "/camera/camera_info": CAMERA_INFO_TYPE,
    "/learner/policy_update": "simreal_ros/msg/PolicyUpdate",
}

DEFAULT_TOPICS = [
    "/joint_states",
    "/policy/action",
    "/safety/status",
    "/forward_position_controller/commands",
    "/object/pose",
    "/task/status",
    "/operator/takeover",
]


@dataclasses.dataclass
class RecorderConfig:
    data_dir: str = setting(
        "~/.simreal/episodes", "Directory that holds one bag directory per episode"
    )
    topics: list = setting(
        DEFAULT_TOPICS,
        "Topics to record; a topic outside the graph's own needs its type: "
        "'/topic=package/msg/Type'",
    )
    record_images: bool = setting(
        False, "Also record image_topic (as image_format says) and its camera_info"
    )
    image_topic: str = setting(
        "/camera/image_raw",
        "Camera topic (sensor_msgs/Image) recorded when record_images; its CameraInfo is "
        "the camera_info topic beside it",
    )
    image_format: str = setting(
        "jpeg",
        "How camera frames go into bags: jpeg or png as sensor_msgs/CompressedImage on "
        "<image_topic>/compressed (image_transport's compressed convention), or raw",
        choices=(*FORMATS, "raw"),
        dynamic=True,
    )
    jpeg_quality: int = setting(
        90, "JPEG quality of recorded frames (higher: larger, closer)", low=1, high=100,
        dynamic=True,
    )  # fmt: skip
    frame_queue_size: int = setting(
        30,
        "Camera frames waiting for compression before new ones are dropped (and counted); "
        "other topics never wait behind them",
        low=1,
        high=1000,
        dynamic=True,
    )
    best_effort_topics: list = setting(
        ["/joint_states", "/camera/image_raw", "/camera/camera_info"],
        "Topics subscribed best-effort (sensor data) until a publisher is seen; once "
        "publishers exist, each subscription follows their reliability",
    )
    subscription_depth: int = setting(
        1000, "Reader queue depth of each recorded topic (samples)", low=1, high=100000
    )
    large_message_depth: int = setting(
        30, "Reader queue depth of image and point-cloud topics (samples)", low=1, high=10000
    )
    action_topic: str = setting("/policy/action", "Policy action topic (steps, versions)")
    source: str = setting("sim", "Default source label of episodes", choices=SOURCES, dynamic=True)
    profile: str = setting("", "Default dynamics profile label (sim bridge profile)", dynamic=True)
    queue_size: int = setting(
        8192,
        "Messages the writer queue holds before it drops (and counts)",
        low=16,
        high=10**6,
        dynamic=True,
    )
    flush_period_s: float = setting(
        0.1,
        "Close the MCAP chunk and flush the file this often; bounds what a kill can lose",
        low=0.005,
        high=10.0,
        unit="s",
        dynamic=True,
    )
    fsync: bool = setting(
        False, "fsync on every flush (survives power loss, costs I/O)", dynamic=True
    )
    min_free_disk_mb: float = setting(
        1024.0,
        "Refuse to start an episode below this free disk space",
        low=0.0,
        unit="MiB",
        dynamic=True,
    )
    match_timeout_s: float = setting(
        2.0,
        "At an episode's start, wait this long for the recorder to match the publishers the "
        "graph already has on its topics (a late match loses the episode's first messages)",
        low=0.0,
        high=60.0,
        unit="s",
        dynamic=True,
    )
    joint_names: list = setting(
        [], "Joint names in controller order stored with each episode (default: robot model)"
    )
    joint_units: list = setting([], "Units of those joints (default: rad, gripper m)")

    def __post_init__(self) -> None:
        validate(self)
        self.topic_specs()  # refuse unknown topic types now, not at the first start

    def topic_specs(self) -> list[TopicSpec]:
        """Topics with their types; QoS reliability here is the pre-discovery default."""
        entries = list(self.topics)
        if self.record_images:
            listed = {str(e).partition("=")[0].strip() for e in entries}
            info = camera_info_topic(self.image_topic)
            if self.image_topic not in listed:
                entries.append(f"{self.image_topic}={IMAGE_TYPE}")
            if info not in listed:
                entries.append(f"{info}={CAMERA_INFO_TYPE}")
        specs, seen = [], set()
        for entry in entries:
            topic, _, msgtype = str(entry).partition("=")
            topic = topic.strip()
            msgtype = msgtype.strip() or KNOWN_TOPIC_TYPES.get(topic, "")
            if not msgtype:
                raise ValueError(
                    f"recorder topic {topic!r} has no known type; write it as "
                    f"'{topic}=package/msg/Type'. Known topics: {', '.join(KNOWN_TOPIC_TYPES)}."
                )
            if topic in seen:
                raise ValueError(f"recorder topic {topic!r} is listed twice.")
            seen.add(topic)
            reliable = topic not in self.best_effort_topics
            specs.append(TopicSpec(topic, full_type_name(msgtype), reliable=reliable))
        return specs

    def frame_compression(self) -> FrameCompression | None:
        """How recorded Image topics are compressed; None records them raw."""
        if self.image_format == "raw":
            return None
        return FrameCompression(self.image_format, self.jpeg_quality)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()


def free_disk_mb(path: Path) -> float:
    """Free space of the file system that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).expanduser().resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free / 2**20


def check_disk(path: Path, min_free_mb: float) -> None:
    free = free_disk_mb(path)
    if free < min_free_mb:
        raise OSError(
            f"only {free:.0f} MiB free on the disk of {path} (minimum {min_free_mb:.0f} MiB); "
            "free space, point data_dir elsewhere or lower min_free_disk_mb."
        )
