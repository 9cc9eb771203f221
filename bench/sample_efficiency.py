"""Sample efficiency on a STAND-IN for the physical arm: is SGFT more sample-efficient than
RL fine-tuning?

The stand-in is ``ArmTaskEnv(profile=--profile)`` (default ``real_twin``): a simulated arm
with a fixed, hidden dynamics gap that plays the part of the physical arm. It is not a
physical arm, and everything printed says so.

Arms (``METHODS``; each row lists the only LearnerConfig fields it changes, every other
learner setting is shared, and each job's full LearnerConfig is recorded in the JSON):
zero-shot, filtered BC-LoRA (clones the successful episodes of its own collection),
RL fine-tuning (SAC, critic warm-started from the checkpoint), SGFT with H = 1, 3 and
infinite (fresh critics; H = 1 also with the sim-advantage warm start), and online system
identification (``sysid``: each round its stand-in episodes are recorded as bags, the sim
is identified from all of them so far, and the policy is fine-tuned in the identified sim
alone; it is counted by the stand-in episodes it identified from).

Each (method, seed) job runs rounds off ROS through the learner's own code path:

  1. collect K stand-in episodes with the current policy's own action distribution (the
     LoRA actor's tanh-Gaussian ``sample``), converted like
     ``learner.data.collect_sim_transitions`` and labelled ``real_twin`` so the learner treats
     them as real data;
  2. ``LearnerSession.finetune`` then ``session.commit`` with a promoted decision (no sim
     gate: the bench measures learning, not gating);
  3. evaluate the deployed, merged adapter on the stand-in.

Paired design: every evaluation uses the same fixed starts (seeds ``--eval-first-seed``
onward) for every method, round and bench seed, and collection starts depend on
(bench seed, round) only, so the arms see the same states. Round 0 is the zero-shot
evaluation, shared by all. Intervals are over training seeds on those fixed starts.

Primary statistic: the normalised area under the success-vs-stand-in-episodes step
function over the budget (K x rounds; 1.0 = 100% from the start), compared per seed as
SGFT(H=1) - RL-FT with a percentile bootstrap over seeds. A job stops after two
consecutive evaluations at the target; its last rate then holds to the budget.

Secondary: stand-in episodes (and simulated minutes of stand-in data) until the target is
held on two consecutive evaluations (the first counts); a seed that never does is
censored at the budget. Reported as the Kaplan-Meier restricted mean up to the budget and
the RL-FT/SGFT ratio of restricted means with a paired bootstrap; censoring turns the
ratio into a bound and the printout says which. Also: each arm's early dip (lowest success
in rounds 1-2 minus zero-shot) and SGFT's V_sim-exploit flags.

V_sim: a base whose critics were never trained would make SGFT's shaping (and RL-FT's warm
start) noise; ``--fit-v-sim auto`` then fits them to the base actor's value in sim
(randomized profile, never the stand-in) once, before any job.

``--quick`` is the small preset (``QUICK``); the default preset (``FULL``) has more seeds
and a budget past 5 minutes of stand-in data. Results and run times are recorded in
docs/results.md and the README's results table, not here. Run:

    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick --out /tmp/se.json
    # the horizon ablation:
    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick \\
        --methods zero_shot,rl_ft,sgft_h1_simadv,sgft_h3,sgft_hinf --out /tmp/se_h.json
    # the online system identification baseline:
    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick \
        --methods zero_shot,rl_ft,sysid --out /tmp/se_sysid.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from simreal_ros.config_schema import shared_setting, validate  # noqa: E402
from simreal_ros.executor import make_executor  # noqa: E402
from simreal_ros.learner.config import LearnerConfig  # noqa: E402
from simreal_ros.learner.methods import method_traits  # noqa: E402
from simreal_ros.stats import (  # noqa: E402
    bootstrap_ci,
    normalised_auc,
    paired_bootstrap_ci,
    restricted_mean_time,
    wilson_interval,
)

# Arm name -> the LearnerConfig fields it sets (None: no training). Nothing else may differ
# between arms, so a difference in outcome belongs to these fields alone.
METHODS: dict[str, dict[str, Any] | None] = {
    "zero_shot": None,
    "bc_lora": {"method": "bc"},
    "rl_ft": {"method": "rl", "critic_init": "auto"},
    "sgft_h1": {"method": "sgft", "horizon": 1, "critic_init": "fresh"},
    "sgft_h1_simadv": {"method": "sgft", "horizon": 1, "critic_init": "sim_advantage"},
    "sgft_h3": {"method": "sgft", "horizon": 3, "critic_init": "fresh"},
    "sgft_hinf": {"method": "sgft", "horizon": 0, "critic_init": "fresh"},
    # Online system identification: identify from the stand-in episodes so far, then
    # fine-tune in the identified sim only; counted by the stand-in episodes identified from.
    "sysid": {"method": "sysid", "critic_init": "auto"},
}
LABELS = {
    "zero_shot": "zero-shot",
    "bc_lora": "BC-LoRA",
    "rl_ft": "RL-FT (SAC)",
    "sgft_h1": "SGFT H=1",
    "sgft_h1_simadv": "SGFT H=1 simadv",
    "sgft_h3": "SGFT H=3",
    "sgft_hinf": "SGFT H=inf",
    "sysid": "sysid (identified sim)",
}
PRIMARY_METHODS = ("zero_shot", "bc_lora", "rl_ft", "sgft_h1")
ABLATION_METHODS = ("zero_shot", "rl_ft", "sgft_h1_simadv", "sgft_h3", "sgft_hinf")
SYSID_METHODS = ("zero_shot", "rl_ft", "sysid")  # the online-identification baseline
SGFT_ARMS = tuple(m for m, o in METHODS.items() if o and method_traits(o["method"]).shaped)
ARM_FIELDS = tuple(sorted({k for row in METHODS.values() if row for k in row}))
# LearnerConfig fields that differ per job by construction, not per arm.
PER_JOB_FIELDS = ("seed", "store_root")
# Targets of the claim under test (the decision lines).
RATIO_TARGET = 3.0
MINUTES_TARGET = 5.0
MIN_SEEDS = 5
MIN_EVAL_EPISODES = 30


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    checkpoint: str
    task: str = "push"
    condition: str = "train"
    profile: str = "real_twin"
    seeds: int = 5
    first_seed: int = 0
    methods: tuple[str, ...] = PRIMARY_METHODS
    episodes_per_round: int = 5
    max_rounds: int = 8
    updates_per_round: int = shared_setting(LearnerConfig, "updates_per_round", 300)
    eval_episodes: int = 30
    eval_first_seed: int = 900_000
    target: float = 0.8
    # > 0: explore with N(0, noise) around the mean action (normalised units) instead of
    # the policy's own capped distribution (the learner's rule, the default).
    noise: float = 0.0
    bc_demos: int = 0
    sim_episodes: int = shared_setting(LearnerConfig, "sim_episodes", 10)
    episode_seconds: float = 6.0
    workers: int = 2
    # auto: fit V_sim in sim when the base's critics were never trained (see fit_sim_critic).
    fit_v_sim: str = "auto"
    fit_v_sim_updates: int = 2000
    # LearnerConfig fields changed from the learner's defaults for every arm.
    learner_overrides: tuple[tuple[str, str], ...] = ()
    bootstrap_resamples: int = 10_000
    bootstrap_seed: int = 0
    # Wall-clock end (epoch s; 0 = none): jobs start no new round after it (flagged).
    deadline: float = 0.0

    def __post_init__(self) -> None:
        validate(self)  # the learner settings it carries, in the learner's own ranges

    @property
    def episode_budget(self) -> int:
        return self.episodes_per_round * self.max_rounds

    @property
    def evaluation_seeds(self) -> list[int]:
        """One fixed list for every method, round and bench seed: a paired comparison."""
        return [self.eval_first_seed + i for i in range(self.eval_episodes)]

    def collection_seeds(self, seed: int, round_index: int) -> list[int]:
        """Start states of a round's collection: (bench seed, round) only, never the
        method, so every arm meets the same states."""
        base = 10_000_000 * (seed + 1) + 1_000 * round_index
        return list(range(base, base + self.episodes_per_round))

    def demo_seeds(self, seed: int, round_index: int) -> list[int]:
        base = 10_000_000 * (seed + 1) + 1_000 * round_index + 500
        return list(range(base, base + self.bc_demos))


def evaluate(cfg: BenchConfig, adapter_dir: str | None, workers: int = 1) -> dict[str, Any]:
    """The deployed (merged, numpy) policy on the stand-in's fixed evaluation starts."""
    from simreal_ros.policy.evaluate import PolicySource, evaluate_policy

    result = evaluate_policy(
        PolicySource(cfg.checkpoint, adapter_dir),
        profile=cfg.profile,
        condition=cfg.condition,
        seeds=cfg.evaluation_seeds,
        workers=workers,
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

    from simreal_ros.learner.critics import actor_mean, twin_q
    from simreal_ros.learner.data import collect_sim_transitions
    from simreal_ros.learner.sgft import FrozenSimValue
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


def learner_config(cfg: BenchConfig, **values: Any):
    """The learner's defaults, the bench's settings, then --learner KEY=VALUE overrides
    (parsed and validated by the learner's own config schema)."""
    from simreal_ros.config_schema import from_mapping

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


def arm_config(cfg: BenchConfig, method: str, seed: int = 0, store_root: str = "models"):
    """The LearnerConfig a job of ``method`` runs with: the settings every arm shares (the
    bench's, then --learner overrides) plus the arm's own row, and nothing else."""
    row = METHODS[method]
    if row is None:
        raise ValueError(f"{method} does not train; it has no learner config.")
    clash = sorted({k for k, _ in cfg.learner_overrides} & set(ARM_FIELDS))
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


def method_job(
    cfg: BenchConfig, method: str, seed: int, round0: dict[str, Any], work_dir: str
) -> dict[str, Any]:
    """Rounds of collect -> fine-tune -> evaluate until the target is held on two
    consecutive evaluations or the budget is spent."""
    _worker_setup()
    started = time.perf_counter()
    rounds = [
        {
            "round": 0,
            "episodes": 0,
            "demo_episodes": 0,
            "steps": 0,
            "minutes": 0.0,
            "evaluation": round0,
            "evaluated": True,
        }
    ]
    out: dict[str, Any] = {"method": method, "seed": seed, "rounds": rounds}
    if METHODS[method] is None:
        return _finish(out, cfg, started)

    import torch

    from simreal_ros.learner import lora
    from simreal_ros.learner.data import (
        collect_sim_transitions,
        expert_actions,
        policy_actions,
        rollout_transitions,
    )
    from simreal_ros.learner.gate import GateDecision
    from simreal_ros.learner.replay import Transitions
    from simreal_ros.learner.session import LearnerSession
    from simreal_ros.policy.checkpoint import load_checkpoint
    from simreal_ros.sim.gym_env import ArmTaskEnv

    torch.manual_seed(seed)
    store_root = Path(tempfile.mkdtemp(prefix=f"{method}-s{seed}-", dir=work_dir))
    config = arm_config(cfg, method, seed, str(store_root))
    out["learner_config"] = dataclasses.asdict(config)
    checkpoint = load_checkpoint(cfg.checkpoint)
    control_rate = float(checkpoint.spec.control_rate_hz)
    sim = None
    # The learner's default sim data (nominal sim, not the stand-in): replay + SGFT scale.
    # Seeded by the bench seed only, so every arm of a seed replays the same sim episodes.
    if config.wants_sim_episodes:
        sim = collect_sim_transitions(
            checkpoint, cfg.task, config.sim_episodes, seed=1_000 + seed,
            episode_seconds=cfg.episode_seconds,
            exploration_std_max=config.exploration_std_max,
        )  # fmt: skip
    session = LearnerSession(config, checkpoint=checkpoint, sim_data=sim)
    converter = session.converter
    env = ArmTaskEnv(
        task=cfg.task,
        profile=cfg.profile,
        condition=cfg.condition,
        control_rate_hz=control_rate,
        episode_seconds=cfg.episode_seconds,
    )
    expert = None
    if method_traits(config.method).uses_expert_demos and cfg.bc_demos > 0:
        from simreal_ros.sim.expert import make_expert

        expert = make_expert(cfg.task, control_rate_hz=control_rate)
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
                    env, converter, seeds, cfg.condition, act, source="real_twin",
                    episode_ids=[f"s{seed}-{s}" for s in seeds],
                )  # fmt: skip
            parts = [part] if part is not None else []
            if expert is not None:
                seeds = cfg.demo_seeds(seed, round_index)
                part, demo_eps = rollout_transitions(
                    env, converter, seeds, cfg.condition, expert_actions(expert, converter),
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
            evaluation = evaluate(cfg, str(stored.path))
            metrics = {
                k: float(v)
                for k, v in candidate.metrics.items()
                if k in ("loss", "critic_loss", "actor_loss", "bc_loss", "q_mean",
                         "reward_mean", "alpha", "reward_scale", "value_exploit_flag",
                         "anchor_drift", "q_scale", "entropy", "updates",
                         "new_real_transitions")
            }  # fmt: skip
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
    return _finish(out, cfg, started)


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
            state_rate_hz=100,
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


def _finish(out: dict[str, Any], cfg: BenchConfig, started: float) -> dict[str, Any]:
    """Per-job statistics: curve AUC, time to target (or censoring), early dip, flags."""
    rounds = out["rounds"]
    zero = rounds[0]["evaluation"]
    trains = METHODS[out["method"]] is not None
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


# ---------------------------------------------------------------- statistics over seeds
def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return float("inf") if a > 0 else float("nan")


def _rmst_rows(rows: np.ndarray, horizon: float) -> float:
    """Restricted mean of [time, censored] rows (the bootstrap resamples whole rows)."""
    rows = np.asarray(rows, np.float64).reshape(-1, 2)
    return restricted_mean_time(rows[:, 0], rows[:, 1] > 0.5, horizon)


def _time_rows(jobs: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.asarray([[j[key], float(not j["reached"])] for j in jobs], np.float64)


def settings_check(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the trained jobs ran with identical learner settings outside their arm's
    row (and the per-job seed and store), and each with its own row's values."""
    trained = [j for j in jobs if j.get("learner_config")]
    skip = set(ARM_FIELDS) | set(PER_JOB_FIELDS)
    differences: set[str] = set()
    wrong_row = []
    if trained:
        reference = trained[0]["learner_config"]
        for job in trained:
            config = job["learner_config"]
            differences |= {k for k in reference if k not in skip and config[k] != reference[k]}
            if any(config[k] != v for k, v in METHODS[job["method"]].items()):
                wrong_row.append(f"{job['method']} seed {job['seed']}")
    return {
        "shared_settings_equal": not differences and not wrong_row,
        "differing_fields": sorted(differences),
        "jobs_not_matching_their_row": wrong_row,
        "arm_fields": list(ARM_FIELDS),
    }


def _method_summary(cfg: BenchConfig, method: str, jobs, zero: dict[str, Any]):
    boot = {"resamples": cfg.bootstrap_resamples, "seed": cfg.bootstrap_seed}
    budget = cfg.episode_budget
    budget_minutes = budget * cfg.episode_seconds / 60.0
    all_rows = sorted((j for j in jobs if j["method"] == method), key=lambda j: j["seed"])
    rows = [j for j in all_rows if not j.get("time_limited")]
    if not rows:
        return None
    auc = [j["auc"] for j in rows]
    episodes = _time_rows(rows, "episodes_to_target")
    minutes = _time_rows(rows, "minutes_to_target")
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
        "label": LABELS[method],
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
        "episodes_to_target": {
            "restricted_mean": _rmst_rows(episodes, budget),
            "ci95": list(bootstrap_ci(episodes, lambda r: _rmst_rows(r, budget), **boot)),
            "horizon": budget,
            "per_seed": episodes[:, 0].tolist(),
        },
        "minutes_to_target": {
            "restricted_mean": _rmst_rows(minutes, budget_minutes),
            "ci95": list(bootstrap_ci(minutes, lambda r: _rmst_rows(r, budget_minutes), **boot)),
            "horizon": budget_minutes,
            "per_seed": minutes[:, 0].tolist(),
        },
        "early_dip": dip,
        "value_exploit_flags": sum(j["value_exploit_flags"] for j in rows),
        "rounds_trained": sum(len(j["rounds"]) - 1 for j in rows),
    }


def _ratio_verdict(ratio_ci, rl_censored: int, sg_censored: int) -> tuple[str, str]:
    """(verdict, note) for RL-FT/SGFT >= RATIO_TARGET at the CI's lower bound.

    A censored seed's true time lies beyond the budget, so its arm's restricted mean
    understates its mean: RL-FT censored makes the ratio a lower bound, SGFT censored an
    upper bound, both censored no bound at all.
    """
    low, high = ratio_ci
    if np.isnan(low) or np.isnan(high):
        return "not measured", "no ratio (neither arm needed any episodes)"
    if sg_censored and rl_censored:
        return "not measured (censored)", "both arms censored: the ratio is no bound either way"
    if sg_censored:
        note = "SGFT censored: the ratio is an upper bound"
        return ("not met" if high < RATIO_TARGET else "not measured (censored)"), note
    if rl_censored:
        note = "RL-FT censored: the ratio is a lower bound"
        return ("met" if low >= RATIO_TARGET else "not measured (censored)"), note
    note = "no seed censored: the ratio is measured"
    return ("met" if low >= RATIO_TARGET else "not met"), note


def _minutes_verdict(minutes: dict[str, Any], censored: int) -> str:
    low, high = minutes["ci95"]
    if not censored:
        return "met" if high < MINUTES_TARGET else "not met"
    # Censored seeds make the restricted mean a lower bound on the minutes needed.
    return "not met" if low >= MINUTES_TARGET else "not measured (censored)"


def summarise(cfg: BenchConfig, jobs: list[dict[str, Any]], zero: dict[str, Any]):
    methods = {}
    for method in cfg.methods:
        row = _method_summary(cfg, method, jobs, zero)
        if row is not None:
            methods[method] = row
    boot = {"resamples": cfg.bootstrap_resamples, "seed": cfg.bootstrap_seed}
    budget = cfg.episode_budget
    usable = [j for j in jobs if not j.get("time_limited")]
    by_seed = {(j["method"], j["seed"]): j for j in usable}
    comparisons = {}
    for arm in (m for m in cfg.methods if m in SGFT_ARMS):
        seeds = sorted(s for m, s in by_seed if m == arm and ("rl_ft", s) in by_seed)
        if not seeds:
            continue
        rl = [by_seed[("rl_ft", s)] for s in seeds]
        sg = [by_seed[(arm, s)] for s in seeds]
        rl_auc = np.asarray([j["auc"] for j in rl])
        sg_auc = np.asarray([j["auc"] for j in sg])
        rl_t, sg_t = _time_rows(rl, "episodes_to_target"), _time_rows(sg, "episodes_to_target")
        ratio = _ratio(_rmst_rows(rl_t, budget), _rmst_rows(sg_t, budget))
        ratio_ci = paired_bootstrap_ci(
            rl_t, sg_t, lambda a, b: _ratio(_rmst_rows(a, budget), _rmst_rows(b, budget)), **boot
        )
        rl_c, sg_c = int(rl_t[:, 1].sum()), int(sg_t[:, 1].sum())
        verdict, note = _ratio_verdict(ratio_ci, rl_c, sg_c)
        diff_ci = paired_bootstrap_ci(sg_auc, rl_auc, **boot)
        diff = float(np.mean(sg_auc - rl_auc))
        if diff_ci[0] > 0:
            auc_verdict = f"{LABELS[arm]} learns faster (CI above 0)"
        elif diff_ci[1] < 0:
            auc_verdict = "RL-FT learns faster (CI below 0)"
        else:
            auc_verdict = "no difference resolved (CI includes 0)"
        sg_row = methods[arm]
        dip = sg_row["early_dip"]
        comparisons[arm] = {
            "seeds": seeds,
            "auc_difference": {
                "mean": diff,
                "ci95": list(diff_ci),
                "per_seed": (sg_auc - rl_auc).tolist(),
                "verdict": auc_verdict,
            },
            "ratio_rl_over_sgft": {
                "restricted_mean_ratio": ratio,
                "ci95": list(ratio_ci),
                "rl_censored": rl_c,
                "sgft_censored": sg_c,
                "note": note,
            },
            "verdicts": {
                "ratio_3x": verdict,
                "minutes_under_5": _minutes_verdict(sg_row["minutes_to_target"], sg_c),
                "no_early_dip": (
                    "not measured" if dip is None else "not met" if dip["dip"] else "met"
                ),
            },
        }
    primary = "sgft_h1" if "sgft_h1" in comparisons else next(iter(comparisons), None)
    return {
        "methods": methods,
        "comparisons": comparisons,
        "primary": primary,
        "learner_settings": settings_check(jobs),
    }


# ---------------------------------------------------------------- report
def _ci(interval, fmt: str) -> str:
    return f"{format(interval[0], fmt)}..{format(interval[1], fmt)}"


def format_table(cfg: BenchConfig, summary: dict[str, Any]) -> str:
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
        if method in SGFT_ARMS:
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
        d, r, v = c["auc_difference"], c["ratio_rl_over_sgft"], c["verdicts"]
        minutes = summary["methods"][arm]["minutes_to_target"]
        lines += [
            f"--- {LABELS[arm]} vs RL-FT{tag}, paired over seeds {c['seeds']}",
            f"{LABELS[arm]} - RL-FT AUC: {d['mean']:+.2f} (95% CI {_ci(d['ci95'], '+.2f')}): "
            f"{d['verdict']}",
            f"RL-FT/{LABELS[arm]} episodes to {cfg.target:.0%} held twice: "
            f"{r['restricted_mean_ratio']:.2f} (95% CI {_ci(r['ci95'], '.2f')}); censored "
            f"{r['rl_censored']}/{len(c['seeds'])} RL-FT, {r['sgft_censored']}/"
            f"{len(c['seeds'])} SGFT: {r['note']}",
            f"target ratio >= {RATIO_TARGET:g}x at the CI lower bound: {v['ratio_3x']}",
            f"target < {MINUTES_TARGET:g} simulated minutes of stand-in data "
            f"({minutes['restricted_mean']:.2f}, CI {_ci(minutes['ci95'], '.2f')}): "
            f"{v['minutes_under_5']}"
            + (
                f" (the whole budget is {budget_minutes:.1f} min, so any seed that reaches "
                "the target meets it)"
                if budget_minutes < MINUTES_TARGET
                else ""
            ),
            f"target no early dip ({LABELS[arm]}): {v['no_early_dip']}",
        ]
    return "\n".join(lines)


def step_values(episodes, success, grid) -> np.ndarray:
    """The success step function (each rate holds until the next evaluation) on ``grid``."""
    index = np.searchsorted(np.asarray(episodes), np.asarray(grid), side="right") - 1
    return np.asarray(success, np.float64)[np.clip(index, 0, None)]


def plot_curves(cfg: BenchConfig, jobs: list[dict[str, Any]], path: str | Path) -> Path:
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
        (line,) = ax.step(grid, values.mean(0), where="post", label=LABELS[method])
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


# ---------------------------------------------------------------- driver
def run(
    cfg: BenchConfig, work_dir: str | None = None, progress=print, time_limit_s: float = 0.0
) -> dict[str, Any]:
    """The zero-shot evaluation (round 0 of every job), then every (method, seed) job."""
    from simreal_ros.sim.profiles import check_profile

    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}.")
    if not (Path(cfg.checkpoint) / "policy.json").is_file():
        raise FileNotFoundError(
            f"checkpoint {cfg.checkpoint} has no policy.json; pass --checkpoint with a "
            f"{cfg.task} checkpoint directory (the shipped one is checkpoints/{cfg.task})."
        )
    check_profile(cfg.profile)
    for method in cfg.methods:  # a bad --learner override fails here, before any work
        if METHODS[method] is not None:
            arm_config(cfg, method)
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
    # One zero-shot evaluation serves every seed and method: the base policy and the
    # evaluation starts are the same for all of them.
    zero = evaluate(cfg, None, workers=cfg.workers)
    progress(
        f"[{time.perf_counter() - started:6.0f}s] zero-shot: {zero['successes']}/"
        f"{zero['episodes']} on the {cfg.profile} stand-in ({cfg.condition})"
    )
    for method in (m for m in cfg.methods if METHODS[m] is None):  # no training: inline
        jobs += [method_job(cfg, method, seed, zero, work_dir) for seed in seeds]
    executor = make_executor("local", cfg.workers)
    try:
        # Seed-major, so every method of a seed runs close together in time (a deadline
        # then cuts all methods alike).
        tasks = [
            (cfg, m, s, zero, work_dir)
            for s in seeds
            for m in cfg.methods
            if METHODS[m] is not None
        ]

        def finished(_index: int, job: dict[str, Any]) -> None:  # as each job arrives
            jobs.append(job)
            last = job["rounds"][-1]
            progress(
                f"[{time.perf_counter() - started:6.0f}s] {LABELS[job['method']]} seed "
                f"{job['seed']}: "
                f"{'held the target' if job['reached'] else 'censored'} "
                f"(episodes to target {job['episodes_to_target']}), AUC {job['auc']:.2f}, "
                f"final {last['evaluation']['successes']}/{last['evaluation']['episodes']} "
                f"after {last['episodes']} episodes, {job['seconds']:.0f}s"
                + (" [time-limited]" if job.get("time_limited") else "")
            )

        executor.map(_method_job, tasks, on_result=finished)
    finally:
        executor.close()
        if own_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    summary = summarise(cfg, jobs, zero)
    return {
        "config": dataclasses.asdict(cfg),
        "base_checkpoint": base_checkpoint,
        "v_sim_fit": v_sim_fit,
        "stand_in": f"{cfg.profile} profile: a simulated stand-in for the physical arm",
        "zero_shot": zero,
        "evaluation_seeds": cfg.evaluation_seeds,
        "jobs": sorted(jobs, key=lambda j: (j["seed"], cfg.methods.index(j["method"]))),
        "summary": summary,
        "wall_seconds": time.perf_counter() - started,
    }


def _method_job(args: tuple) -> dict[str, Any]:
    """``method_job`` as an executor item (its arguments in one tuple)."""
    return method_job(*args)


QUICK = {"seeds": 5, "episodes_per_round": 5, "max_rounds": 5, "updates_per_round": 300,
         "eval_episodes": 30}  # fmt: skip
FULL = {"seeds": 8, "episodes_per_round": 5, "max_rounds": 12, "updates_per_round": 300,
        "eval_episodes": 30}  # fmt: skip


def parse_args(argv=None) -> tuple[BenchConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_ckpt = REPO / "checkpoints" / "push"
    parser.add_argument("--checkpoint", default=str(default_ckpt), help="base checkpoint dir")
    parser.add_argument("--task", default="push", choices=("push", "reach"))
    parser.add_argument("--condition", default="train", choices=("train", "shifted"))
    parser.add_argument(
        "--profile", default="real_twin", help="stand-in dynamics profile: a name or YAML path"
    )
    parser.add_argument("--seeds", type=int, default=None, help=f"bench seeds (>= {MIN_SEEDS})")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--methods",
        default=",".join(PRIMARY_METHODS),
        help=f"comma-separated, from {', '.join(METHODS)}; the H ablation: "
        + ",".join(ABLATION_METHODS),
    )
    parser.add_argument("--episodes-per-round", type=int, default=None)
    parser.add_argument("--max-rounds", type=int, default=None)
    parser.add_argument("--updates-per-round", type=int, default=None)
    parser.add_argument("--eval-episodes", type=int, default=None)
    parser.add_argument("--eval-first-seed", type=int, default=900_000)
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="> 0: Gaussian noise around the mean instead of the policy's own distribution",
    )
    parser.add_argument("--bc-demos", type=int, default=0, help="expert demos/round (BC)")
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
        help="override a LearnerConfig default for every arm (repeatable)",
    )
    parser.add_argument("--bootstrap-resamples", type=int, default=10_000)
    parser.add_argument(
        "--work-dir", default="", help="kept work directory (reuses a fitted V_sim there)"
    )
    parser.add_argument(
        "--deadline-minutes",
        "--time-limit-min",
        dest="deadline_minutes",
        type=float,
        default=0.0,
        help="wall-clock limit: no new round starts after it (those jobs are flagged and "
        "left out of the statistics)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"the <= 20 min preset on 2 cores: {json.dumps(QUICK)}",
    )
    parser.add_argument("--out", default="", help="write the results as JSON here")
    parser.add_argument(
        "--plot",
        default=None,
        help="PNG of the success curves; default <out dir>/sample_efficiency.png, or "
        "bench/results/sample_efficiency.png without --out; 'none' for no plot",
    )
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    values = {
        k: getattr(args, k) if getattr(args, k) is not None else v for k, v in preset.items()
    }
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    cfg = BenchConfig(
        checkpoint=args.checkpoint,
        task=args.task,
        condition=args.condition,
        profile=args.profile,
        first_seed=args.first_seed,
        methods=methods,
        eval_first_seed=args.eval_first_seed,
        target=args.target,
        noise=args.noise,
        bc_demos=args.bc_demos,
        sim_episodes=args.sim_episodes,
        episode_seconds=args.episode_seconds,
        workers=args.workers,
        fit_v_sim=args.fit_v_sim,
        learner_overrides=tuple(_override(text, parser) for text in args.learner),
        fit_v_sim_updates=args.fit_v_sim_updates,
        bootstrap_resamples=args.bootstrap_resamples,
        **values,
    )
    if cfg.seeds < 1 or cfg.episodes_per_round < 1 or cfg.max_rounds < 1:
        parser.error("--seeds, --episodes-per-round and --max-rounds must be at least 1.")
    if cfg.eval_episodes < 1:
        parser.error("--eval-episodes must be at least 1.")
    if args.plot is None:
        args.plot = str(
            Path(args.out).parent / "sample_efficiency.png"
            if args.out
            else REPO / "bench" / "results" / "sample_efficiency.png"
        )
    return cfg, args


