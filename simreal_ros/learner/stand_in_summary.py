"""The stand-in rounds' jobs summarised over seeds (learner.stand_in_rounds): per arm, the
success-curve AUC, episodes and simulated minutes to the target as Kaplan-Meier restricted
means (a seed that never holds the target is censored at the budget), the early dip and
V_sim-exploit flags; per compared arm (SGFT, or one that trains in the identified sim), the
paired comparison against the reference arm (RL-FT) with its verdicts; then the printed
table and the success-curve plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from simreal_ros.learner.stand_in_experiment import PER_JOB_FIELDS, Experiment, RoundsConfig
from simreal_ros.stats import (
    bootstrap_ci,
    censored_ratio_verdict,
    censored_time_below_verdict,
    paired_bootstrap_ci,
    ratio,
    restricted_mean_rows,
    wilson_interval,
)


def time_rows(jobs: list[dict[str, Any]], key: str) -> np.ndarray:
    """[time to target, censored] per job, for ``restricted_mean_rows``."""
    return np.asarray([[j[key], float(not j["reached"])] for j in jobs], np.float64)


def settings_check(jobs: list[dict[str, Any]], experiment: Experiment) -> dict[str, Any]:
    """Whether the trained jobs ran with identical learner settings outside their arm's
    row (and the per-job seed and store), and each with its own row's values."""
    trained = [j for j in jobs if j.get("learner_config")]
    skip = set(experiment.arm_fields) | set(PER_JOB_FIELDS)
    differences: set[str] = set()
    wrong_row = []
    if trained:
        reference = trained[0]["learner_config"]
        for job in trained:
            config = job["learner_config"]
            differences |= {k for k in reference if k not in skip and config[k] != reference[k]}
            if any(config[k] != v for k, v in experiment.arms[job["method"]].items()):
                wrong_row.append(f"{job['method']} seed {job['seed']}")
    return {
        "shared_settings_equal": not differences and not wrong_row,
        "differing_fields": sorted(differences),
        "jobs_not_matching_their_row": wrong_row,
        "arm_fields": list(experiment.arm_fields),
    }


def _time_to_target(rows: np.ndarray, horizon: float, boot: dict[str, Any]) -> dict[str, Any]:
    """Restricted mean time to target of [time, censored] rows, with its bootstrap CI."""
    return {
        "restricted_mean": restricted_mean_rows(rows, horizon),
        "ci95": list(bootstrap_ci(rows, lambda r: restricted_mean_rows(r, horizon), **boot)),
        "horizon": horizon,
        "per_seed": rows[:, 0].tolist(),
    }


