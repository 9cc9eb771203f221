"""Write one episode to its own rosbag2 bag (MCAP), off the caller's thread.

``EpisodeRecording`` is what a recorder node drives: ``offer()`` takes serialized CDR bytes
from a subscription callback and never blocks (a bounded queue; a full queue counts a drop,
never silently); a writer thread appends to the MCAP and closes the open chunk and flushes
the file every ``flush_period_s``. After a SIGKILL, everything flushed is in the file and
``simreal episodes recover`` turns it into a closed bag. ``stop()`` writes the outcome into
the bag and metadata.yaml.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import struct
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from io import BytesIO
from pathlib import Path
from types import MappingProxyType

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability
from rosbags.interfaces import QosTime as _T
from rosbags.rosbag2 import CompressionMode, StoragePlugin, Writer
from rosbags.rosbag2 import storage_mcap as _mcap

from simreal_ros.episodes.frames import (
    COMPRESSED_IMAGE_TYPE,
    IMAGE_TYPE,
    FrameCompression,
    FrameEncoder,
    compressed_topic,
)
from simreal_ros.episodes.metadata import METADATA_TOPIC, METADATA_TYPE, EpisodeMetadata
from simreal_ros.episodes.steps import ControlStepCounter
from simreal_ros.episodes.typestore import definition_and_hash, full_type_name, project_typestore

POLICY_ACTION_TYPE = "simreal_ros/msg/PolicyAction"
TASK_STATUS_TYPE = "simreal_ros/msg/TaskStatus"


@dataclasses.dataclass(frozen=True)
class TopicSpec:
    """One recorded topic and the QoS it was subscribed with (stored as offered QoS)."""

    topic: str
    msgtype: str
    reliable: bool = True
    depth: int = 10
    transient_local: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "msgtype", full_type_name(self.msgtype))
        if not self.topic.startswith("/"):
            raise ValueError(f"topic {self.topic!r} must be an absolute name starting with '/'.")

    def rosbags_qos(self) -> Qos:
        zero = _T(0, 0)
        return Qos(
            QosHistory.KEEP_LAST,
            self.depth,
            QosReliability.RELIABLE if self.reliable else QosReliability.BEST_EFFORT,
            QosDurability.TRANSIENT_LOCAL if self.transient_local else QosDurability.VOLATILE,
            zero,
            zero,
            QosLiveliness.AUTOMATIC,
            zero,
            False,
        )


_U64 = struct.Struct("<Q")
# Message record prefix: opcode, record length, channel id, sequence, log and publish time.
_MESSAGE_HEAD = struct.Struct("<BQHIQQ")
# Chunk record up to its records: opcode, length, start, end, uncompressed size, crc,
# compression name length (0: uncompressed), records length.
_CHUNK_HEAD = struct.Struct("<BQQQQIIQ")


class StreamingMcapWriter(_mcap.McapWriter):
    """rosbags' MCAP storage, but each message goes straight to the file.

    rosbags builds a chunk in memory and copies it several times on the way to the file
    (about a quarter of the raw write speed for camera images). Here a chunk's records are
    written to the file as they come, behind a chunk header whose sizes are patched when the
    chunk is closed (on every flush). Until then the header's sizes are zero, so a stream
    reader of a killed recording sees an empty chunk followed by the messages themselves:
    those are recoverable too, up to a message cut short by the kill. Schemas and channels
    are written outside chunks, before any message that uses them. Uncompressed only.
    """

    def __init__(self, path: Path, compression: CompressionMode) -> None:
        if compression != CompressionMode.NONE:
            raise ValueError("the streaming MCAP writer writes uncompressed chunks only.")
        super().__init__(path, compression)
        self._chunk_at = -1  # file offset of the open chunk's header, -1 when none
        self._records_at = 0

    def add_msgtype(self, connection) -> None:
        self.close_chunk()
        fmt = _mcap.MessageDefinitionFormat.MSG
        schema = _mcap.Schema(
            len(self.schemas) + 1,
            connection.msgtype,
            "ros2msg" if connection.msgdef.format == fmt else "ros2idl",
            connection.msgdef.data,
        )
        self.schemas.append(schema)
        _mcap.write_schema(self.bio, schema)

    def add_connection(self, connection, offered_qos_profiles: str) -> None:
        self.close_chunk()
        metadata = BytesIO()
        _mcap.write_string(metadata, "offered_qos_profiles")
        _mcap.write_string(metadata, offered_qos_profiles)
        channel = _mcap.Channel(
            connection.id,
            connection.msgtype,
            connection.topic,
            connection.ext.serialization_format,
            metadata.getvalue(),
        )
        self.channels.append(channel)
        self.channel_stats[connection.id] = 0
        _mcap.write_channel(self.bio, channel, self.schemas)

    def write(self, connection, timestamp: int, data) -> None:
        bio = self.bio
        if self._chunk_at < 0:
            self._chunk_at = bio.tell()
            bio.write(_CHUNK_HEAD.pack(0x06, 0, 0, 0, 0, 0, 0, 0))
            self._records_at = bio.tell()
        chunk = self.chunk
        chunk.message_start_time = min(timestamp, chunk.message_start_time)
        chunk.message_end_time = max(timestamp, chunk.message_end_time)
        chunk.msgs[connection.id].append((timestamp, bio.tell() - self._records_at))
        self.message_start_time = min(timestamp, self.message_start_time)
        self.message_end_time = max(timestamp, self.message_end_time)
        self.channel_stats[connection.id] += 1
        bio.write(_MESSAGE_HEAD.pack(0x05, 22 + len(data), connection.id, 0, timestamp, timestamp))
        bio.write(data)

    def close_chunk(self) -> None:
        if self._chunk_at < 0:
            return
        bio, chunk = self.bio, self.chunk
        chunk_start, chunk_end = self._chunk_at, bio.tell()
        size = chunk_end - self._records_at
        bio.seek(chunk_start)
        bio.write(
            _CHUNK_HEAD.pack(
                0x06,
                _CHUNK_HEAD.size - 9 + size,
                chunk.message_start_time,
                chunk.message_end_time,
                size,
                0,
                0,
                size,
            )
        )
        bio.seek(chunk_end)
        self._chunk_at = -1
        offsets: list[tuple[int, int]] = []
        for cid, msgs in chunk.msgs.items():
            offsets.append((cid, bio.tell()))
            rec = BytesIO()
            _mcap.write_uint16(rec, cid)
            _mcap.write_uint32(rec, len(msgs) * 16)
            for ts, offset in msgs:
                rec.write(_U64.pack(ts))
                rec.write(_U64.pack(offset))
            _mcap.write_record(bio, 0x07, rec)
        rec = BytesIO()
        _mcap.write_uint64(rec, chunk.message_start_time)
        _mcap.write_uint64(rec, chunk.message_end_time)
        _mcap.write_uint64(rec, chunk_start)
        _mcap.write_uint64(rec, chunk_end - chunk_start)
        _mcap.write_uint32(rec, len(offsets) * 10)
        for cid, offset in offsets:
            _mcap.write_uint16(rec, cid)
            _mcap.write_uint64(rec, offset)
        _mcap.write_uint64(rec, bio.tell() - chunk_end)
        _mcap.write_string(rec, "")
        _mcap.write_uint64(rec, size)
        _mcap.write_uint64(rec, size)
        self.chunks.append(rec)
        self.chunk = _mcap.PendingChunk(2**63 - 1, 0, BytesIO(), defaultdict(list))

    def close(self, version: int, metadata: str) -> None:
        self.close_chunk()
        super().close(version, metadata)


class _StreamingWriter(Writer):
    STORAGE_PLUGINS = MappingProxyType(
        {**Writer.STORAGE_PLUGINS, StoragePlugin.MCAP: StreamingMcapWriter}
    )


def _string_cdr(text: str) -> bytes:
    return project_typestore().serialize_cdr(
        project_typestore().types[METADATA_TYPE](data=text), METADATA_TYPE
    )


class EpisodeBagWriter:
    """Synchronous writer of one episode bag; not thread-safe (one writer thread uses it)."""

    def __init__(self, bag_dir: Path, topics: Sequence[TopicSpec], metadata: EpisodeMetadata):
        self.bag_dir = Path(bag_dir)
        self.topics = list(topics)
        self.metadata = metadata
        self._writer: Writer | None = None
        self._connections: list = []
        self._meta_connection = None
        self._pending = False

    @property
    def mcap_path(self) -> Path:
        return self.bag_dir / f"{self.bag_dir.name}.mcap"

    def open(self) -> None:
        if self.bag_dir.exists():
            raise FileExistsError(
                f"bag directory {self.bag_dir} exists already; episode ids must be unique."
            )
        self.bag_dir.parent.mkdir(parents=True, exist_ok=True)
        writer = _StreamingWriter(self.bag_dir, version=9, storage_plugin=StoragePlugin.MCAP)
        writer.open()
        store = project_typestore()
        for spec in self.topics:
            msgdef, digest = definition_and_hash(spec.msgtype, store)
            self._connections.append(
                writer.add_connection(
                    spec.topic,
                    spec.msgtype,
                    msgdef=msgdef,
                    rihs01=digest,
                    offered_qos_profiles=[spec.rosbags_qos()],
                )
            )
        msgdef, digest = definition_and_hash(METADATA_TYPE, store)
        latched = TopicSpec(METADATA_TOPIC, METADATA_TYPE, depth=1, transient_local=True)
        self._meta_connection = writer.add_connection(
            METADATA_TOPIC,
            METADATA_TYPE,
            msgdef=msgdef,
            rihs01=digest,
            offered_qos_profiles=[latched.rosbags_qos()],
        )
        self._writer = writer
        # What is known at start goes in first, so an unclosed bag still says what it is.
        self.write_metadata(self.metadata.start_time_ns or time.time_ns())
        self.flush()

    def write(self, index: int, timestamp_ns: int, data: bytes) -> None:
        assert self._writer is not None, "open() the bag before writing"
        self._writer.write(self._connections[index], timestamp_ns, data)
        self._pending = True

    def write_metadata(self, timestamp_ns: int) -> None:
        assert self._writer is not None
        self._writer.write(
            self._meta_connection, timestamp_ns, _string_cdr(self.metadata.to_json())
        )
        self._pending = True

    def flush(self, fsync: bool = False) -> None:
        """Close the open MCAP chunk and hand it to the OS: it survives a process kill.

        ``fsync`` also survives a power cut, at the cost of a disk sync.
        """
        storage = self._writer.storage if self._writer else None
        if storage is None:
            return
        storage.close_chunk()
        self._pending = False
        storage.bio.flush()
        if fsync:
            os.fsync(storage.bio.fileno())

    def close(self) -> None:
        """Write the final metadata record, the MCAP summary and metadata.yaml."""
        if self._writer is None:
            return
        self.write_metadata(self.metadata.end_time_ns or time.time_ns())
        for key, value in self.metadata.to_custom_data().items():
            self._writer.set_custom_data(key, value)
        writer, self._writer = self._writer, None
        writer.close()

    def abort(self) -> None:
        """Leave the bag unclosed (recoverable) after a write error."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.abort()


