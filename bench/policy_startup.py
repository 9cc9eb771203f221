#!/usr/bin/env python3
"""Policy node start-up: process start -> lifecycle "active", against a bare rclpy node.

The policy node is started the way the graph starts it (``python -m simreal_ros.nodes.policy
--ros-args -p autostart:=true``, the shipped checkpoint of its default task, no adapters),
and timed from ``Popen`` to its "active:" log line. Baseline, measured in the same run and
interleaved with it: a bare rclpy node process (init, one Node, a "ready" log line), the
floor any node process pays (interpreter, rclpy, DDS participant). Target: policy < 3 s.

The node never imports torch or peft, not even for adapters (merged in numpy on its loader
thread, policy/lora_merge.py). With ``--swap`` a fresh node at 100 Hz (wall clock) gets two
promoted adapters in turn: the first after a cold start, the second (warm) is the baseline.
Printed: load time and missed ticks (gaps in PolicyAction.sequence) from each update to 1 s
after, and whether torch ever got mapped into the node process (/proc/<pid>/maps).

    PYTHONPATH=. .venv/bin/python bench/policy_startup.py [--runs 3] [--swap]
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 3.0
SWAP_RATE_HZ = 100.0


def run_bare() -> None:
    """The baseline: an rclpy node process that starts and says it is ready."""
    from rclpy.node import Node

    from simreal_ros.nodes.runtime import run_node

    def make_bare() -> Node:
        node = Node("bare")
        node.get_logger().info("bare node ready")
        return node

    run_node(make_bare)


def time_to_lines(argv: list[str], env: dict, marks: list[str], timeout: float) -> list[float]:
    """Seconds from process start until each of ``marks`` appears in its output."""
    from simreal_ros.graph.processes import NodeProcess

    start = time.monotonic()
    process = NodeProcess("startup", argv, env)
    seen: list[float] = []
    try:
        for mark in marks:
            while mark not in process.output():
                if process.returncode is not None or time.monotonic() - start > timeout:
                    raise RuntimeError(
                        f"{argv[2]}: no {mark!r} after {time.monotonic() - start:.1f} s; "
                        f"output:\n{process.output()[-2000:]}"
                    )
                time.sleep(0.002)
            seen.append(time.monotonic() - start)
    finally:
        process.stop()
    return seen


def make_adapter(base_dir: Path, adapter_dir: Path, version: str, seed: int) -> None:
    """What the learner writes: a peft LoRA adapter on the actor (random, non-zero)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from simreal_ros.policy import checkpoint as ckpt
    from simreal_ros.training.model import ACTOR_LORA_TARGETS
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    base = load_checkpoint(base_dir, with_critic=False)
    torch.manual_seed(seed)
    actor = get_peft_model(
        copy.deepcopy(base.model.actor),
        LoraConfig(r=4, lora_alpha=8, target_modules=list(ACTOR_LORA_TARGETS)),
    )
    with torch.no_grad():
        for name, parameter in actor.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.1)
    actor.save_pretrained(str(adapter_dir))
    ckpt.write_adapter_metadata(adapter_dir, base, version, base.version)


