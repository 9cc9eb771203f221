"""The loop's driver and the learner node in one process: a round asked for when every
recorded episode is labelled sim is answered at once with the reason, never waited out."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from rclpy.parameter import Parameter
from simreal_ros.msg import EpisodeEvent

from simreal_ros.learner.sim_episodes import record_rollout
from simreal_ros.loop.stops import NoArmData
from simreal_ros.nodes import qos
from simreal_ros.nodes.learner import LearnerNode
from simreal_ros.nodes.loop_driver import LoopDriverNode
from simreal_ros.policy.spec import default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import ActorCritic, Architecture
from simreal_ros.training.torch_checkpoint import load_checkpoint, save_checkpoint


@pytest.fixture
def sim_labelled_bags(tmp_path):
    robot = load_robot_description()
    spec = default_spec(robot, "push")
    torch.manual_seed(0)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (16, 16), (16, 16)))
    save_checkpoint(tmp_path / "push", model, spec, version="base", gamma=0.95, training={})
    base = load_checkpoint(tmp_path / "push")
    metas = [
        record_rollout(tmp_path / "episodes" / f"ep{i}", base, seed=i, source="sim",
                       profile="nominal", episode_seconds=0.5, robot=robot)
        for i in range(2)
    ]  # fmt: skip
    return tmp_path / "push", tmp_path / "episodes", metas


def test_a_round_without_arm_data_stops_the_driver_with_the_labels(
    rclpy_context, executor, tmp_path, sim_labelled_bags
):
    checkpoint_dir, episodes_dir, metas = sim_labelled_bags
    values = {
        "checkpoint_dir": str(checkpoint_dir), "store_root": str(tmp_path / "models"),
        "method": "bc", "screen.workers": 1, "round_every_episodes": 0,
        "min_real_transitions": 5, "sim_episodes": 0, "sim_replay": False,
    }  # fmt: skip
    learner = LearnerNode(
        context=rclpy_context,
        parameter_overrides=[Parameter(k, value=v) for k, v in values.items()],
    )
    driver = LoopDriverNode(context=rclpy_context)
    executor.add_node(learner)
    executor.add_node(driver)
    # The loop spins its nodes on a thread while its own thread waits on the learner.
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        publisher = driver.create_publisher(EpisodeEvent, "/episodes/recorded", qos.STATUS)
        deadline = time.monotonic() + 10
        while not publisher.get_subscription_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert publisher.get_subscription_count(), "the learner never subscribed"
        for meta in metas:
            msg = EpisodeEvent(episode_id=meta.episode_id, source=meta.source)
            msg.bag_path = str(episodes_dir / meta.episode_id)
            publisher.publish(msg)
        deadline = time.monotonic() + 10
        while learner.learner.status().episodes_seen < len(metas):
            assert time.monotonic() < deadline, "the learner never saw the episodes"
            time.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(NoArmData) as stopped:
            driver.train_round(timeout_s=120.0)
        # Answered within seconds (the learner's 1 Hz status), not at the round timeout.
        assert time.monotonic() - started < 60.0
        reason = str(stopped.value)
        assert f"labelled sim {len(metas)}" in reason, reason
        assert "real_twin" in reason and "stand_in: true" in reason, reason
    finally:
        executor.shutdown(timeout_sec=5.0)
        spinner.join(timeout=5.0)
