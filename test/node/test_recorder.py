"""recorder node in one process: services, raw recording, repeated cycles, announcements."""

from __future__ import annotations

import numpy as np
import pytest
import rclpy
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from mcap.reader import make_reader
from rclpy.parameter import Parameter
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import JointState
from simreal_ros.msg import EpisodeEvent, PolicyAction, TaskStatus
from simreal_ros.srv import StartEpisode, StopEpisode

from simreal_ros.episodes.dataset import read_episode
from simreal_ros.nodes import qos
from simreal_ros.nodes.recorder import RecorderNode

JOINTS = [f"j{i}" for i in range(7)]


def make_recorder(rclpy_context, executor, tmp_path, **overrides):
    params = {"data_dir": str(tmp_path), "joint_names": JOINTS, "min_free_disk_mb": 0.0}
    params.update(overrides)
    node = RecorderNode(
        context=rclpy_context,
        parameter_overrides=[Parameter(k, value=v) for k, v in params.items()],
    )
    executor.add_node(node)
    return node


def call(executor, node, srv_type, name, **fields):
    client = node.create_client(srv_type, name)
    assert spin_until(executor, client.service_is_ready, 10.0), f"{name} not available"
    future = client.call_async(srv_type.Request(**fields))
    assert spin_until(executor, future.done, 20.0), f"{name} did not answer"
    node.destroy_client(client)
    return future.result()


@pytest.fixture
def graph(rclpy_context, executor, tmp_path):
    recorder = make_recorder(rclpy_context, executor, tmp_path)
    peer = rclpy.create_node("peer", context=rclpy_context)
    executor.add_node(peer)
    pubs = {
        "js": peer.create_publisher(JointState, "/joint_states", qos.STATE),
        "act": peer.create_publisher(PolicyAction, "/policy/action", qos.COMMAND),
        "task": peer.create_publisher(TaskStatus, "/task/status", qos.STATUS),
    }
    for pub in pubs.values():
        assert wait_for_subscribers(executor, pub)
    events: list[EpisodeEvent] = []
    peer.create_subscription(EpisodeEvent, "/episodes/recorded", events.append, qos.STATUS)
    return recorder, peer, pubs, events


def publish_episode(executor, pubs, steps, version="v7"):
    for step in range(steps):
        js = JointState(name=JOINTS, position=[float(step)] * 7, velocity=[0.0] * 7)
        js.header.stamp.sec = step + 1
        pubs["js"].publish(js)
        executor.spin_once(timeout_sec=0.001)
        action = PolicyAction(policy_version=version, sequence=step, values=[step + 0.5] * 7)
        action.header.stamp = js.header.stamp  # the stamp of the observation it acted on
        pubs["act"].publish(action)
        executor.spin_once(timeout_sec=0.001)
        task = TaskStatus(step=step + 1, reward=-1.0, done=step == steps - 1, success=True)
        pubs["task"].publish(task)
        executor.spin_once(timeout_sec=0.001)


def test_start_record_stop_gives_a_labelled_bag_with_every_message(graph, executor, tmp_path):
    recorder, peer, pubs, events = graph
    started = call(
        executor, peer, StartEpisode, "/recorder/start", condition="shifted", task="push"
    )
    assert started.success, started.message
    publish_episode(executor, pubs, 20)
    # Reliable publishers: every message arrives; wait until the writer has them all.
    assert spin_until(executor, lambda: recorder._recording.received >= 60, 10.0)
    stopped = call(
        executor,
        peer,
        StopEpisode,
        "/recorder/stop",
        outcome="failure",
        failure_mode="Mode collapse",
        note="froze near the cube",
    )
    assert stopped.success, stopped.message
    event = stopped.episode
    assert event.episode_id == started.episode_id and event.outcome == "failure"
    assert event.failure_mode == "mode_collapse" and event.condition == "shifted"
    assert list(event.policy_versions) == ["v7"] and event.steps == 20
    assert event.messages == 60 and event.dropped == 0
    assert spin_until(executor, lambda: len(events) == 1, 5.0)
    assert events[0].bag_path == started.bag_path
    with open(f"{started.bag_path}/{started.episode_id}.mcap", "rb") as f:
        counts: dict[str, int] = {}
        for _, channel, _ in make_reader(f).iter_messages():
            counts[channel.topic] = counts.get(channel.topic, 0) + 1
    assert counts["/joint_states"] == 20 and counts["/policy/action"] == 20
    data = read_episode(started.bag_path, JOINTS)
    assert len(data) == 20 and data.dones[-1]
    np.testing.assert_allclose(data.actions[:, 0], np.arange(20) + 0.5)


