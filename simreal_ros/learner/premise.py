"""The premise check, before any fine-tuning: is there a gap to close, can it be closed, and
does V_sim still rank the stand-in's states?

1. Zero-shot: the base policy's success on the stand-in (target <= ``max_stand_in``) against
   nominal sim (target >= ``min_nominal``), train condition, the same seeds.
2. Feasibility: a controller (the scripted expert, retuned on the stand-in by its tuning
   grid on other seeds, within the policy's own per-tick step) reaches ``min_feasible``
   on the stand-in.
3. V_sim: Spearman rank correlation of V_sim(s) with the Monte-Carlo return-to-go on
   states the base policy visits, on the stand-in and (the same figure) in the
   randomized sim it was trained in. Below ``min_rank`` SGFT's premise fails here.

Return-to-go: the discounted rewards to the episode's end, then the end's value: 0 after a
success, the learner's auto failure value after a failure (``sgft.auto_failure_value``),
and after a time limit the last reward forever (r_T / (1 - gamma)). The tail never uses
V_sim, so the check cannot agree with itself. Nothing here reads the stand-in's file:
it only runs episodes on it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from simreal_ros.config_schema import setting, validate
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.stats import rank_correlation


@dataclasses.dataclass
class PremiseConfig:
    task: str = setting("push", "task", choices=("push", "reach"))
    condition: str = setting("train", "condition the premise is measured on")
    stand_in: str = setting("real_twin", "stand-in profile (name or YAML path)")
    sim_profile: str = setting("randomized", "the sim the base policy was trained in")
    episodes: int = setting(100, "episodes per success rate", low=1, high=100000)
    retune_episodes: int = setting(
        20, "episodes per point of the expert's tuning grid on the stand-in", low=1, high=10000
    )
    value_episodes: int = setting(20, "episodes per V_sim rank correlation", low=2, high=10000)
    first_seed: int = setting(700000, "first seed (every measurement uses the same)", low=0)
    workers: int = setting(2, "evaluation worker processes", low=1, high=256)
    max_stand_in: float = setting(0.4, "zero-shot stand-in success at most", low=0.0, high=1.0)
    min_nominal: float = setting(0.9, "zero-shot nominal-sim success at least", low=0.0, high=1.0)
    min_feasible: float = setting(0.8, "retuned controller success at least", low=0.0, high=1.0)
    min_rank: float = setting(0.5, "V_sim rank correlation at least", low=-1.0, high=1.0)

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass
class PremiseResult:
    config: PremiseConfig
    nominal: dict[str, Any]
    stand_in: dict[str, Any]
    feasible: dict[str, Any]
    rank_sim: float | None  # None: the policy has no critic (a camera policy)
    rank_stand_in: float | None
    checks: dict[str, bool]

    @property
    def holds(self) -> bool:
        return all(self.checks.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": dataclasses.asdict(self.config),
            "nominal": self.nominal,
            "stand_in": self.stand_in,
            "feasible": self.feasible,
            "v_sim_rank_sim": self.rank_sim,
            "v_sim_rank_stand_in": self.rank_stand_in,
            "checks": self.checks,
            "holds": self.holds,
        }


def returns_to_go(transitions, gamma: float, failure_value: float) -> np.ndarray:
    """Monte-Carlo discounted return-to-go of every row, with the tail described above."""
    out = np.zeros(len(transitions))
    failures = transitions.failures
    for _, start, stop in transitions.episode_boundaries():
        rewards = transitions.rewards[start:stop].astype(np.float64)
        last = stop - 1
        if failures[last]:
            tail = failure_value
        elif transitions.terminals[last]:
            tail = 0.0
        else:
            tail = float(rewards[-1]) / (1.0 - gamma)
        running = tail
        for i in range(stop - start - 1, -1, -1):
            running = rewards[i] + gamma * running
            out[start + i] = running
    return out


def value_rank(
    checkpoint, task: str, profile: str, episodes: int, seed: int, *, robot: RobotDescription
) -> float:
    """V_sim's rank correlation with the return-to-go on the base policy's own states on
    ``robot``."""
    from simreal_ros.learner.critics import actor_mean, twin_q
    from simreal_ros.learner.data import collect_sim_transitions
    from simreal_ros.learner.sgft import FrozenSimValue, auto_failure_value

    gamma = float(checkpoint.gamma)
    data = collect_sim_transitions(
        checkpoint, task, episodes, seed=seed, profile=profile, noise=0, robot=robot
    )
    v_sim = FrozenSimValue(checkpoint.model.actor, checkpoint.model.critic, actor_mean, twin_q)
    values = v_sim(data.obs)
    failure_value = auto_failure_value(data.rewards, None, gamma)
    return rank_correlation(values, returns_to_go(data, gamma, failure_value))


def check_premise(
    checkpoint_dir, config: PremiseConfig | None = None, *, robot: RobotDescription
) -> PremiseResult:
    """The premise checks of ``checkpoint_dir`` on ``robot`` (the arm it was trained for)."""
    from simreal_ros.sim.expert import (
        RETUNE_SEED_OFFSET,
        measure_success,
        retuned_on,
        widest_joint_step,
    )
    from simreal_ros.training.evaluate import evaluate_policy
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    cfg = config or PremiseConfig()
    seeds = list(range(cfg.first_seed, cfg.first_seed + cfg.episodes))

    def evaluation(profile: str) -> dict[str, Any]:
        result = evaluate_policy(
            str(checkpoint_dir), profile, cfg.condition, seeds, workers=cfg.workers, robot=robot
        )
        return result.to_dict()

    nominal = evaluation("nominal")
    stand_in = evaluation(cfg.stand_in)
    checkpoint = load_checkpoint(str(checkpoint_dir))
    # Retuned on the stand-in on other seeds (RETUNE_SEED_OFFSET), within the widest
    # per-tick step sim adaptation may give the policy.
    tuning, sweep = retuned_on(
        cfg.task, cfg.condition, cfg.stand_in, cfg.retune_episodes,
        cfg.first_seed + RETUNE_SEED_OFFSET, widest_joint_step(robot, checkpoint.spec),
        robot=robot,
    )  # fmt: skip
    feasible = measure_success(
        cfg.task, cfg.condition, cfg.stand_in, cfg.episodes, cfg.first_seed, tuning, robot=robot
    )
    feasible = {k: v for k, v in feasible.items() if k != "failed_seeds"}
    feasible |= {"lead": tuning.command_lead, "speed": tuning.speed_scale, "sweep": sweep}
    checks = {
        "stand_in_fails": stand_in["success_rate"] <= cfg.max_stand_in,
        "nominal_succeeds": nominal["success_rate"] >= cfg.min_nominal,
        "feasible": feasible["rate"] >= cfg.min_feasible,
    }
    rank_sim = rank_stand_in = None
    if checkpoint.model.critic is not None:  # a camera policy has no V_sim to check
        rank_sim = value_rank(
            checkpoint, cfg.task, cfg.sim_profile, cfg.value_episodes, cfg.first_seed,
            robot=robot,
        )  # fmt: skip
        rank_stand_in = value_rank(
            checkpoint, cfg.task, cfg.stand_in, cfg.value_episodes, cfg.first_seed, robot=robot
        )
        checks["v_sim_ranks_stand_in"] = rank_stand_in >= cfg.min_rank
    return PremiseResult(cfg, nominal, stand_in, feasible, rank_sim, rank_stand_in, checks)


def format_premise(result: PremiseResult) -> str:
    cfg = result.config

    def rate(d: dict[str, Any], key: str) -> str:
        low, high = d.get("ci95", (0.0, 1.0))
        return f"{d['successes']}/{d['episodes']} = {d[key]:.0%} (95% CI {low:.0%}..{high:.0%})"

    def mark(ok: bool) -> str:
        return "ok  " if ok else "FAIL"

    c = result.checks
    lines = [
        f"premise check: {cfg.task}/{cfg.condition}, stand-in {cfg.stand_in} (a simulated "
        f"stand-in for the arm, not the arm), seeds {cfg.first_seed}..",
        f"  {mark(c['nominal_succeeds'])} zero-shot in nominal sim: "
        f"{rate(result.nominal, 'success_rate')}  (target >= {cfg.min_nominal:.0%})",
        f"  {mark(c['stand_in_fails'])} zero-shot on the stand-in: "
        f"{rate(result.stand_in, 'success_rate')}  (target <= {cfg.max_stand_in:.0%})",
        f"  {mark(c['feasible'])} retuned expert on the stand-in (lead "
        f"{result.feasible['lead']:g}, speed {result.feasible['speed']:g}): "
        f"{rate(result.feasible, 'rate')}  (target >= {cfg.min_feasible:.0%}: feasible)",
    ]
    if "v_sim_ranks_stand_in" in c:
        lines.append(
            f"  {mark(c['v_sim_ranks_stand_in'])} V_sim rank correlation with the return-to-go: "
            f"stand-in {result.rank_stand_in:.2f}, sim ({cfg.sim_profile}) {result.rank_sim:.2f}"
            f"  (target >= {cfg.min_rank:.2f})"
        )
    else:
        lines.append("  n/a  V_sim rank: this policy has no critic (a camera policy).")
    if result.holds:
        ranks = ", and V_sim ranks its states" if "v_sim_ranks_stand_in" in c else ""
        lines.append(f"premise holds: a real gap, a feasible task{ranks}.")
    else:
        failed = ", ".join(name for name, ok in c.items() if not ok)
        lines.append(f"premise FAILS ({failed}): fine-tuning results here need that caveat.")
        if not c.get("v_sim_ranks_stand_in", True):
            lines.append(
                "  V_sim does not rank the stand-in's states: SGFT's premise fails here; "
                "refit V_sim in sim on wider rollouts, never on the stand-in."
            )
    return "\n".join(lines)
