"""`simreal pretrain`: train a base policy and its value function (V_sim) in sim."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from simreal_ros.cli.profile_options import add_dynamics_profile_option
from simreal_ros.policy.checkpoint import shipped_checkpoint


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "pretrain",
        help="pretrain a base policy + V_sim in sim (expert demos, DAgger, SAC)",
        description=(
            "Pretrain the base policy for a task in the randomized dynamics profile: expert "
            "demonstrations and DAgger give the actor its competence, then SAC with twin "
            "critics learns the value function SGFT uses (V_sim) while a BC term keeps the "
            "actor close to the expert. Writes a checkpoint directory (safetensors + "
            "policy.json) and its resumable state in OUT/train_state/."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", choices=("push", "reach"), default="push")
    parser.add_argument("--steps", type=int, default=20000, help="SAC gradient steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="checkpoint dir (default: runs/<task>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    add_dynamics_profile_option(
        parser,
        default="randomized",
        help="dynamics profile: nominal, randomized or a YAML path (never a stand-in)",
    )
    parser.add_argument("--demo-episodes", type=int, default=150)
    parser.add_argument("--dagger-iterations", type=int, default=8)
    parser.add_argument("--dagger-episodes", type=int, default=40)
    parser.add_argument("--bc-steps", type=int, default=1500)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument(
        "--actor-rl-weight",
        type=float,
        default=0.0,
        help="weight of the SAC term in the actor loss; 0 = critics only (actor stays on "
        "expert labels)",
    )
    parser.add_argument("--bc-weight", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--save-every", type=int, default=2500)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1-2)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args) -> int:
    import torch
    from tqdm import tqdm

    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.pretrain import STATE_DIR, PretrainConfig, Pretrainer

    torch.set_num_threads(max(1, min(int(args.threads), 2)))
    out = Path(args.out) if args.out else Path("runs") / args.task
    try:
        shipped = shipped_checkpoint(args.task).resolve()
    except FileNotFoundError:  # none shipped for this arm yet
        shipped = None
    if out.resolve() == shipped:
        print(f"note: writing over the shipped checkpoint {out}", file=sys.stderr)
    if not args.resume and (out / STATE_DIR).exists():
        raise ValueError(
            f"{out} already holds a run; pass --resume to continue it or choose another --out."
        )
    config = PretrainConfig(
        task=args.task,
        profile=args.profile,
        seed=args.seed,
        sac_steps=args.steps,
        demo_episodes=args.demo_episodes,
        dagger_iterations=args.dagger_iterations,
        dagger_episodes=args.dagger_episodes,
        bc_steps=args.bc_steps,
        hidden=args.hidden,
        batch_size=args.batch_size,
        save_every=args.save_every,
        actor_rl_weight=args.actor_rl_weight,
        bc_weight=args.bc_weight,
    )
    command = "simreal " + shlex.join(sys.argv[1:]) if "pretrain" in sys.argv[1:] else ""
    trainer = Pretrainer(
        config,
        out,
        command=command or f"simreal pretrain --task {args.task}",
        robot=load_robot_description(),  # --robot
    )
    if args.resume:
        trainer.resume()
    with tqdm(
        total=trainer.total_units(),
        initial=trainer.done_units(),
        disable=args.no_progress,
        desc=f"pretrain {args.task}",
        unit="step",
        dynamic_ncols=True,
    ) as bar:
        trainer.run(bar)
    record = trainer.training_record()
    print(
        f"wrote {out}: {record['data']['episodes']} episodes, {record['data']['env_steps']} "
        f"env steps, {record['sac_steps']} SAC steps, {record['wall_time_s']:.0f} s wall time"
    )
    return 0
