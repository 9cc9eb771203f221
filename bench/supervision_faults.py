#!/usr/bin/env python3
"""Policy deaths under supervision: SIGKILL the policy N times in motion, judged from outside.

A sim graph (`simreal up --only sim_bridge,safety,policy,lifecycle_manager`) drives the arm
toward each new episode's goal; the policy is killed while the command moves, then:

- watchdog trip: its /safety/status stamp minus the newest /policy/action stamp, against
  command_timeout + 2 control periods (config/safety.yaml: 0.3 s + 20 ms);
- braking: each joint's commanded travel from the trip to rest, against v^2/(2A) + 2 v dt;
- back: kill -> the filter passes the respawned policy's fresh actions, against 5 s;
- commands outside the position limits (exactly), against 0.

Baseline, in the same run: the same graph with `--no-respawn` (what `simreal up` did
before supervision): one kill, after which the runner tears the graph down; printed is
whether a watchdog trip was published before the filter was stopped, and whether it drove
again (it cannot). Targets: trip within bound in N of N, back within 5 s, 0 outside.

    PYTHONPATH=. .venv/bin/python bench/supervision_faults.py [--kills 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BACK_TARGET_S = 5.0
NODES = "sim_bridge,safety,policy,lifecycle_manager"


def safety_config():
    from simreal_ros.safety import SafetyConfig

    text = (ROOT / "config" / "safety.yaml").read_text()
    return SafetyConfig(**yaml.safe_load(text)["safety"]["ros__parameters"])


def baseline(config) -> str:
    """One kill with respawning off: did the filter publish a trip before it was stopped?"""
    from simreal_ros.nodes.fault_watch import FaultRig

    rig = FaultRig("sim", ["--only", NODES, "--no-respawn"])
    try:
        watch = rig.watch
        rig.wait(lambda: len(watch.commands) > 20 and len(watch.actions) > 5, 180.0, "graph")
        rig.new_episode(100)
        dt = 1.0 / config.control_rate
        rig.wait(lambda: watch.commanded_speed(dt) > 0.05, 60.0, "the arm to move")
        _, killed_at = rig.kill("policy")
        rig.up.process.wait(timeout=60.0)
        time.sleep(0.5)
        _, statuses, commands, _ = watch.snapshot()
        tripped = any(s.received > killed_at and s.watchdog_tripped for s in statuses)
        last_command = max((r for r, _c in commands), default=killed_at) - killed_at
        return (
            f"no-respawn baseline: graph stopped (exit {rig.up.returncode}); watchdog trip "
            f"published: {tripped}; the command stream ended {last_command:.2f} s after the "
            "kill; drove again: False"
        )
    finally:
        rig.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
    import rclpy

    from simreal_ros.graph import description
    from simreal_ros.graph.fault_checks import commands_outside
    from simreal_ros.nodes.fault_watch import FaultRig
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.safety import limits_from_description

    config = safety_config()
    limits = limits_from_description(load_robot_description(), config)
    dt = 1.0 / config.control_rate
    rclpy.init()
    try:
        line = "" if args.no_baseline else baseline(config)
        with tempfile.TemporaryDirectory() as tmp:
            rig = FaultRig(
                "sim", ["--only", NODES, "--set", f"policy.adapter_store={tmp}/adapters"]
            )
            try:
                watch = rig.watch
                rig.wait(lambda: len(watch.commands) > 20 and len(watch.actions) > 5, 180.0, "up")
                kills = []
                previous = -float("inf")
                for k in range(args.kills):
                    # Each kill after the last respawn was stable (stable_after_s): ten
                    # independent deaths, not a crash loop (that one backs off and gives up).
                    stable = description.SUPERVISION["policy"].stable_after_s + 0.5
                    time.sleep(max(0.0, stable - (time.monotonic() - previous)))
                    rig.new_episode(200 + k)
                    kill = rig.kill_policy_in_motion(
                        config.command_timeout, dt, limits.acceleration
                    )
                    kills.append(kill)
                    previous = time.monotonic()
                    print(
                        f"kill {k + 1}: trip {kill.trip_latency_s * 1000:.1f} ms "
                        f"(bound {kill.trip_bound_s * 1000:.0f} ms), braking margin "
                        f"{np.min(kill.braking_bound - kill.braking_distance):.4f} rad, at rest "
                        f"{kill.came_to_rest}, back after {kill.back_after_s:.2f} s",
                        flush=True,
                    )
                _, _, commands, _ = watch.snapshot()
                outside = commands_outside([c for _r, c in commands], limits.lower, limits.upper)
            finally:
                rig.close()
    finally:
        rclpy.try_shutdown()
    trips = [k.trip_latency_s for k in kills]
    backs = [k.back_after_s for k in kills]
    within = sum(k.trip_latency_s <= k.trip_bound_s for k in kills)
    braked = sum(
        bool(np.all(k.braking_distance <= k.braking_bound)) and k.came_to_rest for k in kills
    )
    back_ok = sum(b <= BACK_TARGET_S for b in backs)
    bound = kills[0].trip_bound_s
    print(
        f"\nwatchdog trip after the newest action: median "
        f"{statistics.median(trips) * 1000:.1f} ms, "
        f"max {max(trips) * 1000:.1f} ms; bound {bound * 1000:.0f} ms "
        f"(ratio max/bound {max(trips) / bound:.3f}); within bound in {within} of {len(kills)}"
    )
    print(f"braked to rest within v^2/(2A) + 2 v dt in {braked} of {len(kills)}")
    print(
        f"policy back and driving: median {statistics.median(backs):.2f} s, max "
        f"{max(backs):.2f} s; within {BACK_TARGET_S:g} s in {back_ok} of {len(kills)}"
    )
    print(f"commands outside the position limits: {outside} of {len(commands)}")
    if line:
        print(line)
    met = within == len(kills) and braked == len(kills) and back_ok == len(kills)
    print("targets " + ("met" if met and outside == 0 else "MISSED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