def _method_summary(cfg: RoundsConfig, label: str, method: str, jobs, zero: dict[str, Any]):
    boot = {"resamples": cfg.bootstrap_resamples, "seed": cfg.bootstrap_seed}
    budget = cfg.episode_budget
    budget_minutes = budget * cfg.episode_seconds / 60.0
    all_rows = sorted((j for j in jobs if j["method"] == method), key=lambda j: j["seed"])
    rows = [j for j in all_rows if not j.get("time_limited")]
    if not rows:
        return None
    auc = [j["auc"] for j in rows]
    episodes = time_rows(rows, "episodes_to_target")
    minutes = time_rows(rows, "minutes_to_target")
    final = [j["final_success"] for j in rows]
    total_s = sum(j["rounds"][-1]["evaluation"]["successes"] for j in rows)
    total_n = sum(j["rounds"][-1]["evaluation"]["episodes"] for j in rows)
    dips = [j["early_dip"] for j in rows if j.get("early_dip")]
    dip = None
    if dips:
        # Pooled over seeds, each at its worst early evaluation; a dip only when even the
        # Wilson upper bound stays below zero-shot (the min of two is already pessimistic).
        s = sum(d["successes"] for d in dips)
        n = sum(d["episodes"] for d in dips)
        upper = wilson_interval(s, n)[1]
        dip = {
            "mean": float(np.mean([d["dip"] for d in dips])),
            "per_seed": [d["dip"] for d in dips],
            "seeds_below_zero_shot": sum(d["below_zero_shot"] for d in dips),
            "pooled_worst_success": s / n if n else float("nan"),
            "pooled_wilson95_high": upper,
            "dip": bool(upper < zero["success"]),
        }
    return {
        "label": label,
        "seeds": len(rows),
        "seed_ids": [j["seed"] for j in rows],
        "time_limited": len(all_rows) - len(rows),
        "zero_shot": zero["success"],
        "final_success": {
            "mean": float(np.mean(final)),
            "per_seed": final,
            "pooled": total_s / total_n if total_n else float("nan"),
            "pooled_wilson95": list(wilson_interval(total_s, total_n)),
        },
        "auc": {
            "mean": float(np.mean(auc)),
            "ci95": list(bootstrap_ci(auc, **boot)),
            "per_seed": auc,
        },
        "censored": int(episodes[:, 1].sum()),
        "episodes_to_target": _time_to_target(episodes, budget, boot),
        "minutes_to_target": _time_to_target(minutes, budget_minutes, boot),
        "early_dip": dip,
        "value_exploit_flags": sum(j["value_exploit_flags"] for j in rows),
        "rounds_trained": sum(len(j["rounds"]) - 1 for j in rows),
    }


def summarise(
    cfg: RoundsConfig, experiment: Experiment, jobs: list[dict[str, Any]], zero: dict[str, Any]
) -> dict[str, Any]:
    methods = {}
    for method in cfg.methods:
        row = _method_summary(cfg, experiment.labels[method], method, jobs, zero)
        if row is not None:
            methods[method] = row
    boot = {"resamples": cfg.bootstrap_resamples, "seed": cfg.bootstrap_seed}
    budget = cfg.episode_budget
    usable = [j for j in jobs if not j.get("time_limited")]
    by_seed = {(j["method"], j["seed"]): j for j in usable}
    reference = experiment.reference
    comparisons = {}
    for arm in (m for m in cfg.methods if m in experiment.compared_arms):
        seeds = sorted(s for m, s in by_seed if m == arm and (reference, s) in by_seed)
        if not seeds:
            continue
        rl = [by_seed[(reference, s)] for s in seeds]
        sg = [by_seed[(arm, s)] for s in seeds]
        rl_auc = np.asarray([j["auc"] for j in rl])
        sg_auc = np.asarray([j["auc"] for j in sg])
        rl_t, sg_t = time_rows(rl, "episodes_to_target"), time_rows(sg, "episodes_to_target")

        def time_ratio(a, b) -> float:
            return ratio(restricted_mean_rows(a, budget), restricted_mean_rows(b, budget))

        ratio_ci = paired_bootstrap_ci(rl_t, sg_t, time_ratio, **boot)
        rl_c, sg_c = int(rl_t[:, 1].sum()), int(sg_t[:, 1].sum())
        verdict, note = censored_ratio_verdict(
            ratio_ci, rl_c, sg_c, experiment.ratio_target,
            names=(experiment.labels[reference], experiment.labels[arm]),
        )  # fmt: skip
        diff_ci = paired_bootstrap_ci(sg_auc, rl_auc, **boot)
        diff = float(np.mean(sg_auc - rl_auc))
        if diff_ci[0] > 0:
            auc_verdict = f"{experiment.labels[arm]} learns faster (CI above 0)"
        elif diff_ci[1] < 0:
            auc_verdict = f"{experiment.labels[reference]} learns faster (CI below 0)"
        else:
            auc_verdict = "no difference resolved (CI includes 0)"
        sg_row = methods[arm]
        dip = sg_row["early_dip"]
        minutes_verdict = censored_time_below_verdict(
            sg_row["minutes_to_target"]["ci95"], sg_c, experiment.minutes_target
        )
        comparisons[arm] = {
            "seeds": seeds,
            "auc_difference": {
                "mean": diff,
                "ci95": list(diff_ci),
                "per_seed": (sg_auc - rl_auc).tolist(),
                "verdict": auc_verdict,
            },
            "ratio_reference_over_arm": {
                "restricted_mean_ratio": time_ratio(rl_t, sg_t),
                "ci95": list(ratio_ci),
                "reference_censored": rl_c,
                "arm_censored": sg_c,
                "note": note,
            },
            "verdicts": {
                "ratio_3x": verdict,
                "minutes_under_5": minutes_verdict,
                "no_early_dip": (
                    "not measured" if dip is None else "not met" if dip["dip"] else "met"
                ),
            },
        }
    primary = experiment.primary
    primary = primary if primary in comparisons else next(iter(comparisons), None)
    return {
        "methods": methods,
        "comparisons": comparisons,
        "primary": primary,
        "learner_settings": settings_check(jobs, experiment),
    }