@dataclasses.dataclass
class RecordingStats:
    queue_depth: int
    queue_capacity: int
    received: int
    written: int
    flushed: int
    dropped: int
    bytes_written: int
    write_rate_msgs: float
    write_rate_bytes: float
    last_flush_age_s: float
    error: str
    bag_bytes: int = 0  # the MCAP file's size so far (after the last flush)
    frames_encoded: int = 0
    frames_dropped: int = 0  # also in ``dropped``
    encode_ms: float = 0.0  # mean compression time per frame
    frame_error: str = ""


class _FlushRequest:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.flushed = 0


_STOP = object()


class EpisodeRecording:
    """One episode being recorded: bounded queue in, writer thread, bag out.

    With ``image_compression``, every sensor_msgs/Image topic is offered raw and written as
    sensor_msgs/CompressedImage on ``<topic>/compressed`` (``episodes.frames``): a
    ``FrameEncoder`` thread compresses frames between ``offer()`` and the writer queue,
    with a queue of ``frame_queue_size`` frames of its own.
    """

    def __init__(
        self,
        bag_dir: Path,
        topics: Sequence[TopicSpec],
        metadata: EpisodeMetadata,
        queue_size: int = 4096,
        flush_period_s: float = 0.1,
        fsync: bool = False,
        action_topic: str = "/policy/action",
        clock: Callable[[], int] = time.time_ns,
        image_compression: FrameCompression | None = None,
        frame_queue_size: int = 30,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size={queue_size} must be at least 1.")
        if not 0.001 <= flush_period_s <= 60.0:
            raise ValueError(f"flush_period_s={flush_period_s} must be within 0.001 .. 60 s.")
        topics = list(topics)
        # Indices of the raw image topics this recording compresses; each keeps its index,
        # renamed in the bag to its compressed topic.
        self._frame_index = set()
        if image_compression is not None:
            self._frame_index = {i for i, t in enumerate(topics) if t.msgtype == IMAGE_TYPE}
            topics = [
                dataclasses.replace(
                    t, topic=compressed_topic(t.topic), msgtype=COMPRESSED_IMAGE_TYPE
                )
                if i in self._frame_index
                else t
                for i, t in enumerate(topics)
            ]
        self.topics = topics  # as written in the bag
        self.metadata = metadata
        self.flush_period_s = flush_period_s
        self.fsync = fsync
        self._clock = clock
        self._bag = EpisodeBagWriter(bag_dir, self.topics, metadata)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._thread: threading.Thread | None = None
        self._counts = [0] * len(self.topics)
        self._action_index = {
            i for i, t in enumerate(self.topics) if t.msgtype == POLICY_ACTION_TYPE
        }
        self._steps_index = {i for i, t in enumerate(self.topics) if t.topic == action_topic}
        self._status_index = {
            i for i, t in enumerate(self.topics) if t.msgtype == TASK_STATUS_TYPE
        }
        self._steps = ControlStepCounter(metadata.episode_id)
        # Counters: `received`/`dropped` belong to the producer, the rest to the writer.
        self.received = 0
        self.queue_drops = 0
        self.write_drops = 0
        self.written = 0
        self.flushed = 0
        self.bytes_written = 0
        self.error = ""
        self._last_flush = time.monotonic()
        self._rate_mark = (time.monotonic(), 0, 0)
        self._rate = (0.0, 0.0)
        self._frames: FrameEncoder | None = None
        if self._frame_index:
            self._frames = FrameEncoder(
                image_compression,
                self._queue_encoded,
                self._queue.put,
                frame_queue_size,
                name=f"frames-{metadata.episode_id}",
            )

    @property
    def bag_dir(self) -> Path:
        return self._bag.bag_dir

    @property
    def mcap_path(self) -> Path:
        return self._bag.mcap_path

    @property
    def dropped(self) -> int:
        """Messages received but not in the bag: queue full, a write that failed, or a
        frame the encoder dropped."""
        frames = self._frames.dropped if self._frames is not None else 0
        return self.queue_drops + self.write_drops + frames

    def start(self) -> None:
        """Create the bag (errors raise here, in the caller) and start the writer thread."""
        if not self.metadata.start_time_ns:
            self.metadata.start_time_ns = self._clock()
        self._bag.open()
        self._thread = threading.Thread(
            target=self._run, name=f"bag-{self.metadata.episode_id}", daemon=True
        )
        self._thread.start()
        if self._frames is not None:
            self._frames.start()

    def offer(self, index: int, timestamp_ns: int, data: bytes) -> bool:
        """Queue one serialized message; never blocks. False (and a counted drop) when full."""
        self.received += 1
        if index in self._frame_index:
            return self._frames.offer(index, timestamp_ns, data)
        try:
            self._queue.put_nowait((index, timestamp_ns, data))
        except queue.Full:
            self.queue_drops += 1
            return False
        return True

    def _queue_encoded(self, index: int, timestamp_ns: int, data: bytes) -> bool:
        """The frame encoder's output: into the writer queue, or dropped when it is full
        (the encoder counts it), so frames never take other topics' places."""
        try:
            self._queue.put_nowait((index, timestamp_ns, data))
        except queue.Full:
            return False
        return True

    def flush(self, timeout: float = 5.0) -> int:
        """Wait until everything queued before this call is flushed; returns messages flushed.

        Raises TimeoutError when the writer does not catch up within ``timeout``.
        """
        request = _FlushRequest()
        if self._frames is not None:  # behind the frames still being encoded
            self._frames.pass_through(request, timeout)
        else:
            self._queue.put(request, timeout=timeout)
        if not request.done.wait(timeout):
            raise TimeoutError(f"the bag writer did not flush within {timeout} s.")
        return request.flushed

    def written_per_topic(self) -> dict[str, int]:
        """Messages written so far, per topic (after ``flush``: flushed)."""
        return {t.topic: n for t, n in zip(self.topics, self._counts, strict=True)}

    def stats(self) -> RecordingStats:
        now = time.monotonic()
        frames = self._frames
        mark_time, mark_msgs, mark_bytes = self._rate_mark
        if now - mark_time >= 0.5:
            dt = now - mark_time
            self._rate = (
                (self.written - mark_msgs) / dt,
                (self.bytes_written - mark_bytes) / dt,
            )
            self._rate_mark = (now, self.written, self.bytes_written)
        return RecordingStats(
            queue_depth=self._queue.qsize(),
            queue_capacity=self._queue.maxsize,
            received=self.received,
            written=self.written,
            flushed=self.flushed,
            dropped=self.dropped,
            bytes_written=self.bytes_written,
            write_rate_msgs=self._rate[0],
            write_rate_bytes=self._rate[1],
            last_flush_age_s=now - self._last_flush,
            error=self.error,
            bag_bytes=self.bag_bytes(),
            frames_encoded=frames.encoded if frames else 0,
            frames_dropped=frames.dropped if frames else 0,
            encode_ms=frames.mean_encode_ms if frames else 0.0,
            frame_error=frames.error if frames else "",
        )

    def bag_bytes(self) -> int:
        """The MCAP file's size on disk now (0 when it cannot be read)."""
        try:
            return self.mcap_path.stat().st_size
        except OSError:
            return 0

    def stop(
        self,
        outcome: str,
        success: bool,
        failure_mode: str = "",
        note: str = "",
        timeout: float = 30.0,
    ) -> EpisodeMetadata:
        """Drain the queue, write the outcome into the bag, close it; returns the metadata."""
        meta = self.metadata
        meta.end_time_ns = self._clock()
        if self._frames is not None:
            self._frames.stop(timeout)
        if self._thread is not None:
            self._queue.put(_STOP, timeout=timeout)
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the bag writer did not finish within {timeout} s.")
        meta.outcome = outcome
        meta.success = bool(success)
        meta.failure_mode = failure_mode
        if note:
            meta.note = f"{meta.note}\n{note}".strip() if meta.note else note
        meta.message_counts = self.written_per_topic()
        meta.dropped = self.dropped
        meta.complete = not self.error
        # Everything recorded is flushed; the closing summary adds a few KiB after this.
        meta.bag_bytes = self.bag_bytes()
        if self.error:
            # The file is as the writer left it; recovery turns it into a closed bag.
            self._bag.abort()
        else:
            self._bag.close()
        return meta

    # ---- writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        next_flush = time.monotonic() + self.flush_period_s
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, next_flush - time.monotonic()))
            except queue.Empty:
                item = None
            if item is _STOP:
                self._flush()
                return
            if isinstance(item, _FlushRequest):
                self._flush()
                item.flushed = self.flushed
                item.done.set()
            elif item is not None:
                self._write(*item)
            if time.monotonic() >= next_flush:
                self._flush()
                next_flush = time.monotonic() + self.flush_period_s

    def _write(self, index: int, timestamp_ns: int, data: bytes) -> None:
        if self.error:
            self.write_drops += 1
            return
        try:
            self._bag.write(index, timestamp_ns, data)
        except Exception as error:  # disk full, I/O error: count, report, keep draining
            self.error = f"writing {self.mcap_path} failed: {error}"
            self.write_drops += 1
            return
        self._counts[index] += 1
        self.written += 1
        self.bytes_written += len(data)
        if index in self._action_index:
            self._inspect_action(index, data)
        elif index in self._status_index:
            self._inspect_status(data)

    def _inspect_action(self, index: int, data: bytes) -> None:
        try:
            msg = project_typestore().deserialize_cdr(bytes(data), POLICY_ACTION_TYPE)
        except Exception:
            return  # the bytes are recorded as they came; the dataset reader reports them
        meta = self.metadata
        if msg.policy_version and msg.policy_version not in meta.policy_versions:
            meta.policy_versions.append(msg.policy_version)
        if index in self._steps_index:
            self._steps.action()
            meta.steps = self._steps.count
        if msg.human_intervention:
            meta.human_interventions += 1

    def _inspect_status(self, data: bytes) -> None:
        """A task status may end the episode: later actions are no control steps."""
        try:
            msg = project_typestore().deserialize_cdr(bytes(data), TASK_STATUS_TYPE)
        except Exception:
            return  # recorded as it came, like an unreadable action
        self._steps.status(msg.episode_id, bool(msg.done), bool(msg.truncated))
        self.metadata.steps = self._steps.count

    def _flush(self) -> None:
        if self.error:
            return
        try:
            self._bag.flush(self.fsync)
        except Exception as error:
            self.error = f"flushing {self.mcap_path} failed: {error}"
            return
        self.flushed = self.written
        self._last_flush = time.monotonic()
