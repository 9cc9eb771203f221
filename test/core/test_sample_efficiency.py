"""Smoke run of bench/sample_efficiency.py's arms through the stand-in rounds
(learner.stand_in_rounds) on the real stack (MuJoCo stand-in, peft LoRA, the learner's
session, the policy evaluation) with tiny numbers; the V_sim fit (learner.critics) and the
rounds' --learner overrides. The statistics and the summary, without simulation, are in
test_stats_bench.py."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch
from core.bench_loader import sample_efficiency as bench

from simreal_ros import config_schema
from simreal_ros.learner.critics import critics_trained, fit_sim_critic
from simreal_ros.learner.methods import method_traits
from simreal_ros.learner.stand_in_experiment import PER_JOB_FIELDS, RoundsConfig
from simreal_ros.learner.stand_in_rounds import arm_config, learner_config, run_experiment
from simreal_ros.learner.stand_in_summary import format_table
from simreal_ros.policy.checkpoint import read_metadata
from simreal_ros.policy.spec import default_spec
from simreal_ros.robot.description import load_robot_description, robot_reference
from simreal_ros.training import torch_checkpoint as ckpt
from simreal_ros.training.model import ActorCritic, Architecture


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


def test_one_seed_one_round_through_every_method(base_dir, tmp_path):
    methods = tuple(bench.METHODS)  # all 10 arms
    assert len(methods) == 10
    cfg = RoundsConfig(
        checkpoint=str(base_dir),
        robot=robot_reference(load_robot_description().source),
        condition="train",
        seeds=1,
        methods=methods,
        episodes_per_round=2,
        max_rounds=1,
        updates_per_round=4,
        eval_episodes=2,
        bc_demos=1,
        sim_episodes=1,
        # 1 s, not less: sysid identifies from these episodes, and two 0.5 s episodes give
        # the identification no profile, so sysid would skip its round untrained.
        episode_seconds=1.0,
        workers=1,
        fit_v_sim="off",
        # The adapt arm's sim training at its smallest (shared; only adapt reads them). The
        # update-to-data ratio is an arm's (rlpd's): two 1 s episodes give 40 transitions.
        learner_overrides=(
            ("adapt.teacher_episodes", "1"),
            ("adapt.iterations", "1"),
            ("adapt.episodes", "2"),
            ("adapt.bc_steps", "5"),
        ),
        bootstrap_resamples=200,
    )
    lines: list[str] = []
    experiment = bench.EXPERIMENT
    result = run_experiment(
        cfg, experiment, work_dir=str(tmp_path / "work"), progress=lines.append
    )
    assert result["config"]["checkpoint"] == str(base_dir)  # fit_v_sim off: the base itself
    assert result["v_sim_fit"] is None
    assert "stand-in" in result["stand_in"]
    assert result["evaluation_seeds"] == cfg.evaluation_seeds == [900_000, 900_001]
    jobs = {j["method"]: j for j in result["jobs"]}
    assert len(result["jobs"]) == len(methods) and set(jobs) == set(methods)
    rate = float(ckpt.load_checkpoint(base_dir).spec.control_rate_hz)
    steps_per_episode = round(cfg.episode_seconds * rate)
    zero = result["zero_shot"]
    assert zero["episodes"] == 2
    for method, job in jobs.items():
        assert job["seed"] == 0
        # Round 0 is the one shared zero-shot evaluation, for every arm.
        assert job["rounds"][0]["evaluation"] == zero
        trained = bench.METHODS[method] is not None
        # One round always runs: two evaluations are needed to hold the target.
        assert len(job["rounds"]) == (2 if trained else 1), method
        for row in job["rounds"]:
            ev = row["evaluation"]
            assert ev["episodes"] == 2
            low, high = ev["ci95"]
            assert 0.0 <= low <= ev["success"] <= high <= 1.0
        assert job["curve"]["episodes"] == [r["episodes"] for r in job["rounds"]]
        assert 0.0 <= job["auc"] <= 1.0
        if not trained:
            assert "learner_config" not in job
            continue
        last = job["rounds"][-1]
        demos = 1 if method == "bc_lora" else 0  # expert demos count as stand-in data
        assert last["episodes"] == 2 + demos and last["demo_episodes"] == demos
        # Episodes end by success, cube loss or the 1 s limit.
        assert 0 < last["steps"] <= last["episodes"] * steps_per_episode
        assert last["minutes"] == pytest.approx(last["steps"] / rate / 60.0)
        if not job["reached"]:
            assert job["episodes_to_target"] == cfg.episode_budget == 2
            assert job["minutes_to_target"] == pytest.approx(last["minutes"])
        if last["evaluated"]:  # BC skips a round with no successful episode to clone
            metrics = last["metrics"]
            if method == "adapt":  # the sim training recipe: no real transition, no SAC
                assert "updates" not in metrics and "new_real_transitions" not in metrics
                assert metrics["distance_from_parent"] > 0
                assert metrics["adapt_teacher_lead"] > 0 and metrics["adapt_teacher_speed"] > 0
                assert last["identification"]["episodes"] == cfg.episodes_per_round
                continue
            # max(updates_per_round, update_to_data x new transitions): rlpd's ratio is 10.
            ratio = job["learner_config"]["update_to_data"]
            assert ratio == (10.0 if method == "rlpd" else 1.0), method
            expected = max(4, math.ceil(ratio * metrics["new_real_transitions"]))
            assert metrics["updates"] == expected, method
            if method == "sysid":  # trains on identified-sim episodes, not the stand-in's
                assert metrics["new_real_transitions"] > 0
                assert last["identification"]["episodes"] == cfg.episodes_per_round
            else:
                assert metrics["new_real_transitions"] == last["steps"]
        else:
            assert method == "bc_lora" and "skipped" in last["metrics"]
            assert last["evaluation"] == zero
    # The actor-critic arms really trained (finite losses from the learner's tuner).
    actor_critic = [
        m for m, row in bench.METHODS.items() if row and method_traits(row["method"]).actor_critic
    ]
    assert len(actor_critic) == 7
    for method in actor_critic:
        metrics = jobs[method]["rounds"][1]["metrics"]
        assert math.isfinite(metrics["critic_loss"]), method
        assert math.isfinite(metrics["loss"]), method  # no actor step yet in critic warm-up
    for method in bench.SGFT_ARMS:
        assert jobs[method]["rounds"][1]["metrics"]["reward_scale"] > 0
        assert jobs[method]["reward_scale"] > 0
    # Each trained job records its full LearnerConfig: the shared settings (with the
    # --learner override) plus its arm's row; the arms differ in their own rows alone.
    configs = {}
    for method in (m for m in methods if bench.METHODS[m] is not None):
        recorded = jobs[method]["learner_config"]
        expected = arm_config(cfg, experiment, method, seed=0, store_root=recorded["store_root"])
        assert recorded == dataclasses.asdict(expected), method
        assert recorded["updates_per_round"] == 4
        configs[method] = recorded
    per_job = set(PER_JOB_FIELDS)
    for a, b in itertools.combinations(configs, 2):
        own = set(bench.METHODS[a]) | set(bench.METHODS[b]) | per_job
        differing = {k for k in configs[a] if k not in own and configs[a][k] != configs[b][k]}
        assert not differing, (a, b, differing)
    assert len({c["store_root"] for c in configs.values()}) == len(configs)
    summary = result["summary"]
    assert summary["learner_settings"]["shared_settings_equal"]
    assert set(summary["methods"]) == set(methods)
    for row in summary["methods"].values():
        assert row["seeds"] == 1 and row["seed_ids"] == [0] and row["time_limited"] == 0
        assert row["zero_shot"] == zero["success"]
    # One paired comparison against RL-FT per arm that brings sim knowledge.
    sgft_arms = {"sgft_h1", "sgft_h1_simadv", "sgft_h3", "sgft_hinf"}
    assert set(bench.SGFT_ARMS) == sgft_arms
    assert set(summary["comparisons"]) == sgft_arms | {"sysid", "adapt"}
    for arm, comparison in summary["comparisons"].items():
        assert comparison["seeds"] == [0]
        assert comparison["auc_difference"]["mean"] == pytest.approx(
            jobs[arm]["auc"] - jobs["rl_ft"]["auc"]
        )
        assert set(comparison["verdicts"]) == {"ratio_3x", "minutes_under_5", "no_early_dip"}
    assert summary["primary"] == "sgft_h1"
    table = format_table(cfg, experiment, summary)
    assert "STAND-IN (simulated; not a physical arm)" in table
    for arm in summary["comparisons"]:
        assert f"--- {bench.LABELS[arm]} vs RL-FT" in table
    assert "--- SGFT H=1 vs RL-FT (SAC) (primary)" in table
    assert any("zero-shot: " in line and "real_twin stand-in" in line for line in lines)
    for method in configs:
        assert any(line.split("] ", 1)[-1].startswith(f"{bench.LABELS[method]} seed 0:")
                   for line in lines), method  # fmt: skip


def test_fit_sim_critic_changes_only_the_critic(base_dir, tmp_path):
    assert not critics_trained(read_metadata(base_dir)["training"])
    out = tmp_path / "fitted"
    report = fit_sim_critic(
        str(base_dir),
        out,
        episodes=2,
        held_out=1,
        updates=30,
        episode_seconds=0.5,
        progress=lambda _: None,
        robot=load_robot_description(),
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
    assert critics_trained(fitted.metadata["training"])


def test_learner_overrides_go_through_the_learner_schema():
    cfg = RoundsConfig(
        checkpoint="x", learner_overrides=(("learning_rate", "3e-5"), ("ewc", "true"))
    )
    config = learner_config(cfg, method="sgft", horizon=3)
    assert config.learning_rate == pytest.approx(3e-5) and config.ewc is True
    assert config.method == "sgft" and config.horizon == 3
    with pytest.raises(ValueError, match=r"unknown LearnerConfig --learner setting\(s\): bogus"):
        learner_config(RoundsConfig(checkpoint="x", learner_overrides=(("bogus", "1"),)))
    renamed = (("sysid_restarts", "1"),)
    with pytest.raises(ValueError, match=r"sysid_restarts is now sysid\.restarts"):
        learner_config(RoundsConfig(checkpoint="x", learner_overrides=renamed))
    grouped = learner_config(
        RoundsConfig(checkpoint="x", learner_overrides=(("sysid.restarts", "1"),))
    )
    assert grouped.sysid.restarts == 1
    with pytest.raises(ValueError):  # out of the schema's range
        learner_config(RoundsConfig(checkpoint="x", learner_overrides=(("learning_rate", "5"),)))


def test_the_rounds_carry_learner_settings_in_the_learners_own_schema():
    from simreal_ros.learner.config import LearnerConfig

    learner = config_schema.settings(LearnerConfig)
    for field in dataclasses.fields(RoundsConfig):
        if field.name in learner and field.name not in ("task", "checkpoint", "seed"):
            meta = dict(field.metadata)
            assert meta.pop("shared_with", None) == "LearnerConfig", field.name
            assert meta.pop("shared_name") == field.name
            assert meta == dict(learner[field.name].metadata), field.name
    with pytest.raises(ValueError, match="updates_per_round = 0 is below its minimum"):
        RoundsConfig(checkpoint="x", updates_per_round=0)
    config = arm_config(RoundsConfig(checkpoint="x", sim_episodes=3), bench.EXPERIMENT, "rl_ft")
    assert config.sim_episodes == 3 and config.updates_per_round == 300
