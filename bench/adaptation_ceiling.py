#!/usr/bin/env python3
"""The ceiling of sim-side adaptation, a DIAGNOSTIC the loop never uses: the same recipe
(``learner.adaptation.adapt``: narrow randomisation, the teacher's grid search, DAgger on a
rank-8 LoRA) trained in the stand-in's TRUE dynamics instead of the identified model, then
evaluated on the stand-in like the loop's adapted policy.

What it separates: if the recipe falls short of the target even here, the recipe (its
teacher, its budget) caps the loop; if it reaches the target here but not from the
identified model, the identification's errors do. The adaptation code refuses stand-in
profiles, so this script writes the stand-in's values as a model profile of its own,
marked as the diagnostic it is; nothing in the package reads it.

    PYTHONPATH=. .venv/bin/python bench/adaptation_ceiling.py [--stand-in real_twin]
        [--checkpoint checkpoints/push] [--episodes 50] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
import yaml

from simreal_ros.learner import lora
from simreal_ros.learner.adaptation import AdaptationSettings, actor_numpy_state, adapt
from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim.profiles import profile_path
from simreal_ros.training.evaluate import PolicySource, evaluate_policy
from simreal_ros.training.torch_checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[1]
EVAL_FIRST_SEED = 900_000  # the loop's and the adaptation results' fixed starts


def true_model_profile(stand_in: str, out_dir: Path) -> Path:
    """The stand-in's own values as a model profile (the diagnostic's only use of them)."""
    document = yaml.safe_load(Path(profile_path(stand_in)).read_text())
    document.update(profile=f"{stand_in}-true-model", stand_in=False)
    path = out_dir / "true_model.yaml"
    header = f"# DIAGNOSTIC ONLY: {stand_in}'s hidden values, for the adaptation ceiling.\n"
    path.write_text(header + yaml.safe_dump(document, sort_keys=False))
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stand-in", default="real_twin")
    parser.add_argument("--checkpoint", default=str(REPO / "checkpoints" / "push"))
    parser.add_argument("--episodes", type=int, default=50, help="evaluation starts a condition")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="", help="write the results as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    robot = load_robot_description()
    checkpoint = load_checkpoint(args.checkpoint, robot)
    actor_peft = lora.wrap(checkpoint.model.actor, rank=8, alpha=16)
    settings = AdaptationSettings(seed=args.seed, workers=args.workers)
    seeds = list(range(EVAL_FIRST_SEED, EVAL_FIRST_SEED + args.episodes))
    with tempfile.TemporaryDirectory(prefix="ceiling-") as tmp:
        model = true_model_profile(args.stand_in, Path(tmp))
        started = time.perf_counter()
        result = adapt(actor_peft, args.checkpoint, checkpoint, model, tmp, settings, robot,
                       progress=print)  # fmt: skip
        adapt_s = time.perf_counter() - started
    adapted = PolicySource(
        args.checkpoint, actor_state=actor_numpy_state(lora.merged(actor_peft)), version="ceiling"
    )
    report = {"stand_in": args.stand_in, "adapt_seconds": round(adapt_s, 1),
              "metrics": result["metrics"], "conditions": {}}  # fmt: skip
    for condition in ("train", "shifted"):
        for name, policy in (("base", args.checkpoint), ("adapted in the true model", adapted)):
            outcome = evaluate_policy(
                policy, args.stand_in, condition, seeds, args.workers, robot=robot
            )
            low, high = outcome.ci
            report["conditions"].setdefault(condition, {})[name] = {
                "successes": outcome.successes, "episodes": outcome.episodes,
                "wilson95": [round(low, 3), round(high, 3)],
            }  # fmt: skip
            print(
                f"{args.stand_in} {condition}: {name} {outcome.successes}/{outcome.episodes} "
                f"[{low:.2f}, {high:.2f}]"
            )
    print(f"adaptation {adapt_s:.0f} s; teacher {result['metrics']['adapt_teacher_success']:.0%}"
          f" in the randomised true model; DAgger student "
          f"{result['metrics']['adapt_dagger_success']:.0%}")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
