#!/usr/bin/env python3
"""Recorder benchmark: 500 Hz JointState + two 640x480 rgb8 image streams at 30 Hz.

Two measurements in one run, on the same bytes:

1. sustained: the recorder's writer pipeline (bounded queue -> writer thread -> MCAP with a
   chunk flush every 100 ms) fed at the real rates for --seconds; reports drops (target 0),
   the deepest the queue got and the achieved write rate. With --dds the messages go
   through DDS to a recorder node in its own process instead (the whole path).
2. throughput: the same message sequence written as fast as possible through the bag
   writer (chunk flush every 100 ms of data) against a raw sequential write of the same
   payload bytes to a plain file, flushed at the same points. Prints the ratio (target >= 0.7).

    PYTHONPATH=. .venv/bin/python bench/recorder.py --seconds 10 [--dds]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from simreal_ros.episodes import messages
from simreal_ros.episodes.bag_writer import EpisodeBagWriter, EpisodeRecording, TopicSpec
from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.episodes.typestore import project_typestore

JOINT_HZ, IMAGE_HZ = 500.0, 30.0
WIDTH, HEIGHT = 640, 480
TOPICS = [
    TopicSpec("/joint_states", "sensor_msgs/msg/JointState", reliable=False),
    TopicSpec("/camera/image_raw", "sensor_msgs/msg/Image", reliable=False),
    TopicSpec("/camera2/image_raw", "sensor_msgs/msg/Image", reliable=False),
]


def joint_state_bytes(t_ns: int) -> bytes:
    names = [f"joint{i}" for i in range(7)]
    position, velocity, effort = np.random.rand(7), np.random.rand(7), np.random.rand(7)
    return bytes(messages.joint_state(t_ns, names, position, velocity, effort, "camera"))


def image_bytes(store, t_ns: int, seed: int) -> bytes:
    data = np.random.default_rng(seed).integers(0, 255, WIDTH * HEIGHT * 3, dtype=np.uint8)
    msg = store.types["sensor_msgs/msg/Image"](
        header=messages.header(t_ns, "camera"),
        height=HEIGHT,
        width=WIDTH,
        encoding="rgb8",
        is_bigendian=0,
        step=WIDTH * 3,
        data=data,
    )
    return bytes(store.serialize_cdr(msg, "sensor_msgs/msg/Image"))


def schedule(seconds: float) -> list[tuple[float, int]]:
    """(time offset s, topic index) of every message, in time order."""
    events = [(k / JOINT_HZ, 0) for k in range(int(seconds * JOINT_HZ))]
    for index in (1, 2):
        phase = 0.5 / IMAGE_HZ * (index - 1)
        events += [(phase + k / IMAGE_HZ, index) for k in range(int(seconds * IMAGE_HZ))]
    return sorted(events)


def feed_at_real_rate(events, items: dict[int, list], send) -> float:
    """``send(index, item)`` at each event's time offset, cycling through ``items[index]``;
    returns the seconds the feeding took."""
    counters = [0, 0, 0]
    start = time.monotonic()
    for offset, index in events:
        delay = start + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        item = items[index][counters[index] % len(items[index])]
        counters[index] += 1
        send(index, item)
    return time.monotonic() - start


def sustained_core(work: Path, seconds: float, payloads: dict[int, list[bytes]]) -> dict:
    """Feed EpisodeRecording at the real rates from a producer thread."""
    rec = EpisodeRecording(work / "sustained", TOPICS, EpisodeMetadata("sustained"))
    rec.start()
    events = schedule(seconds)
    max_depth = 0

    def offer(index: int, data: bytes) -> None:
        nonlocal max_depth
        rec.offer(index, time.time_ns(), data)
        max_depth = max(max_depth, rec._queue.qsize())

    fed = feed_at_real_rate(events, payloads, offer)
    meta = rec.stop("success", True)
    return {
        "messages": len(events),
        "written": sum(meta.message_counts.values()),
        "dropped": meta.dropped,
        "max_queue_depth": max_depth,
        "queue_capacity": rec._queue.maxsize,
        "seconds": fed,
        "bytes": rec.bytes_written,
    }


def sustained_dds(
    work: Path, seconds: float, payloads: dict[int, list[bytes]], transport: str = ""
) -> dict:
    """Publish over DDS to a recorder node in its own process; count what the bag holds."""
    import rclpy
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image, JointState
    from simreal_ros.srv import StartEpisode, StopEpisode
    from std_srvs.srv import Trigger  # noqa: F401 - the recorder's flush service type

    from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv
    from simreal_ros.nodes import qos

    env = graph_environment(domain_id=int(os.environ.get("ROS_DOMAIN_ID", "77")))
    if transport:
        env["FASTDDS_BUILTIN_TRANSPORTS"] = transport
    os.environ.update(env)
    topics = "[/joint_states,/camera/image_raw,/camera2/image_raw=sensor_msgs/msg/Image]"
    best_effort = "[/camera/image_raw,/camera2/image_raw]"
    recorder = NodeProcess(
        "recorder",
        python_module_argv(
            "simreal_ros.nodes.recorder",
            ["-p", f"data_dir:={work / 'dds'}", "-p", "min_free_disk_mb:=0.0",
             "-p", f"topics:={topics}", "-p", f"best_effort_topics:={best_effort}",
             "-p", "image_format:=raw"],  # the raw write path (compression: recorder_frames.py)
        ),
        env,
    )  # fmt: skip
    rclpy.init()
    node = rclpy.create_node("bench_publisher")
    try:
        if not recorder.wait_for_output("recorder ready", 30.0):
            raise RuntimeError(recorder.output())
        msgs = {
            0: [deserialize_message(p, JointState) for p in payloads[0]],
            1: [deserialize_message(p, Image) for p in payloads[1]],
            2: [deserialize_message(p, Image) for p in payloads[2]],
        }
        pubs = {
            0: node.create_publisher(JointState, "/joint_states", qos.STATE),
            1: node.create_publisher(Image, "/camera/image_raw", qos.SENSOR_DATA),
            2: node.create_publisher(Image, "/camera2/image_raw", qos.SENSOR_DATA),
        }
        deadline = time.monotonic() + 20
        while any(p.get_subscription_count() < 1 for p in pubs.values()):
            if time.monotonic() > deadline:
                raise RuntimeError("the recorder did not subscribe")
            rclpy.spin_once(node, timeout_sec=0.05)

        def call(srv_type, name, **fields):
            client = node.create_client(srv_type, name)
            client.wait_for_service(timeout_sec=10)
            future = client.call_async(srv_type.Request(**fields))
            rclpy.spin_until_future_complete(node, future, timeout_sec=60)
            return future.result()

        time.sleep(1.5)  # let the recorder's 1 Hz QoS check settle before recording
        started = call(StartEpisode, "/recorder/start", episode_id="dds")
        if not started.success:
            raise RuntimeError(started.message)
        events = schedule(seconds)
        fed = feed_at_real_rate(events, msgs, lambda index, msg: pubs[index].publish(msg))
        time.sleep(1.0)  # in-flight samples
        stopped = call(StopEpisode, "/recorder/stop", outcome="success")
        event = stopped.episode
        from simreal_ros.episodes.dataset import read_episode_metadata

        counts = read_episode_metadata(event.bag_path).message_counts
        return {
            "per_topic": counts,
            "messages": len(events),
            "written": int(event.messages),
            "dropped": int(event.dropped),
            "not_delivered": len(events) - int(event.messages) - int(event.dropped),
            "seconds": fed,
        }
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        recorder.stop()


def throughput(work: Path, seconds: float, payloads: dict[int, list[bytes]]) -> dict:
    """Bag writer vs raw sequential write of the same bytes, flushed at the same points."""
    events = schedule(seconds)
    sequence = []
    counters = [0, 0, 0]
    for _, index in events:
        sequence.append((index, payloads[index][counters[index] % len(payloads[index])]))
        counters[index] += 1
    total = sum(len(d) for _, d in sequence)
    flush_every = max(1, int(len(sequence) / seconds * 0.1))  # every 100 ms of data

    def raw() -> float:
        path = work / "raw.bin"
        with open(path, "wb") as f:
            t0 = time.perf_counter()
            for k, (_, data) in enumerate(sequence):
                f.write(data)
                if k % flush_every == flush_every - 1:
                    f.flush()
            f.flush()
            os.fsync(f.fileno())
            elapsed = time.perf_counter() - t0
        path.unlink()
        return elapsed

    close_times = []

    def bag() -> float:
        # Timed like the raw write: the data path from the first message to the last byte
        # on disk. Opening (schemas) and closing (summary, metadata.yaml) happen once per
        # episode and are reported separately.
        bag_dir = work / "throughput"
        writer = EpisodeBagWriter(bag_dir, TOPICS, EpisodeMetadata("throughput"))
        writer.open()
        t0 = time.perf_counter()
        for k, (index, data) in enumerate(sequence):
            writer.write(index, k, data)
            if k % flush_every == flush_every - 1:
                writer.flush()
        writer.flush(fsync=True)
        elapsed = time.perf_counter() - t0
        t1 = time.perf_counter()
        writer.close()
        close_times.append(time.perf_counter() - t1)
        shutil.rmtree(bag_dir)
        return elapsed

    # Alternate and keep the best of three each, so both see the same cache/disk state.
    raw_times, bag_times = [], []
    for _ in range(3):
        raw_times.append(raw())
        bag_times.append(bag())
    raw_s, bag_s = min(raw_times), min(bag_times)
    return {
        "bytes": total,
        "raw_mb_s": total / raw_s / 2**20,
        "bag_mb_s": total / bag_s / 2**20,
        "ratio": raw_s / bag_s,
        "close_s": min(close_times),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="recording length")
    parser.add_argument("--dds", action="store_true", help="sustained run through DDS")
    parser.add_argument(
        "--transport",
        default="",
        help="Fast DDS builtin transports for --dds (e.g. LARGE_DATA: shared memory + TCP; "
        "default: the graph's UDPv4)",
    )
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    store = project_typestore()
    now = time.time_ns()
    payloads = {
        0: [joint_state_bytes(now + k) for k in range(50)],
        1: [image_bytes(store, now + k, k) for k in range(4)],
        2: [image_bytes(store, now + k, 100 + k) for k in range(4)],
    }
    rate = (JOINT_HZ * len(payloads[0][0]) + 2 * IMAGE_HZ * len(payloads[1][0])) / 2**20
    print(
        f"recorder bench: {JOINT_HZ:.0f} Hz JointState + 2 x {IMAGE_HZ:.0f} Hz {WIDTH}x{HEIGHT} "
        f"rgb8 for {args.seconds:g} s = {rate:.1f} MiB/s offered"
    )
    work = Path(tempfile.mkdtemp(prefix="recorder-bench-", dir=args.dir))
    try:
        if args.dds:
            s = sustained_dds(work, args.seconds, payloads, args.transport)
            print(
                f"sustained (DDS -> recorder process): published in {s['seconds']:.1f} s, "
                f"{s['written']}/{s['messages']} recorded, "
                f"dropped by the writer queue {s['dropped']}, not delivered by DDS "
                f"{s['not_delivered']} (best-effort images); per topic {s['per_topic']}"
            )
        else:
            s = sustained_core(work, args.seconds, payloads)
            print(
                f"sustained (writer pipeline): {s['written']}/{s['messages']} written, "
                f"dropped {s['dropped']} (target 0), max queue depth {s['max_queue_depth']}/"
                f"{s['queue_capacity']}, {s['bytes'] / s['seconds'] / 2**20:.1f} MiB/s"
            )
        t = throughput(work, min(args.seconds, 20.0), payloads)
        print(
            f"throughput: bag writer {t['bag_mb_s']:.0f} MiB/s vs raw sequential write "
            f"{t['raw_mb_s']:.0f} MiB/s of the same {t['bytes'] / 2**20:.0f} MiB "
            f"(best of 3 each, alternating; closing a bag adds {t['close_s']:.2f} s once)"
        )
        print(f"ratio bag/raw = {t['ratio']:.2f} (target >= 0.70)")
        ok = s["dropped"] == 0 and t["ratio"] >= 0.7
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
