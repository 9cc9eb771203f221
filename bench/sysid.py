#!/usr/bin/env python3
"""System identification benchmark: 10 stand-in episodes to an identified profile.

Records ``--episodes`` episodes of the shipped push policy (with exploration noise, half in
each condition) on the stand-in profile, off ROS, in the graph's bag format (joint states
and cube pose at 100 Hz, the commands topic), or uses ``--bags DIR`` (e.g. a `simreal loop`
run's bags). Then identifies with the defaults of `simreal sysid` and reports:

- wall time (target <= 300 s on the 2-core machine), against the baseline: a raw
  ``mj_step`` loop over the same number of physics steps the identification replayed,
  single-threaded, in the same run (the ratio says what the search and rollout
  machinery cost beyond bare physics, and what the 2 threads give back);
- each parameter's error against the stand-in's hidden values (read only for this
  report), and which were unidentifiable;
- the fit error before and after, on fit and held-out episodes.

    PYTHONPATH=. .venv/bin/python bench/sysid.py [--episodes 10] [--bags DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np
import torch

from simreal_ros.learner.sim_episodes import record_rollout
from simreal_ros.policy.checkpoint import load_checkpoint, shipped_checkpoint
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sysid import DEFAULT_PARAMETERS, FitSettings, identify_bags
from simreal_ros.sysid.output import format_result, hidden_factors
from simreal_ros.sysid.recording import read_replay_episodes

RESULTS = Path(__file__).resolve().parent / "results"


def record(out: Path, profile: str, episodes: int, seed: int) -> None:
    base = load_checkpoint(shipped_checkpoint("push"), with_critic=False)
    for i in range(episodes):
        record_rollout(
            out / f"ep{i:02d}", base, seed=seed + i, profile=profile, episode_seconds=6.0,
            noise=0.1, state_rate_hz=100, condition="train" if i % 2 == 0 else "shifted",
        )  # fmt: skip


def raw_steps_per_second(steps: int) -> float:
    """The baseline: bare mj_step on the arm model with the cube resting on the table."""
    physics = ArmPhysics()
    physics.reset()
    model, data = physics.model, physics.data
    data.ctrl[physics.actuator_idx[1]] += 0.3
    started = time.perf_counter()
    done = 0
    while done < steps:
        chunk = min(5000, steps - done)
        mujoco.mj_step(model, data, nstep=chunk)
        done += chunk
    return steps / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--bags", default="", help="identify these bags instead of recording")
    parser.add_argument("--profile", default="real_twin", help="stand-in to record in")
    parser.add_argument("--seed", type=int, default=700)
    parser.add_argument("--json", default=str(RESULTS / "sysid.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        bags = Path(args.bags) if args.bags else Path(tmp) / "bags"
        if not args.bags:
            started = time.monotonic()
            record(bags, args.profile, args.episodes, args.seed)
            print(
                f"recorded {args.episodes} stand-in episodes in {time.monotonic() - started:.0f} s"
            )
        robot = ArmPhysics().robot
        episodes = read_replay_episodes(bags, robot, "push")
        steps_per_replay = sum(
            int(np.ceil(e.duration / 0.002)) for e in episodes
        )  # all episodes, fit and held out, bound the per-replay cost
        started = time.monotonic()
        result, _ = identify_bags(
            bags, Path(tmp) / "out", "push", DEFAULT_PARAMETERS, 2, FitSettings(),
            robot, args.episodes, progress=lambda text: print(f"[sysid] {text}"),
        )  # fmt: skip
        seconds = time.monotonic() - started
    fit_share = len(result.fit_sources) / max(1, len(episodes))
    replayed_steps = int(result.evaluations * steps_per_replay * fit_share)
    raw = raw_steps_per_second(min(replayed_steps, 2_000_000))
    baseline_seconds = replayed_steps / raw
    hidden = hidden_factors(args.profile, result.nominal, [p.pattern for p in DEFAULT_PARAMETERS])
    print(format_result(result, hidden))
    print(
        f"identification: {seconds:.0f} s for {len(episodes)} episodes (target <= 300 s); "
        f"baseline raw mj_step over the same {replayed_steps / 1e6:.1f} M physics steps, one "
        f"thread: {baseline_seconds:.0f} s ({raw / 1e3:.0f} k steps/s); ratio "
        f"{seconds / baseline_seconds:.2f}"
    )
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "episodes": len(episodes),
                "seconds": seconds,
                "baseline_seconds": baseline_seconds,
                "ratio": seconds / baseline_seconds,
                "hidden": hidden,
                "result": result.to_dict(),
            },
            indent=2,
            default=float,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