def test_repeated_cycles_in_one_process_each_give_a_complete_bag(graph, executor):
    recorder, _peer, pubs, events = graph
    for cycle in range(3):
        recorder.start_episode(episode_id=f"cycle{cycle}")
        publish_episode(executor, pubs, 5 + cycle)
        n = 3 * (5 + cycle)
        assert spin_until(executor, lambda n=n: recorder._recording.received >= n, 10.0)
        event = recorder.stop_episode("success", True)
        assert event.messages == n, (cycle, event.messages)
    assert spin_until(executor, lambda: len(events) == 3, 5.0)
    assert [e.episode_id for e in events] == ["cycle0", "cycle1", "cycle2"]


def test_bad_requests_are_refused_with_a_reason(graph, executor):
    _recorder, peer, _, _ = graph
    bad = call(executor, peer, StartEpisode, "/recorder/start", episode_id="../x")
    assert not bad.success and "directory name" in bad.message
    bad = call(executor, peer, StartEpisode, "/recorder/start", source="robot")
    assert not bad.success and "source" in bad.message
    stop = call(executor, peer, StopEpisode, "/recorder/stop", outcome="success")
    assert not stop.success and "no episode is recording" in stop.message
    first = call(executor, peer, StartEpisode, "/recorder/start", episode_id="a")
    assert first.success
    # The same start again (a client resending a request whose answer was lost) is
    # answered with the same episode; another episode's start is refused.
    resent = call(executor, peer, StartEpisode, "/recorder/start", episode_id="a")
    assert resent.success and resent.bag_path == first.bag_path
    again = call(executor, peer, StartEpisode, "/recorder/start", episode_id="b")
    assert not again.success and "still recording" in again.message
    stop = call(executor, peer, StopEpisode, "/recorder/stop", outcome="won")
    assert not stop.success and "outcome" in stop.message
    assert call(executor, peer, StopEpisode, "/recorder/stop", outcome="aborted").success


def test_refuses_to_start_when_the_disk_is_nearly_full(rclpy_context, executor, tmp_path):
    make_recorder(rclpy_context, executor, tmp_path, min_free_disk_mb=1e9)
    peer = rclpy.create_node("peer2", context=rclpy_context)
    executor.add_node(peer)
    diagnostics: list[DiagnosticArray] = []
    peer.create_subscription(DiagnosticArray, "/diagnostics", diagnostics.append, qos.STATUS)
    answer = call(executor, peer, StartEpisode, "/recorder/start")
    assert (
        not answer.success
        and "MiB free" in answer.message
        and "min_free_disk_mb" in answer.message
    )
    assert not any(tmp_path.iterdir())
    assert spin_until(executor, lambda: bool(diagnostics), 5.0)
    status = diagnostics[-1].status[0]
    keys = {kv.key for kv in status.values}
    assert "disk nearly full" in status.message and "disk_free_mb" in keys