def _ci(interval, fmt: str) -> str:
    return f"{format(interval[0], fmt)}..{format(interval[1], fmt)}"


def format_table(cfg: RoundsConfig, experiment: Experiment, summary: dict[str, Any]) -> str:
    """The printed report: one row per arm, notes, then each comparison's verdict lines."""
    labels = experiment.labels
    budget_minutes = cfg.episode_budget * cfg.episode_seconds / 60.0
    lines = [
        f"Sample efficiency on the {cfg.profile} STAND-IN (simulated; not a physical arm): "
        f"task {cfg.task}, condition {cfg.condition}; {cfg.eval_episodes} fixed evaluation "
        f"starts; budget {cfg.max_rounds} rounds x {cfg.episodes_per_round} episodes = "
        f"{cfg.episode_budget} episodes ({budget_minutes:.1f} sim min); "
        f"{cfg.updates_per_round} updates/round; target {cfg.target:.0%} held on two "
        "consecutive evaluations",
        f"{'method':<16} {'seeds':>5} {'zero-shot':>9} {'final':>6}  {'AUC [95% CI]':<19} "
        f"{'episodes to target [CI]':<25} {'cens.':>5}  {'sim minutes [CI]':<18}",
    ]
    for row in summary["methods"].values():
        a, e, m = row["auc"], row["episodes_to_target"], row["minutes_to_target"]
        mark = ">=" if row["censored"] else "  "
        lines.append(
            f"{row['label']:<16} {row['seeds']:>5} {row['zero_shot']:>9.0%} "
            f"{row['final_success']['mean']:>6.0%}  "
            f"{a['mean']:.2f} [{_ci(a['ci95'], '.2f')}]{'':5} "
            f"{mark}{e['restricted_mean']:5.1f} [{_ci(e['ci95'], '5.1f')}]{'':4} "
            f"{row['censored']:>2}/{row['seeds']:<2}  "
            f"{mark}{m['restricted_mean']:4.2f} [{_ci(m['ci95'], '.2f')}]"
        )
    lines.append(
        "(AUC: success-vs-episodes area / budget, 1.0 = 100% from the start; episodes and "
        "minutes: Kaplan-Meier restricted means up to the budget, '>=' = some seeds "
        "censored, so a lower bound; CIs: percentile bootstrap over seeds)"
    )
    for method, row in summary["methods"].items():
        if row["time_limited"]:
            lines.append(
                f"{row['label']}: {row['time_limited']} seed(s) stopped by the deadline "
                "before the budget (left out of every statistic)"
            )
        dip = row["early_dip"]
        if dip is not None:
            lines.append(
                f"{row['label']}: early dip (worst of rounds 1-2 minus zero-shot) "
                f"{dip['mean']:+.2f} mean over seeds, {dip['seeds_below_zero_shot']} seed(s) "
                f"below zero-shot beyond Wilson noise; pooled: "
                f"{'DIP' if dip['dip'] else 'no dip beyond noise'}"
            )
        if method in experiment.shaped_arms:
            lines.append(
                f"{row['label']}: V_sim-exploit flags in {row['value_exploit_flags']} of "
                f"{row['rounds_trained']} rounds"
            )
    settings = summary["learner_settings"]
    if not settings["shared_settings_equal"]:
        lines.append(
            f"WARNING: arms differ outside their rows: {settings['differing_fields']} "
            f"{settings['jobs_not_matching_their_row']}"
        )
    for arm, c in summary["comparisons"].items():
        tag = " (primary)" if arm == summary["primary"] else ""
        d, r, v = c["auc_difference"], c["ratio_reference_over_arm"], c["verdicts"]
        ref = labels[experiment.reference]
        minutes = summary["methods"][arm]["minutes_to_target"]
        lines += [
            f"--- {labels[arm]} vs {ref}{tag}, paired over seeds {c['seeds']}",
            f"{labels[arm]} - {ref} AUC: {d['mean']:+.2f} (95% CI {_ci(d['ci95'], '+.2f')}): "
            f"{d['verdict']}",
            f"{ref}/{labels[arm]} episodes to {cfg.target:.0%} held twice: "
            f"{r['restricted_mean_ratio']:.2f} (95% CI {_ci(r['ci95'], '.2f')}); censored "
            f"{r['reference_censored']}/{len(c['seeds'])} {ref}, {r['arm_censored']}/"
            f"{len(c['seeds'])} {labels[arm]}: {r['note']}",
            f"target ratio >= {experiment.ratio_target:g}x at the CI lower bound: {v['ratio_3x']}",
            f"target < {experiment.minutes_target:g} simulated minutes of stand-in data "
            f"({minutes['restricted_mean']:.2f}, CI {_ci(minutes['ci95'], '.2f')}): "
            f"{v['minutes_under_5']}"
            + (
                f" (the whole budget is {budget_minutes:.1f} min, so any seed that reaches "
                "the target meets it)"
                if budget_minutes < experiment.minutes_target
                else ""
            ),
            f"target no early dip ({labels[arm]}): {v['no_early_dip']}",
        ]
    return "\n".join(lines)


