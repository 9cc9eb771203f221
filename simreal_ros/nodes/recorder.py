"""recorder node: one rosbag2 (MCAP) bag per episode, started and stopped by service.

Raw subscriptions hand CDR bytes to ``EpisodeRecording`` (simreal_ros.episodes), which
writes them off the executor thread; camera frames (``record_images``) are compressed on
a thread of their own and written as sensor_msgs/CompressedImage (``episodes.frames``).
Services ``~/start`` (StartEpisode), ``~/stop`` (StopEpisode) and ``~/flush`` (Trigger:
returns once everything received so far is in the file). Each finished episode is
announced on /episodes/recorded.
"""

from __future__ import annotations

import importlib
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription
from std_srvs.srv import Trigger

from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
from simreal_ros.episodes.config import RecorderConfig, check_disk, free_disk_mb
from simreal_ros.episodes.metadata import (
    CONDITIONS,
    OUTCOMES,
    SOURCES,
    EpisodeMetadata,
    check_choice,
    check_episode_id,
    new_episode_id,
    normalize_failure_mode,
)
from simreal_ros.graph.processes import notify_ready
from simreal_ros.msg import EpisodeEvent
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import ERROR, OK, WARN, diagnostic_array
from simreal_ros.nodes.episode_event import episode_event
from simreal_ros.nodes.params import declare_config, declare_robot
from simreal_ros.srv import StartEpisode, StopEpisode

# rclpy passes the DDS message info (source timestamp) to two-argument callbacks since
# Iron; on Humble the recorder records from when each message is taken.
_MESSAGE_INFO = hasattr(Subscription, "CallbackType")

LARGE_MESSAGE_TYPES = {
    "sensor_msgs/msg/Image",
    "sensor_msgs/msg/CompressedImage",
    "sensor_msgs/msg/PointCloud2",
}


def _message_class(msgtype: str):
    package, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.{kind}"), name)


class RecorderNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("recorder", **kwargs)
        robot = declare_robot(self)  # the graph's arm: its joints are the bags' joint spec
        # The dynamic settings (labels, queue, flushing, disk floor) apply from the next episode.
        self.config: RecorderConfig = declare_config(
            self, RecorderConfig, apply=lambda config: setattr(self, "config", config)
        )
        self.config.data_path.mkdir(parents=True, exist_ok=True)
        names, units = list(robot.joint_names), list(robot.joint_units)
        self._joint_names = list(self.config.joint_names) or names
        self._joint_units = list(self.config.joint_units) or (
            units if not self.config.joint_names else []
        )
        self._specs = self.config.topic_specs()
        self._recording: EpisodeRecording | None = None
        self._started_ns = 0  # system time the current episode started recording
        self._topic_subs: dict[str, object] = {}
        self._sub_reliable: dict[str, bool] = {}
        self._last_event: EpisodeEvent | None = None
        self._last_bag_bytes = 0
        self._episodes_done = 0
        for index, spec in enumerate(self._specs):
            self._subscribe(index, spec)
        self._event_pub = self.create_publisher(EpisodeEvent, "/episodes/recorded", qos.STATUS)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        self.create_service(StartEpisode, "~/start", self._on_start)
        self.create_service(StopEpisode, "~/stop", self._on_stop)
        self.create_service(Trigger, "~/flush", self._on_flush)
        self.create_timer(1.0, self._on_diagnostics)
        self.create_timer(1.0, self._follow_publisher_qos)
        self.get_logger().info(
            f"recorder ready: {len(self._specs)} topics -> {self.config.data_path}"
        )

    # ---- subscriptions --------------------------------------------------------------------

    def _publisher_reliability(self, topic: str) -> bool | None:
        infos = self.get_publishers_info_by_topic(topic)
        if not infos:
            return None
        return all(i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in infos)

    def _subscribe(self, index: int, spec: TopicSpec) -> None:
        reliable = self._publisher_reliability(spec.topic)
        reliable = spec.reliable if reliable is None else reliable
        base = qos.STATUS if reliable else qos.SENSOR_DATA
        # Same policies as the named profile, but a reader queue deep enough to ride out a
        # busy executor (a full reader queue loses samples before the recorder sees them).
        large = spec.msgtype in LARGE_MESSAGE_TYPES
        profile = QoSProfile(
            history=base.history,
            depth=self.config.large_message_depth if large else self.config.subscription_depth,
            reliability=base.reliability,
            durability=base.durability,
        )
        old = self._topic_subs.pop(spec.topic, None)
        if old is not None:
            self.destroy_subscription(old)
        if _MESSAGE_INFO:
            callback = lambda data, info, i=index: self._on_message(i, data, info)  # noqa: E731
        else:
            callback = lambda data, i=index: self._on_message(i, data)  # noqa: E731
        self._topic_subs[spec.topic] = self.create_subscription(
            _message_class(spec.msgtype), spec.topic, callback, profile, raw=True
        )
        self._sub_reliable[spec.topic] = reliable
        self._specs[index] = TopicSpec(
            spec.topic,
            spec.msgtype,
            reliable=reliable,
            depth=profile.depth,
            transient_local=profile.durability == DurabilityPolicy.TRANSIENT_LOCAL,
        )

    def _wait_for_publishers(self, timeout_s: float) -> None:
        """Until every publisher the graph has on a recorded topic is matched (or timeout):
        a node that came up just before the episode (a lifecycle node creates its
        publishers when configured) is otherwise missing from its first messages.
        Matching is DDS's work, not the executor's, so waiting here blocks nothing it needs.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            late = [
                topic
                for topic, subscription in self._topic_subs.items()
                if subscription.get_publisher_count() < self.count_publishers(topic)
            ]
            if not late or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if late:
            self.get_logger().warning(
                f"episode starts before the recorder matched every publisher on {late}; their "
                "first messages may be missing (a QoS mismatch, or discovery still running)"
            )

    def _follow_publisher_qos(self) -> None:
        # A reliable subscription never matches a best-effort publisher: follow publishers
        # as they appear (only between episodes, so a bag's offered QoS stays true).
        if self._recording is not None:
            return
        for index, spec in enumerate(self._specs):
            wanted = self._publisher_reliability(spec.topic)
            if wanted is not None and wanted != self._sub_reliable[spec.topic]:
                self.get_logger().info(
                    f"{spec.topic}: publishers are {'reliable' if wanted else 'best-effort'}; "
                    "resubscribing to match"
                )
                self._subscribe(index, spec)

    def _on_message(self, index: int, data: bytes, info: dict | None = None) -> None:
        recording = self._recording
        if recording is None:
            return
        # Published before the episode started, delivered after (a deep reader queue is
        # drained after the start request): it belongs to the episode before.
        if info is not None and info["source_timestamp"] < self._started_ns:
            return
        recording.offer(index, self.get_clock().now().nanoseconds, data)

    # ---- services -------------------------------------------------------------------------

    def start_episode(
        self,
        episode_id: str = "",
        condition: str = "",
        source: str = "",
        profile: str = "",
        task: str = "",
        seed: int = 0,
        note: str = "",
    ) -> EpisodeRecording:
        current = self._recording
        if current is not None and episode_id and current.metadata.episode_id == episode_id:
            return current  # the same request again (a client resends one not answered)
        if current is not None:
            raise ValueError(
                f"episode {self._recording.metadata.episode_id} is still recording; stop it first."
            )
        source = source or self.config.source
        check_choice("source", source, SOURCES, allow_empty=False)
        check_choice("condition", condition, CONDITIONS, allow_empty=True)
        episode_id = check_episode_id(episode_id) if episode_id else new_episode_id(source)
        check_disk(self.config.data_path, self.config.min_free_disk_mb)
        for index, spec in enumerate(self._specs):
            # Only a reliable subscription facing a best-effort publisher must change now
            # (it would receive nothing); upgrades to reliable wait for the timer, since a
            # new subscription needs discovery and could miss the episode's first messages.
            if self._sub_reliable[spec.topic] and self._publisher_reliability(spec.topic) is False:
                self._subscribe(index, spec)
        self._wait_for_publishers(self.config.match_timeout_s)
        meta = EpisodeMetadata(
            episode_id=episode_id,
            source=source,
            profile=profile or self.config.profile,
            condition=condition,
            task=task,
            seed=int(seed),
            note=note,
            joint_names=list(self._joint_names),
            joint_units=list(self._joint_units),
        )
        recording = EpisodeRecording(
            self.config.data_path / episode_id,
            self._specs,
            meta,
            queue_size=self.config.queue_size,
            flush_period_s=self.config.flush_period_s,
            fsync=self.config.fsync,
            action_topic=self.config.action_topic,
            clock=lambda: self.get_clock().now().nanoseconds,
            image_compression=self.config.frame_compression(),
            frame_queue_size=self.config.frame_queue_size,
        )
        recording.start()
        self._started_ns = time.time_ns()  # the system clock, as DDS source timestamps are
        self._recording = recording
        self.get_logger().info(f"recording episode {episode_id} -> {recording.bag_dir}")
        return recording

    def stop_episode(
        self, outcome: str = "", success: bool = False, failure_mode: str = "", note: str = ""
    ) -> EpisodeEvent:
        recording = self._recording
        if recording is None:
            raise ValueError("no episode is recording; call ~/start first.")
        outcome = outcome or ("success" if success else "failure")
        check_choice("outcome", outcome, OUTCOMES, allow_empty=False)
        if outcome == "success":
            success = True
        self._recording = None
        try:
            meta = recording.stop(outcome, success, normalize_failure_mode(failure_mode), note)
        except Exception:
            self.get_logger().error(
                f"closing {recording.bag_dir} failed; the bag is left unclosed: run "
                f"`simreal episodes recover {recording.bag_dir}`"
            )
            raise
        event = self._event(meta, recording)
        if self.context.ok():  # at Ctrl-C the bag is closed, but there is no one to tell
            self._event_pub.publish(event)
        self._last_event = event
        self._last_bag_bytes = meta.bag_bytes
        self._episodes_done += 1
        level = self.get_logger().warning if meta.dropped or recording.error else None
        text = (
            f"episode {meta.episode_id}: {outcome}, {meta.messages} messages, "
            f"{meta.dropped} dropped, {meta.bag_bytes / 2**20:.1f} MiB -> {recording.bag_dir}"
        )
        (level or self.get_logger().info)(
            text + (f"; {recording.error}" if recording.error else "")
        )
        return event

    def _event(self, meta: EpisodeMetadata, recording: EpisodeRecording) -> EpisodeEvent:
        event = episode_event(meta, recording.bag_dir, self.get_clock().now().to_msg())
        if not meta.complete:
            event.outcome = "incomplete"
        event.duration = meta.duration_s
        event.messages = meta.messages
        event.dropped = meta.dropped
        event.note = meta.note
        return event

    def _on_start(self, request, response):
        try:
            recording = self.start_episode(
                request.episode_id,
                request.condition,
                request.source,
                request.profile,
                request.task,
                request.seed,
                request.note,
            )
        except (ValueError, OSError) as error:
            response.success = False
            response.message = f"not started: {error}"
            self.get_logger().error(response.message)
            return response
        response.success = True
        response.episode_id = recording.metadata.episode_id
        response.bag_path = str(recording.bag_dir)
        response.message = f"recording {response.episode_id}"
        return response

    def _on_stop(self, request, response):
        try:
            response.episode = self.stop_episode(
                request.outcome, request.success, request.failure_mode, request.note
            )
        except (ValueError, OSError, TimeoutError) as error:
            response.success = False
            response.message = f"not stopped: {error}"
            self.get_logger().error(response.message)
            return response
        response.success = True
        response.message = (
            f"episode {response.episode.episode_id} recorded to {response.episode.bag_path} "
            f"({self._last_bag_bytes / 2**20:.1f} MiB)"
        )
        return response

    def _on_flush(self, request, response):
        recording = self._recording
        if recording is None:
            response.success, response.message = False, "no episode is recording."
            return response
        try:
            flushed = recording.flush(timeout=5.0)
        except (TimeoutError, OSError) as error:
            response.success, response.message = False, f"flush failed: {error}"
            return response
        response.success = not recording.error
        counts = ", ".join(f"{t} {n}" for t, n in recording.written_per_topic().items())
        response.message = f"flushed {flushed} messages to {recording.mcap_path} ({counts})"
        if recording.error:
            response.message += f"; {recording.error}"
        return response

    # ---- diagnostics ----------------------------------------------------------------------

    def _on_diagnostics(self) -> None:
        free = free_disk_mb(self.config.data_path)
        values = {
            "recording": "false",
            "disk_free_mb": f"{free:.0f}",
            "min_free_disk_mb": f"{self.config.min_free_disk_mb:.0f}",
            "episodes_recorded": str(self._episodes_done),
            "data_dir": str(self.config.data_path),
        }
        level, message = OK, "idle"
        recording = self._recording
        if recording is not None:
            stats = recording.stats()
            values.update(
                recording="true",
                episode_id=recording.metadata.episode_id,
                queue_depth=str(stats.queue_depth),
                queue_capacity=str(stats.queue_capacity),
                write_rate_msgs=f"{stats.write_rate_msgs:.1f}",
                write_rate_mb=f"{stats.write_rate_bytes / 2**20:.2f}",
                written=str(stats.written),
                flushed=str(stats.flushed),
                dropped=str(stats.dropped),
                last_flush_age_s=f"{stats.last_flush_age_s:.3f}",
                bag_mb=f"{stats.bag_bytes / 2**20:.2f}",
            )
            if self.config.record_images:
                values.update(
                    frames_encoded=str(stats.frames_encoded),
                    frames_dropped=str(stats.frames_dropped),
                    encode_ms=f"{stats.encode_ms:.2f}",
                )
            message = f"recording {recording.metadata.episode_id}"
            if stats.error:
                level, message = ERROR, stats.error
            elif stats.frame_error:
                level, message = WARN, stats.frame_error
            elif stats.dropped:
                level = WARN
                message = f"{stats.dropped} messages dropped (writer queue full)"
                if stats.frames_dropped:
                    message += (
                        f"; {stats.frames_dropped} of them camera frames the encoder fell "
                        "behind on (lower the camera rate or use jpeg)"
                    )
        elif self._last_event is not None:
            values["dropped_last_episode"] = str(self._last_event.dropped)
            values["bag_mb_last_episode"] = f"{self._last_bag_bytes / 2**20:.2f}"
        if free < self.config.min_free_disk_mb:
            level = ERROR
            message = f"disk nearly full: {free:.0f} MiB free; new episodes are refused"
        self._diag_pub.publish(
            diagnostic_array(self, "recorder: bag writer", "recorder", level, message, values)
        )

    def shutdown(self) -> None:
        """Close a running episode as aborted (Ctrl-C); nothing received is lost."""
        if self._recording is not None:
            try:
                self.stop_episode("aborted", False, "", "recorder shut down")
            except Exception as error:
                self.get_logger().error(f"closing the episode at shutdown failed: {error}")


def main(args=None) -> None:
    rclpy.init(args=args)
    node = None
    try:
        node = RecorderNode()
        notify_ready()
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    except ValueError as error:
        print(f"recorder: configuration error: {error}", flush=True)
        raise SystemExit(2) from None
    finally:
        if node is not None:
            node.shutdown()
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
