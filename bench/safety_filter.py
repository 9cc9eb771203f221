"""Benchmark of the safety filter: per-tick cost and the latency the safety node adds.

1. Per-tick filter time for the 7-joint arm with all limits on, with and without the
   workspace check (MuJoCo forward kinematics), for a request that passes and one that is
   limited; baseline: ``numpy.clip`` of the same 7-element array, timed in the same run.
   Targets: <= 20 us per tick and <= 3x the clip.
2. Latency from a /policy/action to the matching /forward_position_controller/commands,
   through the safety node versus a bare rclpy relay node on the same hops (separate
   processes over DDS). The safety node publishes on its own 100 Hz timer, so it is
   compared with a relay that also publishes on a 100 Hz timer (same design) and with a
   relay that republishes inside its subscription callback. Target: <= 1.2x at p99.

Run: PYTHONPATH=. .venv/bin/python bench/safety_filter.py [--seconds 15] [--ticks 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simreal_ros.robot.description import load_robot_description  # noqa: E402
from simreal_ros.safety import SafetyConfig, SafetyFilter  # noqa: E402
from simreal_ros.stats import percentile  # noqa: E402

ROBOT = load_robot_description()
HOME = np.asarray(ROBOT.home_position, dtype=float)


# ----------------------------------------------------------------------------- part 1


FK_PER_TICK: dict[str, float] = {}  # forward kinematics runs per tick, per case


def time_filter(workspace: bool, limited: bool, ticks: int) -> list[float]:
    """Microseconds per tick (submit_command + tick) with a fresh state every tick."""
    f = SafetyFilter.from_description(ROBOT, SafetyConfig(workspace_check=workspace))
    t = 1000.0
    f.submit_state(HOME, t, t)
    f.tick(t)
    samples = []
    phase = np.arange(ROBOT.num_joints)
    for k in range(ticks):
        t += 0.01
        f.submit_state(f.commanded_position, t, t)
        if limited:  # alternate far targets: every joint is limited every tick
            command = HOME + (0.6 if (k // 50) % 2 == 0 else -0.6)
        else:  # a smooth small motion that passes unchanged
            command = HOME + 0.05 * np.sin(0.01 * k + phase)
        if ROBOT.gripper_index is not None:  # half open (home is closed, its lower limit)
            g = ROBOT.gripper_index
            command[g] = 0.5 * (ROBOT.position_lower[g] + ROBOT.position_upper[g])
        start = time.perf_counter_ns()
        f.submit_command(command, t, t)
        f.tick(t)
        samples.append((time.perf_counter_ns() - start) / 1000.0)
    if f.workspace is not None:
        FK_PER_TICK[f"{workspace}/{limited}"] = f.workspace.fk_calls / ticks
    return samples


def time_clip(ticks: int) -> list[float]:
    lower, upper = np.asarray(ROBOT.position_lower), np.asarray(ROBOT.position_upper)
    samples = []
    for k in range(ticks):
        command = HOME + 0.05 * np.sin(0.01 * k + np.arange(ROBOT.num_joints))
        start = time.perf_counter_ns()
        np.clip(command, lower, upper)
        samples.append((time.perf_counter_ns() - start) / 1000.0)
    return samples


def part_one(ticks: int) -> dict:
    results = {"clip": time_clip(ticks)}
    fk_runs = {}
    for workspace in (True, False):
        for limited in (False, True):
            name = f"filter {'with' if workspace else 'without'} FK, " + (
                "limited" if limited else "pass"
            )
            results[name] = time_filter(workspace, limited, ticks)
            fk_runs[name] = FK_PER_TICK.get(f"{workspace}/{limited}")
    results["clip (again)"] = time_clip(ticks)  # the baseline before and after
    clips = results["clip"] + results["clip (again)"]
    clip, clip_min = percentile(clips, 50), min(clips)
    print(f"\n== per-tick time, 7 joints, {ticks} ticks each (microseconds) ==")
    print("min is the least-disturbed sample: the cost without other processes' load")
    print(
        f"{'case':32s} {'min':>7s} {'p50':>8s} {'p99':>9s} {'min/clip':>9s} {'p50/clip':>9s}"
        "  target <=20 us, <=3x clip"
    )
    summary = {}
    for name, samples in results.items():
        low, p50, p99 = min(samples), percentile(samples, 50), percentile(samples, 99)
        summary[name] = {
            "min_us": low,
            "p50_us": p50,
            "p99_us": p99,
            "min_ratio_to_clip": low / clip_min,
            "p50_ratio_to_clip": p50 / clip,
            "fk_per_tick": fk_runs.get(name),
        }
        print(
            f"{name:32s} {low:7.2f} {p50:8.2f} {p99:9.2f} {low / clip_min:8.1f}x "
            f"{p50 / clip:8.1f}x"
        )
    for name, fk in fk_runs.items():
        if fk is not None:  # the workspace check proves most braking paths without FK
            print(f"{name}: {fk:.2f} forward kinematics runs per tick")
    return summary


# ----------------------------------------------------------------------------- part 2

RELAY_SCRIPT = r"""
import sys
import rclpy
from rclpy.node import Node
from std_msgs.msg import Float64MultiArray
from simreal_ros.msg import PolicyAction
from simreal_ros.nodes import qos

