"""One round's update of the running adapter, per method: behaviour cloning (bc), the
actor-critic fine-tuner (rl, sgft, and sysid on identified-sim episodes), sim-side
adaptation in the identified sim (adapt), SGFT's model rollouts and value watch, and the
forgetting guards every round reports.

The trust region anchors to the parent: the running version this round starts from (its
merged actor, frozen at the round's start), never the base checkpoint, so a gap that needs
a large correction can be closed over rounds, and after sim-side adaptation the arm's own
data fine-tune the adapted policy, anchored to it. Every round reports how far the
candidate moved from its parent (``distance_from_parent``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from simreal_ros.learner import lora
from simreal_ros.learner.adaptation import distance_from_parent
from simreal_ros.learner.bc import BehaviourCloning
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.critics import Critics, make_ewc
from simreal_ros.learner.data import policy_actions, rollout_transitions
from simreal_ros.learner.ewc import ElasticWeightConsolidation
from simreal_ros.learner.methods import method_traits
from simreal_ros.learner.replay import Transitions
from simreal_ros.learner.sac_finetune import ActorCriticFineTuner
from simreal_ros.learner.sgft import ValueExploitMonitor, frozen_copy, shape_rewards

if TYPE_CHECKING:
    from simreal_ros.learner.dynamics_model import ModelRollouts

log = logging.getLogger("simreal_ros.learner")


def anchor_weight(config: LearnerConfig, real_transitions: int) -> float:
    """The trust region's weight after this many real transitions: it halves at
    ``anchor_half_transitions``, so a critic fitted on more real data may correct the
    sim policy further (a constant weight caps every correction at ~1/(2w))."""
    if config.anchor_half_transitions <= 0:
        return config.anchor_weight
    n0 = config.anchor_half_transitions
    return config.anchor_weight * n0 / (n0 + real_transitions)


def forgetting_guards(
    config: LearnerConfig, ewc: ElasticWeightConsolidation | None
) -> dict[str, float]:
    """The round's guards against forgetting the sim policy, as metrics."""
    out = {
        "sim_replay": float(config.sim_replay),
        "real_weight": config.real_weight,
        "sim_weight": config.sim_weight,
        "ewc": float(ewc is not None),
        "learning_rate": config.effective_learning_rate,
        "learning_rate_clipped": float(config.learning_rate > config.learning_rate_cap),
    }
    if ewc is not None:
        out.update(ewc.stats())
    return out


class ValueWatch:
    """Per real episode (each once): r, V_sim and r~; flags V_sim rising while the real
    reward falls."""

    def __init__(self, window: int) -> None:
        self.monitor = ValueExploitMonitor(window)
        self.flag = ""
        self._seen: set[str] = set()

    def update(
        self, real: Transitions | None, gamma: float, reward_scale: float
    ) -> dict[str, float]:
        """The round's metrics: the reward scale, and whether the flag is up."""
        if real is None or real.v_sim is None:
            return {"reward_scale": reward_scale}
        shaped = shape_rewards(
            real.rewards, real.v_sim, real.v_sim_next, real.terminals, gamma, reward_scale
        )
        for episode_id, start, stop in real.episode_boundaries():
            if episode_id in self._seen:
                continue
            self._seen.add(episode_id)
            row = self.monitor.add_episode(
                episode_id, real.rewards[start:stop], real.v_sim[start:stop], shaped[start:stop]
            )
            log.info(
                "episode %s: return %.3f, mean V_sim %.3f, shaped return %.3f",
                episode_id,
                row["return"],
                row["mean_v_sim"],
                row["shaped_return"],
            )
        self.flag = self.monitor.flag()
        if self.flag:
            log.warning(self.flag)
        return {"reward_scale": reward_scale, "value_exploit_flag": float(bool(self.flag))}


