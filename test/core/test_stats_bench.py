"""The few-seed statistics in simreal_ros.stats (bootstrap, Kaplan-Meier restricted mean,
normalised AUC, censored ratio verdicts) against hand-computed cases; the stand-in rounds'
stopping rule and summary (learner.stand_in_rounds, learner.stand_in_summary); and
bench/sample_efficiency.py's arms and CLI, without running any simulation."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from core.bench_loader import sample_efficiency as bench

from simreal_ros.learner.stand_in_experiment import Experiment, RoundsConfig
from simreal_ros.learner.stand_in_rounds import arm_config, finish_job
from simreal_ros.learner.stand_in_summary import format_table, settings_check, summarise
from simreal_ros.stats import (
    bootstrap_ci,
    censored_ratio_verdict,
    censored_time_below_verdict,
    kaplan_meier,
    normalised_auc,
    paired_bootstrap_ci,
    restricted_mean_rows,
    restricted_mean_time,
)

# The three arms the summary tests need (the bench's full matrix is tested against the
# bench itself below).
ARMS = Experiment(
    {"zero_shot": None, "rl_ft": {"method": "rl"}, "sgft_h1": {"method": "sgft", "horizon": 1}},
    {"zero_shot": "zero-shot", "rl_ft": "RL-FT (SAC)", "sgft_h1": "SGFT H=1"},
)


# ---------------------------------------------------------------- restricted mean (KM)
def test_restricted_mean_without_censoring_is_the_mean_clipped_at_the_horizon():
    times = [2.0, 4.0, 6.0, 10.0]
    assert restricted_mean_time(times, [False] * 4, 8.0) == pytest.approx((2 + 4 + 6 + 8) / 4)
    assert restricted_mean_time(times, [False] * 4, 20.0) == pytest.approx(np.mean(times))
    assert restricted_mean_time([0.0, 0.0], [False, False], 5.0) == 0.0


def test_restricted_mean_with_censoring_hand_computed():
    # KM: t=2, 3 at risk, 1 event -> S = 2/3; t=4 censored; t=6, 1 at risk -> S = 0.
    # Area to 8: 2 * 1 + (6 - 2) * 2/3 + 0 = 14/3.
    times, censored = [2.0, 4.0, 6.0], [False, True, False]
    event_times, survival = kaplan_meier(times, censored)
    assert event_times.tolist() == [2.0, 6.0]
    assert survival == pytest.approx([2 / 3, 0.0])
    assert restricted_mean_time(times, censored, 8.0) == pytest.approx(14 / 3)
    rows = np.column_stack([times, censored])  # what a bootstrap over seeds resamples
    assert restricted_mean_rows(rows, 8.0) == pytest.approx(14 / 3)
    # The plain mean treating the censored time as an event would be 4: KM is higher.
    assert restricted_mean_time(times, censored, 8.0) > np.mean(times)


def test_restricted_mean_censored_at_the_horizon_and_ties():
    # Every unit censored at the horizon: the curve never drops.
    assert restricted_mean_time([10.0, 10.0], [True, True], 10.0) == pytest.approx(10.0)
    # One event and one censoring at 3: the censored unit was still at risk, S(3) = 1/2.
    assert restricted_mean_time([3.0, 3.0], [False, True], 5.0) == pytest.approx(3 + 2 * 0.5)
    # Two of four reach at 4, two are censored at the horizon 10: 4 + 6 * 0.5 = 7.
    times, censored = [4.0, 4.0, 10.0, 10.0], [False, False, True, True]
    assert restricted_mean_time(times, censored, 10.0) == pytest.approx(7.0)
    assert math.isnan(restricted_mean_time([], [], 10.0))
    with pytest.raises(ValueError):
        restricted_mean_time([-1.0], [False], 10.0)


# ---------------------------------------------------------------- AUC
def test_normalised_auc_of_a_known_step_function():
    # 0.2 over [0, 5), 0.6 over [5, 10), 1.0 over [10, 20]: (1 + 3 + 10) / 20.
    assert normalised_auc([0, 5, 10], [0.2, 0.6, 1.0], 20) == pytest.approx(0.7)
    # An evaluation past the budget is ignored; the one before it holds to the budget.
    assert normalised_auc([0, 10, 30], [0.5, 1.0, 0.0], 20) == pytest.approx(0.75)
    assert normalised_auc([0], [1.0], 25) == pytest.approx(1.0)
    assert normalised_auc([0, 25], [0.0, 1.0], 25) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="at 0"):
        normalised_auc([5, 10], [0.1, 0.2], 20)
    with pytest.raises(ValueError):
        normalised_auc([0, 10, 5], [0.1, 0.2, 0.3], 20)


# ---------------------------------------------------------------- bootstrap
def test_bootstrap_ci_contains_the_mean_shrinks_and_is_reproducible():
    rng = np.random.default_rng(1)
    small, large = rng.normal(2.0, 1.0, 8), rng.normal(2.0, 1.0, 400)
    low_s, high_s = bootstrap_ci(small)
    low_l, high_l = bootstrap_ci(large)
    assert low_s < small.mean() < high_s and low_l < large.mean() < high_l
    assert high_l - low_l < 0.5 * (high_s - low_s)
    assert bootstrap_ci(small, seed=3) == bootstrap_ci(small, seed=3)
    assert bootstrap_ci(small, seed=3) != bootstrap_ci(small, seed=4)
    assert bootstrap_ci([0.4, 0.4, 0.4]) == pytest.approx((0.4, 0.4))
    # A general statistic goes through the same resampling (median of one value each).
    assert bootstrap_ci([1.0, 1.0], statistic=np.median, resamples=200) == (1.0, 1.0)
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    with pytest.raises(ValueError):
        bootstrap_ci(small, level=1.0)


def test_paired_bootstrap_cancels_the_shared_per_unit_effect():
    base = np.array([0.1, 0.5, 0.9, 0.3, 0.7])  # a large seed-to-seed spread
    better = base + 0.1
    assert paired_bootstrap_ci(better, base) == pytest.approx((0.1, 0.1))
    low, high = bootstrap_ci(better)  # unpaired, the spread swamps the difference
    assert high - low > 0.2
    # A statistic of two-column rows: resampled as whole rows of both samples.
    a = np.array([[2.0, 0.0], [4.0, 0.0]])
    b = np.array([[1.0, 0.0], [2.0, 0.0]])
    ratio = paired_bootstrap_ci(a, b, lambda x, y: x[:, 0].mean() / y[:, 0].mean(), resamples=300)
    assert ratio == pytest.approx((2.0, 2.0))
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap_ci([1.0], [1.0, 2.0])


def test_bootstrap_interval_keeps_an_infinite_end():
    # Half the resamples divide by zero: the upper end is inf, not NaN.
    values = np.array([0.0, 1.0])
    low, high = bootstrap_ci(values, lambda x: 1.0 / x.mean() if x.mean() else math.inf)
    assert math.isfinite(low) and high == math.inf


# ---------------------------------------------------------------- the bench's arms
def test_arms_differ_only_in_their_own_rows():
    cfg = RoundsConfig(checkpoint="ckpt", learner_overrides=(("learning_rate", "1e-4"),))
    experiment = bench.EXPERIMENT
    trained = [m for m, row in bench.METHODS.items() if row is not None]
    groups = (bench.PRIMARY_METHODS, bench.ABLATION_METHODS, bench.SYSID_METHODS,
              bench.ADAPT_METHODS, bench.RLPD_METHODS)  # fmt: skip
    assert set().union(*groups) == set(bench.METHODS)
    configs = {
        m: dataclasses.asdict(arm_config(cfg, experiment, m, seed=3, store_root="s"))
        for m in trained
    }
    for method, config in configs.items():
        for key, value in bench.METHODS[method].items():
            assert config[key] == value, (method, key)
        assert config["learning_rate"] == pytest.approx(1e-4)  # shared overrides reach all
        assert config["updates_per_round"] == cfg.updates_per_round
    for a, b in itertools.combinations(trained, 2):
        own = set(bench.METHODS[a]) | set(bench.METHODS[b])
        left = {k: v for k, v in configs[a].items() if k not in own}
        right = {k: v for k, v in configs[b].items() if k not in own}
        assert left == right, (a, b)
    jobs = [{"method": m, "seed": 0, "learner_config": c} for m, c in configs.items()]
    assert settings_check(jobs, experiment)["shared_settings_equal"]
    jobs[0]["learner_config"] = {**jobs[0]["learner_config"], "anchor_weight": 0.0}
    assert settings_check(jobs, experiment)["differing_fields"] == ["anchor_weight"]
    assert arm_config(cfg, experiment, "rl_ft").resolved_critic_init == "checkpoint"
    assert arm_config(cfg, experiment, "sgft_hinf").horizon_or_none is None
    with pytest.raises(ValueError, match="set by the arms"):
        arm_config(
            dataclasses.replace(cfg, learner_overrides=(("horizon", "2"),)), experiment, "sgft_h1"
        )
    assert bench.SGFT_ARMS == ("sgft_h1", "sgft_h1_simadv", "sgft_h3", "sgft_hinf")
    # Compared against RL-FT: the arms that bring sim knowledge, never BC or RL-FT itself.
    assert experiment.compared_arms == (*bench.SGFT_ARMS, "sysid", "adapt")


def test_seeds_are_paired_across_methods_and_fixed_for_evaluation():
    cfg = RoundsConfig(checkpoint="ckpt")
    assert cfg.condition == "train" and cfg.profile == "real_twin" and cfg.bc_demos == 0
    assert cfg.evaluation_seeds == list(range(900_000, 900_030))
    assert cfg.eval_episodes >= 30 and cfg.seeds >= 5
    # Collection starts: a function of (bench seed, round) only, distinct across both.
    starts = [s for seed in range(3) for r in range(1, 4) for s in cfg.collection_seeds(seed, r)]
    assert len(set(starts)) == len(starts)
    assert not set(starts) & set(cfg.evaluation_seeds)
    quick, _ = bench.parse_args(["--quick"])
    assert quick.seeds >= 5 and quick.eval_episodes >= 30
    assert quick.methods == bench.PRIMARY_METHODS


# ---------------------------------------------------------------- stand-in rounds' summary


def _job(cfg, method, seed, successes, per_round=5, skipped=()):
    """A finished job from evaluated success rates, round 0 first."""
    rounds = []
    for i, rate in enumerate(successes):
        n = cfg.eval_episodes
        rounds.append(
            {
                "round": i,
                "episodes": i * per_round,
                "steps": i * per_round * 100,
                "minutes": i * per_round * 100 / 20.0 / 60.0,
                "evaluation": {"success": rate, "successes": round(rate * n), "episodes": n},
                "evaluated": i not in skipped,
                "metrics": {"value_exploit_flag": 1.0} if i == 1 else {},
            }
        )
    job = {"method": method, "seed": seed, "rounds": rounds}
    return finish_job(job, cfg, ARMS.trains(method), 0.0)


def test_target_must_hold_on_two_consecutive_evaluations():
    cfg = RoundsConfig(checkpoint="x", episodes_per_round=5, max_rounds=4, eval_episodes=10)
    job = _job(cfg, "rl_ft", 0, [0.2, 0.8, 0.6, 0.9, 0.8])
    assert job["reached"] and job["episodes_to_target"] == 15  # the first of the two
    assert job["auc"] == pytest.approx((0.2 * 5 + 0.8 * 5 + 0.6 * 5 + 0.9 * 5) / 20)
    once = _job(cfg, "rl_ft", 0, [0.2, 0.4, 0.5, 0.6, 0.9])  # at target only at the end
    assert not once["reached"] and once["episodes_to_target"] == 20
    # A skipped round repeats the last evaluation; it is no confirmation.
    skip = _job(cfg, "rl_ft", 0, [0.2, 0.9, 0.9, 0.1, 0.1], skipped=(2,))
    assert not skip["reached"]
    assert job["early_dip"]["dip"] == pytest.approx(0.6 - 0.2)
    dip = _job(cfg, "rl_ft", 0, [0.9, 0.0, 0.1])
    assert dip["early_dip"]["dip"] == pytest.approx(-0.9) and dip["early_dip"]["below_zero_shot"]
    zero = _job(cfg, "zero_shot", 0, [0.9])
    assert zero["reached"] and zero["episodes_to_target"] == 0 and zero["auc"] == 0.9


def test_summary_ratio_auc_and_verdicts():
    cfg = RoundsConfig(
        checkpoint="x",
        methods=("zero_shot", "rl_ft", "sgft_h1"),
        episodes_per_round=5,
        max_rounds=4,
        eval_episodes=10,
        bootstrap_resamples=500,
    )
    jobs = []
    for seed in range(5):
        jobs.append(_job(cfg, "zero_shot", seed, [0.3]))
        # RL-FT holds from episode 15 on three seeds, never on two (censored at 20).
        rl = [0.3, 0.4, 0.5, 0.9, 0.9] if seed < 3 else [0.3, 0.4, 0.5, 0.6, 0.7]
        jobs.append(_job(cfg, "rl_ft", seed, rl))
        jobs.append(_job(cfg, "sgft_h1", seed, [0.3, 0.9, 0.9]))  # holds from 5
    summary = summarise(cfg, ARMS, jobs, {"success": 0.3})
    rl_row = summary["methods"]["rl_ft"]
    assert rl_row["censored"] == 2
    # KM: 3 of 5 reach at 15, 2 censored at 20: 15 + 5 * 0.4 = 17.
    assert rl_row["episodes_to_target"]["restricted_mean"] == pytest.approx(17.0)
    comparison = summary["comparisons"]["sgft_h1"]
    ratio = comparison["ratio_reference_over_arm"]
    assert ratio["restricted_mean_ratio"] == pytest.approx(17.0 / 5.0)
    assert ratio["reference_censored"] == 2 and ratio["arm_censored"] == 0
    # Resampled, RL-FT's restricted mean stays in 15..20 and SGFT's at 5: CI within 3..4,
    # so the lower bound (RL-FT is censored) already clears 3x.
    assert 3.0 <= ratio["ci95"][0] <= ratio["ci95"][1] <= 4.0
    assert "lower bound" in ratio["note"] and comparison["verdicts"]["ratio_3x"] == "met"
    sg_auc = (0.3 * 5 + 0.9 * 15) / 20
    rl_auc = [(0.3 * 5 + 0.4 * 5 + 0.5 * 5 + 0.9 * 5) / 20] * 3 + [
        (0.3 * 5 + 0.4 * 5 + 0.5 * 5 + 0.6 * 5) / 20
    ] * 2
    assert comparison["auc_difference"]["mean"] == pytest.approx(sg_auc - np.mean(rl_auc))
    assert comparison["auc_difference"]["ci95"][0] > 0
    assert comparison["verdicts"]["no_early_dip"] == "met"
    # SGFT holds after 5 episodes of 100 steps at 20 Hz: 0.42 min on every seed.
    minutes = summary["methods"]["sgft_h1"]["minutes_to_target"]
    assert minutes["restricted_mean"] == pytest.approx(500 / 20.0 / 60.0)
    assert comparison["verdicts"]["minutes_under_5"] == "met"
    assert summary["primary"] == "sgft_h1"
    assert summary["methods"]["sgft_h1"]["value_exploit_flags"] == 5
    table = format_table(cfg, ARMS, summary)
    assert "STAND-IN" in table and "SGFT H=1 - RL-FT (SAC) AUC: +" in table
    assert "RL-FT (SAC)/SGFT H=1 episodes to 80% held twice: 3.40" in table
    assert "censored 2/5 RL-FT (SAC), 0/5 SGFT H=1: RL-FT (SAC) censored" in table
    rows = {
        label: next(line for line in table.splitlines() if line.startswith(f"{label:<16} "))
        for label in ("RL-FT (SAC)", "SGFT H=1")
    }
    assert ">=" in rows["RL-FT (SAC)"]  # the censored arm's restricted means are bounds
    assert ">=" not in rows["SGFT H=1"]


def test_ratio_verdicts_say_when_censoring_makes_a_bound():
    def verdict(ci, rl_censored, sgft_censored):
        return censored_ratio_verdict(ci, rl_censored, sgft_censored, 3.0, ("RL-FT", "SGFT"))

    assert verdict((3.5, 6.0), 0, 0)[0] == "met"
    assert verdict((2.0, 6.0), 0, 0)[0] == "not met"
    assert verdict((2.0, 6.0), 2, 0) == (
        "not measured (censored)",
        "RL-FT censored: the ratio is a lower bound",
    )
    assert verdict((3.2, 6.0), 2, 0)[0] == "met"  # a lower bound already clears 3x
    assert verdict((1.0, 2.5), 0, 1) == ("not met", "SGFT censored: the ratio is an upper bound")
    assert verdict((1.0, 4.0), 0, 1)[0] == "not measured (censored)"
    assert verdict((1.0, 4.0), 1, 1)[0] == "not measured (censored)"
    assert verdict((math.nan, math.nan), 0, 0)[0] == "not measured"

    # Minutes: censored seeds make the restricted mean a lower bound on the minutes needed.
    def minutes(ci, censored):
        return censored_time_below_verdict(ci, censored, 5.0)

    assert minutes([0.5, 4.9], 0) == "met"
    assert minutes([3.0, 5.5], 0) == "not met"
    assert minutes([5.0, 7.0], 1) == "not met"  # even the bound is past 5
    assert minutes([0.5, 2.0], 1) == "not measured (censored)"
