"""trial_runner + recorder in one process against a fake sim bridge (reset + /task/status)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import rclpy
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from simreal_ros.msg import PolicyAction, TaskStatus
from simreal_ros.srv import GetDynamics, ResetEpisode, Resync, StopEpisode
from std_srvs.srv import SetBool

from simreal_ros.episodes.dataset import read_episode
from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.nodes import qos
from simreal_ros.nodes.recorder import RecorderNode
from simreal_ros.nodes.trial_runner import TrialRunnerNode
from simreal_ros.trials.runner import run_trials

JOINTS = [f"j{i}" for i in range(7)]


class FakeBridge:
    """Publishes a 100 Hz episode that ends (done) after `steps`; even seeds succeed."""

    def __init__(self, context, steps=8, hang_seeds=(), stand_in_profile=""):
        self.node = rclpy.create_node("sim_bridge", context=context)
        self.steps = steps
        self.hang_seeds = set(hang_seeds)
        self.episode_id, self.seed, self.step = "", 0, 0
        self.status = self.node.create_publisher(TaskStatus, "/task/status", qos.STATUS)
        self.joints = self.node.create_publisher(JointState, "/joint_states", qos.STATE)
        self.action = self.node.create_publisher(PolicyAction, "/policy/action", qos.COMMAND)
        self.takeover = self.node.create_publisher(PolicyAction, "/operator/takeover", qos.COMMAND)
        self.paused = False
        self.node.create_service(ResetEpisode, "~/reset", self.on_reset)
        self.node.create_service(SetBool, "~/pause", self.on_pause)
        if stand_in_profile:  # a profile given by path: a name no lookup can resolve
            self.stand_in_profile = stand_in_profile
            self.node.create_service(GetDynamics, "~/get_dynamics", self.on_get_dynamics)
        # The safety filter's resync, on a node of its own as in the graph.
        self.safety = rclpy.create_node("safety", context=context)
        self.safety.create_service(Resync, "~/resync", self.on_resync)
        self.reset_stamps: list[tuple[int, int]] = []
        self.resyncs: list[tuple[int, int]] = []
        self.node.create_timer(0.01, self.tick)
        self.lock = threading.Lock()

    def on_reset(self, request, response):
        with self.lock:
            self.episode_id = request.episode_id or f"fake-{request.seed}"
            self.seed, self.step = request.seed, 0
        response.success, response.episode_id = True, self.episode_id
        response.stamp.sec, response.stamp.nanosec = request.seed + 1, 0
        self.reset_stamps.append((response.stamp.sec, response.stamp.nanosec))
        return response

    def on_get_dynamics(self, request, response):
        response.profile, response.stand_in = self.stand_in_profile, True
        return response

    def on_resync(self, request, response):
        self.resyncs.append((request.after.sec, request.after.nanosec))
        response.success, response.message = True, "resynced"
        return response

    def on_pause(self, request, response):
        self.paused = request.data
        response.success = True
        return response

    def tick(self):
        with self.lock:
            if not self.episode_id or self.step > self.steps or self.paused:
                return
            self.step += 1
            step, seed, episode_id = self.step, self.seed, self.episode_id
        js = JointState(name=JOINTS, position=[float(step)] * 7, velocity=[0.0] * 7)
        js.header.stamp.sec, js.header.stamp.nanosec = seed + 1, step
        self.joints.publish(js)
        action = PolicyAction(policy_version="v3", sequence=step, values=[0.1] * 7)
        action.header.stamp = js.header.stamp
        self.action.publish(action)
        if seed == 1 and step == 2:
            self.takeover.publish(PolicyAction(values=[0.2] * 7, human_intervention=True))
        if seed in self.hang_seeds:
            return
        done = step == self.steps
        self.status.publish(
            TaskStatus(
                episode_id=episode_id,
                step=step,
                reward=-1.0,
                done=done,
                success=done and seed % 2 == 0,
                truncated=done and seed % 2 == 1,
            )
        )


@pytest.fixture
def running_graph(rclpy_context, tmp_path, request):
    stand_in_profile = getattr(request, "param", "")
    recorder = RecorderNode(
        context=rclpy_context,
        parameter_overrides=[
            Parameter("data_dir", value=str(tmp_path)),
            Parameter("joint_names", value=JOINTS),
            Parameter("min_free_disk_mb", value=0.0),
        ],
    )
    bridge = FakeBridge(rclpy_context, hang_seeds=(4,), stand_in_profile=stand_in_profile)
    dynamics = "/sim_bridge/get_dynamics" if stand_in_profile else "/nobody/get_dynamics"
    runner = TrialRunnerNode(
        context=rclpy_context,
        parameter_overrides=[
            Parameter("service_timeout_s", value=5.0),
            Parameter("dynamics_service", value=dynamics),
        ],
    )
    # One thread, as the nodes run (see trial_runner.SpinningNode for why).
    executor = SingleThreadedExecutor(context=rclpy_context)
    for node in (recorder, bridge.node, bridge.safety, runner):
        executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    # Discovery first: the recorder and the runner must both hear the bridge from step 1.
    matched = threading.Event()
    pubs = (bridge.status, bridge.takeover, bridge.joints, bridge.action)
    wanted = (2, 2, 1, 1)
    try:
        for _ in range(1000):
            if all(p.get_subscription_count() >= n for p, n in zip(pubs, wanted, strict=True)):
                break
            matched.wait(0.01)
        else:
            raise AssertionError("the recorder and runner never matched the bridge's publishers")
        yield runner, executor, bridge
    finally:
        executor.shutdown()
        thread.join(timeout=5.0)
        for node in (runner, bridge.safety, bridge.node, recorder):
            node.destroy_node()


def test_five_labelled_episodes_through_reset_record_and_task_status(running_graph):
    runner, _, bridge = running_graph
    # Each episode runs 8 steps at 100 Hz (80 ms); 1.5 s only fails if callbacks are starved.
    results = run_trials(runner, 5, "train", seeds=range(5), timeout_s=1.5, progress=False)
    assert [r.error for r in results] == [""] * 5
    # After every reset the safety filter was resynced at the stamp that reset returned.
    assert bridge.resyncs == bridge.reset_stamps and len(bridge.resyncs) == 5
    assert [r.outcome for r in results] == ["success", "failure", "success", "failure", "failure"]
    # Each episode's length, the recorder's control steps: the task said done at its 8th.
    assert [r.steps for r in results[:4]] == [8] * 4
    assert results[4].timed_out  # seed 4: the fake bridge never says done
    assert results[1].human_interventions == 1
    assert "human takeover" in results[1].note
    for r in results:
        info = yaml.safe_load(Path(r.bag_path, "metadata.yaml").read_text())
        meta = EpisodeMetadata.from_custom_data(info["rosbag2_bagfile_information"]["custom_data"])
        assert meta.outcome == r.outcome and meta.complete and meta.source == "sim"
        assert meta.policy_versions == ["v3"] and meta.dropped == 0
        assert r.messages == sum(meta.message_counts.values())
        # `simreal trials` and `simreal episodes list` say the same of the same bag.
        assert r.steps == meta.steps, (r.steps, meta.steps)
    for r in results[:4]:
        assert len(read_episode(r.bag_path, JOINTS)) == r.steps  # the learner's transitions
    data = read_episode(results[0].bag_path, JOINTS)
    assert len(data) >= 1 and data.dones[-1]
    takeover = read_episode(results[1].bag_path, JOINTS)
    assert takeover.human_interventions.any()


@pytest.mark.parametrize("running_graph", ["my_gap"], indirect=True)
def test_a_stand_in_the_bridge_names_labels_its_episodes_the_stand_ins(running_graph):
    """The bridge says its profile is a stand-in; the runner labels from that, not from a
    lookup of the name (a user's profile given by path is unknown by name)."""
    runner, _, _ = running_graph
    results = run_trials(runner, 2, "train", seeds=[0, 2], timeout_s=1.5, progress=False)
    assert [r.error for r in results] == ["", ""]
    for r in results:
        info = yaml.safe_load(Path(r.bag_path, "metadata.yaml").read_text())
        meta = EpisodeMetadata.from_custom_data(info["rosbag2_bagfile_information"]["custom_data"])
        assert (meta.source, meta.profile) == ("real_twin", "my_gap")


def test_operator_label_service_ends_the_running_episode(running_graph, rclpy_context):
    runner, executor, _ = running_graph
    caller = rclpy.create_node("operator", context=rclpy_context)
    executor.add_node(caller)
    client = caller.create_client(StopEpisode, "/trial_runner/label")
    answers = []

    def label_soon():
        assert client.wait_for_service(timeout_sec=5.0)
        # Wait until the episode is recording, then label it as an operator would.
        deadline = time.monotonic() + 10.0
        while not runner.recording:
            assert time.monotonic() < deadline, "the episode never started recording"
            threading.Event().wait(0.01)
        request = StopEpisode.Request(
            outcome="failure", failure_mode="action convention mismatch", note="joints swapped"
        )
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _: done.set())
        assert done.wait(10.0)
        answers.append(future.result())

    thread = threading.Thread(target=label_soon)
    thread.start()
    results = run_trials(runner, 1, "shifted", seeds=[4], timeout_s=10.0, progress=False)
    thread.join(timeout=10.0)
    assert answers and answers[0].success, answers
    result = results[0]
    assert result.outcome == "failure" and not result.timed_out
    assert result.failure_mode == "action_convention_mismatch"
    assert result.note == "joints swapped" and result.duration_s < 8.0