def _override(text: str, parser) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        parser.error(f"--learner {text!r}: use KEY=VALUE, e.g. --learner learning_rate=3e-5")
    return key.strip(), value.strip()


def design_warnings(cfg: BenchConfig) -> list[str]:
    """Settings below the paired design's minimums: allowed for smoke runs, never silent."""
    out = []
    if cfg.seeds < MIN_SEEDS:
        out.append(f"{cfg.seeds} seed(s) < {MIN_SEEDS}: the bootstrap intervals mean little")
    if cfg.eval_episodes < MIN_EVAL_EPISODES:
        out.append(
            f"{cfg.eval_episodes} evaluation episodes < {MIN_EVAL_EPISODES}: each success "
            "rate is coarse"
        )
    if "rl_ft" not in cfg.methods or not set(cfg.methods) & set(SGFT_ARMS):
        out.append("no RL-FT vs SGFT pair among --methods: no decision lines")
    return out


def main(argv=None) -> None:
    import torch

    torch.set_num_threads(1)
    cfg, args = parse_args(argv)
    print(f"config: {json.dumps(dataclasses.asdict(cfg))}", flush=True)
    for warning in design_warnings(cfg):
        print(f"WARNING: {warning}; not decision-grade.", flush=True)
    try:
        result = run(
            cfg,
            work_dir=args.work_dir or None,
            progress=lambda line: print(line, flush=True),
            time_limit_s=60.0 * args.deadline_minutes,
        )
    except (ValueError, FileNotFoundError) as error:
        sys.exit(f"sample_efficiency: {error}")
    table = format_table(cfg, result["summary"])
    result["table"] = table
    result["warnings"] = design_warnings(cfg)
    print(table)
    print(f"wall time {result['wall_seconds']:.0f} s")
    if args.plot and args.plot.lower() != "none":
        result["plot"] = str(plot_curves(cfg, result["jobs"], args.plot))
        print(f"wrote {result['plot']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
