"""Episode bags: round trip checked with the `mcap` library, metadata, recovery."""

from __future__ import annotations

import shutil

import pytest
import yaml
from mcap.reader import make_reader
from rosbags.rosbag2 import Reader

from simreal_ros.episodes.bag_reader import bag_state
from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
from simreal_ros.episodes.metadata import (
    METADATA_TOPIC,
    EpisodeMetadata,
    check_episode_id,
    normalize_failure_mode,
)
from simreal_ros.episodes.recovery import recover_bag
from simreal_ros.episodes.synthetic import TOPICS, write_episode
from simreal_ros.episodes.typestore import definition_and_hash, project_typestore


def test_round_trip_exact_counts_and_bytes_read_with_mcap_library(tmp_path):
    bag = tmp_path / "ep"
    rec, sent = write_episode(bag, steps=12, interventions_at=(3,), takeover_at=(5,))
    # Independent of the writer: the mcap library's indexed reader on the closed file.
    with open(bag / "ep.mcap", "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        got: dict[str, list[bytes]] = {}
        for schema, channel, message in reader.iter_messages():
            got.setdefault(channel.topic, []).append(bytes(message.data))
            assert schema.encoding == "ros2msg"
            assert channel.message_encoding == "cdr"
    for topic, payloads in sent.items():
        if payloads:
            assert got[topic] == payloads, topic
    assert len(got[METADATA_TOPIC]) == 2  # at start and at stop
    assert summary.statistics.message_count == sum(map(len, sent.values())) + 2
    # Custom types carry their full definitions, dependencies included.
    schemas = {s.name: s.data.decode() for s in summary.schemas.values()}
    action_def = schemas["simreal_ros/msg/PolicyAction"]
    assert "bool human_intervention" in action_def
    assert "MSG: std_msgs/Header" in action_def
    assert "MSG: simreal_ros/SafetyIntervention" in schemas["simreal_ros/msg/SafetyStatus"]
    assert rec.dropped == 0


def test_metadata_travels_in_yaml_and_mcap_and_type_hashes_are_recorded(tmp_path):
    bag = tmp_path / "ep"
    write_episode(bag, steps=10, episode_id="ep", outcome="failure")
    info = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    meta = EpisodeMetadata.from_custom_data(info["custom_data"])
    assert meta.episode_id == "ep" and meta.outcome == "failure" and meta.complete
    assert meta.policy_versions == ["v1", "v2"]
    assert meta.steps == 10
    assert meta.message_counts["/joint_states"] == 50
    topics = {t["topic_metadata"]["name"]: t for t in info["topics_with_message_count"]}
    action = topics["/policy/action"]["topic_metadata"]
    assert action["type_description_hash"] == definition_and_hash(action["type"])[1]
    assert (
        topics["/joint_states"]["topic_metadata"]["offered_qos_profiles"][0]["reliability"]
        == "best_effort"
    )
    # rosbags reads it back as a bag, with the same counts.
    with Reader(bag) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
    assert counts["/policy/action"] == 10 and counts["/task/status"] == 10


def test_repeated_start_stop_cycles_each_give_a_complete_bag(tmp_path):
    for i in range(3):
        write_episode(tmp_path / f"ep{i}", steps=4 + i, episode_id=f"ep{i}")
    for i in range(3):
        assert bag_state(tmp_path / f"ep{i}") == "closed"
        with Reader(tmp_path / f"ep{i}") as reader:
            counts = {c.topic: c.msgcount for c in reader.connections}
        assert counts["/policy/action"] == 4 + i


def test_full_queue_counts_drops_and_never_blocks(tmp_path):
    meta = EpisodeMetadata(episode_id="q")
    rec = EpisodeRecording(tmp_path / "q", TOPICS[:1], meta, queue_size=3)
    # Not started: nothing drains the queue, so the 4th offer must be a counted drop.
    rec._bag.open()
    results = [rec.offer(0, i, b"\x00\x01\x00\x00") for i in range(5)]
    assert results == [True, True, True, False, False]
    assert rec.dropped == 2 and rec.received == 5
    rec._bag.close()


def test_unclosed_bag_is_recovered_with_every_flushed_message(tmp_path):
    bag = tmp_path / "live"
    rec, sent = write_episode(bag, steps=8, episode_id="live", close=False)
    # What a SIGKILL leaves: the file as flushed, no summary, no metadata.yaml, plus a
    # half-written record at the end.
    killed = tmp_path / "killed"
    killed.mkdir()
    shutil.copy(bag / "live.mcap", killed / "killed.mcap")
    with open(killed / "killed.mcap", "ab") as f:
        f.write(b"\x06" + (4096).to_bytes(8, "little") + b"partial")
    rec.stop("aborted", False)
    assert bag_state(killed) == "unclosed"
    report = recover_bag(killed)
    assert bag_state(killed) == "closed"
    assert report.metadata.outcome == "incomplete" and report.metadata.recovered
    assert "unpack" in report.stopped_reading_because or report.stopped_reading_because
    with open(killed / "killed.mcap", "rb") as f:
        got: dict[str, list[bytes]] = {}
        for _, channel, message in make_reader(f).iter_messages():
            got.setdefault(channel.topic, []).append(bytes(message.data))
    for topic, payloads in sent.items():
        assert got.get(topic, []) == payloads, topic
    assert not (killed / "killed.mcap.unclosed").exists()
    assert recover_bag(killed).state_before == "closed"  # idempotent


def test_recover_refuses_a_file_that_is_not_mcap(tmp_path):
    bag = tmp_path / "junk"
    bag.mkdir()
    (bag / "junk.mcap").write_bytes(b"not an mcap file at all")
    with pytest.raises(ValueError, match="no readable MCAP"):
        recover_bag(bag)


def test_metadata_validation_and_failure_mode_labels():
    assert normalize_failure_mode("Over-specialization") == "over_specialization"
    assert normalize_failure_mode("mode collapse") == "mode_collapse"
    assert normalize_failure_mode("gripper slipped") == "gripper slipped"
    with pytest.raises(ValueError, match="directory name"):
        check_episode_id("../etc")
    with pytest.raises(ValueError, match="source"):
        EpisodeMetadata(episode_id="x", source="robot")
    meta = EpisodeMetadata(episode_id="x", policy_versions=["a"], message_counts={"/a": 3})
    assert EpisodeMetadata.from_custom_data(meta.to_custom_data()) == meta
    assert EpisodeMetadata.from_json(meta.to_json()) == meta


def test_topic_spec_and_typestore_refuse_bad_input():
    with pytest.raises(ValueError, match="absolute"):
        TopicSpec("joint_states", "sensor_msgs/msg/JointState")
    with pytest.raises(ValueError, match="unknown"):
        definition_and_hash("nope_msgs/msg/Nothing")
    assert "simreal_ros/msg/TaskStatus" in project_typestore().fielddefs


def test_messages_in_a_chunk_still_open_at_the_kill_are_recovered(tmp_path):
    """Killed between flushes: the open chunk's header has zero sizes, its messages follow."""
    rec, sent = write_episode(tmp_path / "live", steps=6, episode_id="live", close=False)
    store = project_typestore()
    extra = [
        store.serialize_cdr(
            store.types["std_msgs/msg/String"](data=f"late {i}"), "std_msgs/msg/String"
        )
        for i in range(3)
    ]
    bag = rec._bag
    # Written to the OS, chunk not closed (what the file holds between two flushes).
    bag.write_metadata(1)
    for data in extra:
        bag._writer.write(bag._meta_connection, 2, data)
    bag._writer.storage.bio.flush()
    killed = tmp_path / "killed"
    killed.mkdir()
    shutil.copy(tmp_path / "live" / "live.mcap", killed / "killed.mcap")
    report = recover_bag(killed)
    with open(killed / "killed.mcap", "rb") as f:
        got: dict[str, list[bytes]] = {}
        for _, channel, message in make_reader(f).iter_messages():
            got.setdefault(channel.topic, []).append(bytes(message.data))
    for topic, payloads in sent.items():
        assert got.get(topic, []) == payloads, topic
    assert all(bytes(d) in got[METADATA_TOPIC] for d in extra)
    assert report.messages == sum(map(len, sent.values()))
    rec.stop("aborted", False)
