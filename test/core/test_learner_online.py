"""The learner's online loop off ROS: rounds on a worker thread, duplicates ignored,
a failing round reported and survived."""

from __future__ import annotations

import time

import pytest
import torch

from simreal_ros.config_schema import from_mapping, updated
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.gate import EvaluationSummary
from simreal_ros.learner.online import EpisodeInfo, OnlineLearner
from simreal_ros.learner.sim_episodes import record_rollout
from simreal_ros.policy.spec import default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import ActorCritic, Architecture
from simreal_ros.training.torch_checkpoint import load_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    spec = default_spec(load_robot_description(), "push")
    torch.manual_seed(0)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (16, 16), (16, 16)))
    root = tmp_path_factory.mktemp("online")
    save_checkpoint(root / "push", model, spec, version="base", gamma=0.95, training={})
    base = load_checkpoint(root / "push")
    metas = [
        record_rollout(
            root / "eps" / f"ep{i}",
            base,
            seed=i,
            episode_seconds=0.5,
            robot=load_robot_description(),
        )
        for i in range(2)
    ]
    return root, metas


def tiny_bc_config(root, tmp_path) -> LearnerConfig:
    """A BC round of a few updates on the two recorded episodes; the gate always promotes."""
    return from_mapping(LearnerConfig, {
        "checkpoint_dir": str(root / "push"), "store_root": str(tmp_path / "m"), "method": "bc",
        "bc_use_failures": True, "updates_per_round": 5, "batch_size": 8,
        "round_every_episodes": 2, "min_real_transitions": 5, "sim_episodes": 0,
        "sim_replay": False, "screen.seeds": 2, "screen.conditions": ["train"],
        "promotion.ci_low": 0.0, "promotion.tolerance": 1.0,
    })  # fmt: skip


def wait(condition, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_rounds_run_off_the_caller_thread_and_survive_a_failure(setup, tmp_path):
    root, metas = setup
    cfg = tiny_bc_config(root, tmp_path)
    calls = {"n": 0}

    def evaluator(checkpoint_dir, adapter_dir, condition, seeds):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("sim worker crashed")
        return EvaluationSummary(len(seeds), len(seeds), 0.0)

    results = []
    learner = OnlineLearner(
        cfg, on_result=results.append, evaluator=evaluator, robot=load_robot_description()
    )
    learner.start()
    try:
        episodes = [
            EpisodeInfo(m.episode_id, str(root / "eps" / m.episode_id), m.source) for m in metas
        ]
        start = time.perf_counter()
        for episode in episodes:
            learner.offer(episode)
        assert time.perf_counter() - start < 0.05  # offer never waits on training
        assert wait(lambda: "sim worker crashed" in learner.status().last_error)
        assert not results and learner.session.store.versions() == []  # nothing half-stored
        # The same episodes announced again (a resuming loop) add no duplicate data.
        for episode in episodes:
            learner.offer(episode)
        assert wait(lambda: results), learner.status()
        status = learner.status()
        assert status.buffer_sizes == {"real_twin": sum(m.steps for m in metas)}
        assert status.last_error == "" and "promoted" in status.last_gate
        assert results[0].stored.version == learner.session.store.current()
        assert learner.session.store.clean_staging() == []  # the failed round left no debris
    finally:
        learner.stop()


def test_a_run_time_setting_change_applies_from_the_next_round(setup, tmp_path):

    root, metas = setup
    cfg = tiny_bc_config(root, tmp_path)
    seeds_seen: list[int] = []

    def evaluator(checkpoint_dir, adapter_dir, condition, seeds):
        seeds_seen.append(len(seeds))
        return EvaluationSummary(len(seeds), len(seeds), 0.0)

    results = []
    learner = OnlineLearner(
        cfg, on_result=results.append, evaluator=evaluator, robot=load_robot_description()
    )
    learner.start()
    try:
        for m in metas:
            learner.offer(EpisodeInfo(m.episode_id, str(root / "eps" / m.episode_id), m.source))
        assert wait(lambda: len(results) == 1), learner.status()
        assert set(seeds_seen) == {2}
        seeds_seen.clear()
        learner.update_config(updated(cfg, {"screen.seeds": 3}))
        learner.request_round()
        assert wait(lambda: len(results) == 2), learner.status()
        assert seeds_seen and set(seeds_seen) == {3}
    finally:
        learner.stop()


def test_a_requested_round_without_arm_data_is_answered_with_the_labels(setup, tmp_path):
    """Episodes labelled sim never count as the arm's: the request is answered (not left
    pending) with a reason naming the label they carry and the ones the learner wants."""
    root, _ = setup
    base = load_checkpoint(root / "push")
    sim = [
        record_rollout(tmp_path / f"sim{i}", base, seed=i, source="sim", profile="nominal",
                       episode_seconds=0.5, robot=load_robot_description())
        for i in range(2)
    ]  # fmt: skip
    cfg = tiny_bc_config(root, tmp_path)
    learner = OnlineLearner(
        cfg, on_result=lambda result: None, robot=load_robot_description(),
        evaluator=lambda *args: EvaluationSummary(1, 1, 0.0),
    )  # fmt: skip
    learner.start()
    try:
        # Nothing announced at all: the request is still answered, with that reason.
        first = learner.request_round()
        assert wait(lambda: learner.status().requests_answered >= first), learner.status()
        assert "no episode was announced" in learner.status().waiting
        for i, m in enumerate(sim):
            learner.offer(EpisodeInfo(m.episode_id, str(tmp_path / f"sim{i}"), m.source))
        second = learner.request_round()
        assert second == first + 1
        assert wait(lambda: learner.status().requests_answered >= second), learner.status()
        status = learner.status()
        assert status.requests == second and status.last_gate == ""
        assert f"labelled sim {len(sim)}" in status.waiting
        assert "real_twin" in status.waiting and "0 arm transitions" in status.waiting
    finally:
        learner.stop()
