"""Benchmark of the policy node: latency against a bare relay, forward time, missed ticks.

1. Observation -> action latency over DDS between processes. A driver publishes
   /joint_states at 500 Hz (like the sim bridge) plus /object/pose and /task/status; the
   policy node (100 Hz checkpoint, 256x256 actor) publishes /policy/action stamped with
   the joint state it used. Baseline: a bare rclpy relay with the same hops (same
   subscriptions, QoS and timer rate; it copies the joint positions into the action).
   Latency = receive time - observation stamp. Target: policy p99 <= 1.2 x relay p99.
2. Model forward: torch (no_grad, batch 1) against the numpy forward the node runs,
   same weights.
3. Missed ticks: gaps in PolicyAction.sequence over the run (target 0), and the node's
   own count from /diagnostics.

    PYTHONPATH=. .venv/bin/python bench/policy_node.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RATE_HZ = 100.0
RELAY_TOPIC = "/relay/action"
TOPICS = {"policy": "/policy/action", "relay": RELAY_TOPIC}
OBSERVATION_HZ = 500.0


def run_relay(rate_hz: float) -> None:
    """The baseline: same hops as the policy node, no policy."""
    from geometry_msgs.msg import PoseStamped
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from simreal_ros.msg import PolicyAction, TaskStatus

    from simreal_ros.nodes import qos
    from simreal_ros.nodes.runtime import run_node

    def make_relay() -> Node:
        node = Node("relay")
        latest: list[JointState] = []
        publisher = node.create_publisher(PolicyAction, RELAY_TOPIC, qos.COMMAND)
        # Same subscriptions and QoS as the policy node; only the joint state is used.
        node.create_subscription(
            JointState, "/joint_states", lambda m: _keep(latest, m), qos.SENSOR_DATA
        )
        node.create_subscription(PoseStamped, "/object/pose", lambda m: None, qos.SENSOR_DATA)
        node.create_subscription(TaskStatus, "/task/status", lambda m: None, qos.STATUS)
        # Tick index on the timer's grid, exactly as the policy node numbers its ticks.
        period_ns = round(1e9 / rate_hz)
        origin = node.get_clock().now().nanoseconds
        sequence = [-1]

        def tick() -> None:
            now = node.get_clock().now().nanoseconds
            sequence[0] = max((now - origin) // period_ns, sequence[0] + 1)
            if not latest:
                return
            msg = PolicyAction()
            msg.header.stamp = latest[0].header.stamp
            msg.policy_version = "relay"
            msg.sequence = sequence[0]
            msg.joint_names = list(latest[0].name)
            msg.values = list(latest[0].position)
            publisher.publish(msg)

        node.create_timer(1.0 / rate_hz, tick)
        print("relay ready", flush=True)
        return node

    run_node(make_relay)


def _keep(latest: list, message) -> None:
    latest[:] = [message]


def drive(processes: dict, seconds: float) -> dict:
    """Publish observations, collect both nodes' actions for ``seconds`` (both run at once,
    so they share the machine's load); returns latency stats per node."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PoseStamped
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from simreal_ros.msg import PolicyAction, TaskStatus

    from simreal_ros.nodes import qos
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.stats import percentile

    robot = load_robot_description()
    rclpy.init()
    node = Node("bench_driver")
    joints = node.create_publisher(JointState, "/joint_states", qos.STATE)
    pose = node.create_publisher(PoseStamped, "/object/pose", qos.STATE)
    status = node.create_publisher(TaskStatus, "/task/status", qos.STATUS)
    received: dict[str, list[tuple[float, float, int]]] = {label: [] for label in TOPICS}
    diagnostics: dict[str, str] = {}

    def on_action(label: str, msg: PolicyAction) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        received[label].append((time.time(), stamp, msg.sequence))

    def on_diag(msg: DiagnosticArray) -> None:
        for s in msg.status:
            if s.name.startswith("policy"):
                diagnostics.update({kv.key: kv.value for kv in s.values})

    for label, topic in TOPICS.items():
        node.create_subscription(
            PolicyAction,
            topic,
            lambda m, label=label: on_action(label, m),
            QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE),
        )
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, qos.STATUS)
    position = np.asarray(robot.home_position, dtype=float)
    js = JointState(name=list(robot.joint_names), velocity=[0.0] * robot.num_joints)
    count = [0]

    def publish() -> None:
        js.header.stamp = _now_msg()
        js.position = (position + 1e-4 * np.sin(count[0] * 0.01)).tolist()
        joints.publish(js)
        count[0] += 1
        if count[0] % 5 == 0:
            p = PoseStamped()
            p.pose.position.x, p.pose.position.y, p.pose.position.z = 0.5, 0.0, 0.025
            p.pose.orientation.w = 1.0
            pose.publish(p)
        if count[0] % 25 == 0:
            s = TaskStatus(task="reach")
            s.goal.x, s.goal.y, s.goal.z = 0.5, 0.1, 0.2
            status.publish(s)

    node.create_timer(1.0 / OBSERVATION_HZ, publish)
    # Warm up until actions flow, then measure.
    deadline = time.monotonic() + 60.0
    while not all(received.values()) and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.01)
    for label, process in processes.items():
        if not received[label]:
            raise RuntimeError(f"{label}: no actions arrived; output:\n{process.output()}")
    end_warmup = time.monotonic() + 2.0
    while time.monotonic() < end_warmup:
        rclpy.spin_once(node, timeout_sec=0.01)
    for values in received.values():
        values.clear()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.01)
    # Let the last diagnostics arrive.
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.01)
    node.destroy_node()
    rclpy.try_shutdown()
    results = {}
    for label, rows in received.items():
        latency_ms = [(r - s) * 1e3 for r, s, _ in rows]
        sequences = np.array([q for _, _, q in rows])
        gaps = np.diff(sequences) if len(sequences) > 1 else np.array([1])
        results[label] = {
            "actions": len(rows),
            "rate_hz": len(rows) / seconds,
            "p50_ms": percentile(latency_ms, 50),
            "p99_ms": percentile(latency_ms, 99),
            "max_ms": max(latency_ms),
            "sequence_gaps": int(np.sum(gaps[gaps > 1] - 1)),
        }
    results["policy"].update(
        node_missed_ticks=diagnostics.get("missed_ticks"),
        node_inference_p50_us=diagnostics.get("inference_p50_us"),
        node_inference_p99_us=diagnostics.get("inference_p99_us"),
    )
    return results


