"""Benchmark: the sim bridge's physics rate with publishing on vs a raw mj_step loop.

Run: PYTHONPATH=. .venv/bin/python bench/sim_bridge.py [--rounds 6] [--slice 0.5]

Same model, same process, interleaved in short slices so drifting machine load hits both:
  - raw:    a bare Python loop of mujoco.mj_step on the bridge's physics (its physics
            thread stopped);
  - bridge: the sim_bridge node free-running as fast as possible (real_time_factor 0),
            publishing every topic, with a /joint_states subscriber in another process.
Prints median steps/s of each, the ratio bridge/raw (target >= 0.9), and the same ratio per
CPU second of the stepping thread. On a machine shared with other jobs the wall-clock rates
mostly measure the scheduler's share of a core, not the bridge, so read the per-CPU ratio
there. Then it runs the bridge at real-time factor 1 and prints its physics rate and the
/joint_states rate received by the subscriber against the configured rates.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import mujoco
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter

from simreal_ros.graph.processes import NodeProcess, graph_environment
from simreal_ros.nodes.sim_bridge import SimBridgeNode

# A separate process counts /joint_states and prints "<monotonic time> <count>" lines.
PROBE = """
import time, rclpy
from sensor_msgs.msg import JointState
from simreal_ros.nodes import qos
rclpy.init()
node = rclpy.create_node("bench_probe")
count = [0]
def on_state(_):
    count[0] += 1
node.create_subscription(JointState, "/joint_states", on_state, qos.STATE)
print("probe ready", flush=True)
last = time.monotonic()
while rclpy.ok():
    rclpy.spin_once(node, timeout_sec=0.01)
    if time.monotonic() - last >= 0.1:
        last = time.monotonic()
        print(f"count {last:.6f} {count[0]}", flush=True)
"""


def probe_count(probe: NodeProcess, at: float) -> tuple[float, int]:
    """The probe's (time, count) report closest after ``at`` (wait for it)."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        for line in probe.output().splitlines():
            if line.startswith("count "):
                _, stamp, count = line.split()
                if float(stamp) >= at:
                    return float(stamp), int(count)
        time.sleep(0.05)
    raise RuntimeError("the /joint_states probe stopped reporting:\n" + probe.output()[-2000:])


def run_for(executor, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="raw/bridge slice pairs")
    parser.add_argument("--slice", type=float, default=0.5, help="seconds per slice")
    parser.add_argument("--rate", type=float, default=500.0, help="joint_state_rate_hz")
    args = parser.parse_args()

    probe = NodeProcess("probe", [sys.executable, "-c", PROBE], graph_environment())
    context = Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    bridge = SimBridgeNode(
        context=context,
        parameter_overrides=[
            Parameter("autostart", value=True),
            Parameter("real_time_factor", value=0.0),
            Parameter("joint_state_rate_hz", value=args.rate),
        ],
    )
    executor.add_node(bridge)
    core = bridge.core
    model, data = core.physics.model, core.physics.data
    try:
        assert probe.wait_for_output("probe ready", 30.0), probe.output()
        while bridge._joint_pub.get_subscription_count() < 1:
            executor.spin_once(timeout_sec=0.05)
        run_for(executor, 1.0)  # warm up

        raw, fast, topic_fast, raw_cpu, fast_cpu = [], [], [], [], []
        for _ in range(args.rounds):
            core.stop()  # no physics thread at all while the raw loop runs
            with core.lock:
                steps, start, cpu = 0, time.perf_counter(), time.thread_time()
                while time.perf_counter() - start < args.slice:
                    for _ in range(50):
                        mujoco.mj_step(model, data)
                    steps += 50
                raw.append(steps / (time.perf_counter() - start))
                raw_cpu.append(steps / (time.thread_time() - cpu))
            core.start()
            run_for(executor, 0.05)  # the physics thread resumes
            wall0, steps0, cpu0 = time.monotonic(), core.total_steps, core.physics_thread_cpu
            run_for(executor, args.slice)
            wall1, steps1, cpu1 = time.monotonic(), core.total_steps, core.physics_thread_cpu
            fast.append((steps1 - steps0) / (wall1 - wall0))
            fast_cpu.append((steps1 - steps0) / max(cpu1 - cpu0, 1e-9))
            (t0, c0), (t1, c1) = probe_count(probe, wall0), probe_count(probe, wall1)
            topic_fast.append((c1 - c0) / (t1 - t0))

        # Real-time factor 1: physics and topic rates against the configured ones.
        core.real_time_factor = 1.0
        core.set_paused(False)
        run_for(executor, 1.0)
        wall0, steps0 = time.monotonic(), core.total_steps
        t0, c0 = probe_count(probe, wall0)
        run_for(executor, 3.0)
        wall1, steps1 = time.monotonic(), core.total_steps
        t1, c1 = probe_count(probe, wall1)
        paced_steps = (steps1 - steps0) / (wall1 - wall0)
        paced_topic = (c1 - c0) / (t1 - t0)
    finally:
        executor.remove_node(bridge)
        bridge.destroy_node()
        executor.shutdown()
        rclpy.shutdown(context=context)
        probe.stop()

    raw_median, fast_median = statistics.median(raw), statistics.median(fast)
    target_steps = 1.0 / model.opt.timestep
    print(
        f"model arm.xml, timestep {model.opt.timestep * 1e3:g} ms, {args.rounds} rounds of "
        f"{args.slice:g} s, /joint_states configured at {args.rate:g} Hz"
    )
    print(
        f"raw mj_step loop           : {raw_median:9.0f} steps/s (median; "
        f"{min(raw):.0f}..{max(raw):.0f})"
    )
    print(
        f"bridge RTF 0, publishing   : {fast_median:9.0f} steps/s (median; "
        f"{min(fast):.0f}..{max(fast):.0f}); /joint_states received "
        f"{statistics.median(topic_fast):.0f} Hz"
    )
    print(f"ratio bridge / raw         : {fast_median / raw_median:9.3f} (target >= 0.9)")
    raw_cpu_median, fast_cpu_median = statistics.median(raw_cpu), statistics.median(fast_cpu)
    print(
        f"per CPU second of the thread: raw {raw_cpu_median:.0f}, bridge (stepping + "
        f"publishing) {fast_cpu_median:.0f} steps, ratio {fast_cpu_median / raw_cpu_median:.3f}"
        " (less sensitive to other jobs on the machine)"
    )
    print(
        f"bridge RTF 1, publishing   : {paced_steps:9.1f} steps/s (configured "
        f"{target_steps:g}, ratio {paced_steps / target_steps:.3f})"
    )
    print(
        f"/joint_states at RTF 1     : {paced_topic:9.1f} Hz received (configured "
        f"{args.rate:g}, ratio {paced_topic / args.rate:.3f})"
    )


if __name__ == "__main__":
    main()
