#!/usr/bin/env python3
"""Camera policy inference per control tick, against the state policy, on one core.

What the policy node runs at each tick: ``DeployedPolicy.act`` (numpy) on an observation
dict. The camera policy (an untrained ``make_untrained_checkpoint(camera=True)``, 256x256
trunk as ``simreal pretrain-camera`` builds it, CNN encoder on a 72x96 RGB frame) and the
state policy (the shipped checkpoints/push) run interleaved in the same run, at the control
rate's tick pattern: one call of each per tick, then sleep to the next tick on the control
period's grid (caches go cold between ticks, as in the node). Each tick gets another frame
and joint state. The order alternates tick by tick. Target: camera p99 <= 10 ms.

One core: OMP/OPENBLAS/MKL threads and torch's set to 1 before numpy loads (``--cpu N``
also pins the process to core N).

    PYTHONPATH=. .venv/bin/python bench/camera_policy.py [--ticks 600] [--cpu 0]
"""

from __future__ import annotations

import os

# One thread each, before numpy and torch load their BLAS and OpenMP.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

P99_TARGET_MS = 10.0
WARMUP_TICKS = 20
FRAMES = 8  # distinct frames, cycled: each tick sees another one


def deployed(directory: Path, robot):
    """What the node runs for a base checkpoint (numpy weights, its FK when it needs it)."""
    from simreal_ros.policy.checkpoint import load_numpy_checkpoint
    from simreal_ros.policy.inference import deploy_base
    from simreal_ros.robot.kinematics import ToolKinematics

    checkpoint = load_numpy_checkpoint(directory, description=robot)
    kinematics = ToolKinematics.for_robot(robot) if checkpoint.spec.needs_kinematics else None
    return deploy_base(checkpoint, kinematics)


def observations(robot, camera, ticks: int, seed: int = 0) -> list[dict]:
    """One observation per tick: joints near home moving a little, the cube, the goal and
    (for the camera policy) one of ``FRAMES`` random frames."""
    rng = np.random.default_rng(seed)
    home = np.asarray(robot.home_position, dtype=np.float64)
    frames = rng.integers(0, 256, size=(FRAMES, camera.height, camera.width, 3), dtype=np.uint8)
    out = []
    for tick in range(ticks):
        out.append(
            {
                "joint_position": home + 0.05 * rng.standard_normal(home.shape),
                "joint_velocity": 0.1 * rng.standard_normal(home.shape),
                "object_position": np.array([0.55, 0.05, 0.025]),
                "object_orientation": np.array([1.0, 0.0, 0.0, 0.0]),
                "goal_position": np.array([0.6, -0.1, 0.025]),
                "image": frames[tick % FRAMES],
            }
        )
    return out


def run(ticks: int, hidden: int) -> dict:
    import torch

    from simreal_ros.policy.checkpoint import shipped_checkpoint
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.stats import percentile
    from simreal_ros.training.torch_checkpoint import make_untrained_checkpoint

    torch.set_num_threads(1)
    robot = load_robot_description()
    state = deployed(shipped_checkpoint("push"), robot)
    rate_hz = state.converter.spec.control_rate_hz
    with tempfile.TemporaryDirectory() as tmp:
        camera_dir = make_untrained_checkpoint(
            Path(tmp) / "camera",
            robot,
            task="push",
            control_rate_hz=rate_hz,
            hidden=(hidden, hidden),
            version="bench-camera",
            camera=True,
        )
        camera = deployed(camera_dir, robot)
    spec = camera.converter.spec.camera
    policies = {"camera": camera, "state": state}
    times_ms: dict[str, list[float]] = {name: [] for name in policies}
    obs = observations(robot, spec, WARMUP_TICKS + ticks)
    period = 1.0 / rate_hz
    start = time.monotonic()
    late = 0
    for tick, observation in enumerate(obs):
        order = list(policies) if tick % 2 == 0 else list(reversed(policies))
        for name in order:
            t0 = time.perf_counter()
            policies[name].act(observation)
            elapsed_ms = (time.perf_counter() - t0) * 1e3
            if tick >= WARMUP_TICKS:
                times_ms[name].append(elapsed_ms)
        wait = start + (tick + 1) * period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            late += 1
    results = {
        name: {
            "p50_ms": percentile(values, 50),
            "p99_ms": percentile(values, 99),
            "max_ms": max(values),
            "samples": len(values),
        }
        for name, values in times_ms.items()
    }
    results["rate_hz"] = rate_hz
    results["late_ticks"] = late
    results["frame"] = f"{spec.width}x{spec.height}"
    results["camera_hidden"] = hidden
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=600, help="measured ticks (after warm-up)")
    parser.add_argument("--hidden", type=int, default=256, help="camera policy trunk width")
    parser.add_argument("--cpu", type=int, default=None, help="pin the process to this core")
    parser.add_argument("--json", default=None, help="write results here too")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    results = run(args.ticks, args.hidden)
    camera, state = results["camera"], results["state"]
    print(
        f"per-tick inference (DeployedPolicy.act, numpy, 1 thread), {camera['samples']} ticks "
        f"at {results['rate_hz']:g} Hz, interleaved:"
    )
    for name, label in (
        ("camera", f"camera ({results['frame']} rgb8, {results['camera_hidden']}x2 trunk)"),
        ("state", "state (shipped checkpoints/push)"),
    ):
        r = results[name]
        print(
            f"  {label:42s} p50 {r['p50_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms  "
            f"max {r['max_ms']:7.3f} ms"
        )
    print(
        f"  ratio camera/state: p50 {camera['p50_ms'] / state['p50_ms']:.1f}x  "
        f"p99 {camera['p99_ms'] / state['p99_ms']:.1f}x  "
        f"(ticks that overran the period: {results['late_ticks']})"
    )
    passed = camera["p99_ms"] <= P99_TARGET_MS
    verdict = "PASS" if passed else "FAIL"
    print(f"{verdict}: camera p99 {camera['p99_ms']:.3f} ms (target <= {P99_TARGET_MS:g} ms)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
