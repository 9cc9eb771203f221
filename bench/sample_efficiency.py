"""Sample efficiency on the real_twin STAND-IN: stand-in episodes needed to reach a success
target, for zero-shot, BC-LoRA, RL fine-tuning (SAC warm start) and SGFT (H=1, H=3).

The stand-in is ``ArmTaskEnv(profile="real_twin")``: a simulated arm with a fixed, hidden
dynamics gap that plays the part of the physical arm. It is not a physical arm.

Each (method, seed) job runs rounds, all off ROS, through the learner's own code path
(``LearnerSession.finetune`` with the learner's defaults, updates per round configurable):

  1. collect K stand-in episodes with the current policy (base + LoRA adapter, Gaussian
     exploration noise in the normalised action space, the same as the learner's sim
     rollouts), converted exactly like ``trainer.collect_sim_transitions`` and labelled
     with source ``real_twin`` so the learner treats them as real data;
     BC also gets ``--bc-demos`` scripted-expert episodes per round on the stand-in
     (counted as stand-in episodes) and clones the successful episodes;
  2. fine-tune one round (LoRA on the base; the session keeps critic and optimisers);
  3. store the adapter (no sim screening gate: every candidate becomes the running policy,
     because the bench measures learning, not gating) and evaluate its deployed, merged
     form on ``--eval-episodes`` stand-in episodes (Wilson 95% CI);
  4. stop when the evaluated success rate reaches ``--target`` or the round budget is spent.

Round 0 is the zero-shot evaluation of the base checkpoint, shared by every method of a
seed (same evaluation seeds per seed for every method: a paired comparison). A seed that
never reaches the target is censored at the budget; its episode count is then a lower
bound and the mean over seeds is marked with ">=". Evaluation episodes are not counted as
training data (they are reported separately). Sim data the learner itself uses (its
default ``sim_episodes`` nominal-sim rollouts for replay and the SGFT reward scale) is sim,
not stand-in, and is not counted either.

Ratio printed: RL-FT episodes-to-target / SGFT episodes-to-target (target >= 3x), and
SGFT's simulated minutes of stand-in data (target < 5 min). RL-FT is the baseline measured
in the same run.

Condition: the default is ``shifted``. On ``train`` the push base (DAgger stage) already
succeeds zero-shot on the stand-in (39/40 episodes), so every method needs 0 episodes and
nothing is measured; ``--condition train`` runs it anyway.

V_sim: a base whose pretraining stopped before any SAC step has random critics, which would
make SGFT's shaping (and RL-FT's critic warm start) noise. ``--fit-v-sim auto`` (default)
then fits the critics to the base actor's value in sim (randomized profile, never the
stand-in) once, before any job, and every method runs from that checkpoint (the actor is
unchanged). ``--work-dir`` keeps the fit for the next run.

    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --out /tmp/sample_eff.json
    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick
    # a learner setting changed for every method, e.g. a 10x lower adapter learning rate:
    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --learner learning_rate=3e-5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import multiprocessing
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from simreal_ros.stats import wilson_interval  # noqa: E402

# method name -> (learner method, SGFT horizon); zero_shot never trains.
METHODS: dict[str, tuple[str | None, int]] = {
    "zero_shot": (None, 0),
    "bc_lora": ("bc", 0),
    "rl_ft": ("rl", 0),
    "sgft_h1": ("sgft", 1),
    "sgft_h3": ("sgft", 3),
}
LABELS = {
    "zero_shot": "zero-shot",
    "bc_lora": "BC-LoRA",
    "rl_ft": "RL-FT (SAC)",
    "sgft_h1": "SGFT H=1",
    "sgft_h3": "SGFT H=3",
}
# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom (no scipy in the venv).
T95 = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    checkpoint: str
    task: str = "push"
    condition: str = "shifted"
    seeds: int = 5
    first_seed: int = 0
    methods: tuple[str, ...] = tuple(METHODS)
    episodes_per_round: int = 10
    max_rounds: int = 5
    updates_per_round: int = 300
    eval_episodes: int = 20
    target: float = 0.8
    noise: float = 0.1
    bc_demos: int = 2
    sim_episodes: int = 10
    episode_seconds: float = 6.0
    workers: int = 2
    # auto: fit V_sim in sim when the base's critics were never trained (see fit_sim_critic).
    fit_v_sim: str = "auto"
    fit_v_sim_updates: int = 2000
    # LearnerConfig fields changed from the learner's defaults (e.g. learning_rate).
    learner_overrides: tuple[tuple[str, str], ...] = ()
    # Wall-clock end (epoch s; 0 = none): jobs start no new round after it (flagged).
    deadline: float = 0.0

    @property
    def episode_budget(self) -> int:
        return self.episodes_per_round * self.max_rounds


# ---------------------------------------------------------------- stand-in episodes
def collect_transitions(env, converter, episode_seeds, condition, *, actor=None, expert=None,
                        noise=0.0, rng=None, prefix="ep", source="real_twin"):  # fmt: skip
    """Episodes on ``env`` as learner Transitions (actor's normalised coordinates).

    Same conversion as ``trainer.collect_sim_transitions``: the recorded action is what the
    arm received, re-expressed as an action. With ``expert`` the expert's command is first
    clipped to the policy's action range, so the recorded action is exactly what ran.
    Returns (transitions, per-episode [(episode_id, steps, success)]).
    """
    import torch

    from simreal_ros.learner.replay import Transitions

    rows: dict[str, list] = {k: [] for k in ("o", "a", "r", "n", "t", "u", "e", "s")}
    episodes = []
    for seed in episode_seeds:
        obs, _ = env.reset(seed=int(seed), options={"condition": condition})
        start, success, done = len(rows["r"]), False, False
        episode_id = f"{prefix}-{seed}"
        while not done:
            o = converter.normalized_observation(obs)
            q = obs["joint_position"]
            if expert is not None:
                a = converter.action_from_command(expert.act(obs), q)
            else:
                with torch.no_grad():
                    a = actor(torch.as_tensor(o, dtype=torch.float32)).numpy()
                if noise > 0:
                    a = np.clip(a + noise * rng.standard_normal(a.shape), -1.0, 1.0)
            command = converter.command_from_action(a, q)
            next_obs, reward, terminated, truncated, info = env.step(command)
            success = success or bool(info.get("success", False))
            rows["o"].append(o)
            rows["a"].append(converter.action_from_command(command, q))
            rows["r"].append(reward)
            rows["n"].append(converter.normalized_observation(next_obs))
            rows["t"].append(bool(terminated))
            rows["u"].append(bool(truncated) and not terminated)
            rows["e"].append(episode_id)
            done = terminated or truncated
            obs = next_obs
        steps = len(rows["r"]) - start
        rows["s"] += [success] * steps
        episodes.append((episode_id, steps, success))
    n = len(rows["r"])
    transitions = Transitions(
        obs=np.asarray(rows["o"], np.float32),
        actions=np.asarray(rows["a"], np.float32),
        rewards=np.asarray(rows["r"], np.float32),
        next_obs=np.asarray(rows["n"], np.float32),
        terminals=np.asarray(rows["t"], bool),
        truncateds=np.asarray(rows["u"], bool),
        episode_ids=np.asarray(rows["e"]),
        sources=np.asarray([source] * n),
        interventions=np.zeros(n, bool),
        episode_success=np.asarray(rows["s"], bool),
    )
    return transitions, episodes


def evaluation_seeds(cfg: BenchConfig, seed: int) -> list[int]:
    """Per bench seed, the same evaluation starts for every method (paired)."""
    return [5_000_000 + 10_000 * seed + i for i in range(cfg.eval_episodes)]


def evaluate(cfg: BenchConfig, adapter_dir: str | None, seed: int) -> dict[str, Any]:
    """The deployed (merged, numpy) policy on the stand-in; success with a Wilson CI."""
    from simreal_ros.policy.evaluate import PolicySource, evaluate_policy

    result = evaluate_policy(
        PolicySource(cfg.checkpoint, adapter_dir),
        profile="real_twin",
        condition=cfg.condition,
        seeds=evaluation_seeds(cfg, seed),
        workers=1,
    )
    return {
        "successes": result.successes,
        "episodes": result.episodes,
        "success": result.success_rate,
        "ci95": list(result.ci),
        "mean_return": result.mean_return,
        "mean_length": result.mean_length,
    }


# ---------------------------------------------------------------- V_sim workaround
def critic_was_trained(checkpoint_dir: str) -> bool:
    """False when pretraining stopped before any SAC step: the critics are still random."""
    from simreal_ros.policy.checkpoint import read_metadata

    training = read_metadata(checkpoint_dir).get("training", {})
    return not (training.get("phase") in ("sac", "dagger", "demos") and
                int(training.get("sac_steps", 0) or 0) == 0)  # fmt: skip


def fit_sim_critic(
    checkpoint_dir: str,
    out_dir: str | Path,
    *,
    task: str = "push",
    episodes: int = 40,
    held_out: int = 10,
    updates: int = 2000,
    seed: int = 12345,
    episode_seconds: float = 6.0,
    progress=print,
) -> dict[str, Any]:
    """Fit the base's twin critics to its own value IN SIM (randomized profile, the
    pretraining profile; never the stand-in) and save base actor + fitted critics.

    Workaround for a base checkpoint whose critics were never trained (DAgger stage, 0 SAC
    steps), which would make V_sim random noise. Targets: discounted return-to-go of the
    base actor's (noisy) rollouts, bootstrapped with the critic itself at time-limit
    truncations (recomputed every 200 updates), zero after true terminations.
    """
    import torch

    from simreal_ros.learner.sgft import FrozenSimValue
    from simreal_ros.learner.trainer import actor_mean, collect_sim_transitions, twin_q
    from simreal_ros.policy.checkpoint import load_checkpoint, save_checkpoint

    torch.manual_seed(seed)
    checkpoint = load_checkpoint(checkpoint_dir)
    gamma = float(checkpoint.gamma)
    data = collect_sim_transitions(
        checkpoint, task, episodes + held_out, seed=seed, profile="randomized",
        episode_seconds=episode_seconds,
    )  # fmt: skip
    ids = data.episode_ids
    held_ids = [f"sim-{seed}-{e}" for e in range(episodes, episodes + held_out)]
    held = np.isin(ids, held_ids)
    critic = checkpoint.model.critic
    critic.train()
    for p in critic.parameters():
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(critic.parameters(), lr=3e-4)
    obs = torch.as_tensor(data.obs)
    actions = torch.as_tensor(data.actions)
    train_rows = np.flatnonzero(~held)
    rng = np.random.default_rng(seed)

    def targets() -> np.ndarray:
        with torch.no_grad():
            next_v = torch.minimum(
                *critic(
                    torch.as_tensor(data.next_obs),
                    checkpoint.model.actor(torch.as_tensor(data.next_obs)),
                )
            )
        next_v = next_v.reshape(-1).numpy()  # fmt: skip
        out = np.zeros(len(data), np.float64)
        running = 0.0
        for i in reversed(range(len(data))):
            if data.terminals[i]:
                running = float(data.rewards[i])
            elif data.truncateds[i]:
                running = float(data.rewards[i]) + gamma * float(next_v[i])
            else:
                running = float(data.rewards[i]) + gamma * running
            out[i] = running
        return out.astype(np.float32)

    target = torch.as_tensor(targets())
    for update in range(updates):
        if update and update % 200 == 0:
            target = torch.as_tensor(targets())
        index = torch.as_tensor(rng.choice(train_rows, 256))
        q1, q2 = critic(obs[index], actions[index])
        loss = ((q1.reshape(-1) - target[index]) ** 2).mean() + (
            (q2.reshape(-1) - target[index]) ** 2
        ).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    critic.eval()
    target = targets()
    v = FrozenSimValue(checkpoint.model.actor, critic, actor_mean, twin_q)(data.obs)
    corr = float(np.corrcoef(v[held], target[held])[0, 1])
    report = {
        "fitted_from": str(checkpoint_dir),
        "profile": "randomized",
        "episodes": episodes,
        "updates": updates,
        "held_out_corr_v_vs_return": corr,
        "held_out_v_mean": float(v[held].mean()),
        "held_out_return_mean": float(target[held].mean()),
    }
    save_checkpoint(
        out_dir,
        checkpoint.model,
        checkpoint.spec,
        version=f"{checkpoint.version}+vsim",
        gamma=gamma,
        # critic_steps tells the learner's check that these critics were trained.
        training={
            **checkpoint.metadata.get("training", {}),
            "critic_steps": updates,
            "v_sim_fit": report,
        },
        parent_version=checkpoint.version,
    )
    progress(
        f"fitted V_sim in sim (randomized): held-out corr(V_sim, return) {corr:.2f}, "
        f"mean V {report['held_out_v_mean']:.2f} vs return {report['held_out_return_mean']:.2f}"
    )
    return report


# ---------------------------------------------------------------- one job
def _worker_setup() -> None:
    import torch

    torch.set_num_threads(1)
    logging.getLogger("simreal_ros").setLevel(logging.ERROR)


def zero_shot_job(cfg: BenchConfig, seed: int) -> dict[str, Any]:
    _worker_setup()
    start = time.perf_counter()
    evaluation = evaluate(cfg, None, seed)
    return {"seed": seed, "evaluation": evaluation, "seconds": time.perf_counter() - start}


def learner_config(cfg: BenchConfig, **values: Any):
    """The learner's defaults, the bench's settings, then --learner KEY=VALUE overrides
    (parsed and validated by the learner's own config schema)."""
    from simreal_ros.config_schema import from_mapping
    from simreal_ros.learner.config import LearnerConfig

    for key, text in cfg.learner_overrides:
        if key not in LearnerConfig.__dataclass_fields__:
            raise ValueError(f"--learner {key}=...: LearnerConfig has no field {key!r}.")
        values[key] = json.loads(text) if text[:1] in "[{" else _scalar(text)
    return from_mapping(LearnerConfig, values)


def _scalar(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def method_job(
    cfg: BenchConfig, method: str, seed: int, round0: dict[str, Any], work_dir: str
) -> dict[str, Any]:
    """Rounds of collect -> fine-tune -> evaluate until the target or the budget."""
    _worker_setup()
    started = time.perf_counter()
    control_rate = 20.0
    rounds = [
        {
            "round": 0,
            "episodes": 0,
            "demo_episodes": 0,
            "steps": 0,
            "minutes": 0.0,
            "evaluation": round0,
        }
    ]
    out: dict[str, Any] = {"method": method, "seed": seed, "rounds": rounds}
    if round0["success"] >= cfg.target or METHODS[method][0] is None:
        return _finish(out, cfg, started)

    import torch

    from simreal_ros.learner import lora
    from simreal_ros.learner.gate import GateDecision
    from simreal_ros.learner.replay import Transitions
    from simreal_ros.learner.trainer import LearnerSession, collect_sim_transitions
    from simreal_ros.policy.checkpoint import load_checkpoint
    from simreal_ros.sim.env import ArmTaskEnv

    torch.manual_seed(seed)
    learner_method, horizon = METHODS[method]
    store_root = Path(tempfile.mkdtemp(prefix=f"{method}-s{seed}-", dir=work_dir))
    sgft_horizon = {"horizon": horizon} if learner_method == "sgft" else {}
    config = learner_config(
        cfg,
        method=learner_method,
        seed=seed,
        task=cfg.task,
        checkpoint_dir=cfg.checkpoint,
        updates_per_round=cfg.updates_per_round,
        sim_episodes=cfg.sim_episodes,
        store_root=str(store_root),
        **sgft_horizon,
    )
    checkpoint = load_checkpoint(cfg.checkpoint)
    control_rate = float(checkpoint.spec.control_rate_hz)
    sim = None
    # The learner's default sim data (nominal sim, not the stand-in): replay + SGFT scale.
    if config.sim_episodes > 0 and (config.sim_replay or config.ewc or learner_method == "sgft"):
        sim = collect_sim_transitions(
            checkpoint, cfg.task, config.sim_episodes, seed=1_000 + seed,
            episode_seconds=cfg.episode_seconds,
        )  # fmt: skip
    session = LearnerSession(config, checkpoint=checkpoint, sim_data=sim)
    converter = session.converter
    env = ArmTaskEnv(
        task=cfg.task,
        profile="real_twin",
        condition=cfg.condition,
        control_rate_hz=control_rate,
        episode_seconds=cfg.episode_seconds,
    )
    expert = None
    if learner_method == "bc" and cfg.bc_demos > 0:
        from simreal_ros.sim.expert import make_expert

        expert = make_expert(cfg.task, control_rate_hz=control_rate)
    rng = np.random.default_rng(seed)
    real: Transitions | None = None
    episodes = demos = steps = 0
    try:
        for round_index in range(1, cfg.max_rounds + 1):
            if cfg.deadline and time.time() > cfg.deadline:
                out["time_limited"] = True
                break
            t0 = time.perf_counter()
            base_seed = 10_000_000 * (seed + 1) + 1_000 * round_index
            actor = lora.merged(session.actor_peft)
            parts = []
            part, collected = collect_transitions(
                env, converter, range(base_seed, base_seed + cfg.episodes_per_round),
                cfg.condition, actor=actor, noise=cfg.noise, rng=rng, prefix=f"s{seed}",
            )  # fmt: skip
            parts.append(part)
            if expert is not None:
                demo_seeds = range(base_seed + 500, base_seed + 500 + cfg.bc_demos)
                part, demo_eps = collect_transitions(
                    env, converter, demo_seeds, cfg.condition, expert=expert, prefix="demo"
                )
                parts.append(part)
                collected += demo_eps
                demos += len(demo_eps)
            collect_s = time.perf_counter() - t0
            episodes += len(collected)
            steps += sum(n for _, n, _ in collected)
            real = Transitions.concatenate(([real] if real is not None else []) + parts)
            t1 = time.perf_counter()
            try:
                candidate = session.finetune(real)
            except ValueError as error:  # e.g. BC with no successful episode yet
                rounds.append(
                    _round_row(round_index, episodes, demos, steps, control_rate, collected,
                               rounds[-1]["evaluation"], {"skipped": str(error)},
                               collect_s, 0.0, 0.0)
                )  # fmt: skip
                continue
            decision = GateDecision(
                promoted=True,
                reason="bench: evaluated on the stand-in directly, no sim screening",
                results=[],
                ci_low_threshold=0.0,
                tolerance=0.0,
                seeds=[],
            )
            stored = session.commit(candidate, decision)
            train_s = time.perf_counter() - t1
            t2 = time.perf_counter()
            evaluation = evaluate(cfg, str(stored.path), seed)
            metrics = {
                k: float(v)
                for k, v in candidate.metrics.items()
                if k in ("loss", "critic_loss", "actor_loss", "bc_loss", "q_mean",
                         "reward_mean", "alpha", "reward_scale", "value_exploit_flag",
                         "anchor_drift", "q_scale", "entropy")
            }  # fmt: skip
            rounds.append(
                _round_row(round_index, episodes, demos, steps, control_rate, collected,
                           evaluation, metrics, collect_s, train_s, time.perf_counter() - t2)
            )  # fmt: skip
            if evaluation["success"] >= cfg.target:
                break
    finally:
        env.close()
        shutil.rmtree(store_root, ignore_errors=True)
    out["reward_scale"] = float(session.reward_scale)
    return _finish(out, cfg, started, control_rate)


def _round_row(index, episodes, demos, steps, rate, collected, evaluation, metrics,
               collect_s, train_s, eval_s) -> dict[str, Any]:  # fmt: skip
    return {
        "round": index,
        "episodes": episodes,
        "demo_episodes": demos,
        "steps": steps,
        "minutes": steps / rate / 60.0,
        "collected_success": float(np.mean([s for _, _, s in collected])) if collected else 0.0,
        "evaluation": evaluation,
        "metrics": metrics,
        "seconds": {"collect": collect_s, "train": train_s, "evaluate": eval_s},
    }


def _finish(out: dict[str, Any], cfg: BenchConfig, started: float, rate: float = 20.0):
    rounds = out["rounds"]
    hit = next((r for r in rounds if r["evaluation"]["success"] >= cfg.target), None)
    last = rounds[-1]
    out["reached"] = hit is not None
    if hit is not None:
        out["episodes_to_target"] = hit["episodes"]
        out["minutes_to_target"] = hit["minutes"]
    else:
        # Censored at the budget: everything collected (or the full budget if collection
        # stopped early, e.g. zero-shot, which never collects).
        budget_steps = cfg.episode_budget * cfg.episode_seconds * rate
        out["episodes_to_target"] = max(last["episodes"], cfg.episode_budget)
        out["minutes_to_target"] = max(last["minutes"], budget_steps / rate / 60.0)
        if out.get("time_limited"):  # stopped by the wall clock: what was collected (JSON)
            out["episodes_to_target"] = last["episodes"]
            out["minutes_to_target"] = last["minutes"]
    out["final_success"] = last["evaluation"]["success"]
    out["seconds"] = time.perf_counter() - started
    return out


# ---------------------------------------------------------------- statistics
def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """Mean and a two-sided 95% Student-t interval over seeds."""
    x = np.asarray(values, np.float64)
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if len(x) < 2:
        return mean, float("nan"), float("nan")
    t = T95[len(x) - 2] if len(x) - 1 <= len(T95) else 1.96
    half = t * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


def _clip_low(interval: tuple[float, float, float]) -> tuple[float, float, float]:
    mean, low, high = interval
    return mean, (max(0.0, low) if math.isfinite(low) else low), high


def summarise(cfg: BenchConfig, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    by_method: dict[str, Any] = {}
    for method in cfg.methods:
        rows = sorted((j for j in jobs if j["method"] == method), key=lambda j: j["seed"])
        if not rows:
            continue
        # Seeds cut by --time-limit-min never got their budget: left out of the statistics.
        time_limited = sum(bool(j.get("time_limited")) for j in rows)
        rows = [j for j in rows if not j.get("time_limited")] or rows
        censored = sum(not j["reached"] for j in rows)
        # Counts and minutes cannot be negative: the t-interval's low end is clipped at 0.
        eps = _clip_low(mean_ci([j["episodes_to_target"] for j in rows]))
        mins = _clip_low(mean_ci([j["minutes_to_target"] for j in rows]))
        final = [j["final_success"] for j in rows]
        total_s = sum(j["rounds"][-1]["evaluation"]["successes"] for j in rows)
        total_n = sum(j["rounds"][-1]["evaluation"]["episodes"] for j in rows)
        by_method[method] = {
            "label": LABELS[method],
            "seeds": len(rows),
            "censored": censored,
            "time_limited": time_limited,
            "episodes_to_target": {"mean": eps[0], "ci95": [eps[1], eps[2]]},
            "minutes_to_target": {"mean": mins[0], "ci95": [mins[1], mins[2]]},
            "per_seed_episodes": [j["episodes_to_target"] for j in rows],
            "final_success": {
                "mean": float(np.mean(final)),
                "pooled": total_s / total_n if total_n else float("nan"),
                "pooled_wilson95": list(wilson_interval(total_s, total_n)),
            },
        }
    ratios = {}
    rl = by_method.get("rl_ft")
    for name in ("sgft_h1", "sgft_h3"):
        sg = by_method.get(name)
        if rl is None or sg is None:
            continue
        a, b = rl["episodes_to_target"]["mean"], sg["episodes_to_target"]["mean"]
        ratio = a / b if b > 0 else float("inf") if a > 0 else float("nan")
        counts = (
            f"censored on {rl['censored']}/{rl['seeds']} (RL-FT) and "
            f"{sg['censored']}/{sg['seeds']} (SGFT) seeds"
        )
        if sg["censored"] and rl["censored"]:
            note = f"{counts}: ratio not measured"
        elif rl["censored"]:
            note = f"{counts}: ratio is a lower bound"
        elif sg["censored"]:
            note = f"{counts}: ratio is an upper bound"
        else:
            note = "both reached the target on every seed"
        ratios[name] = {
            "rl_over_sgft_episodes": ratio,
            "note": note,
            "meets_3x": bool(ratio >= 3.0) and not sg["censored"],
            "sgft_minutes": sg["minutes_to_target"]["mean"],
            "sgft_under_5_minutes": bool(sg["minutes_to_target"]["mean"] < 5.0)
            and not sg["censored"],
        }
    return {"methods": by_method, "ratios": ratios}


def format_table(cfg: BenchConfig, summary: dict[str, Any]) -> str:
    lines = [
        f"Sample efficiency on the real_twin STAND-IN (simulated; not a physical arm): "
        f"task {cfg.task}, condition {cfg.condition}, target {cfg.target:.0%} over "
        f"{cfg.eval_episodes} evaluation episodes, budget {cfg.max_rounds} rounds x "
        f"{cfg.episodes_per_round} episodes, {cfg.updates_per_round} updates/round",
        f"{'method':<13} {'seeds':>5} {'cens.':>5}  {'stand-in episodes to target':<31} "
        f"{'sim minutes of stand-in data':<30} {'final success':<13}",
    ]
    for row in summary["methods"].values():
        e, m = row["episodes_to_target"], row["minutes_to_target"]
        mark = ">=" if row["censored"] else "  "
        lines.append(
            f"{row['label']:<13} {row['seeds']:>5} {row['censored']:>5}  "
            f"{mark}{e['mean']:6.1f} [{e['ci95'][0]:6.1f}, {e['ci95'][1]:6.1f}]{'':7} "
            f"{mark}{m['mean']:5.2f} [{m['ci95'][0]:5.2f}, {m['ci95'][1]:5.2f}]{'':8} "
            f"{row['final_success']['mean']:6.1%}"
        )
    lines.append("(mean [95% t-interval over seeds]; censored seeds count at the budget)")
    for row in summary["methods"].values():
        if row["time_limited"]:
            lines.append(
                f"{row['label']}: {row['time_limited']} seed(s) stopped by --time-limit-min "
                "before the budget (left out of the statistics above)"
            )
    for name, r in summary["ratios"].items():
        lines.append(
            f"ratio RL-FT / {LABELS[name]}: {r['rl_over_sgft_episodes']:.2f}x episodes "
            f"(target >= 3x: {'met' if r['meets_3x'] else 'NOT met'}; {r['note']}); "
            f"{LABELS[name]} needs {r['sgft_minutes']:.2f} sim minutes of stand-in data "
            f"(target < 5: {'met' if r['sgft_under_5_minutes'] else 'NOT met'})"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- driver
def run(
    cfg: BenchConfig, work_dir: str | None = None, progress=print, time_limit_s: float = 0.0
) -> dict[str, Any]:
    """Every (method, seed) job; zero-shot evaluations first (they are round 0 of all)."""
    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}.")
    if not (Path(cfg.checkpoint) / "policy.json").is_file():
        raise FileNotFoundError(
            f"checkpoint {cfg.checkpoint} has no policy.json; pass --checkpoint with a "
            f"{cfg.task} checkpoint directory (the shipped one is checkpoints/{cfg.task})."
        )
    learner_config(cfg, method="rl", task=cfg.task)  # a bad --learner override fails here
    own_dir = work_dir is None
    work_dir = work_dir or tempfile.mkdtemp(prefix="sample_eff-")
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    seeds = list(range(cfg.first_seed, cfg.first_seed + cfg.seeds))
    started = time.perf_counter()
    jobs: list[dict[str, Any]] = []
    v_sim_fit = None
    base_checkpoint = cfg.checkpoint
    if cfg.fit_v_sim == "on" or (
        cfg.fit_v_sim == "auto" and not critic_was_trained(cfg.checkpoint)
    ):
        fitted = Path(work_dir) / "base_with_fitted_v_sim"
        if (fitted / "policy.json").is_file():  # a kept --work-dir: reuse the fit
            from simreal_ros.policy.checkpoint import read_metadata

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
            )  # fmt: skip
        cfg = dataclasses.replace(cfg, checkpoint=str(fitted))
    if time_limit_s > 0:
        cfg = dataclasses.replace(cfg, deadline=time.time() + time_limit_s)
    pool = None
    if cfg.workers > 1:
        pool = ProcessPoolExecutor(cfg.workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        round0 = {}
        for result in _map(pool, zero_shot_job, [(cfg, s) for s in seeds]):
            seed = result["seed"]
            round0[seed] = result["evaluation"]
            ev = result["evaluation"]
            progress(
                f"[{time.perf_counter() - started:6.0f}s] zero-shot seed {seed}: "
                f"{ev['successes']}/{ev['episodes']} on the stand-in"
            )
        # Seed-major, so every method of a seed runs close together in time (a wall-clock
        # limit then cuts all methods alike).
        tasks = [(cfg, m, s, round0[s], work_dir) for s in seeds for m in cfg.methods]
        for job in _map(pool, method_job, tasks):
            jobs.append(job)
            last = job["rounds"][-1]
            progress(
                f"[{time.perf_counter() - started:6.0f}s] {LABELS[job['method']]} seed "
                f"{job['seed']}: {'reached' if job['reached'] else 'censored'} after "
                f"{last['episodes']} episodes ({last['minutes']:.2f} sim min), final "
                f"{last['evaluation']['successes']}/{last['evaluation']['episodes']}, "
                f"{job['seconds']:.0f}s"
            )
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if own_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    summary = summarise(cfg, jobs)
    return {
        "config": dataclasses.asdict(cfg),
        "base_checkpoint": base_checkpoint,
        "v_sim_fit": v_sim_fit,
        "stand_in": "real_twin profile: a simulated stand-in for the physical arm",
        "zero_shot_round0": {str(k): v for k, v in round0.items()},
        "jobs": jobs,
        "summary": summary,
        "wall_seconds": time.perf_counter() - started,
    }


def _map(pool, fn, arg_list):
    """Results as they arrive (inline, in order, without a pool)."""
    if pool is None:
        for args in arg_list:
            yield fn(*args)
        return
    futures = [pool.submit(fn, *args) for args in arg_list]
    for future in as_completed(futures):
        yield future.result()


def parse_args(argv=None) -> tuple[BenchConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_ckpt = REPO / "checkpoints" / "push"
    parser.add_argument("--checkpoint", default=str(default_ckpt), help="base checkpoint dir")
    parser.add_argument("--task", default="push", choices=("push", "reach"))
    parser.add_argument("--condition", default="shifted", choices=("train", "shifted"))
    parser.add_argument("--seeds", type=int, default=None, help="seeds per method (>= 5)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--episodes-per-round", type=int, default=None)
    parser.add_argument("--max-rounds", type=int, default=None)
    parser.add_argument("--updates-per-round", type=int, default=None)
    parser.add_argument("--eval-episodes", type=int, default=None)
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--noise", type=float, default=0.1, help="exploration noise")
    parser.add_argument("--bc-demos", type=int, default=None, help="expert demos/round (BC)")
    parser.add_argument("--sim-episodes", type=int, default=10)
    parser.add_argument("--episode-seconds", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--fit-v-sim",
        default="auto",
        choices=("auto", "on", "off"),
        help="fit the base critics (V_sim) in sim first; auto: when they were never trained",
    )
    parser.add_argument("--fit-v-sim-updates", type=int, default=2000)
    parser.add_argument(
        "--learner",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a LearnerConfig default for every method (repeatable)",
    )
    parser.add_argument(
        "--work-dir", default="", help="kept work directory (reuses a fitted V_sim there)"
    )
    parser.add_argument(
        "--time-limit-min",
        type=float,
        default=0.0,
        help="wall-clock limit: no new round starts after it (those seeds are flagged)",
    )
    parser.add_argument("--quick", action="store_true", help="2 seeds, fewer rounds")
    parser.add_argument("--out", default="", help="write the results as JSON here")
    args = parser.parse_args(argv)
    quick = {"seeds": 2, "episodes_per_round": 6, "max_rounds": 2, "updates_per_round": 150,
             "eval_episodes": 10, "bc_demos": 1}  # fmt: skip
    full = {"seeds": 5, "episodes_per_round": 10, "max_rounds": 5, "updates_per_round": 300,
            "eval_episodes": 20, "bc_demos": 2}  # fmt: skip
    preset = quick if args.quick else full
    values = {
        k: getattr(args, k) if getattr(args, k) is not None else v for k, v in preset.items()
    }
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    cfg = BenchConfig(
        checkpoint=args.checkpoint,
        task=args.task,
        condition=args.condition,
        first_seed=args.first_seed,
        methods=methods,
        target=args.target,
        noise=args.noise,
        sim_episodes=args.sim_episodes,
        episode_seconds=args.episode_seconds,
        workers=args.workers,
        fit_v_sim=args.fit_v_sim,
        learner_overrides=tuple(_override(text, parser) for text in args.learner),
        fit_v_sim_updates=args.fit_v_sim_updates,
        **values,
    )
    if cfg.seeds < 1 or cfg.episodes_per_round < 1 or cfg.max_rounds < 1:
        parser.error("--seeds, --episodes-per-round and --max-rounds must be at least 1.")
    return cfg, args


def _override(text: str, parser) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        parser.error(f"--learner {text!r}: use KEY=VALUE, e.g. --learner learning_rate=3e-5")
    return key.strip(), value.strip()


def main(argv=None) -> None:
    import torch

    torch.set_num_threads(1)
    cfg, args = parse_args(argv)
    print(f"config: {json.dumps(dataclasses.asdict(cfg))}", flush=True)
    try:
        result = run(
            cfg,
            work_dir=args.work_dir or None,
            progress=lambda line: print(line, flush=True),
            time_limit_s=60.0 * args.time_limit_min,
        )
    except (ValueError, FileNotFoundError) as error:
        sys.exit(f"sample_efficiency: {error}")
    table = format_table(cfg, result["summary"])
    result["table"] = table
    print(table)
    print(f"wall time {result['wall_seconds']:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
