#!/usr/bin/env python3
"""Sim-work throughput of the executor (environment steps per second), per backend.

Adaptation-style work: exploring episodes of the shipped push policy (its own action
distribution) in the ``randomized`` profile, each item a chunk of episodes that returns
its transitions (normalised observation, command, reward) to the caller, as the sim
adaptation's rollouts do. Measured in one run, on the same episodes:

- the baseline: a raw single-process loop (``env.reset``/``policy.act``/``env.step``,
  no executor, no rollout helper);
- ``serial`` (1 process), ``local`` on every core, and ``ray`` (a local Ray instance)
  on the same cores, each through ``simreal_ros.executor``.

Each backend's throughput is measured on a started executor (its workers warmed by one
item each); the start-up time (spawning workers, starting Ray) is printed beside it. The
ratio is backend / raw: at most about the number of cores, less what spawning, policy
loading, pickling and the data's way back cost. Every backend must return the raw loop's
transitions exactly, or the bench fails.

    PYTHONPATH=. .venv/bin/python bench/executor_throughput.py [--episodes 128] \
        [--backends serial,local,ray] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from simreal_ros.executor import make_executor  # noqa: E402

TASK = "push"
PROFILE = "randomized"


@dataclasses.dataclass(frozen=True)
class RolloutChunk:
    checkpoint: str
    seeds: tuple[int, ...]


def _policy_and_env(checkpoint: str):
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.training.evaluate import PolicySource, build_policy

    robot = load_robot_description()
    policy = build_policy(PolicySource(checkpoint), robot=robot)
    env = ArmTaskEnv(
        task=TASK,
        profile=PROFILE,
        control_rate_hz=policy.converter.spec.control_rate_hz,
        robot=robot,
    )
    return policy, env


def rollout_chunk(chunk: RolloutChunk) -> list[dict[str, np.ndarray]]:
    """The executor's item: one exploring episode per seed, through the project's rollout."""
    from simreal_ros.sim.rollout import rollout

    policy, env = _policy_and_env(chunk.checkpoint)
    episodes = []
    try:
        for seed in chunk.seeds:
            rows = _Transitions(policy, np.random.default_rng(seed))
            rollout(env, rows, seed, "train", rows.on_step)
            episodes.append(rows.arrays())
    finally:
        env.close()
    return episodes


class _Transitions:
    """An exploring actor that keeps each step's transition."""

    def __init__(self, policy, rng) -> None:
        self.policy, self.rng = policy, rng
        self.observations, self.commands, self.rewards = [], [], []

    def act(self, observation):
        return self.policy.act(observation, 0.0, self.rng)

    def on_step(self, step) -> None:
        self.observations.append(self.policy.converter.normalized_observation(step.observation))
        self.commands.append(step.command)
        self.rewards.append(step.reward)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "observation": np.asarray(self.observations, dtype=np.float32),
            "command": np.asarray(self.commands, dtype=np.float32),
            "reward": np.asarray(self.rewards, dtype=np.float32),
        }


def raw_loop(checkpoint: str, seeds: list[int]) -> tuple[float, list[dict[str, np.ndarray]]]:
    """The baseline: the same episodes in a plain loop in this process (policy and env
    built before the clock starts). Returns (seconds, transitions)."""
    policy, env = _policy_and_env(checkpoint)
    episodes = []
    started = time.perf_counter()
    try:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            observation, _ = env.reset(seed=seed, options={"condition": "train"})
            observations, commands, rewards = [], [], []
            done = False
            while not done:
                command = np.asarray(policy.act(observation, 0.0, rng), dtype=np.float64)
                observations.append(policy.converter.normalized_observation(observation))
                commands.append(command)
                observation, reward, terminated, truncated, _ = env.step(command)
                rewards.append(float(reward))
                done = bool(terminated or truncated)
            episodes.append(
                {
                    "observation": np.asarray(observations, dtype=np.float32),
                    "command": np.asarray(commands, dtype=np.float32),
                    "reward": np.asarray(rewards, dtype=np.float32),
                }
            )
    finally:
        env.close()
    return time.perf_counter() - started, episodes


def measure(kind: str, checkpoint: str, seeds: list[int], per_item: int, ray_dir: str):
    """(start-up seconds, map seconds, transitions) of ``kind`` on all ``seeds``."""
    options = {"_temp_dir": ray_dir} if kind == "ray" else None
    started = time.perf_counter()
    executor = make_executor(kind, None, ray_init_options=options)
    with executor:
        warm = [RolloutChunk(checkpoint, (seeds[0],))] * executor.workers
        executor.map(rollout_chunk, warm)  # workers started, modules imported
        startup = time.perf_counter() - started
        chunks = [
            RolloutChunk(checkpoint, tuple(seeds[i : i + per_item]))
            for i in range(0, len(seeds), per_item)
        ]
        started = time.perf_counter()
        results = executor.map(rollout_chunk, chunks, progress=f"{kind} rollouts")
        seconds = time.perf_counter() - started
        workers = executor.workers
    return startup, seconds, [e for chunk in results for e in chunk], workers


def same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(REPO / "checkpoints" / TASK))
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--episodes-per-item", type=int, default=8)
    parser.add_argument("--first-seed", type=int, default=700000)
    parser.add_argument("--backends", default="serial,local,ray")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.episodes_per_item < 1:
        parser.error("--episodes and --episodes-per-item must be at least 1")
    backends = [b for b in args.backends.split(",") if b]
    import torch

    torch.set_num_threads(1)
    seeds = list(range(args.first_seed, args.first_seed + args.episodes))
    print(f"{args.episodes} exploring {TASK} episodes in the {PROFILE} profile, "
          f"{args.episodes_per_item} per item, {os.cpu_count()} cores")  # fmt: skip
    raw_s, expected = raw_loop(args.checkpoint, seeds)
    steps = sum(len(e["reward"]) for e in expected)
    raw_rate = steps / raw_s
    print(f"raw single-process loop: {steps} steps in {raw_s:.1f} s = {raw_rate:.0f} steps/s")
    report = {"episodes": args.episodes, "steps": steps, "cores": os.cpu_count(),
              "raw": {"seconds": raw_s, "steps_per_second": raw_rate}}  # fmt: skip
    failed = False
    with tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp") as ray_dir:
        for kind in backends:
            startup, seconds, episodes, workers = measure(
                kind, args.checkpoint, seeds, args.episodes_per_item, ray_dir
            )
            rate = steps / seconds
            identical = same(episodes, expected)
            failed |= not identical
            print(
                f"{kind:>6} ({workers} worker{'s' if workers > 1 else ''}): {rate:.0f} "
                f"steps/s = {rate / raw_rate:.2f} x raw, {seconds:.1f} s (start-up "
                f"{startup:.1f} s); transitions {'identical to' if identical else 'DIFFER FROM'}"
                " the raw loop's"
            )
            report[kind] = {"workers": workers, "seconds": seconds, "startup_seconds": startup,
                            "steps_per_second": rate, "ratio_to_raw": rate / raw_rate,
                            "identical": identical}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
