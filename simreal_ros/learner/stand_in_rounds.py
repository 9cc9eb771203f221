"""Fine-tuning rounds on a simulated STAND-IN for the arm, off ROS, through the learner's own
code path: the round loop of bench/sample_efficiency.py, one job per (arm, seed).

Each job runs rounds until the target is held on two consecutive evaluations or the
episode budget is spent:

  1. collect K stand-in episodes with the current policy's own action distribution (the
     LoRA actor's tanh-Gaussian ``sample``), converted like
     ``learner.data.collect_sim_transitions`` and labelled ``real_twin`` so the learner treats
     them as real data (an identified-sim arm records them as bags and identifies from
     them instead);
  2. ``LearnerSession.finetune`` then ``session.commit`` with ``unscreened_promotion()``:
     no sim gate and no arm decision, because this measures learning, not gating;
  3. evaluate the deployed, merged adapter on the stand-in.

Paired design: every evaluation uses the same fixed starts for every arm, round and seed,
and collection starts depend on (seed, round) only, so the arms see the same states.
Round 0 is the zero-shot evaluation, shared by all. The arms themselves (which LearnerConfig
fields each sets) come from the caller as an ``Experiment``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from simreal_ros.config_schema import check_names, from_mapping
from simreal_ros.executor import make_executor
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.methods import method_traits
from simreal_ros.learner.stand_in_experiment import Experiment, RoundsConfig
from simreal_ros.stats import normalised_auc, wilson_interval

# Training metrics a round row keeps.
ROUND_METRICS = ("loss", "critic_loss", "actor_loss", "bc_loss", "q_mean", "reward_mean",
                 "alpha", "reward_scale", "value_exploit_flag", "anchor_drift", "q_scale",
                 "entropy", "updates", "new_real_transitions", "distance_from_parent",
                 "adapt_teacher_lead", "adapt_teacher_speed", "adapt_step_factor",
                 "adapt_teacher_success", "adapt_parent_success", "adapt_imitated",
                 "adapt_dagger_success", "adapt_polish_before", "adapt_polish_after",
                 "adapt_polish_kept")  # fmt: skip


def evaluate(cfg: RoundsConfig, adapter_dir: str | None, workers: int = 1) -> dict[str, Any]:
    """The deployed (merged, numpy) policy on the stand-in's fixed evaluation starts."""
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.evaluate import PolicySource, evaluate_policy

    result = evaluate_policy(
        PolicySource(cfg.checkpoint, adapter_dir),
        profile=cfg.profile,
        condition=cfg.condition,
        seeds=cfg.evaluation_seeds,
        workers=workers,
        robot=load_robot_description(cfg.robot),
    )
    return {
        "successes": result.successes,
        "episodes": result.episodes,
        "success": result.success_rate,
        "ci95": list(result.ci),
        "mean_return": result.mean_return,
        "mean_length": result.mean_length,
    }


def learner_config(cfg: RoundsConfig, **values: Any) -> LearnerConfig:
    """The learner's defaults, the given settings, then the --learner KEY=VALUE overrides
    (parsed and validated by the learner's own config schema)."""
    for key, text in cfg.learner_overrides:
        check_names(LearnerConfig, [key], "--learner setting")
        values[key] = json.loads(text) if text[:1] in "[{" else _scalar(text)
    return from_mapping(LearnerConfig, values)


