"""A visual gap closed from the arm's unlabeled frames, off ROS.

1. The camera policy zero-shot on the visual stand-in and in nominal sim (50 fixed seeds
   each, the loop's off-ROS check seeds);
2. ``--episodes`` stand-in episodes of the base policy, keeping only their frames (no
   labels, no rewards: what the arm's bags give);
3. ``learner.visual_alignment.align_to_arm_frames``: the arm camera's pose identified from
   the frames and their joint positions (its warp carried by the version), then CORAL on
   the encoder's LoRA, anchored by expert-labelled sim frames under the pretraining's
   randomisation;
4. the adapted version on the same 50 seeds, stand-in and nominal.

The stand-in is simulated, never the physical arm; its visual values are never read by the
method (only its frames are).

    PYTHONPATH=. .venv/bin/python bench/visual_gap.py --profile visual_shift --episodes 10

``--profile bench/profiles/visual/visual_shift_camera.yaml`` (and the other parts of a gap
there) with ``--zero-shot-only`` measures which part of a gap the base fails on.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

CHECK_SEEDS = list(range(900000, 900050))


def stand_in_frames(checkpoint: str, profile: str, episodes: int, robot):
    """Every frame the base policy saw in ``episodes`` stand-in episodes, and the joint
    positions it saw with each (what the arm's bags record beside the frames)."""
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.sim.profiles import load_profile
    from simreal_ros.sim.rollout import rollout
    from simreal_ros.sim.visuals import CameraObservations
    from simreal_ros.training.evaluate import PolicySource, build_policy

    policy = build_policy(PolicySource(checkpoint), robot=robot)
    spec = policy.converter.spec
    camera = spec.camera
    env = CameraObservations(
        ArmTaskEnv(task=spec.task, profile=profile, robot=robot),
        camera.camera_name, camera.width, camera.height, load_profile(profile).visual,
    )  # fmt: skip
    frames: list[np.ndarray] = []
    joints: list[np.ndarray] = []

    def keep(step) -> None:
        frames.append(step.observation["image"])
        joints.append(np.asarray(step.observation["joint_position"], dtype=np.float64))

    try:
        for k in range(episodes):
            rollout(env, policy, 800_000 + k, "train", keep)
    finally:
        env.close()
    return np.stack(frames), np.stack(joints)


def sim_side(adapter: Path) -> Path:
    """A copy of ``adapter`` without the arm camera's corrections (its sim-side half)."""
    import json
    import shutil

    from simreal_ros.policy.camera import VERSION_METADATA
    from simreal_ros.policy.checkpoint import ADAPTER_METADATA

    out = adapter.with_name(adapter.name + "_sim")
    shutil.copytree(adapter, out)
    metadata = json.loads((out / ADAPTER_METADATA).read_text())
    for key in VERSION_METADATA:
        metadata.pop(key, None)
    (out / ADAPTER_METADATA).write_text(json.dumps(metadata, indent=2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default="checkpoints/push_camera")
    parser.add_argument("--profile", default="visual_shift", help="the visual stand-in")
    parser.add_argument("--episodes", type=int, default=10, help="stand-in episodes of frames")
    parser.add_argument("--steps", type=int, default=600, help="alignment steps")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--feature-anchor-weight", type=float, default=1.0,
        help="weight of keeping the sim frames' features at the base's (frozen reference)",
    )  # fmt: skip
    parser.add_argument(
        "--two-sided",
        action="store_true",
        help="Deep CORAL's two-sided form (both domains move) instead of the frozen reference",
    )
    parser.add_argument(
        "--camera-adaptation", choices=("warp", "render", "none"), default="warp",
        help="identify the arm's camera from the frames and joints first: its pose's warp "
        "(warp), or its pose, light and table rendered for paired adaptation (render)",
    )  # fmt: skip
    parser.add_argument(
        "--warp-only", action="store_true",
        help="the identified camera pose's warp alone, without CORAL",
    )  # fmt: skip
    parser.add_argument(
        "--zero-shot-only", action="store_true",
        help="only the base's success on the stand-in (a part of a gap: bench/profiles/visual)",
    )  # fmt: skip
    args = parser.parse_args()

    from simreal_ros.sim.rendering import ensure_headless_gl

    ensure_headless_gl()
    import torch

    from simreal_ros.learner.visual_alignment import AlignmentConfig, align_to_arm_frames
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sysid.camera_look import describe_look
    from simreal_ros.sysid.camera_pose import describe_camera_pose
    from simreal_ros.training.evaluate import PolicySource, evaluate_policy

    torch.set_num_threads(2)
    robot = load_robot_description()

    def check(source, profile: str) -> str:
        result = evaluate_policy(source, profile, "train", CHECK_SEEDS, args.workers, robot=robot)
        return f"{result.successes}/{result.episodes}"

    started = time.perf_counter()
    base = PolicySource(args.checkpoint)
    if args.zero_shot_only:
        print(f"base on {args.profile}/train: {check(base, args.profile)} "
              f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
        return
    zero_shot = {p: check(base, p) for p in (args.profile, "nominal")}
    frames, joints = stand_in_frames(args.checkpoint, args.profile, args.episodes, robot)
    with tempfile.TemporaryDirectory() as scratch:
        adapter = Path(scratch) / "aligned"
        summary = align_to_arm_frames(
            args.checkpoint, frames, adapter, robot, version="aligned",
            config=AlignmentConfig(
                steps=args.steps,
                frozen_reference=not args.two_sided,
                feature_anchor_weight=args.feature_anchor_weight,
                camera_adaptation=args.camera_adaptation,
                align_features=not args.warp_only,
            ),
            arm_joints=joints,
        )  # fmt: skip
        aligned = PolicySource(args.checkpoint, str(adapter))
        after = {args.profile: check(aligned, args.profile)}
        # In nominal sim the camera is where it was trained, so the arm camera's warp does
        # not belong there: nominal checks the encoder's adapter alone.
        after["nominal"] = check(PolicySource(args.checkpoint, str(sim_side(adapter))), "nominal")
    print(f"stand-in {args.profile}: {args.episodes} episodes, {len(frames)} frames "
          f"(unlabeled); {summary['sim_frames']} sim frames as the anchor")  # fmt: skip
    if summary["camera_pose"] is not None:
        print(describe_camera_pose(summary["camera_pose"]))
    if summary["scene_look"] is not None:
        print(describe_look(summary["scene_look"]))
    if "feature_distance_before" in summary:
        print(
            f"encoder feature distance (held out): {summary['feature_distance_before']:.4g} -> "
            f"{summary['feature_distance_after']:.4g}"
        )
        scale = ", ".join(f"{v:.2f}" for v in summary["sim_feature_scale"])
        print(f"sim features' std per layer, aligned over base (held out): {scale}")
    print(f"{'version':<10} {args.profile + '/train':>20} {'nominal/train':>15}  (nominal: "
          "the encoder's adapter without the arm camera's warp)")  # fmt: skip
    print(f"{'base':<10} {zero_shot[args.profile]:>20} {zero_shot['nominal']:>15}")
    print(f"{'aligned':<10} {after[args.profile]:>20} {after['nominal']:>15}")
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
