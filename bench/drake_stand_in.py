#!/usr/bin/env python3
"""The second-engine stand-in's cost: episodes through Drake against a MuJoCo stand-in.

The shipped push policy plays the same seeds behind the safety filter, one process, on
the MuJoCo stand-in (the baseline, ``real_twin``) and on each Drake configuration, through
the same evaluation code the loop and `simreal eval` use. Per configuration: wall seconds
per episode and per control step, and the ratio to the baseline in this run (target <= 3
per episode). Then the real-time factor (simulated seconds per wall second) of the physics
alone, an arm holding still with the cube on the table, and of the sim bridge's core
free-running as fast as it can with its outputs (what the graph can hold; it needs 1).

    PYTHONPATH=. .venv/bin/python bench/drake_stand_in.py [--episodes 20] [--robot panda]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

BASELINE = "real_twin"
CONFIGURATIONS = ("drake_clean", "drake_worn")


def episodes(profile: str, seeds: list[int], robot) -> dict:
    from simreal_ros.policy.checkpoint import shipped_checkpoint
    from simreal_ros.training.evaluate import evaluate_policy

    started = time.perf_counter()
    result = evaluate_policy(
        str(shipped_checkpoint("push")), profile, "train", seeds, workers=1,
        safety_filter=True, robot=robot,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    steps = sum(r.length for r in result.records)
    return {
        "profile": profile,
        "success": f"{result.successes}/{result.episodes}",
        "per_episode": seconds / len(seeds),
        "per_step": seconds / steps,
    }


def real_time_factor(profile: str, robot, seconds: float = 5.0) -> float:
    """Simulated seconds per wall second: the arm holding home, the cube on the table."""
    from simreal_ros.sim.environment import physics_for
    from simreal_ros.sim.profiles import load_profile

    physics = physics_for(robot, load_profile(profile))
    home = np.array(robot.home_position)
    physics.reset(home, cube_position=np.array([0.5, 0.0, physics.cube_half_size]))
    physics.set_command(home)
    steps = round(seconds / physics.timestep)
    started = time.perf_counter()
    physics.step(steps)
    return seconds / (time.perf_counter() - started)


class _NullSink:
    """The bridge's outputs, dropped: what is measured is the bridge's own work."""

    def joint_state(self, *args) -> None: ...
    def object_pose(self, *args) -> None: ...
    def task_status(self, *args) -> None: ...
    def clock(self, *args) -> None: ...


def bridge_real_time_factor(profile: str, robot, seconds: float = 5.0) -> float:
    """The sim bridge's core free-running as fast as it can (real_time_factor 0), with
    /joint_states at 100 Hz: the most simulated time per wall second the graph can get."""
    from simreal_ros.sim.bridge import SimBridgeConfig, SimBridgeCore

    config = SimBridgeConfig(profile=profile, real_time_factor=0.0, joint_state_rate_hz=100.0)
    core = SimBridgeCore(config, _NullSink(), robot)
    core.reset(seed=0, condition="train")
    start_sim, started = core.sim_time, time.perf_counter()
    core.start()
    time.sleep(seconds)
    core.stop()
    return (core.sim_time - start_sim) / (time.perf_counter() - started)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--robot", default="simreal_arm")
    parser.add_argument("--first-seed", type=int, default=300000)
    args = parser.parse_args(argv)
    from simreal_ros.robot.description import load_robot_description, select_robot

    select_robot(args.robot)
    robot = load_robot_description(args.robot)
    seeds = list(range(args.first_seed, args.first_seed + args.episodes))
    rows = [episodes(BASELINE, seeds, robot)]
    rows += [episodes(name, seeds, robot) for name in CONFIGURATIONS]
    base = rows[0]
    print(f"{args.robot}, {args.episodes} episodes of the shipped push policy behind the "
          "safety filter, one process")  # fmt: skip
    print(f"{'profile':<14} {'success':>8} {'s/episode':>10} {'ms/step':>8} "
          f"{'ratio/episode':>14} {'ratio/step':>11}")  # fmt: skip
    worst = 0.0
    for row in rows:
        per_episode = row["per_episode"] / base["per_episode"]
        per_step = row["per_step"] / base["per_step"]
        if row is not base:
            worst = max(worst, per_episode)
        milliseconds = 1000 * row["per_step"]
        print(f"{row['profile']:<14} {row['success']:>8} {row['per_episode']:>10.3f} "
              f"{milliseconds:>8.2f} {per_episode:>14.2f} {per_step:>11.2f}")  # fmt: skip
    print("physics alone, real-time factor (simulated s per wall s):")
    for profile in ("nominal", *CONFIGURATIONS):
        print(f"  {profile:<12} {real_time_factor(profile, robot):8.1f}")
    print("the sim bridge's core, free-running as fast as it can (the graph needs >= 1):")
    for profile in (BASELINE, *CONFIGURATIONS):
        print(f"  {profile:<12} {bridge_real_time_factor(profile, robot):8.1f}")
    print(f"worst Drake episode cost: {worst:.2f}x the MuJoCo stand-in's (target <= 3)")
    return 0 if worst <= 3.0 else 1


if __name__ == "__main__":
    sys.exit(main())