def _now_msg():
    from builtin_interfaces.msg import Time

    now = time.time_ns()
    return Time(sec=now // 1_000_000_000, nanosec=now % 1_000_000_000)


def forward_times(checkpoint_dir: Path) -> dict:
    import torch

    from simreal_ros.policy.inference import NumpyActor
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    torch.set_num_threads(1)
    actor = load_checkpoint(checkpoint_dir).model.actor
    numpy_actor = NumpyActor(actor)
    x = np.random.default_rng(0).normal(size=actor.arch.obs_dim)
    xt = torch.as_tensor(x, dtype=torch.float32)

    def torch_forward():
        with torch.no_grad():
            return actor(xt).numpy()

    n = 3000
    torch_us = min(timeit.repeat(torch_forward, number=n, repeat=3)) / n * 1e6
    numpy_us = min(timeit.repeat(lambda: numpy_actor(x), number=n, repeat=3)) / n * 1e6
    return {"torch_us": torch_us, "numpy_us": numpy_us, "torch_over_numpy": torch_us / numpy_us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measurement per run")
    parser.add_argument("--relay", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="write results here too")
    args = parser.parse_args()
    if args.relay:
        run_relay(RATE_HZ)
        return
    from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.torch_checkpoint import make_untrained_checkpoint

    env = graph_environment(domain_id=int(time.time()) % 90 + 5)
    import os

    os.environ.update(env)
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = make_untrained_checkpoint(
            Path(tmp) / "bench",
            load_robot_description(),
            control_rate_hz=RATE_HZ,
            hidden=(256, 256),
            version="bench-100hz",
        )
        results["forward"] = forward_times(checkpoint)
        runs = {
            "policy": python_module_argv(
                "simreal_ros.nodes.policy",
                [
                    "-p",
                    "autostart:=true",
                    "-p",
                    f"checkpoint:={checkpoint}",
                    "-p",
                    "diagnostics_period:=0.5",
                ],
            ),
            "relay": [sys.executable, str(Path(__file__).resolve()), "--relay"],
        }
        processes = {label: NodeProcess(label, argv, env) for label, argv in runs.items()}
        try:
            results.update(drive(processes, args.seconds))
        finally:
            for process in processes.values():
                process.stop()
    policy, relay, forward = results["policy"], results["relay"], results["forward"]
    print(
        f"observation -> action latency over DDS ({args.seconds:g} s, both at once, "
        f"{RATE_HZ:g} Hz):"
    )
    for label in ("policy", "relay"):
        r = results[label]
        print(
            f"  {label:6s}: p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  "
            f"max {r['max_ms']:.2f} ms  ({r['actions']} actions, {r['rate_hz']:.1f}/s)"
        )
    print(
        f"  ratio policy/relay: p50 {policy['p50_ms'] / relay['p50_ms']:.2f}x  "
        f"p99 {policy['p99_ms'] / relay['p99_ms']:.2f}x (target <= 1.2x at p99)"
    )
    print(
        f"model forward (batch 1): torch {forward['torch_us']:.1f} us, numpy "
        f"{forward['numpy_us']:.1f} us -> numpy is {forward['torch_over_numpy']:.1f}x faster"
    )
    print(
        f"node inference (numpy, incl. conversions and FK): p50 "
        f"{policy['node_inference_p50_us']} us, p99 {policy['node_inference_p99_us']} us"
    )
    print(
        f"missed ticks at {RATE_HZ:g} Hz over {args.seconds:g} s: policy sequence gaps "
        f"{policy['sequence_gaps']} (node's own count {policy['node_missed_ticks']}, target 0); "
        f"bare relay on the same grid: {relay['sequence_gaps']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
