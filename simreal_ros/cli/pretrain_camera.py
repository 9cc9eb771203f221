"""`simreal pretrain-camera`: a camera policy by DAgger from the privileged expert, in sim."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from simreal_ros.cli.profile_options import add_dynamics_profile_option

CHECK_SEEDS = tuple(range(900000, 900050))  # the fixed off-ROS check's 50 seeds


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "pretrain-camera",
        help="pretrain a camera policy (RGB frames + proprioception) by DAgger in sim",
        description=(
            "Train a camera policy: a small CNN on the scene camera's frames and the arm's "
            "proprioception, no cube pose. The scripted expert (which sees the cube's true "
            "pose) labels every frame; each episode draws its lighting, colours and camera "
            "pose from the visual randomisation. Writes a checkpoint directory and its "
            "success table on 50 fixed seeds (nominal, train and shifted)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", choices=("push", "reach"), default="push")
    parser.add_argument("--out", default=None, help="checkpoint dir (default: runs/<task>-camera)")
    parser.add_argument("--seed", type=int, default=0)
    add_dynamics_profile_option(parser, default="randomized", help="dynamics to train in")
    from simreal_ros.config_schema import settings
    from simreal_ros.training.camera_pretrain import CameraPretrainConfig

    fields = settings(CameraPretrainConfig)
    for name in ("demo_episodes", "dagger_iterations", "dagger_episodes", "scenes",
                 "perception_steps", "demo_steps", "round_steps"):  # fmt: skip
        parser.add_argument(
            "--" + name.replace("_", "-"), type=int, default=fields[name].default,
            help=fields[name].metadata["description"],
        )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--workers", type=int, default=2, help="evaluation processes")
    parser.add_argument(
        "--no-eval", action="store_true", help="skip the 50-seed success table (tests)"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from simreal_ros.sim.rendering import ensure_headless_gl

    ensure_headless_gl()  # before anything imports mujoco
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.camera_pretrain import CameraPretrainConfig, CameraPretrainer

    out = Path(args.out) if args.out else Path("runs") / f"{args.task}-camera"
    if (out / "policy.json").exists():
        raise ValueError(f"{out} already holds a checkpoint; choose another --out.")
    config = CameraPretrainConfig(
        task=args.task,
        profile=args.profile,
        seed=args.seed,
        demo_episodes=args.demo_episodes,
        dagger_iterations=args.dagger_iterations,
        dagger_episodes=args.dagger_episodes,
        demo_steps=args.demo_steps,
        round_steps=args.round_steps,
        scenes=args.scenes,
        perception_steps=args.perception_steps,
        threads=args.threads,
    )
    robot = load_robot_description()  # --robot
    command = "simreal " + shlex.join(sys.argv[1:]) if "pretrain-camera" in sys.argv else ""
    trainer = CameraPretrainer(config, out, robot=robot, command=command)
    path = trainer.run()
    print(f"wrote {path}: {trainer.data.size} frames in {trainer.log[-1]['minutes']} min")
    if args.no_eval:
        return 0
    print(json.dumps(record_success_table(path, robot, args.workers)))
    return 0


# The success table of a camera checkpoint: nominal sim, and the visual stand-in zero-shot.
TABLE_ROWS = (("nominal", "train"), ("nominal", "shifted"), ("visual_shift", "train"))


def record_success_table(path, robot, workers: int = 2) -> dict:
    """Evaluate ``TABLE_ROWS`` on the fixed check seeds; write them into policy.json and the
    checkpoint's README."""
    from simreal_ros.policy.checkpoint import update_metadata
    from simreal_ros.training.evaluate import evaluate_policy
    from simreal_ros.training.report import write_readme

    table = {}
    for profile, condition in TABLE_ROWS:
        result = evaluate_policy(
            str(path), profile, condition, list(CHECK_SEEDS), workers=workers, robot=robot
        )
        print(result.summary())
        table[f"{profile}/{condition}"] = {
            **result.to_dict(),
            "seeds": [CHECK_SEEDS[0], CHECK_SEEDS[-1]],
        }
    update_metadata(path, evaluation=table)
    write_readme(path)
    return {k: f"{v['successes']}/{v['episodes']}" for k, v in table.items()}
