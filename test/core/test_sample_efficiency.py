"""Smoke run of bench/sample_efficiency.py's core on the real stack (MuJoCo stand-in, peft
LoRA, the learner's session, the policy package's evaluation) with tiny numbers, plus the
statistics that turn per-seed results into the reported table."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.model import ActorCritic, Architecture
from simreal_ros.policy.spec import default_spec
from simreal_ros.robot.description import load_robot_description

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sample_efficiency.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("sample_efficiency_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    torch.set_num_threads(1)
    spec = default_spec(load_robot_description(), "push")
    torch.manual_seed(0)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (32, 32), (32, 32)))
    directory = tmp_path_factory.mktemp("ckpt") / "push"
    ckpt.save_checkpoint(
        directory,
        model,
        spec,
        version="se-test",
        gamma=0.99,
        training={"phase": "sac", "sac_steps": 0},  # critics never trained
    )
    return directory


def test_one_seed_one_round_through_every_method(bench, base_dir, tmp_path):
    cfg = bench.BenchConfig(
        checkpoint=str(base_dir),
        condition="train",
        seeds=1,
        methods=("zero_shot", "bc_lora", "rl_ft", "sgft_h1", "sgft_h3"),
        episodes_per_round=2,
        max_rounds=1,
        updates_per_round=4,
        eval_episodes=2,
        bc_demos=1,
        sim_episodes=1,
        episode_seconds=0.5,
        workers=1,
        fit_v_sim="off",
    )
    lines: list[str] = []
    result = bench.run(cfg, work_dir=str(tmp_path / "work"), progress=lines.append)
    jobs = {j["method"]: j for j in result["jobs"]}
    assert set(jobs) == set(cfg.methods)
    steps_per_episode = round(0.5 * 20)
    for method, job in jobs.items():
        assert job["seed"] == 0
        assert job["rounds"][0]["evaluation"] == result["zero_shot_round0"]["0"]
        trained = method != "zero_shot" and job["rounds"][0]["evaluation"]["success"] < 0.8
        assert len(job["rounds"]) == (2 if trained else 1), method
        for row in job["rounds"]:
            ev = row["evaluation"]
            assert ev["episodes"] == 2
            low, high = ev["ci95"]
            assert 0.0 <= low <= ev["success"] <= high <= 1.0
        if trained:
            last = job["rounds"][-1]
            expected = 2 + (1 if method == "bc_lora" else 0)  # demos count as stand-in data
            assert last["episodes"] == expected
            assert last["demo_episodes"] == expected - 2
            # Episodes end by success, cube loss or the 0.5 s limit: at most 10 steps each.
            assert 0 < last["steps"] <= expected * steps_per_episode
            assert last["minutes"] == pytest.approx(last["steps"] / 20.0 / 60.0)
        if not job["reached"]:
            assert job["episodes_to_target"] == max(job["rounds"][-1]["episodes"], 2)
    # The actor-critic methods really trained (finite losses from the learner's tuner).
    for method in ("rl_ft", "sgft_h1", "sgft_h3"):
        if len(jobs[method]["rounds"]) > 1:
            metrics = jobs[method]["rounds"][1]["metrics"]
            assert math.isfinite(metrics["critic_loss"])
    if len(jobs["sgft_h1"]["rounds"]) > 1:
        assert jobs["sgft_h1"]["rounds"][1]["metrics"]["reward_scale"] > 0
    summary = result["summary"]
    assert set(summary["methods"]) == set(cfg.methods)
    assert set(summary["ratios"]) == {"sgft_h1", "sgft_h3"}
    table = bench.format_table(cfg, summary)
    assert "STAND-IN" in table and "RL-FT / SGFT H=3" in table
    assert any("zero-shot seed 0" in line for line in lines)


def test_fit_sim_critic_changes_only_the_critic(bench, base_dir, tmp_path):
    assert not bench.critic_was_trained(str(base_dir))
    out = tmp_path / "fitted"
    report = bench.fit_sim_critic(
        str(base_dir),
        out,
        episodes=2,
        held_out=1,
        updates=30,
        episode_seconds=0.5,
        progress=lambda _: None,
    )
    assert report["updates"] == 30 and np.isfinite(report["held_out_v_mean"])
    base = ckpt.load_checkpoint(base_dir)
    fitted = ckpt.load_checkpoint(out)
    assert fitted.parent_version == base.version
    for name, tensor in base.model.actor.state_dict().items():
        assert torch.equal(tensor, fitted.model.actor.state_dict()[name]), name
    changed = [
        name
        for name, tensor in base.model.critic.state_dict().items()
        if not torch.equal(tensor, fitted.model.critic.state_dict()[name])
    ]
    assert changed, "the critic was not fitted"
    assert fitted.metadata["training"]["v_sim_fit"]["profile"] == "randomized"
    assert fitted.metadata["training"]["critic_steps"] == 30  # the learner sees a trained critic


def test_mean_ci_is_a_student_t_interval(bench):
    mean, low, high = bench.mean_ci([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert high - mean == pytest.approx(4.303 / math.sqrt(3), rel=1e-3)
    assert mean - low == pytest.approx(high - mean)
    assert math.isnan(bench.mean_ci([4.0])[1])


def _job(method, seed, episodes, reached, final=0.9):
    evaluation = {"success": final, "successes": int(final * 10), "episodes": 10}
    return {
        "method": method,
        "seed": seed,
        "reached": reached,
        "episodes_to_target": episodes,
        "minutes_to_target": episodes * 6.0 / 60.0,
        "final_success": final,
        "rounds": [{"evaluation": evaluation}],
    }


def test_summary_ratio_and_censoring(bench):
    cfg = bench.BenchConfig(checkpoint="x", methods=("rl_ft", "sgft_h1", "sgft_h3"))
    jobs = [_job("rl_ft", s, 30, True) for s in range(3)]
    jobs += [_job("sgft_h1", s, 10, True) for s in range(3)]
    jobs += [_job("sgft_h3", 0, 50, False)] + [_job("sgft_h3", s, 40, True) for s in (1, 2)]
    summary = bench.summarise(cfg, jobs)
    h1 = summary["ratios"]["sgft_h1"]
    assert h1["rl_over_sgft_episodes"] == pytest.approx(3.0)
    assert h1["meets_3x"] and h1["sgft_minutes"] == pytest.approx(1.0)
    assert h1["sgft_under_5_minutes"]
    h3 = summary["ratios"]["sgft_h3"]
    assert h3["rl_over_sgft_episodes"] == pytest.approx(30 / (130 / 3))
    assert not h3["meets_3x"] and "upper bound" in h3["note"]
    assert summary["methods"]["sgft_h3"]["censored"] == 1
    table = bench.format_table(cfg, summary)
    assert ">=" in table.splitlines()[4]  # the censored SGFT H=3 row is marked


def test_learner_overrides_go_through_the_learner_schema(bench):
    cfg = bench.BenchConfig(
        checkpoint="x", learner_overrides=(("learning_rate", "3e-5"), ("ewc", "true"))
    )
    config = bench.learner_config(cfg, method="sgft", horizon=3)
    assert config.learning_rate == pytest.approx(3e-5) and config.ewc is True
    assert config.method == "sgft" and config.horizon == 3
    with pytest.raises(ValueError, match="no field 'bogus'"):
        bench.learner_config(
            bench.BenchConfig(checkpoint="x", learner_overrides=(("bogus", "1"),))
        )
    with pytest.raises(ValueError):  # out of the schema's range
        bench.learner_config(
            bench.BenchConfig(checkpoint="x", learner_overrides=(("learning_rate", "5"),))
        )