mode = sys.argv[1]
rclpy.init()
node = Node("relay")
topic = "/forward_position_controller/commands"
pub = node.create_publisher(Float64MultiArray, topic, qos.COMMAND)
out = Float64MultiArray()
latest = []

def on_action(msg):
    if mode == "callback":
        out.data = list(msg.values)
        pub.publish(out)
    else:
        latest[:] = [msg]

def on_timer():
    if latest:
        out.data = list(latest[0].values)
        pub.publish(out)

node.create_subscription(PolicyAction, "/policy/action", on_action, qos.COMMAND)
if mode == "timer":
    node.create_timer(0.01, on_timer)
print("relay ready", flush=True)
try:
    rclpy.spin(node)
except Exception:
    pass
"""


def measure_latency(label: str, argv: list[str], env: dict, seconds: float) -> list[float]:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from simreal_ros.msg import PolicyAction
    from std_msgs.msg import Float64MultiArray

    from simreal_ros.graph.processes import NodeProcess
    from simreal_ros.nodes import qos

    process = NodeProcess(label, argv, env)
    rclpy.init()
    node = Node("latency_driver")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    sent: dict[float, float] = {}
    latencies: list[float] = []

    def on_command(msg):
        received = time.perf_counter()
        key = msg.data[0] if len(msg.data) else None
        start = sent.pop(key, None)
        if start is not None:
            latencies.append((received - start) * 1e6)

    node.create_subscription(
        Float64MultiArray, "/forward_position_controller/commands", on_command, qos.COMMAND
    )
    state_pub = node.create_publisher(JointState, "/joint_states", qos.STATE)
    action_pub = node.create_publisher(PolicyAction, "/policy/action", qos.COMMAND)
    names = list(ROBOT.joint_names)
    target = HOME.copy()
    counter = [0]

    def send_state():
        msg = JointState()
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.name = names
        msg.position = target.tolist()
        state_pub.publish(msg)

    def send_action():
        time.sleep(random.random() * 0.004)  # decorrelate from the node's timer phase
        counter[0] += 1
        target[0] = HOME[0] + 1e-4 * (counter[0] % 400)  # small: the filter passes it
        msg = PolicyAction()
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.values = target.tolist()
        sent[float(target[0])] = time.perf_counter()
        action_pub.publish(msg)

    try:
        deadline = time.monotonic() + 20.0
        while action_pub.get_subscription_count() < 1 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        if action_pub.get_subscription_count() < 1:
            raise RuntimeError(f"{label} never subscribed; its output:\n{process.output()}")
        node.create_timer(0.01, send_state)
        warmup_end = time.monotonic() + 1.0
        while time.monotonic() < warmup_end:
            executor.spin_once(timeout_sec=0.01)
        node.create_timer(0.02, send_action)
        latencies.clear()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.01)
    finally:
        node.destroy_node()
        executor.shutdown()
        rclpy.try_shutdown()
        process.stop()
    return latencies


def part_two(seconds: float) -> dict:
    from simreal_ros.graph.processes import graph_environment, python_module_argv

    env = graph_environment(domain_id=random.randint(101, 200))
    os.environ.update(env)
    variants = {
        "safety node (100 Hz timer)": python_module_argv(
            "simreal_ros.nodes.safety", ["-p", "autostart:=true"]
        ),
        "bare relay, 100 Hz timer": [sys.executable, "-c", RELAY_SCRIPT, "timer"],
        "bare relay, in callback": [sys.executable, "-c", RELAY_SCRIPT, "callback"],
    }
    results = {}
    print(f"\n== /policy/action -> command latency over DDS, {seconds:g} s each (us) ==")
    for label, argv in variants.items():
        latencies = measure_latency(label, argv, env, seconds)
        if not latencies:
            raise RuntimeError(f"no matched commands through {label}")
        results[label] = {
            "samples": len(latencies),
            "p50_us": percentile(latencies, 50),
            "p99_us": percentile(latencies, 99),
        }
        r = results[label]
        print(f"{label:30s} n={r['samples']:5d} p50 {r['p50_us']:9.1f}  p99 {r['p99_us']:9.1f}")
    safety = results["safety node (100 Hz timer)"]
    for base in ("bare relay, 100 Hz timer", "bare relay, in callback"):
        b = results[base]
        print(
            f"safety / {base}: p50 {safety['p50_us'] / b['p50_us']:.2f}x, "
            f"p99 {safety['p99_us'] / b['p99_us']:.2f}x (target <= 1.2x at p99 vs the timer relay)"
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    summary = {"per_tick": part_one(args.ticks)}
    if not args.skip_latency:
        summary["latency"] = part_two(args.seconds)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "safety_filter.json").write_text(json.dumps(summary, indent=2))
    print(f"\nwrote {out / 'safety_filter.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