def _scalar(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def arm_config(
    cfg: RoundsConfig, experiment: Experiment, method: str, seed: int = 0,
    store_root: str = "models",
) -> LearnerConfig:  # fmt: skip
    """The LearnerConfig a job of ``method`` runs with: the settings every arm shares (the
    rounds', then --learner overrides) plus the arm's own row, and nothing else."""
    row = experiment.arms[method]
    if row is None:
        raise ValueError(f"{method} does not train; it has no learner config.")
    clash = sorted({k for k, _ in cfg.learner_overrides} & set(experiment.arm_fields))
    if clash:
        # An override of an arm field would silently turn arms into one another.
        raise ValueError(f"--learner {', '.join(clash)}: set by the arms; choose --methods.")
    return learner_config(
        cfg,
        seed=seed,
        task=cfg.task,
        checkpoint_dir=cfg.checkpoint,
        updates_per_round=cfg.updates_per_round,
        sim_episodes=cfg.sim_episodes,
        store_root=store_root,
        **row,
    )


def unscreened_promotion():
    """A promotion without the sim gate or the arm's decision: these rounds evaluate every
    candidate on the stand-in directly, so the gate (learner.gate) would only change what
    is measured. Never use it where a candidate reaches an arm."""
    from simreal_ros.learner.gate import GateDecision

    return GateDecision(
        promoted=True,
        reason="bench: evaluated on the stand-in directly, no sim screening",
        results=[],
        ci_low_threshold=0.0,
        tolerance=0.0,
        seeds=[],
    )


def _worker_setup() -> None:
    import torch

    torch.set_num_threads(1)
    logging.getLogger("simreal_ros").setLevel(logging.ERROR)


def arm_rounds(
    cfg: RoundsConfig, experiment: Experiment, method: str, seed: int,
    round0: dict[str, Any], work_dir: str,
) -> dict[str, Any]:  # fmt: skip
    """One job: rounds of collect -> fine-tune -> evaluate until the target is held on two
    consecutive evaluations or the budget is spent."""
    _worker_setup()
    started = time.perf_counter()
    rounds = [{"round": 0, "episodes": 0, "demo_episodes": 0, "steps": 0, "minutes": 0.0,
               "evaluation": round0, "evaluated": True}]  # fmt: skip
    out: dict[str, Any] = {"method": method, "seed": seed, "rounds": rounds}
    if not experiment.trains(method):
        return finish_job(out, cfg, False, started)

    import torch

    from simreal_ros.learner import lora
    from simreal_ros.learner.data import (
        collect_sim_transitions,
        expert_actions,
        policy_actions,
        rollout_transitions,
    )
    from simreal_ros.learner.replay import Transitions
    from simreal_ros.learner.session import LearnerSession
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    torch.manual_seed(seed)
    store_root = Path(tempfile.mkdtemp(prefix=f"{method}-s{seed}-", dir=work_dir))
    config = arm_config(cfg, experiment, method, seed, str(store_root))
    out["learner_config"] = dataclasses.asdict(config)
    checkpoint = load_checkpoint(cfg.checkpoint)
    control_rate = float(checkpoint.spec.control_rate_hz)
    if not cfg.robot:
        raise ValueError("RoundsConfig.robot names the arm (robot_reference of its robot.yaml).")
    robot = load_robot_description(cfg.robot)
    sim = None
    # The learner's default sim data (nominal sim, not the stand-in): replay + SGFT scale.
    # Seeded by the seed only, so every arm of a seed replays the same sim episodes.
    if config.wants_sim_episodes:
        sim = collect_sim_transitions(
            checkpoint, cfg.task, config.sim_episodes, seed=1_000 + seed,
            episode_seconds=cfg.episode_seconds,
            exploration_std_max=config.exploration_std_max, robot=robot,
        )  # fmt: skip
    session = LearnerSession(config, checkpoint=checkpoint, sim_data=sim, robot=robot)
    env = ArmTaskEnv(
        task=cfg.task,
        profile=cfg.profile,
        condition=cfg.condition,
        control_rate_hz=control_rate,
        episode_seconds=cfg.episode_seconds,
        robot=robot,
    )
    expert = None
    if method_traits(config.method).uses_expert_demos and cfg.bc_demos > 0:
        from simreal_ros.sim.expert import make_expert

        expert = make_expert(cfg.task, robot, control_rate_hz=control_rate)
    real: Transitions | None = None
    episodes = demos = steps = 0
    try:
        for round_index in range(1, cfg.max_rounds + 1):
            if held_index(rounds, cfg.target) is not None:
                break  # held on two consecutive evaluations: the rest adds nothing
            if cfg.deadline and time.time() > cfg.deadline:
                out["time_limited"] = True
                break
            t0 = time.perf_counter()
            act = policy_actions(
                lora.inner(session.actor_peft), cfg.noise or None, config.exploration_std_max
            )
            seeds = cfg.collection_seeds(seed, round_index)
            if method_traits(config.method).trains_in == "identified_sim":
                # Its stand-in episodes are bags (states at 100 Hz, the commands topic) to
                # identify from; no stand-in transition reaches its updates.
                collected = _record_bags(cfg, session, store_root / "bags", seeds, seed)
                session.identify(sorted(str(b) for b in (store_root / "bags").iterdir()))
                part = None
            else:
                part, collected = rollout_transitions(
                    env, session.converter, seeds, cfg.condition, act, source="real_twin",
                    episode_ids=[f"s{seed}-{s}" for s in seeds],
                )  # fmt: skip
            parts = [part] if part is not None else []
            if expert is not None:
                seeds = cfg.demo_seeds(seed, round_index)
                part, demo_eps = rollout_transitions(
                    env, session.converter, seeds, cfg.condition,
                    expert_actions(expert, session.converter),
                    source="real_twin", episode_ids=[f"demo-{s}" for s in seeds],
                )  # fmt: skip
                parts.append(part)
                collected += demo_eps
                demos += len(demo_eps)
            collect_s = time.perf_counter() - t0
            episodes += len(collected)
            steps += sum(n for _, n, _ in collected)
            if parts:
                real = Transitions.concatenate(([real] if real is not None else []) + parts)
            t1 = time.perf_counter()
            try:
                candidate = session.finetune(real)
            except ValueError as error:  # e.g. BC with no successful episode yet
                # The policy is unchanged, so its last evaluation still describes it.
                rounds.append(
                    _round_row(round_index, episodes, demos, steps, control_rate, collected,
                               rounds[-1]["evaluation"], {"skipped": str(error)},
                               collect_s, 0.0, 0.0, evaluated=False)
                )  # fmt: skip
                continue
            stored = session.commit(candidate, unscreened_promotion())
            train_s = time.perf_counter() - t1
            t2 = time.perf_counter()
            evaluation = evaluate(cfg, str(stored.path))
            metrics = {k: float(v) for k, v in candidate.metrics.items() if k in ROUND_METRICS}
            rounds.append(
                _round_row(round_index, episodes, demos, steps, control_rate, collected,
                           evaluation, metrics, collect_s, train_s, time.perf_counter() - t2)
            )  # fmt: skip
            if session.identified.identification:
                rounds[-1]["identification"] = session.identified.identification
    finally:
        env.close()
        shutil.rmtree(store_root, ignore_errors=True)
    out["reward_scale"] = float(session.critics.reward_scale)
    return finish_job(out, cfg, True, started)


def _record_bags(cfg, session, bag_root: Path, seeds, bench_seed: int) -> list[tuple]:
    """The running policy's stand-in episodes as bags, as the graph records them."""
    from simreal_ros.learner import lora
    from simreal_ros.learner.sim_episodes import record_rollout

    collected = []
    for s in seeds:
        episode_id = f"s{bench_seed}-{s}"
        meta = record_rollout(
            bag_root / episode_id, session.checkpoint, task=cfg.task, seed=int(s),
            profile=cfg.profile, actor=lora.inner(session.actor_peft),
            version=session.promotion.running_version or session.checkpoint.version,
            condition=cfg.condition, episode_seconds=cfg.episode_seconds,
            noise=cfg.noise or 0.1, converter=session.converter, episode_id=episode_id,
            state_rate_hz=100, robot=session.robot,
        )  # fmt: skip
        steps = meta.steps or round(cfg.episode_seconds * session.checkpoint.spec.control_rate_hz)
        collected.append((episode_id, int(steps), bool(meta.success)))
    return collected


def _round_row(index, episodes, demos, steps, rate, collected, evaluation, metrics,
               collect_s, train_s, eval_s, evaluated=True) -> dict[str, Any]:  # fmt: skip
    return {
        "round": index,
        "episodes": episodes,
        "demo_episodes": demos,
        "steps": steps,
        "minutes": steps / rate / 60.0,
        "collected_success": float(np.mean([s for _, _, s in collected])) if collected else 0.0,
        "evaluation": evaluation,
        "evaluated": evaluated,
        "metrics": metrics,
        "seconds": {"collect": collect_s, "train": train_s, "evaluate": eval_s},
    }


def held_index(rounds: list[dict[str, Any]], target: float) -> int | None:
    """First round whose evaluation and the next one's are both at the target; the second
    must be a fresh evaluation (a skipped round only repeats the previous one)."""
    for i in range(len(rounds) - 1):
        now, after = rounds[i], rounds[i + 1]
        if (
            after.get("evaluated", True)
            and now["evaluation"]["success"] >= target
            and after["evaluation"]["success"] >= target
        ):
            return i
    return None


def finish_job(
    out: dict[str, Any], cfg: RoundsConfig, trains: bool, started: float
) -> dict[str, Any]:
    """Per-job statistics: curve AUC, time to target (or censoring), early dip, flags."""
    rounds = out["rounds"]
    zero = rounds[0]["evaluation"]
    index = held_index(rounds, cfg.target)
    if not trains and zero["success"] >= cfg.target:
        # The untrained policy is deterministic and re-evaluated on the same starts it
        # would score the same: held from episode 0.
        index = 0
    out["reached"] = index is not None
    if index is not None:
        out["episodes_to_target"] = rounds[index]["episodes"]
        out["minutes_to_target"] = rounds[index]["minutes"]
    else:
        # Censored: never held within the budget. Minutes censor at what was collected
        # (an arm that collects nothing, at the budget's worth).
        out["episodes_to_target"] = cfg.episode_budget
        budget_minutes = cfg.episode_budget * cfg.episode_seconds / 60.0
        out["minutes_to_target"] = rounds[-1]["minutes"] if trains else budget_minutes
        if out.get("time_limited"):  # cut by the wall clock: what was collected (JSON only)
            out["episodes_to_target"] = rounds[-1]["episodes"]
    out["curve"] = {
        "episodes": [r["episodes"] for r in rounds],
        "success": [r["evaluation"]["success"] for r in rounds],
    }
    out["auc"] = normalised_auc(out["curve"]["episodes"], out["curve"]["success"],
                                cfg.episode_budget)  # fmt: skip
    early = rounds[1:3]
    out["early_dip"] = None
    if early:
        worst = min(early, key=lambda r: r["evaluation"]["success"])["evaluation"]
        high = wilson_interval(worst["successes"], worst["episodes"])[1]
        out["early_dip"] = {
            "dip": worst["success"] - zero["success"],
            "successes": worst["successes"],
            "episodes": worst["episodes"],
            "below_zero_shot": bool(high < zero["success"]),
        }
    out["value_exploit_flags"] = sum(
        1 for r in rounds[1:] if r.get("metrics", {}).get("value_exploit_flag", 0.0) > 0
    )
    out["final_success"] = rounds[-1]["evaluation"]["success"]
    out["seconds"] = time.perf_counter() - started
    return out


def run_experiment(
    cfg: RoundsConfig, experiment: Experiment, work_dir: str | None = None, progress=print,
    time_limit_s: float = 0.0,
) -> dict[str, Any]:  # fmt: skip
    """The zero-shot evaluation (round 0 of every job), then every (arm, seed) job of
    ``cfg.methods``, then their summary over seeds."""
    from simreal_ros.learner.critics import critics_trained, fit_sim_critic
    from simreal_ros.learner.stand_in_summary import summarise
    from simreal_ros.policy.checkpoint import read_metadata
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.profiles import check_profile

    unknown = [m for m in cfg.methods if m not in experiment.arms]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {', '.join(experiment.arms)}.")
    if not (Path(cfg.checkpoint) / "policy.json").is_file():
        raise FileNotFoundError(
            f"checkpoint {cfg.checkpoint} has no policy.json; pass --checkpoint with a "
            f"{cfg.task} checkpoint directory (the shipped one is checkpoints/{cfg.task})."
        )
    check_profile(cfg.profile)
    for method in cfg.methods:  # a bad --learner override fails here, before any work
        if experiment.trains(method):
            arm_config(cfg, experiment, method)
    own_dir = work_dir is None
    work_dir = work_dir or tempfile.mkdtemp(prefix="sample_eff-")
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    seeds = list(range(cfg.first_seed, cfg.first_seed + cfg.seeds))
    started = time.perf_counter()
    jobs: list[dict[str, Any]] = []
    v_sim_fit = None
    base_checkpoint = cfg.checkpoint
    if cfg.fit_v_sim == "on" or (
        cfg.fit_v_sim == "auto"
        and not critics_trained(read_metadata(cfg.checkpoint).get("training", {}))
    ):
        fitted = Path(work_dir) / "base_with_fitted_v_sim"
        if (fitted / "policy.json").is_file():  # a kept --work-dir: reuse the fit
            v_sim_fit = read_metadata(fitted)["training"].get("v_sim_fit")
            progress(f"critics never trained; reusing the V_sim fitted in {fitted}: {v_sim_fit}")
        else:
            progress(
                f"{cfg.checkpoint}: critics never trained (0 SAC steps); fitting V_sim in sim "
                f"({cfg.fit_v_sim_updates} updates) so SGFT and RL-FT warm starts have a value"
            )
            v_sim_fit = fit_sim_critic(
                cfg.checkpoint, fitted, task=cfg.task, updates=cfg.fit_v_sim_updates,
                episode_seconds=cfg.episode_seconds, progress=progress,
                robot=load_robot_description(cfg.robot),
            )  # fmt: skip
        cfg = dataclasses.replace(cfg, checkpoint=str(fitted))
    if time_limit_s > 0:
        cfg = dataclasses.replace(cfg, deadline=time.time() + time_limit_s)
    # One zero-shot evaluation serves every seed and method: the base policy and the
    # evaluation starts are the same for all of them.
    zero = evaluate(cfg, None, workers=cfg.workers)
    progress(
        f"[{time.perf_counter() - started:6.0f}s] zero-shot: {zero['successes']}/"
        f"{zero['episodes']} on the {cfg.profile} stand-in ({cfg.condition})"
    )
    for method in (m for m in cfg.methods if not experiment.trains(m)):  # inline
        jobs += [arm_rounds(cfg, experiment, method, seed, zero, work_dir) for seed in seeds]
    executor = make_executor("local", cfg.workers)
    try:
        # Seed-major, so every method of a seed runs close together in time (a deadline
        # then cuts all methods alike).
        tasks = [
            (cfg, experiment, m, s, zero, work_dir)
            for s in seeds
            for m in cfg.methods
            if experiment.trains(m)
        ]

        def finished(_index: int, job: dict[str, Any]) -> None:  # as each job arrives
            jobs.append(job)
            last = job["rounds"][-1]
            progress(
                f"[{time.perf_counter() - started:6.0f}s] {experiment.labels[job['method']]} "
                f"seed {job['seed']}: "
                f"{'held the target' if job['reached'] else 'censored'} "
                f"(episodes to target {job['episodes_to_target']}), AUC {job['auc']:.2f}, "
                f"final {last['evaluation']['successes']}/{last['evaluation']['episodes']} "
                f"after {last['episodes']} episodes, {job['seconds']:.0f}s"
                + (" [time-limited]" if job.get("time_limited") else "")
            )

        executor.map(_arm_rounds_item, tasks, on_result=finished)
    finally:
        executor.close()
        if own_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    return {
        "config": dataclasses.asdict(cfg),
        "base_checkpoint": base_checkpoint,
        "v_sim_fit": v_sim_fit,
        "stand_in": f"{cfg.profile} profile: a simulated stand-in for the physical arm",
        "zero_shot": zero,
        "evaluation_seeds": cfg.evaluation_seeds,
        "jobs": sorted(jobs, key=lambda j: (j["seed"], cfg.methods.index(j["method"]))),
        "summary": summarise(cfg, experiment, jobs, zero),
        "wall_seconds": time.perf_counter() - started,
    }


def _arm_rounds_item(args: tuple) -> dict[str, Any]:
    """``arm_rounds`` as an executor item (its arguments in one tuple)."""
    return arm_rounds(*args)
