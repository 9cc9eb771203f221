"""`simreal align`: a camera policy's encoder aligned to the arm's recorded frames.

Reads the camera frames of recorded episode bags and the joint positions at each (no
labels, no rewards). First it identifies where the arm's camera is from the arm's own body
in the frames (``sysid/camera_pose.py``); a pose that explains held-out frames better than
the trained camera's becomes a warp of every frame into the trained view. Then it trains a
LoRA adapter on the encoder's convolutions by CORAL against sim frames of the same task
(``learner/visual_alignment.py``), and writes it as a peft adapter beside what it measured
(the warp in its metadata). Evaluate it with ``simreal eval --adapter`` before running it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "align",
        help="align a camera policy's encoder to recorded frames (no labels): a LoRA adapter",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--episodes", required=True, nargs="+", help="episode bag(s) or folder(s)")
    p.add_argument("--checkpoint", required=True, help="the camera policy's base checkpoint")
    p.add_argument("--out", required=True, help="adapter directory to write")
    p.add_argument("--version", default="", help="the adapter's version (default: its folder)")
    p.add_argument("--sim-episodes", type=int, default=20, help="sim episodes of anchor frames")
    p.add_argument("--steps", type=int, default=600, help="alignment gradient steps")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument(
        "--camera-adaptation", choices=("warp", "render", "none"), default="warp",
        help="identify the arm's camera from the frames and joints first: its pose's warp "
        "(warp), or its pose, light and table rendered for paired adaptation (render)",
    )  # fmt: skip
    p.add_argument(
        "--warp-only", action="store_true",
        help="write the identified camera pose's warp alone, without CORAL",
    )  # fmt: skip
    p.set_defaults(func=run)


def arm_frames(bags, joint_names) -> tuple:
    """Every recorded frame of ``bags`` that belongs to a tick (ticks before an episode's
    first frame have none), the joint positions of those ticks (in ``joint_names``' order),
    and the number of episodes read."""
    import numpy as np

    from simreal_ros.episodes.dataset import find_bags, read_episode

    found = find_bags(bags)
    if not found:
        raise ValueError(f"no episode bags under {', '.join(map(str, bags))}.")
    frames, joints = [], []
    for bag in found:
        steps = read_episode(bag, joint_names, frames=True)
        has_frame = np.isfinite(steps.frame_ages)
        frames.append(steps.frames[has_frame])
        joints.append(steps.obs["joint_position"][has_frame])
    return np.concatenate(frames), np.concatenate(joints), len(found)


def run(args) -> int:
    from simreal_ros.sim.rendering import ensure_headless_gl

    ensure_headless_gl()
    import torch

    from simreal_ros.learner.visual_alignment import AlignmentConfig, align_to_arm_frames
    from simreal_ros.policy.checkpoint import load_numpy_checkpoint
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sysid.camera_look import describe_look
    from simreal_ros.sysid.camera_pose import describe_camera_pose

    torch.set_num_threads(max(1, args.threads))
    robot = load_robot_description()  # --robot
    base = load_numpy_checkpoint(args.checkpoint, robot)
    if base.spec.camera is None:
        raise ValueError(f"{args.checkpoint} is a state policy; align needs a camera policy.")
    frames, joints, episodes = arm_frames(args.episodes, robot.joint_names)
    out = Path(args.out)
    summary = align_to_arm_frames(
        args.checkpoint, frames, out, robot, version=args.version or out.name,
        parent_version=base.version, sim_episodes=args.sim_episodes,
        config=AlignmentConfig(steps=args.steps, camera_adaptation=args.camera_adaptation,
                               align_features=not args.warp_only),
        arm_joints=joints,
    )  # fmt: skip
    shift = summary["feature_shift"]
    print(
        f"perception: the base's features on the arm's frames lie {shift['ratio']:.3g}x the "
        "distance between two halves of its sim frames from the sim's ("
        + ("outside the sim's distribution: the pixels differ)" if shift["outside_sim"] else
           "within it: the arm's failures are likely not the camera's; alignment may not "
           "help)")
    )  # fmt: skip
    if summary["camera_pose"] is not None:
        print(describe_camera_pose(summary["camera_pose"]))
    if summary["scene_look"] is not None:
        print(describe_look(summary["scene_look"]))
    distance = (
        f"; encoder feature distance (held out) {summary['feature_distance_before']:.4g} -> "
        f"{summary['feature_distance_after']:.4g}"
        if "feature_distance_before" in summary else " (the camera pose's warp alone)"
    )  # fmt: skip
    print(f"wrote {out}: {len(frames)} frames from {episodes} episodes{distance}")
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
    return 0