class RoundTrainer:
    """Trains the running adapter one round at a time; keeps what carries over between
    rounds (the actor-critic tuner, EWC, the dynamics model, method sysid's episodes)."""

    def __init__(
        self, config: LearnerConfig, checkpoint, actor_peft, critics: Critics, robot
    ) -> None:
        self.robot = robot  # the arm the rounds train for (a RobotDescription)
        self.checkpoint = checkpoint
        self.actor_peft = actor_peft
        self.critics = critics
        self.parent_actor: torch.nn.Module | None = None  # the round's start, frozen
        self.tuner: ActorCriticFineTuner | None = None
        self.ewc: ElasticWeightConsolidation | None = None
        self.dynamics: ModelRollouts | None = None  # SGFT's model rollouts, once they run
        self.value_watch = ValueWatch(config.value_exploit_window)
        self.sysid_data: Transitions | None = None  # method sysid: identified-sim episodes
        self._real_transitions_seen = 0
        self._updates: dict[str, Callable[..., dict[str, float]]] = {
            "behaviour_cloning": self._behaviour_cloning,
            "actor_critic": self._actor_critic,
        }

    def train(
        self,
        config: LearnerConfig,
        data: Transitions,
        real: Transitions | None,
        round_: int,
        sim_data: Transitions | None,
    ) -> dict[str, float]:
        """Round ``round_``'s updates on ``data`` (``real``: the target domain's part of
        it); the round's metrics."""
        if self.ewc is None:
            self.ewc = make_ewc(config, sim_data, self.actor_peft)
        self.critics.bound_failure_value(data)
        real_now = int(data.real_mask().sum())
        new_real = max(0, real_now - self._real_transitions_seen)
        self._real_transitions_seen = real_now
        updates = max(config.updates_per_round, math.ceil(config.update_to_data * new_real))
        metrics: dict[str, float] = {"updates": float(updates), "new_real_transitions": new_real}
        self.parent_actor = frozen_copy(lora.merged(self.actor_peft))
        update = self._updates[method_traits(config.method).update]
        metrics.update(update(config, data, real, round_, real_now, updates))
        metrics["distance_from_parent"] = distance_from_parent(
            self.actor_peft, self.parent_actor, data.obs
        )
        critics = self.critics
        if critics.v_sim is not None:
            critics.v_sim.check_frozen()
            metrics.update(self.value_watch.update(real, critics.gamma, critics.reward_scale))
        metrics.update(forgetting_guards(config, self.ewc))
        return metrics

    def _behaviour_cloning(self, cfg: LearnerConfig, data, real, round_, real_now, updates):
        trainer = BehaviourCloning(
            self.actor_peft,
            data,
            learning_rate=cfg.effective_learning_rate,
            batch_size=cfg.batch_size,
            intervention_weight=cfg.bc_intervention_weight,
            use_failures=cfg.bc_use_failures,
            real_weight=cfg.real_weight,
            sim_weight=cfg.sim_weight,
            sim_replay=cfg.sim_replay,
            ewc=self.ewc,
            grad_clip=cfg.grad_clip,
            weight_decay=cfg.weight_decay,
            seed=cfg.seed + round_,
        )
        return trainer.train(updates)

    def _actor_critic(self, cfg: LearnerConfig, data, real, round_, real_now, updates):
        """rl, sgft and sysid: one path, differing only in the reward and the data."""
        critics = self.critics
        if self.tuner is None:
            self.tuner = ActorCriticFineTuner(
                self.actor_peft,
                critics.critic,
                data,
                gamma=critics.gamma,
                horizon=cfg.horizon_or_none if method_traits(cfg.method).shaped else None,
                shaping=method_traits(cfg.method).shaped,
                reward_scale=critics.reward_scale,
                actor_learning_rate=cfg.effective_learning_rate,
                critic_learning_rate=cfg.effective_critic_learning_rate,
                batch_size=cfg.batch_size,
                tau=cfg.tau,
                entropy_alpha=cfg.entropy_alpha,
                auto_entropy=cfg.auto_entropy,
                real_weight=cfg.real_weight,
                sim_weight=cfg.sim_weight,
                sim_replay=cfg.sim_replay,
                ewc=self.ewc,
                bc_regulariser=cfg.bc_regulariser,
                critic_warmup=cfg.critic_warmup_updates
                if cfg.resolved_critic_init == "fresh"
                else 0,
                grad_clip=cfg.grad_clip,
                seed=cfg.seed,
                base_actor=self.parent_actor,
                anchor_weight=cfg.anchor_weight,
                failure_value=critics.failure_value,
                entropy_backup=cfg.entropy_backup,
            )
        else:
            self.tuner.set_data(data, seed=cfg.seed + round_)
            if self.tuner.base_actor is not None:
                self.tuner.base_actor = self.parent_actor  # the trust region's new centre
        self.tuner.anchor_weight = anchor_weight(cfg, real_now)
        metrics = {"anchor_weight": self.tuner.anchor_weight}
        if (
            cfg.model_rollouts
            and method_traits(cfg.method).shaped
            and real is not None
            and len(real)
        ):
            metrics.update(self._model_rollouts(cfg, real))
        metrics.update(self.tuner.train(updates))
        return metrics

    def _model_rollouts(self, cfg: LearnerConfig, real: Transitions) -> dict[str, float]:
        """Fit the dynamics model on all real data, then imagine short rollouts."""
        from simreal_ros.learner.dynamics_model import ModelRollouts

        if self.dynamics is None:
            arch = self.checkpoint.arch
            self.dynamics = ModelRollouts(arch.obs_dim, arch.act_dim, seed=cfg.seed)
        loss = self.dynamics.fit(real, cfg.updates_per_round, cfg.batch_size)
        starts = max(1, cfg.batch_size // cfg.rollout_length)
        rollouts = self.dynamics.rollout(
            lora.inner(self.actor_peft), real, starts, cfg.rollout_length, self.critics.v_sim
        )
        self.tuner.extra_batches = self.dynamics.batches(cfg.rollout_fraction)
        return {"dynamics_loss": loss, "model_transitions": float(len(rollouts))}

    def identified_sim_episodes(
        self, cfg: LearnerConfig, profile: str, converter, round_: int
    ) -> Transitions:
        """method sysid: the running policy (exploring) in the identified sim before round
        ``round_ + 1``, accumulated over rounds; the data the candidate is fine-tuned on."""
        from simreal_ros.sim.gym_env import ArmTaskEnv

        if not profile:
            raise ValueError(
                "method sysid needs an identified profile: record real episodes with "
                "/forward_position_controller/commands (the learner identifies from them) "
                "or set sysid.profile to a `simreal sysid` profile.yaml."
            )
        env = ArmTaskEnv(task=cfg.task, profile=profile, robot=self.robot)
        act = policy_actions(lora.inner(self.actor_peft), None, cfg.exploration_std_max)
        first = cfg.seed * 1_000_003 + 500_000 + round_ * cfg.sysid.sim_episodes
        seeds = range(first, first + cfg.sysid.sim_episodes)
        try:
            fresh, _ = rollout_transitions(
                env, converter, seeds, "train", act, source="identified_sim",
                episode_ids=[f"sysid-{s}" for s in seeds],
            )  # fmt: skip
        finally:
            env.close()
        # The target domain's data here (real_weight, the trust region's schedule).
        self.sysid_data = (
            fresh if self.sysid_data is None else Transitions.concatenate([self.sysid_data, fresh])
        )
        return self.sysid_data

    def sim_adaptation(
        self,
        cfg: LearnerConfig,
        profile: str,
        checkpoint_dir: str,
        out_dir: str,
        round_: int,
        executor=None,
        progress=None,
        parent_scale=None,
        arm_bags=(),
    ) -> dict[str, Any]:
        """methods adapt and cotrain: the running adapter adapted in the identified sim (in
        place), from its current weights at its per-tick step ``parent_scale``, co-trained
        on ``arm_bags``' states where given; ``adaptation.adapt``'s result: the round's
        metrics (``distance_from_parent`` among them) and the candidate's step
        (``action_scale``)."""
        from simreal_ros.learner.adaptation import AdaptationSettings, adapt
        from simreal_ros.learner.sim_polish import PolishSettings, polish

        if not profile:
            raise ValueError(
                "method adapt needs an identified profile: record real episodes with "
                "/forward_position_controller/commands (the learner identifies from them) "
                "or set sysid.profile to a `simreal sysid` profile.yaml."
            )
        settings = AdaptationSettings(
            teacher_episodes=cfg.adapt.teacher_episodes,
            iterations=cfg.adapt.iterations,
            episodes=cfg.adapt.episodes,
            bc_steps=cfg.adapt.bc_steps,
            batch_size=max(cfg.batch_size, 256),
            learning_rate=min(cfg.adapt.learning_rate, cfg.learning_rate_cap),
            shifted_share=cfg.adapt.shifted_share,
            log_spread_floor=max(cfg.adapt.log_spread, cfg.adapt.arm_log_spread)
            if arm_bags
            else cfg.adapt.log_spread,
            seed=cfg.seed * 101 + round_,
            workers=cfg.screen.workers,
        )
        # The polish's move is measured from the version before the whole stage.
        parent = lora.merged(self.actor_peft) if cfg.adapt.polish_rounds else None
        result = adapt(
            self.actor_peft, checkpoint_dir, self.checkpoint, profile, out_dir, settings,
            self.robot, executor, progress, parent_scale, arm_bags,
            cfg.adapt.arm_share if arm_bags else 0.0,
        )  # fmt: skip
        if cfg.adapt.polish_rounds:
            polished = polish(
                self.actor_peft, checkpoint_dir, self.checkpoint, result["profile"],
                tuple(result["teacher"]["tuning"]), settings,
                PolishSettings(
                    rounds=cfg.adapt.polish_rounds,
                    episodes=cfg.adapt.polish_episodes,
                    behaviour_weight=cfg.adapt.polish_behaviour_weight,
                ),
                self.robot, executor, progress, result["action_scale"],
            )  # fmt: skip
            result["metrics"].update(polished["metrics"])
            if polished["kept"]:
                scale = self.checkpoint.spec.action_scale if parent_scale is None else parent_scale
                ratio = np.asarray(result["action_scale"]) / np.asarray(scale)
                result["metrics"]["distance_from_parent"] = distance_from_parent(
                    self.actor_peft, parent, polished["obs"], ratio
                )
        return result
