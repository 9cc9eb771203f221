"""The value side of a learner session, fixed when it starts: V_sim (SGFT's frozen sim
value), the critic the actor-critic methods train, the reward scale and failure value every
method trains on, and EWC's Fisher estimate on the sim data. Also the fit that gives a base
whose critics pretraining never trained a V_sim (``fit_sim_critic``)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simreal_ros.learner import lora
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.ewc import ElasticWeightConsolidation
from simreal_ros.learner.methods import method_traits
from simreal_ros.learner.replay import Transitions
from simreal_ros.learner.sac_finetune import ColumnCritic
from simreal_ros.learner.sgft import (
    FrozenSimValue,
    HorizonCritic,
    SimAdvantageCritic,
    auto_failure_value,
    fixed_reward_scale,
    with_failure_value,
)
from simreal_ros.robot.description_record import RobotDescription

log = logging.getLogger("simreal_ros.learner")


def actor_mean(actor, obs):
    return actor(obs)


def actor_sample(actor, obs):
    return actor.sample(obs)[0]


def twin_q(critic, obs, action):
    return critic(obs, action)


def check_gamma(configured: float, pretraining: float) -> float:
    """The discount the session trains with: the checkpoint's (0 configured: take it)."""
    if configured and abs(configured - pretraining) > 1e-9:
        raise ValueError(
            f"gamma {configured} differs from the checkpoint's pretraining gamma "
            f"{pretraining}; V_sim and the shaped reward need the same gamma. Set gamma "
            "to 0 (take it from the checkpoint) or to the same value."
        )
    return pretraining


def critics_trained(training: dict[str, Any]) -> bool:
    """False when pretraining took no SAC step and no fit trained the critics since
    (``training`` is a checkpoint's training metadata): they are still random."""
    return not (training.get("sac_steps") == 0 and not training.get("critic_steps"))


def check_critic_trained(checkpoint, config: LearnerConfig) -> str:
    """V_sim (and an RL warm start) need critics that pretraining actually trained: a
    warning when they were not and this method would use them, else empty."""
    untrained = not critics_trained((checkpoint.metadata or {}).get("training", {}) or {})
    needs_critic = method_traits(config.method).shaped or config.resolved_critic_init != "fresh"
    if untrained and needs_critic:
        warning = (
            f"checkpoint {checkpoint.version}: its critics were never trained "
            "(training.sac_steps = 0), so V_sim / the critic warm start carry no value "
            "information; pretrain with SAC steps (or refit the critics in sim) first."
        )
        log.warning(warning)
        return warning
    return ""


def make_ewc(
    config: LearnerConfig, sim: Transitions | None, actor_peft
) -> ElasticWeightConsolidation | None:
    """EWC around the adapter's current weights, its Fisher estimated on sim states; None
    when EWC is off or there is no sim data to estimate it from."""
    if not config.ewc:
        return None
    if sim is None or len(sim) == 0:
        log.warning("EWC is on but there is no sim data to estimate the Fisher; EWC off.")
        return None
    rng = np.random.default_rng(config.seed)
    rows = rng.choice(len(sim), min(config.ewc_fisher_samples, len(sim)), replace=False)
    return ElasticWeightConsolidation(
        lora.trainable_parameters(actor_peft),
        lora.inner(actor_peft).distribution,
        torch.as_tensor(sim.obs[rows], dtype=torch.float32),
        config.ewc_weight,
    )


