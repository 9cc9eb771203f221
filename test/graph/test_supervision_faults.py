"""Fault injection: SIGKILL each node of a running graph in turn, during motion, and judge
from outside the killed process (docs/supervision.md states the bounds checked here).

- After a policy death the safety filter's watchdog trips (the command_timeout + 2
  control periods target is timed by the bench; here it has 0.2 s of slack), the command
  brakes to rest within v^2/(2A) + 2 v dt of where it was, and the respawned policy drives
  again (the 5 s target is timed by the bench).
- No command to the arm is ever outside the position limits (exactly).
- A recorder killed mid-episode leaves a bag that recovers and reads; the trial runner's
  next episode records a closed, complete bag. No bag is lost.
- A dead safety filter is reported by the lifecycle manager (ERROR on /diagnostics) and the
  policy's actions resume only after the new filter is active.
One `simreal up` graph is shared by all kills (sim: the sim bridge; real: the stand-in arm).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from simreal_ros.graph.fault_checks import (
    commands_outside,
    filter_death_seen,
    judge_filter_death,
)
from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv
from simreal_ros.graph.runner import GRAPH_READY

# Serial: it times a respawn and a watchdog trip, which other tests' load can push past
# their bounds; `make test` runs it alone after the rest.
pytestmark = [pytest.mark.graph, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]
# The respawned policy must drive again and the watchdog must trip; their targets (5 s,
# command_timeout + 2 ticks) are timed by bench/supervision_faults.py, not here: a loaded
# CI host must not fail a correct graph.
RESPAWN_BOUND_S = 20.0
# About 4x the trip target, as the respawn's bound is 4x its target: a fresh-clone run saw
# 0.62 s (target 0.32 s) while the respawned policy imported torch beside it.
TRIP_SLACK_S = 1.0


def safety_config():
    from simreal_ros.safety import SafetyConfig

    text = (ROOT / "config" / "safety.yaml").read_text()
    return SafetyConfig(**yaml.safe_load(text)["safety"]["ros__parameters"])


def common_args(tmp_path) -> list[str]:
    return [
        "--set", f"recorder.data_dir={tmp_path / 'episodes'}",
        "--set", "recorder.min_free_disk_mb=0.0",
        "--set", "learner.round_every_episodes=0",
        "--set", f"learner.store_root={tmp_path / 'adapters'}",
        "--set", f"policy.adapter_store={tmp_path / 'adapters'}",
    ]  # fmt: skip


@pytest.fixture
def rigs():
    """Fault rigs a test starts; each is stopped even when the test fails."""
    started = []
    try:
        yield started
    finally:
        for rig in started:
            rig.close()


def assert_policy_kill_within_bounds(rig, config, limits) -> dict:
    kill = rig.kill_policy_in_motion(
        config.command_timeout, 1.0 / config.control_rate, limits.acceleration
    )
    report = {
        "trip_latency_s": round(kill.trip_latency_s, 4),
        "trip_bound_s": kill.trip_bound_s,
        "braking_margin": float(np.min(kill.braking_bound - kill.braking_distance)),
        "came_to_rest": kill.came_to_rest,
        "back_after_s": round(kill.back_after_s, 2),
    }
    # The watchdog must trip; the target of command_timeout + 2 ticks is timed by the bench
    # (on a shared 2-core host a tick of the filter's timer can slip a few periods).
    assert kill.trip_latency_s <= kill.trip_bound_s + TRIP_SLACK_S, report
    assert np.all(kill.braking_distance <= kill.braking_bound) and kill.came_to_rest, report
    assert kill.back_after_s <= RESPAWN_BOUND_S, report
    return report


def test_sim_graph_survives_a_sigkill_of_each_node(tmp_path, rclpy_context, rigs):
    from simreal_ros.episodes.bag_reader import bag_state
    from simreal_ros.episodes.dataset import read_episode_metadata
    from simreal_ros.episodes.recovery import recover_bag
    from simreal_ros.nodes.fault_watch import FaultRig
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.safety import limits_from_description

    robot = load_robot_description()
    config = safety_config()
    limits = limits_from_description(robot, config)
    args = [*common_args(tmp_path), "--set", "sim_bridge.episode_seconds=4.0"]
    rig = FaultRig("sim", args, context=rclpy_context)
    rigs.append(rig)
    watch, trial = rig.watch, rig.trial
    rig.wait(lambda: len(watch.commands) > 20 and len(watch.actions) > 5, 180.0, "the graph")
    # The learner's start (torch) and the standbys' imports come after the drive path is up;
    # a kill during them found a standby still importing: a cold start, over 30 s on one CI
    # host. Faults are for a graph that is up, as `simreal up` reports it.
    rig.wait(lambda: GRAPH_READY in rig.up.output(), 180.0, "the graph to be ready")
    report = {}

    # 1. The policy, mid-episode (a fresh episode, so the arm is moving).
    rig.new_episode(11)
    report["policy"] = assert_policy_kill_within_bounds(rig, config, limits)

    # 2. The recorder, mid-episode: what it wrote is recoverable; the next episode records.
    episode = trial.reset(12, "train", "killed-recording")
    bag = Path(trial.start_recording(episode, "train", 12))
    dt = 1.0 / config.control_rate
    rig.wait(lambda: watch.commanded_speed(dt) > 0.05, 30.0, "motion while recording")
    # Let it record a while, by what it reports flushed, not by the clock: on a host 3x
    # slower a one-second sleep left the bag without a single /joint_states message.
    from std_srvs.srv import Trigger

    flush = rig.watch.create_client(Trigger, "/recorder/flush")

    def flushed_at_least(topic: str, count: int) -> bool:
        future = flush.call_async(Trigger.Request())
        rig.wait(future.done, 10.0, "the recorder's flush")
        found = re.search(rf"{topic} (\d+)", future.result().message or "")
        return found is not None and int(found.group(1)) >= count

    assert flush.wait_for_service(timeout_sec=30.0), "the recorder's ~/flush service"
    # Per topic: in one CI run 300 messages in all were flushed, none of /joint_states.
    rig.wait(lambda: flushed_at_least("/joint_states", 50), 60.0, "50 joint states flushed")
    readies = rig.up.output().count(GRAPH_READY)
    old, _ = rig.kill("recorder")
    rig.wait(lambda: rig.respawned("recorder", old), 10.0, "the recorder's respawn")
    assert bag_state(bag) == "unclosed"
    recovered = recover_bag(bag)
    assert recovered.metadata.outcome == "incomplete"
    assert recovered.metadata.message_counts.get("/joint_states", 0) > 10
    # The next episode, from a trial runner started now (`simreal trials`, as an operator
    # would run it), once the graph reports itself whole again: a respawned process may
    # still be starting, and in one CI run its ~/start did not answer the runner in 10 s.
    rig.wait(lambda: rig.up.output().count(GRAPH_READY) > readies, 60.0, "the graph ready again")
    out = tmp_path / "next.json"
    trials = NodeProcess(
        "trials",
        [sys.executable, "-m", "simreal_ros.cli.main", "trials", "--episodes", "1",
         "--timeout", "8", "--seed", "13", "--json", str(out)],
        graph_environment(),
    )  # fmt: skip
    rig.wait(lambda: trials.returncode is not None, 120.0, "the next episode")
    assert trials.returncode == 0, trials.output()[-3000:]
    (result,) = json.loads(out.read_text())
    assert result["error"] == "", result
    assert bag_state(result["bag_path"]) == "closed"
    assert read_episode_metadata(result["bag_path"]).complete

    # 3. The learner: respawned; the graph keeps driving.
    old, killed_at = rig.kill("learner")
    rig.wait(lambda: rig.respawned("learner", old), 10.0, "the learner's respawn")

    # 4. The safety filter: reported loudly; the policy resumes only after it is back.
    rig.new_episode(14)
    old, killed_at = rig.kill("safety")
    rig.wait(lambda: rig.respawned("safety", old), 10.0, "the safety filter's respawn")
    # Driving is waited for after the manager's report, not after the kill: statuses the dead
    # filter sent just before it can arrive after it (one CI run took those for the new
    # filter's and judged before the manager had seen the death).
    rig.wait(lambda: watch.manager_error_since(killed_at), 30.0, "the manager's report")
    reported_at, report_message = watch.manager_error_since(killed_at)
    assert "SAFETY FILTER DOWN" in report_message, report_message
    rig.wait(lambda: watch.driving_since(reported_at), 60.0, "driving after the filter's death")
    with contextlib.suppress(AssertionError):  # the judge below names what is missing
        rig.wait(
            lambda: filter_death_seen(killed_at, watch.transition_events()),
            30.0,
            "the policy's and the new filter's activation events",
        )
    actions, statuses, _commands, _manager = watch.snapshot()
    # The manager deactivates the policy while the filter is down, and activates it only
    # after the new filter is active: judged from their lifecycle transition events.
    try:
        report["filter_death"] = judge_filter_death(killed_at, actions, watch.transition_events())
    except AssertionError as error:
        raise AssertionError(f"{error}\n{rig.up.output()[-4000:]}") from None
    report["safety_back_after_s"] = round(
        min(s.received for s in statuses if s.received > reported_at and s.state in (0, 1))
        - killed_at,
        2,
    )

    # 5. The lifecycle manager: respawned; nothing changes state.
    old, killed_at = rig.kill("lifecycle_manager")
    rig.wait(lambda: rig.respawned("lifecycle_manager", old), 10.0, "the manager's respawn")
    rig.wait(lambda: watch.driving_since(killed_at + 1.0), 30.0, "driving after the manager")

    # 6. The sim bridge (the arm side): respawned; the graph drives its new episode.
    old, killed_at = rig.kill("sim_bridge")
    rig.wait(lambda: rig.respawned("sim_bridge", old), 10.0, "the sim bridge's respawn")
    # Everything after the arm side is brought up again, afresh on the new sim clock (about
    # 5 s here; it took a minute while the filter refused the new clock's states as old).
    rig.wait(lambda: watch.driving_since(killed_at + 1.0), 30.0, "driving after the bridge")
    report["sim_bridge_back_after_s"] = round(
        min(
            s.received
            for s in watch.snapshot()[1]
            if s.received > killed_at + 1.0 and s.state in (0, 1)
        )
        - killed_at,
        2,
    )

    # Throughout: no command outside the limits, and every bag reads.
    _, _, commands, _ = watch.snapshot()
    assert commands_outside([c for _r, c in commands], limits.lower, limits.upper) == 0
    bags = sorted(p for p in (tmp_path / "episodes").iterdir() if p.is_dir())
    assert len(bags) >= 2
    for path in bags:
        if bag_state(path) != "closed":
            recover_bag(path)
        read_episode_metadata(path)
    rig.wait(lambda: watch.snapshot()[3][-1][0] > time.monotonic() - 1.0, 5.0, "diagnostics")
    restarts = watch.snapshot()[3][-1][3]
    for name in ("policy", "recorder", "learner", "safety", "sim_bridge"):
        assert restarts.get(f"{name}.restarts") == "1", (name, restarts)
        assert restarts.get(f"{name}.last_exit_code") == "-9", (name, restarts)
    assert rig.up.returncode is None
    print(f"\nfault injection (sim), {len(commands)} commands checked: {report}")


def test_real_graph_with_the_stand_in_arm_holds_until_engaged_and_survives_a_policy_kill(
    tmp_path, rclpy_context, rigs
):
    from geometry_msgs.msg import PoseStamped
    from simreal_ros.msg import TaskStatus
    from std_srvs.srv import Trigger

    from simreal_ros.nodes import qos
    from simreal_ros.nodes.fault_watch import FaultRig
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.safety import limits_from_description

    robot = load_robot_description()
    config = safety_config()
    limits = limits_from_description(robot, config)
    arm = NodeProcess(
        "stand_in_arm", python_module_argv("simreal_ros.nodes.stand_in_arm"), graph_environment()
    )
    try:
        args = [
            "--only", "safety,policy,lifecycle_manager",
            "--set", f"policy.adapter_store={tmp_path / 'adapters'}",
        ]  # fmt: skip
        rig = FaultRig("real", args, context=rclpy_context)
        rigs.append(rig)
        watch, node = rig.watch, rig.trial
        # Perception and the operator's task state, as on the robot (wall-clock stamps).
        pose_pub = node.create_publisher(PoseStamped, "/object/pose", qos.STATE)
        status_pub = node.create_publisher(TaskStatus, "/task/status", qos.STATUS)
        pose = PoseStamped()
        pose.header.frame_id = "base"
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = 0.5, 0.0, 0.025
        pose.pose.orientation.w = 1.0
        task = TaskStatus(task="push", condition="train", episode_id="operator-0001")
        task.header.frame_id = "base"
        task.goal.x, task.goal.y, task.goal.z = 0.62, 0.12, 0.025

        def publish_task_state() -> None:
            pose.header.stamp = task.header.stamp = node.get_clock().now().to_msg()
            task.step += 1
            pose_pub.publish(pose)
            status_pub.publish(task)

        node.create_timer(0.05, publish_task_state)
        rig.wait(lambda: len(watch.commands) > 20 and len(watch.actions) > 5, 180.0, "graph")
        # Nothing moves until someone asks.
        time.sleep(1.0)
        _, statuses, commands, _ = watch.snapshot()
        assert not statuses[-1].engaged
        still = np.array([c for _r, c in commands])
        assert np.all(still == still[0]), "the arm was commanded to move before engage"
        engage = node.create_client(Trigger, "/safety/engage")
        future = engage.call_async(Trigger.Request())
        rig.wait(future.done, 20.0, "engage")
        assert future.result().success, future.result().message
        report = assert_policy_kill_within_bounds(rig, config, limits)
        _, statuses, commands, _ = watch.snapshot()
        assert statuses[-1].engaged  # a policy restart does not disengage by default
        assert commands_outside([c for _r, c in commands], limits.lower, limits.upper) == 0
        print(f"\nfault injection (real, stand-in arm): {report}")
    finally:
        arm.stop()
