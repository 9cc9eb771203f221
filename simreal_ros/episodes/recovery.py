"""Turn a bag whose recorder was killed (no MCAP summary, no metadata.yaml) into a closed one.

The MCAP is read as a stream up to the last complete record; every message found is
copied into a new bag with the same connections, a metadata.yaml is written, and the
episode is marked ``recovered`` with outcome ``incomplete`` (unless the final metadata
record with the outcome had already been written). The original file is kept as
``<name>.mcap.unclosed`` until the copy is verified, then removed (``keep_original``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections import Counter
from pathlib import Path

from mcap.records import Channel, Message
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.rosbag2.metadata import parse_qos

from simreal_ros.episodes.bag_reader import ScanResult, bag_state, iter_mcap_records, mcap_file
from simreal_ros.episodes.metadata import METADATA_TOPIC, METADATA_TYPE, EpisodeMetadata
from simreal_ros.episodes.steps import ControlStepCounter
from simreal_ros.episodes.typestore import project_typestore, register_definition

POLICY_ACTION_TYPE = "simreal_ros/msg/PolicyAction"
TASK_STATUS_TYPE = "simreal_ros/msg/TaskStatus"
ACTION_TOPIC = "/policy/action"


@dataclasses.dataclass
class RecoveryReport:
    bag_dir: Path
    state_before: str
    messages: int
    message_counts: dict[str, int]
    stopped_reading_because: str
    metadata: EpisodeMetadata | None

    def summary(self) -> str:
        if self.state_before == "closed":
            return f"{self.bag_dir}: already closed, nothing to do."
        why = (
            f" (read stopped at: {self.stopped_reading_because})"
            if self.stopped_reading_because
            else ""
        )
        return (
            f"{self.bag_dir}: recovered {self.messages} messages on "
            f"{len(self.message_counts)} topics{why}; marked "
            f"{self.metadata.outcome if self.metadata else 'incomplete'}."
        )


def recover_bag(bag_dir: Path, keep_original: bool = False) -> RecoveryReport:
    """Rebuild an unclosed episode bag into a closed rosbag2 bag, in place."""
    bag_dir = Path(bag_dir)
    state = bag_state(bag_dir)
    if state == "closed":
        return RecoveryReport(bag_dir, state, 0, {}, "", None)
    if state == "corrupt":
        raise ValueError(
            f"{bag_dir} holds no readable MCAP file (bad magic or no .mcap); nothing to recover."
        )
    source = mcap_file(bag_dir)
    work = bag_dir / ".recovering"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    target_dir = work / bag_dir.name
    store = project_typestore()
    writer = Writer(target_dir, version=9, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    connections: dict[int, object] = {}
    counts: Counter = Counter()
    last_meta: EpisodeMetadata | None = None
    first_ns, last_ns = 0, 0
    scan = ScanResult({}, {}, Counter(), False, "")
    seen: dict = {"human": 0, "versions": []}
    # Control steps for the episode id the start metadata record names (the recorder writes
    # it first), as the recorder counted them.
    steps: ControlStepCounter | None = None
    try:
        for record in iter_mcap_records(source, scan):
            if not isinstance(record, Message):
                continue
            channel = scan.channels[record.channel_id]
            if record.channel_id not in connections:
                connections[record.channel_id] = _add_connection(writer, store, scan, channel)
            writer.write(connections[record.channel_id], record.log_time, record.data)
            counts[channel.topic] += 1
            first_ns = first_ns or record.log_time
            last_ns = max(last_ns, record.log_time)
            if channel.topic == METADATA_TOPIC:
                last_meta = _decode_metadata(store, record.data) or last_meta
                continue
            if steps is None:
                steps = ControlStepCounter(last_meta.episode_id if last_meta else "")
            msgtype = scan.schemas[channel.schema_id].name
            if msgtype == POLICY_ACTION_TYPE:
                _count_action(store, channel.topic, record.data, seen, steps)
            elif msgtype == TASK_STATUS_TYPE:
                _count_status(store, record.data, steps)
        meta = last_meta or EpisodeMetadata(episode_id=_safe_id(bag_dir.name))
        if not meta.complete:
            meta.outcome = "incomplete"
            meta.success = False
        meta.recovered = True
        meta.end_time_ns = meta.end_time_ns or last_ns or time.time_ns()
        meta.start_time_ns = meta.start_time_ns or first_ns
        meta.message_counts = {t: n for t, n in counts.items() if t != METADATA_TOPIC}
        # Counted from the data: the start record knew none of this yet.
        meta.steps = steps.count if steps is not None else 0
        meta.human_interventions = seen["human"]
        meta.policy_versions = list(dict.fromkeys(meta.policy_versions + seen["versions"]))
        # The record of the recovery itself, so readers of the MCAP alone see it too.
        meta_channel = next(
            (cid for cid, ch in scan.channels.items() if ch.topic == METADATA_TOPIC), None
        )
        if meta_channel is not None and meta_channel in connections:
            data = store.serialize_cdr(
                store.types[METADATA_TYPE](data=meta.to_json()), METADATA_TYPE
            )
            writer.write(connections[meta_channel], max(last_ns, meta.end_time_ns), data)
            counts[METADATA_TOPIC] += 1
        for key, value in meta.to_custom_data().items():
            writer.set_custom_data(key, value)
        writer.close()
    except BaseException:
        writer.abort()
        shutil.rmtree(work, ignore_errors=True)
        raise

    recovered_mcap = target_dir / f"{bag_dir.name}.mcap"
    total = sum(counts.values())
    _verify(target_dir, total)
    unclosed = source.with_name(source.name + ".unclosed")
    source.replace(unclosed)
    recovered_mcap.replace(bag_dir / source.name)
    _write_metadata_yaml(target_dir / "metadata.yaml", bag_dir / "metadata.yaml", source.name)
    shutil.rmtree(work, ignore_errors=True)
    _verify(bag_dir, total)
    if not keep_original:
        unclosed.unlink()
    return RecoveryReport(
        bag_dir,
        state,
        sum(meta.message_counts.values()),
        dict(meta.message_counts),
        scan.error,
        meta,
    )


def _safe_id(name: str) -> str:
    from simreal_ros.episodes.metadata import check_episode_id

    try:
        return check_episode_id(name)
    except ValueError:
        return "recovered"


def _add_connection(writer: Writer, store, scan: ScanResult, channel: Channel):
    schema = scan.schemas.get(channel.schema_id)
    if schema is None:
        raise ValueError(f"channel {channel.topic} has no schema in the MCAP; cannot recover it.")
    msgtype = schema.name
    if msgtype not in store.fielddefs:
        register_definition(store, msgtype, schema.data.decode())
    qos_text = channel.metadata.get("offered_qos_profiles", "")
    return writer.add_connection(
        channel.topic,
        msgtype,
        msgdef=schema.data.decode(),
        rihs01=store.hash_rihs01(msgtype),
        serialization_format=channel.message_encoding or "cdr",
        offered_qos_profiles=parse_qos(qos_text) if qos_text else [],
    )


def _count_action(store, topic: str, data: bytes, seen: dict, steps: ControlStepCounter) -> None:
    try:
        msg = store.deserialize_cdr(data, POLICY_ACTION_TYPE)
    except Exception:
        return
    if topic == ACTION_TOPIC:
        steps.action()
    if msg.human_intervention:
        seen["human"] += 1
    if msg.policy_version and msg.policy_version not in seen["versions"]:
        seen["versions"].append(msg.policy_version)


def _count_status(store, data: bytes, steps: ControlStepCounter) -> None:
    try:
        msg = store.deserialize_cdr(data, TASK_STATUS_TYPE)
    except Exception:
        return
    steps.status(msg.episode_id, bool(msg.done), bool(msg.truncated))


def _decode_metadata(store, data: bytes) -> EpisodeMetadata | None:
    try:
        text = store.deserialize_cdr(data, METADATA_TYPE).data
        return EpisodeMetadata.from_json(text)
    except (ValueError, TypeError, KeyError, json.JSONDecodeError):
        return None


def _write_metadata_yaml(src: Path, dst: Path, mcap_name: str) -> None:
    """Copy metadata.yaml, naming the bag's MCAP file as it is called in place."""
    text = src.read_text()
    if mcap_name != f"{src.parent.name}.mcap":
        text = text.replace(f"{src.parent.name}.mcap", mcap_name)
    tmp = dst.with_suffix(".yaml.tmp")
    tmp.write_text(text)
    tmp.replace(dst)


def _verify(bag_dir: Path, expected: int) -> None:
    with Reader(bag_dir) as reader:
        found = sum(1 for _ in reader.messages())
    if found != expected:
        raise RuntimeError(
            f"recovered bag {bag_dir} holds {found} messages, expected {expected}; "
            "the original was left in place."
        )