def step_values(episodes, success, grid) -> np.ndarray:
    """The success step function (each rate holds until the next evaluation) on ``grid``."""
    index = np.searchsorted(np.asarray(episodes), np.asarray(grid), side="right") - 1
    return np.asarray(success, np.float64)[np.clip(index, 0, None)]


def plot_curves(
    cfg: RoundsConfig, experiment: Experiment, jobs: list[dict[str, Any]], path: str | Path
) -> Path:
    """Mean success vs stand-in episodes per arm, min..max over seeds shaded."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on a robot PC or in CI
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    grid = np.arange(cfg.episode_budget + 1)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for method in cfg.methods:
        rows = [j for j in jobs if j["method"] == method and not j.get("time_limited")]
        if not rows:
            continue
        values = np.asarray(
            [step_values(j["curve"]["episodes"], j["curve"]["success"], grid) for j in rows]
        )
        (line,) = ax.step(grid, values.mean(0), where="post", label=experiment.labels[method])
        ax.fill_between(grid, values.min(0), values.max(0), step="post", alpha=0.15,
                        color=line.get_color())  # fmt: skip
    ax.axhline(cfg.target, color="k", linestyle="--", linewidth=1, label="target")
    ax.set_xlim(0, cfg.episode_budget)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # episodes are counts
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("stand-in episodes collected")
    ax.set_ylabel(f"success on {cfg.eval_episodes} fixed starts")
    ax.set_title(f"{cfg.task} on the {cfg.profile} STAND-IN (simulated), condition "
                 f"{cfg.condition}: mean, min..max over seeds", fontsize=9)  # fmt: skip
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