class Critics:
    """V_sim, the trained critic, reward scale and failure value of one session.

    Built from the settings the session starts with; the scale and failure value are fixed
    once (from the sim data when there is some) and the same rule holds for every method.
    """

    def __init__(
        self,
        config: LearnerConfig,
        checkpoint,
        gamma: float,
        sim_data: Transitions | None,
    ) -> None:
        self.gamma = gamma
        self.v_sim: FrozenSimValue | None = None
        if method_traits(config.method).shaped:
            self.v_sim = FrozenSimValue(
                checkpoint.model.actor,
                checkpoint.model.critic,
                actor_mean,
                twin_q,
                actor_sample,
                config.v_sim_action_samples,
                seed=config.seed,
            )
        self.warning = check_critic_trained(checkpoint, config)
        self.reward_scale = 1.0
        self.scale_source = "constant 1 (bc trains on no reward)"
        if sim_data is not None and self.v_sim is not None:
            self.v_sim.annotate(sim_data)
        self.failure_value: float | None = config.failure_value or None
        if self.failure_value is None and sim_data is not None and len(sim_data):
            self.failure_value = self._auto_failure_value(sim_data)
        if method_traits(config.method).actor_critic:
            self.reward_scale, self.scale_source = self._fixed_scale(config, sim_data)
        self.critic: torch.nn.Module | None = None
        if method_traits(config.method).actor_critic:
            self.critic = self._make_critic(config, checkpoint)

    def annotate(self, data: Transitions) -> None:
        """V_sim on transitions that do not carry it yet (SGFT only)."""
        if self.v_sim is not None and data.v_sim is None:
            self.v_sim.annotate(data)

    def bound_failure_value(self, data: Transitions) -> None:
        """Without sim data the failure value is still open: bound it by the data at hand."""
        if self.failure_value is None:
            self.failure_value = self._auto_failure_value(data)

    def _auto_failure_value(self, data: Transitions) -> float:
        values = None
        if data.v_sim is not None and data.v_sim_next is not None:
            values = np.concatenate([data.v_sim, data.v_sim_next])
        return auto_failure_value(data.rewards, values, self.gamma)

    def _fixed_scale(self, config: LearnerConfig, sim: Transitions | None) -> tuple[float, str]:
        if config.reward_scale > 0:
            return config.reward_scale, "configured"
        if sim is None or len(sim) < 2:
            return 1.0, "1 (no sim data to fix it from)"
        rewards = with_failure_value(sim.rewards, sim.failures, self.gamma, self.failure_value)
        shaped = method_traits(config.method).shaped
        scale = fixed_reward_scale(
            rewards,
            sim.v_sim if shaped else None,
            sim.v_sim_next if shaped else None,
            sim.terminals,
            self.gamma,
        )
        kind = "r~" if shaped else "r"
        return scale, f"1/std of {kind} over {len(sim)} sim transitions"

    def _make_critic(self, cfg: LearnerConfig, checkpoint) -> torch.nn.Module:
        arch = checkpoint.arch
        horizon = cfg.horizon_or_none if method_traits(cfg.method).shaped else None
        init = cfg.resolved_critic_init
        if init == "fresh":
            return HorizonCritic(
                arch.obs_dim, arch.act_dim, horizon, arch.critic_hidden, layer_norm=True
            )
        if init == "sim_advantage":
            return SimAdvantageCritic(
                checkpoint.model.actor,
                checkpoint.model.critic,
                actor_mean,
                twin_q,
                arch.obs_dim,
                arch.act_dim,
                horizon,
                self.reward_scale,
                arch.critic_hidden,
            ).train()
        if horizon is not None:
            raise ValueError("a checkpoint critic has one head; it needs horizon 0 (infinite).")
        critic = copy.deepcopy(checkpoint.model.critic)
        if init == "checkpoint_lora":
            critic = lora.wrap(critic, cfg.lora.rank, cfg.lora.alpha, cfg.lora.dropout)
        else:
            for p in critic.parameters():
                p.requires_grad_(True)
        return ColumnCritic(critic, self.reward_scale).train()


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
    robot: RobotDescription,
) -> dict[str, Any]:
    """Fit the base's twin critics to its own value IN SIM (randomized profile, the
    pretraining profile; never a stand-in for the arm) and save base actor + fitted critics.

    For a base checkpoint whose critics were never trained (DAgger stage, 0 SAC steps),
    which would make V_sim random noise. Targets: discounted return-to-go of the base
    actor's (noisy) rollouts, bootstrapped with the critic itself at time-limit truncations
    (recomputed every 200 updates), zero after true terminations.
    """
    from simreal_ros.learner.data import collect_sim_transitions
    from simreal_ros.training.torch_checkpoint import load_checkpoint, save_checkpoint

    torch.manual_seed(seed)
    checkpoint = load_checkpoint(checkpoint_dir)
    gamma = float(checkpoint.gamma)
    data = collect_sim_transitions(
        checkpoint, task, episodes + held_out, seed=seed, profile="randomized",
        episode_seconds=episode_seconds, robot=robot,
    )  # fmt: skip
    held_ids = [f"sim-{seed}-{e}" for e in range(episodes, episodes + held_out)]
    held = np.isin(data.episode_ids, held_ids)
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
            next_obs = torch.as_tensor(data.next_obs)
            next_v = torch.minimum(*critic(next_obs, checkpoint.model.actor(next_obs)))
        next_v = next_v.reshape(-1).numpy()
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
        # critic_steps tells critics_trained (and so the learner) these critics are trained.
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
