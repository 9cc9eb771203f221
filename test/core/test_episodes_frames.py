"""Camera frames in episode bags: compressed on the way in, aligned to the ticks on the way out."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest
import yaml
from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore

from simreal_ros.episodes import frames as frames_module
from simreal_ros.episodes import messages
from simreal_ros.episodes.bag_writer import EpisodeRecording
from simreal_ros.episodes.dataset import (
    NoFramesError,
    load_transitions,
    read_episode,
    read_episode_metadata,
)
from simreal_ros.episodes.frames import FrameCompression
from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.episodes.synthetic import (
    CAMERA_TOPICS,
    JOINTS,
    write_camera_episode,
    write_episode,
)

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
TICKS = [T0 + i * 50 * MS for i in range(8)]
# Frame stamps (the second one exactly on tick 2); each received 40 ms after its stamp, as a
# rendering camera delivers, so aligning on receive times would pick other frames.
FRAME_STAMPS = [T0 + 30 * MS, T0 + 100 * MS, T0 + 230 * MS, T0 + 310 * MS]
LATENCY = 40 * MS
# The rule, worked by hand: per tick, the newest frame stamped at or before it, and its age.
EXPECTED_FRAME = [None, 0, 1, 1, 1, 2, 2, 3]
EXPECTED_AGE_MS = [np.nan, 20, 0, 50, 100, 20, 70, 40]


def camera_frame(k: int, height: int = 48, width: int = 64) -> np.ndarray:
    """Smooth (JPEG-friendly) RGB frames whose levels differ by 40 from one k to the next."""
    y, x = np.mgrid[0:height, 0:width]
    channels = [40 * k + x + y // 2 + 20 * c for c in range(3)]
    return np.clip(np.stack(channels, axis=-1), 0, 255).astype(np.uint8)


def write(bag_dir, compression):
    sent = [(stamp, stamp + LATENCY, camera_frame(k)) for k, stamp in enumerate(FRAME_STAMPS)]
    return write_camera_episode(bag_dir, TICKS, sent, compression)


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_frames_decode_to_the_originals_and_each_tick_gets_the_newest_frame_not_after_it(
    tmp_path, fmt
):
    rec = write(tmp_path / "cam", FrameCompression(fmt, jpeg_quality=90))
    assert rec.dropped == 0
    data = read_episode(tmp_path / "cam", JOINTS, frames=True)
    assert len(data) == 8 and data.frames.shape == (8, 48, 64, 3)
    assert data.frames.dtype == np.uint8
    np.testing.assert_allclose(data.frame_ages * 1e3, EXPECTED_AGE_MS, atol=1e-6)
    assert not data.frames[0].any()  # before the first frame: black, age NaN
    for tick, k in enumerate(EXPECTED_FRAME[1:], start=1):
        error = np.abs(data.frames[tick].astype(int) - camera_frame(k))
        if fmt == "png":
            assert error.max() == 0, tick
        else:  # JPEG at quality 90 on smooth frames; neighbours differ by 40 levels
            assert error.mean() < 1.5 and error.max() <= 8, (tick, error.mean(), error.max())
    # Without frames nothing changes; frames are only there when asked for.
    plain = read_episode(tmp_path / "cam", JOINTS)
    assert plain.frames is None and plain.frame_ages is None
    with_frames = data.to_arrays()
    for name, value in plain.to_arrays().items():
        np.testing.assert_array_equal(value, with_frames[name], err_msg=name)
    assert set(with_frames) - set(plain.to_arrays()) == {"frames", "frame_ages"}
    np.testing.assert_array_equal(plain.obs["joint_position"][:, 0], np.arange(8))


def test_the_bag_is_plain_rosbag2_with_compressed_images_and_camera_info(tmp_path):
    rec = write(tmp_path / "cam", FrameCompression("jpeg", 90))
    meta = read_episode_metadata(tmp_path / "cam")
    size = (tmp_path / "cam" / "cam.mcap").stat().st_size
    assert 0 < meta.bag_bytes <= size < meta.bag_bytes + 64 * 1024
    assert meta.message_counts["/camera/image_raw/compressed"] == 4
    assert rec.written_per_topic()["/camera/camera_info"] == 4
    # rosbags' own reader and stock Jazzy typestore, as any rosbag2 tool reads it.
    store = get_typestore(Stores.ROS2_JAZZY)
    with Reader(tmp_path / "cam") as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        assert types["/camera/image_raw/compressed"] == "sensor_msgs/msg/CompressedImage"
        assert types["/camera/camera_info"] == "sensor_msgs/msg/CameraInfo"
        images = [c for c in reader.connections if c.topic == "/camera/image_raw/compressed"]
        decoded = []
        for connection, _, raw in reader.messages(connections=images):
            msg = store.deserialize_cdr(raw, connection.msgtype)
            assert msg.format == "rgb8; jpeg compressed bgr8"
            stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
            bgr = cv2.imdecode(np.frombuffer(msg.data, np.uint8), cv2.IMREAD_COLOR)
            decoded.append((stamp, bgr[..., ::-1]))
    assert [stamp for stamp, _ in decoded] == FRAME_STAMPS
    for k, (_, rgb) in enumerate(decoded):
        assert np.abs(rgb.astype(int) - camera_frame(k)).mean() < 1.5
    info = yaml.safe_load((tmp_path / "cam" / "metadata.yaml").read_text())
    listed = {
        t["topic_metadata"]["name"]: t
        for t in info["rosbag2_bagfile_information"]["topics_with_message_count"]
    }
    camera = listed["/camera/image_raw/compressed"]
    assert camera["topic_metadata"]["type"] == "sensor_msgs/msg/CompressedImage"
    assert camera["message_count"] == 4


def test_asking_for_frames_of_an_episode_without_any_says_so(tmp_path):
    write_episode(tmp_path / "ep", steps=3)
    with pytest.raises(
        NoFramesError, match=r"no frames on /camera/image_raw/compressed.*record_images"
    ):
        read_episode(tmp_path / "ep", JOINTS, frames=True)
    with pytest.raises(NoFramesError, match="ep"):
        load_transitions(tmp_path, JOINTS, frames=True)
    assert load_transitions(tmp_path, JOINTS).frames is None


def test_a_stalled_encoder_drops_frames_never_other_topics_messages(tmp_path, monkeypatch):
    release = threading.Event()
    real = frames_module.compress_image_cdr

    def stalled(data, compression):  # the encoder stuck on its first frame
        release.wait(10.0)
        return real(data, compression)

    monkeypatch.setattr(frames_module, "compress_image_cdr", stalled)
    rec = EpisodeRecording(
        tmp_path / "stall",
        CAMERA_TOPICS,
        EpisodeMetadata("stall"),
        image_compression=FrameCompression(),
        frame_queue_size=4,
    )
    rec.start()
    frame = messages.image(T0, camera_frame(0))
    for k in range(200):
        rec.offer(0, T0 + k * MS, messages.joint_state(T0 + k * MS, JOINTS, [0.0] * 7, [0.0] * 7))
        if k % 5 == 0:
            rec.offer(2, T0 + k * MS, frame)
    release.set()
    meta = rec.stop("success", True)
    frames_written = meta.message_counts["/camera/image_raw/compressed"]
    assert meta.message_counts["/joint_states"] == 200
    assert 4 <= frames_written <= 5 and frames_written + meta.dropped == 40


def test_an_image_encoding_that_cannot_be_compressed_is_dropped_with_the_reason(tmp_path):
    rec = EpisodeRecording(
        tmp_path / "depth",
        CAMERA_TOPICS,
        EpisodeMetadata("depth"),
        image_compression=FrameCompression(),
    )
    rec.start()
    depth = messages.image(T0, np.zeros((4, 8, 2), np.uint8), encoding="16UC1")
    rec.offer(2, T0, depth)
    rec.offer(2, T0 + MS, messages.image(T0 + MS, camera_frame(1)))
    rec.flush()
    stats = rec.stats()
    meta = rec.stop("success", True)
    assert "16UC1" in stats.frame_error and "rgb8" in stats.frame_error
    assert stats.frames_encoded == 1 and meta.dropped == 1
    assert meta.message_counts["/camera/image_raw/compressed"] == 1


def test_settings_are_checked():
    with pytest.raises(ValueError, match="jpeg_quality=0"):
        FrameCompression("jpeg", 0)
    with pytest.raises(ValueError, match="webp"):
        FrameCompression("webp")
