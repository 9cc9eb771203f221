#!/usr/bin/env python3
"""Camera frames in episode bags: what compressing them costs, and what it saves.

At the sim bridge's camera settings (SimBridgeConfig: resolution and rate), on frames MuJoCo
renders of the push scene while the arm moves:

1. encode cost per frame: a serialized Image in, a serialized CompressedImage out (what the
   recorder's encoder thread does), median and p99, for JPEG and PNG; against what the
   recorder's subscription callback pays per frame (``offer()``: queue the bytes), measured
   in the same run: the ratio is what encoding in the callback would cost it.
2. bag size per episode (one episode of the bridge's length at its rates: joint states,
   object pose, actions, commands, task status, camera and camera_info) without the camera,
   with JPEG frames, PNG frames and raw frames.
3. the JPEG episode read back with frames: decode error against the rendered frames and
   the frame age per control tick.

    PYTHONPATH=. .venv/bin/python bench/recorder_frames.py [--quality 90] [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from simreal_ros.episodes import messages
from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
from simreal_ros.episodes.dataset import read_episode
from simreal_ros.episodes.frames import FrameCompression, compress_image_cdr
from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.sim.bridge import SimBridgeConfig

CONTROL_HZ = 20.0  # the policy's tick (the task status rate)
T0 = 1_700_000_000_000_000_000
TOPICS = [
    TopicSpec("/joint_states", "sensor_msgs/msg/JointState", reliable=False),
    TopicSpec("/object/pose", "geometry_msgs/msg/PoseStamped"),
    TopicSpec("/policy/action", "simreal_ros/msg/PolicyAction"),
    TopicSpec("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray"),
    TopicSpec("/task/status", "simreal_ros/msg/TaskStatus"),
    TopicSpec("/camera/image_raw", "sensor_msgs/msg/Image", reliable=False),
    TopicSpec("/camera/camera_info", "sensor_msgs/msg/CameraInfo", reliable=False),
]
CAMERA = {5, 6}


def render_frames(config: SimBridgeConfig, count: int):
    """``count`` frames of the push scene at the bridge's camera, the arm moving between
    them; returns (frames, intrinsics, joint names)."""
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.sim.rendering import CameraRenderer, ensure_headless_gl

    ensure_headless_gl()
    env = ArmTaskEnv(task="push", robot=load_robot_description())
    observation, _ = env.reset(seed=0)
    renderer = CameraRenderer(
        env.physics, config.camera_name, config.camera_width, config.camera_height
    )
    start = observation["joint_position"].copy()
    steps_per_frame = max(1, round(CONTROL_HZ / config.camera_rate_hz))
    frames = []
    try:
        for k in range(count):
            for _ in range(steps_per_frame):
                phase = 2 * np.pi * k / count
                env.step(start + 0.4 * np.sin(phase + np.arange(len(start))))
            frames.append(renderer.render().copy())
        intrinsics = renderer.intrinsics()
    finally:
        renderer.close()
        env.close()
    return frames, intrinsics, list(env.core.robot.joint_names)


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1e3
    return float(np.median(ms)), float(np.percentile(ms, 99))


def encode_cost(images: list[bytes], compression: FrameCompression, repeats: int) -> dict:
    times, sizes = [], []
    for _ in range(repeats):
        for data in images:
            start = time.perf_counter()
            out = compress_image_cdr(data, compression)
            times.append(time.perf_counter() - start)
            sizes.append(len(out))
    median, p99 = percentiles(times)
    return {"median_ms": median, "p99_ms": p99, "bytes": float(np.mean(sizes))}


def offer_cost(work: Path, images: list[bytes], repeats: int) -> dict:
    """What the subscription callback pays per frame: ``offer()`` into a recording that
    compresses (the encoder thread does the rest)."""
    rec = EpisodeRecording(
        work / "offer",
        TOPICS,
        EpisodeMetadata("offer"),
        image_compression=FrameCompression(),
        frame_queue_size=len(images) * repeats + 1,
    )
    rec.start()
    times = []
    for k in range(repeats * len(images)):
        data = images[k % len(images)]
        start = time.perf_counter()
        rec.offer(5, T0 + k, data)
        times.append(time.perf_counter() - start)
    rec.stop("success", True)
    median, p99 = percentiles(times)
    return {"median_ms": median, "p99_ms": p99, "dropped": rec.dropped}


def episode_messages(config, frames, intrinsics, joints, with_camera: bool):
    """(receive time, topic index, CDR) of one episode at the bridge's rates, time-ordered;
    receive times are the stamps. Actions carry their observation's stamp."""
    seconds = config.episode_seconds
    out = []
    zeros = np.zeros(len(joints))
    state_period = round(1e9 / config.joint_state_rate_hz)
    for k in range(int(seconds * config.joint_state_rate_hz)):
        t = T0 + k * state_period
        position = 0.1 * np.sin(k * 1e-3 + np.arange(len(joints)))
        out.append((t, 0, messages.joint_state(t, joints, position, zeros, zeros)))
    pose_period = round(1e9 / config.object_pose_rate_hz)
    for k in range(int(seconds * config.object_pose_rate_hz)):
        t = T0 + k * pose_period
        out.append((t, 1, messages.pose_stamped(t, (0.4 + 1e-4 * k, 0.0, 0.02))))
    tick_period = round(1e9 / CONTROL_HZ)
    for k in range(int(seconds * CONTROL_HZ)):
        t = T0 + k * tick_period
        stamp = T0 + (k * tick_period // state_period) * state_period
        action = messages.policy_action(stamp, zeros, version="v1", sequence=k)
        out.append((t, 2, action))
        out.append((t, 3, messages.float64_multi_array(zeros)))
        status = messages.task_status(
            t, episode_id="size", task="push", condition="train", seed=0, step=k,
            goal=(0.5, 0.1, 0.0), reward=-1.0, success=False, done=False,
        )  # fmt: skip
        out.append((t + 1, 4, status))
    if with_camera:
        frame_period = round(1e9 / config.camera_rate_hz)
        fx, fy, cx, cy = intrinsics
        for k in range(int(seconds * config.camera_rate_hz)):
            t = T0 + k * frame_period
            pixels = frames[k % len(frames)]
            out.append((t, 5, messages.image(t, pixels)))
            height, width = pixels.shape[:2]
            out.append((t, 6, messages.camera_info(t, width, height, fx, fy, cx, cy)))
    return sorted(out, key=lambda item: item[:2])


def record(work: Path, name: str, items, compression: FrameCompression | None):
    meta = EpisodeMetadata(name)
    rec = EpisodeRecording(
        work / name,
        TOPICS,
        meta,
        queue_size=len(items) + 1,
        image_compression=compression,
        frame_queue_size=len(items) + 1,
    )
    rec.start()
    for t, index, data in items:
        rec.offer(index, t, data)
    meta = rec.stop("success", True)
    on_disk = sum(p.stat().st_size for p in (work / name).iterdir())
    return meta, on_disk


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality")
    parser.add_argument("--repeats", type=int, default=5, help="encodes per rendered frame")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    config = SimBridgeConfig()
    count = int(config.episode_seconds * config.camera_rate_hz)
    t0 = time.monotonic()
    frames, intrinsics, joints = render_frames(config, count)
    print(
        f"recorder frames bench: {len(frames)} MuJoCo frames of the push scene, "
        f"{config.camera_width}x{config.camera_height} rgb8 at {config.camera_rate_hz:g} Hz "
        f"(the bridge's camera), rendered in {time.monotonic() - t0:.1f} s"
    )
    images = [bytes(messages.image(T0 + k, f)) for k, f in enumerate(frames)]
    work = Path(tempfile.mkdtemp(prefix="recorder-frames-", dir=args.dir))
    try:
        jpeg = encode_cost(images, FrameCompression("jpeg", args.quality), args.repeats)
        png = encode_cost(images, FrameCompression("png"), args.repeats)
        offered = offer_cost(work, images, args.repeats)
        n = len(images) * args.repeats
        period_ms = 1e3 / config.camera_rate_hz
        raw_kib = len(images[0]) / 1024
        for name, cost in ((f"jpeg q{args.quality}", jpeg), ("png", png)):
            share = 100 * cost["median_ms"] / period_ms
            print(
                f"encode {name:8s}: median {cost['median_ms']:.2f} ms, p99 "
                f"{cost['p99_ms']:.2f} ms per frame over {n} ({share:.1f}% "
                f"of the {period_ms:.0f} ms frame period); {cost['bytes'] / 1024:.1f} KiB "
                f"from {raw_kib:.0f} KiB raw ({raw_kib * 1024 / cost['bytes']:.1f}x smaller)"
            )
        print(
            f"callback cost per frame (offer to the encoder thread): median "
            f"{offered['median_ms'] * 1e3:.1f} us, p99 {offered['p99_ms'] * 1e3:.1f} us; "
            f"encoding in the callback instead would cost it "
            f"{jpeg['median_ms'] / offered['median_ms']:.0f}x (jpeg) / "
            f"{png['median_ms'] / offered['median_ms']:.0f}x (png) more per frame"
        )
        sizes = {}
        for label, with_camera, compression in (
            ("no camera", False, None),
            (f"jpeg q{args.quality}", True, FrameCompression("jpeg", args.quality)),
            ("png", True, FrameCompression("png")),
            ("raw Image", True, None),
        ):
            items = episode_messages(config, frames, intrinsics, joints, with_camera)
            meta, on_disk = record(work, label.replace(" ", "_"), items, compression)
            sizes[label] = on_disk
            print(
                f"bag per {config.episode_seconds:g} s episode, {label:9s}: "
                f"{on_disk / 2**20:6.2f} MiB on disk (metadata bag_bytes "
                f"{meta.bag_bytes / 2**20:.2f} MiB), {meta.messages} messages, "
                f"{meta.dropped} dropped"
            )
        base = sizes["no camera"]
        print(
            "frames add per episode: "
            + ", ".join(
                f"{k} +{(v - base) / 2**20:.2f} MiB" for k, v in sizes.items() if v != base
            )
        )
        steps = read_episode(work / f"jpeg_q{args.quality}", joints, frames=True)
        ages = steps.frame_ages[np.isfinite(steps.frame_ages)] * 1e3
        frame_period = round(1e9 / config.camera_rate_hz)
        errors = []
        for i in np.flatnonzero(np.isfinite(steps.frame_ages)):
            tick = T0 + i * round(1e9 / CONTROL_HZ)
            k = (tick - T0 - round(steps.frame_ages[i] * 1e9)) // frame_period
            errors.append(np.abs(steps.frames[i].astype(int) - frames[k % len(frames)]).mean())
        print(
            f"read back with frames: {len(steps)} ticks, frames {steps.frames.shape[1:]}, "
            f"decode error mean {np.mean(errors):.2f} / worst frame {np.max(errors):.2f} "
            f"levels of 255; frame age per tick median {np.median(ages):.0f} ms, "
            f"max {ages.max():.0f} ms"
        )
        ok = offered["dropped"] == 0 and all(
            v > base for k, v in sizes.items() if k != "no camera"
        )
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
