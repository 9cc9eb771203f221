"""`simreal trials` in the sim graph: sim_bridge, safety, recorder and the trial runner as separate
processes over DDS; 5 labelled episodes, each a closed bag whose outcome matches."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
import rclpy
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import JointState
from simreal_ros.msg import PolicyAction

from simreal_ros.episodes.bag_reader import bag_state
from simreal_ros.episodes.dataset import (
    iter_bag_messages,
    read_episode,
    read_episode_metadata,
    stamp_ns,
)
from simreal_ros.episodes.steps import CONTROL_STEPS
from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv
from simreal_ros.nodes import qos

pytestmark = pytest.mark.graph


def main_output(argv: list[str]) -> str:
    import contextlib
    import io

    from simreal_ros.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def actions_before_first_state(bag_path, steps: int) -> int:
    """How many of an episode's control steps answer a joint state stamped before the
    bag's first one (the dataset has no observation for them)."""
    first_state, stamps = None, []
    for topic, _, msg in iter_bag_messages(bag_path, ["/joint_states", "/policy/action"]):
        stamp = stamp_ns(msg)
        if topic == "/joint_states":
            first_state = stamp if first_state is None else min(first_state, stamp)
        else:
            stamps.append(stamp)
    assert first_state is not None, bag_path
    return sum(stamp < first_state for stamp in stamps[:steps])


# The sim, and the second-engine stand-in behind the same topics and services: its
# episodes are the stand-in's (real_twin), never sim and never real.
@pytest.mark.parametrize(("profile", "source"), [("nominal", "sim"), ("drake_worn", "real_twin")])
def test_trials_cli_runs_five_labelled_recorded_episodes(
    tmp_path, rclpy_context, executor, profile, source
):
    assert importlib.util.find_spec("simreal_ros.nodes.sim_bridge"), "sim_bridge is missing"
    from simreal_ros.robot.description import load_robot_description

    robot = load_robot_description()
    env = graph_environment()
    bridge = NodeProcess(
        "sim_bridge",
        python_module_argv(
            "simreal_ros.nodes.sim_bridge",
            ["-p", "autostart:=true", "-p", "episode_seconds:=1.0",
             "-p", "joint_state_rate_hz:=100.0", "-p", f"profile:={profile}"],
        ),
        env,
    )  # fmt: skip
    recorder = NodeProcess(
        "recorder",
        python_module_argv(
            "simreal_ros.nodes.recorder",
            ["-p", f"data_dir:={tmp_path / 'episodes'}", "-p", "min_free_disk_mb:=0.0"],
        ),
        env,
    )
    # The sim graph's safety filter, so each reset resyncs it (as `simreal up` runs it).
    safety = NodeProcess(
        "safety",
        python_module_argv(
            "simreal_ros.nodes.safety",
            ["-p", "autostart:=true", "-p", "use_sim_time:=true", "-p", "allow_resync:=true"],
        ),
        env,
    )
    trials = None
    try:
        assert bridge.wait_for_output("active: episode", 60.0), bridge.output()
        assert f"profile {profile}" in bridge.output(), bridge.output()
        assert recorder.wait_for_output("recorder ready", 30.0), recorder.output()
        assert safety.wait_for_output("safety", 30.0), safety.output()
        # A stand-in for the policy: hold the home position, one action per 20 Hz tick,
        # stamped with the observation it answers (so the dataset can align it).
        node = rclpy.create_node("stand_in_policy", context=rclpy_context)
        executor.add_node(node)
        latest: list[JointState] = []
        node.create_subscription(JointState, "/joint_states", latest.append, qos.SENSOR_DATA)
        pub = node.create_publisher(PolicyAction, "/policy/action", qos.COMMAND)
        sequence = [0]

        def act():
            if latest:
                msg = PolicyAction(policy_version="home-hold", sequence=sequence[0])
                msg.header.stamp = latest[-1].header.stamp
                msg.values = [float(v) for v in robot.home_position]
                pub.publish(msg)
                sequence[0] += 1
                del latest[:-1]

        node.create_timer(0.05, act)
        # The first episode's bag holds actions only once the recorder and the safety node
        # have discovered this publisher and it is publishing: wait for both.
        assert wait_for_subscribers(executor, pub, count=2, timeout=30.0)
        assert spin_until(executor, lambda: sequence[0] > 5, 30.0)
        out = tmp_path / "results.json"
        trials = NodeProcess(
            "trials",
            [sys.executable, "-m", "simreal_ros.cli.main", "trials", "--episodes", "5",
             "--timeout", "6", "--seed", "3", "--json", str(out)],
            env,
        )  # fmt: skip
        assert spin_until(executor, lambda: trials.returncode is not None, 150.0), trials.output()
        assert trials.returncode == 0, trials.output()
        assert "successes" in trials.output()
        # Every optional service of the sim graph was found, however late discovery was.
        assert "not available" not in trials.output(), trials.output()
        assert "resync refused" not in trials.output(), trials.output()
        results = json.loads(out.read_text())
        assert len(results) == 5
        for r in results:
            assert r["error"] == "" and r["outcome"] in ("success", "failure"), r
            assert not r["timed_out"], r  # every episode ended on /task/status done
            assert bag_state(r["bag_path"]) == "closed"
            meta = read_episode_metadata(r["bag_path"])
            assert meta.outcome == r["outcome"] and meta.complete and meta.source == source
            assert meta.seed == r["seed"] and meta.condition == "train"
            assert meta.profile == profile
            assert meta.message_counts["/object/pose"] > 50
            assert meta.message_counts["/joint_states"] > 50
            assert meta.message_counts["/task/status"] >= 15
            data = read_episode(r["bag_path"], robot.joint_names)
            assert len(data) > 5, r
            # One length for one bag: the trials' summary and the episode index agree, and
            # the learner gets a transition per control step, less each action whose
            # observation came before the recording started (a loaded host answers late).
            unobserved = actions_before_first_state(r["bag_path"], meta.steps)
            assert r["steps"] == meta.steps and len(data) == meta.steps - unobserved, r
            assert unobserved < meta.steps // 2, (unobserved, r)
            assert data.dones[-1] or data.truncateds[-1]
            np.testing.assert_allclose(data.actions[0], robot.home_position)
        assert [r["seed"] for r in results] == [3, 4, 5, 6, 7]
        listed = main_output(["episodes", "list", "--data-dir", str(tmp_path / "episodes")])
        for r in results:
            (row,) = [line for line in listed.splitlines() if line.startswith(r["episode_id"])]
            assert f" {r['steps']:13d} " in row, (r["steps"], listed)
            assert f"{CONTROL_STEPS} {r['steps']} " in trials.output()
        print("\n" + trials.output()[-600:])
    finally:
        for process in (trials, safety, recorder, bridge):
            if process is not None:
                process.stop()