def torch_mapped(pid: int) -> bool | None:
    """Whether torch's libraries are mapped into process ``pid`` (None: cannot tell)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    return "/torch/" in maps


def measure_swaps(env: dict, timeout: float) -> list[dict]:
    """A fresh policy node at 100 Hz, two promoted adapters in turn: load time, missed ticks."""
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from simreal_ros.msg import PolicyAction, PolicyUpdate, TaskStatus

    from simreal_ros.graph.processes import NodeProcess, python_module_argv
    from simreal_ros.nodes import qos
    from simreal_ros.policy import checkpoint as ckpt
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.torch_checkpoint import make_untrained_checkpoint

    robot = load_robot_description()
    work = Path(tempfile.mkdtemp(prefix="policy_startup."))
    base = make_untrained_checkpoint(
        work / "base", robot, control_rate_hz=SWAP_RATE_HZ, hidden=(256, 256), version="base"
    )
    for seed, version in enumerate(("a1", "a2")):
        make_adapter(base, work / version, version, seed)
    argv = python_module_argv(
        "simreal_ros.nodes.policy", ["-p", "autostart:=true", "-p", f"checkpoint:={base}"]
    )
    process = NodeProcess("policy", argv, env)
    rclpy.init()
    node = Node("startup_bench_driver")
    try:
        if not process.wait_for_output("active:", timeout):
            raise RuntimeError(f"policy node not active:\n{process.output()[-2000:]}")
        actions: list[tuple[float, int, str]] = []
        node.create_subscription(
            PolicyAction,
            "/policy/action",
            lambda m: actions.append((time.monotonic(), m.sequence, m.policy_version)),
            QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE),
        )
        joints = node.create_publisher(JointState, "/joint_states", qos.STATE)
        pose = node.create_publisher(PoseStamped, "/object/pose", qos.STATE)
        status = node.create_publisher(TaskStatus, "/task/status", qos.STATUS)
        updates = node.create_publisher(PolicyUpdate, "/learner/policy_update", qos.LATCHED)
        js = JointState(name=list(robot.joint_names), velocity=[0.0] * len(robot.joint_names))
        js.position = [float(q) for q in robot.home_position]
        p = PoseStamped()
        p.pose.position.x, p.pose.position.z, p.pose.orientation.w = 0.5, 0.025, 1.0
        s = TaskStatus(task="reach")
        s.goal.x, s.goal.z = 0.5, 0.2

        def publish() -> None:
            js.header.stamp = node.get_clock().now().to_msg()
            joints.publish(js)
            pose.publish(p)
            status.publish(s)

        node.create_timer(1.0 / (2 * SWAP_RATE_HZ), publish)

        def spin_until(condition, seconds: float) -> bool:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                if condition():
                    return True
                rclpy.spin_once(node, timeout_sec=0.005)
            return condition()

        if not spin_until(lambda: len(actions) > SWAP_RATE_HZ, timeout):
            raise RuntimeError(f"no actions from the policy node:\n{process.output()[-2000:]}")
        results = []
        for version in ("a1", "a2"):
            first = len(actions)
            sent = time.monotonic()
            updates.publish(
                PolicyUpdate(
                    version=version,
                    adapter_path=str(work / version),
                    checksum=ckpt.sha256_file(work / version / ckpt.ADAPTER_WEIGHTS),
                    promoted=True,
                )
            )
            if not spin_until(lambda v=version: actions[-1][2] == v, timeout):
                raise RuntimeError(f"{version} never ran:\n{process.output()[-2000:]}")
            swapped = next(t for t, _, v in actions[first:] if v == version)
            spin_until(lambda: False, 1.0)
            sequences = np.array([q for _, q, _ in actions[first - 1 :]])
            gaps = np.diff(sequences)
            results.append(
                {
                    "version": version,
                    "load_s": swapped - sent,
                    "missed": int(np.sum(gaps[gaps > 1] - 1)),
                    "longest_gap_ms": float(gaps.max() * 1e3 / SWAP_RATE_HZ),
                    "torch_loaded": torch_mapped(process.process.pid),
                }
            )
        return results
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        process.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="start-ups of each process")
    parser.add_argument("--timeout", type=float, default=60.0, help="per start-up")
    parser.add_argument("--swap", action="store_true", help="also time the first two swaps")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        run_bare()
        return
    from simreal_ros.graph.processes import graph_environment, python_module_argv

    env = graph_environment(domain_id=int(time.time()) % 90 + 5)
    os.environ.update(env)  # this process's driver node (--swap) joins the same domain
    bare_argv = [sys.executable, str(Path(__file__).resolve()), "--bare"]
    policy_argv = python_module_argv("simreal_ros.nodes.policy", ["-p", "autostart:=true"])
    bare, configured, active = [], [], []
    for _ in range(args.runs):  # interleaved, so both see the same machine
        bare += time_to_lines(bare_argv, env, ["bare node ready"], args.timeout)
        times = time_to_lines(policy_argv, env, ["configured:", "active:"], args.timeout)
        configured.append(times[0])
        active.append(times[1])

    def describe(values: list[float]) -> str:
        listed = ", ".join(f"{v:.2f}" for v in values)
        return f"median {statistics.median(values):.2f} s  ({listed})"

    print(f"process start -> ready, {args.runs} runs each (shipped checkpoint, no adapters):")
    print(f"  bare rclpy node  -> ready     : {describe(bare)}")
    print(f"  policy node      -> configured: {describe(configured)}")
    print(f"  policy node      -> active    : {describe(active)}")
    median_active = statistics.median(active)
    print(
        f"  ratio policy/bare: {median_active / statistics.median(bare):.2f}x; policy "
        f"{median_active:.2f} s (target < {TARGET_S:g} s), "
        f"{median_active - statistics.median(bare):.2f} s above the bare node"
    )
    if args.swap:
        first, second = measure_swaps(env, args.timeout)
        print(f"hot swap at {SWAP_RATE_HZ:g} Hz (wall clock), update -> 1 s after the swap:")
        for label, r in (
            ("first (after a cold start)", first),
            ("second (warm, baseline)", second),
        ):
            torch_loaded = {True: "yes", False: "no", None: "unknown"}[r["torch_loaded"]]
            print(
                f"  {label:28s}: load {r['load_s']:.2f} s, missed ticks {r['missed']} "
                f"(longest gap {r['longest_gap_ms']:.0f} ms), torch in the node: {torch_loaded}"
            )


if __name__ == "__main__":
    main()