def test_images_are_recorded_compressed_best_effort_and_diagnostics_report_the_writer(
    rclpy_context, executor, tmp_path
):
    from sensor_msgs.msg import CameraInfo, Image

    from simreal_ros.episodes.dataset import read_episode_metadata
    from simreal_ros.episodes.frames import decode_frame

    recorder = make_recorder(
        rclpy_context, executor, tmp_path, record_images=True, image_format="png"
    )
    peer = rclpy.create_node("camera", context=rclpy_context)
    executor.add_node(peer)
    pub = peer.create_publisher(Image, "/camera/image_raw", qos.SENSOR_DATA)
    info_pub = peer.create_publisher(CameraInfo, "/camera/camera_info", qos.SENSOR_DATA)
    diagnostics: list[DiagnosticArray] = []
    peer.create_subscription(DiagnosticArray, "/diagnostics", diagnostics.append, qos.STATUS)
    assert wait_for_subscribers(executor, pub) and wait_for_subscribers(executor, info_pub)
    recorder.start_episode(episode_id="cam")
    pixels = (np.arange(48 * 64 * 3) % 251).astype(np.uint8).reshape(48, 64, 3)
    frame = Image(height=48, width=64, encoding="rgb8", step=192, data=pixels.tobytes())
    for _ in range(10):
        pub.publish(frame)
        info_pub.publish(CameraInfo(width=64, height=48))
        spin_until(executor, lambda: False, 0.02)
    assert spin_until(executor, lambda: recorder._recording.received >= 20, 10.0)
    diagnostics.clear()
    assert spin_until(
        executor, lambda: any(d.status[0].name.startswith("recorder") for d in diagnostics), 5.0
    )
    values = {kv.key: kv.value for kv in diagnostics[-1].status[0].values}
    assert values["recording"] == "true" and values["episode_id"] == "cam"
    for key in ("queue_depth", "write_rate_msgs", "dropped", "disk_free_mb", "flushed"):
        assert key in values, key
    assert values["frames_dropped"] == "0" and float(values["bag_mb"]) > 0
    event = recorder.stop_episode("success", True)
    assert event.messages == 20 and event.dropped == 0
    with open(tmp_path / "cam" / "cam.mcap", "rb") as f:
        by_topic: dict[str, list] = {}
        for schema, channel, message in make_reader(f).iter_messages():
            by_topic.setdefault(channel.topic, []).append((schema.name, message.data))
    assert "/camera/image_raw" not in by_topic  # compressed only
    images = by_topic["/camera/image_raw/compressed"]
    assert len(images) == 10 and len(by_topic["/camera/camera_info"]) == 10
    assert images[0][0] == "sensor_msgs/msg/CompressedImage"
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import CompressedImage

    compressed = deserialize_message(images[-1][1], CompressedImage)
    assert compressed.format == "rgb8; png compressed bgr8"
    np.testing.assert_array_equal(decode_frame(compressed.format, compressed.data), pixels)
    assert read_episode_metadata(tmp_path / "cam").bag_bytes > len(compressed.data) * 10
    info = yaml.safe_load((tmp_path / "cam" / "metadata.yaml").read_text())
    topics = info["rosbag2_bagfile_information"]["topics_with_message_count"]
    camera = next(
        t for t in topics if t["topic_metadata"]["name"] == "/camera/image_raw/compressed"
    )
    assert camera["topic_metadata"]["offered_qos_profiles"][0]["reliability"] == "best_effort"


def test_a_message_published_before_the_start_but_taken_after_it_is_not_recorded(graph, executor):
    """A deep reader queue is drained after the start request: what was published before
    the episode began (the last ticks of the previous one) stays out of its bag."""
    recorder, _, pubs, _ = graph
    before = JointState(name=JOINTS, position=[-9.0] * 7, velocity=[0.0] * 7)
    before.header.stamp.sec = 1
    pubs["js"].publish(before)  # queued: nothing spins before the start
    recorder.start_episode(episode_id="ep-order", condition="train", task="push")
    after = JointState(name=JOINTS, position=[1.0] * 7, velocity=[0.0] * 7)
    after.header.stamp.sec = 2
    pubs["js"].publish(after)
    assert spin_until(executor, lambda: recorder._recording.stats().received >= 1, 5.0)
    spin_until(executor, lambda: False, 0.2)  # whatever else was queued is taken now
    event = recorder.stop_episode(outcome="success", success=True)
    from simreal_ros.episodes.dataset import iter_bag_messages

    positions = [
        list(m.position) for _, _, m in iter_bag_messages(event.bag_path, ["/joint_states"])
    ]
    assert positions == [[1.0] * 7]
