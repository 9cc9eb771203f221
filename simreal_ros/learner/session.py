"""Fine-tuning rounds: data in, candidate adapter out, screened, stored, maybe promoted.

Entry points (the node, the CLI and notebooks call these; no rclpy here):

    session = LearnerSession(config)                 # base checkpoint, store, sim data
    candidate = session.finetune(real_transitions)   # one round of BC / RL / SGFT
    decision = session.screen(candidate, evaluator)  # sim gate on the same seeds
    stored = session.commit(candidate, decision)     # atomic store write; activate if promoted

    round = session.run_round(paths, evaluator)      # all of the above for episode bags

and the one-shot functions ``finetune(...)`` / ``screen(...)`` below. Each version is
"base checkpoint + one LoRA adapter"; a new round continues from the running adapter's
weights, and a rejected candidate's weights are dropped again.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simreal_ros.learner import lora
from simreal_ros.learner.bc import BehaviourCloning
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.ewc import ElasticWeightConsolidation
from simreal_ros.learner.gate import EvaluationSummary, Evaluator, GateDecision, GateSettings
from simreal_ros.learner.gate import screen as gate_screen
from simreal_ros.learner.replay import REAL_SOURCES, Transitions
from simreal_ros.learner.sac_finetune import ActorCriticFineTuner, ColumnCritic
from simreal_ros.learner.sgft import (
    FrozenSimValue,
    HorizonCritic,
    SimAdvantageCritic,
    ValueExploitMonitor,
    auto_failure_value,
    fixed_reward_scale,
    shape_rewards,
    with_failure_value,
)
from simreal_ros.learner.store import AdapterStore, StoredVersion

# Methods that fine-tune an actor-critic (a critic, a reward scale, the trust region).
ACTOR_CRITIC_METHODS = ("rl", "sgft", "sysid")

log = logging.getLogger("simreal_ros.learner")


# ---------------------------------------------------------------- data
def make_converter(checkpoint):
    from simreal_ros.policy.spec import SpecConverter

    fk = None
    if checkpoint.spec.needs_kinematics:
        from simreal_ros.robot.description import load_robot_description
        from simreal_ros.robot.kinematics import ToolKinematics

        fk = ToolKinematics.for_robot(load_robot_description())
    return SpecConverter(checkpoint.spec, fk)


def transitions_from_dataset(data, converter, success_by_episode: dict[str, bool]) -> Transitions:
    """Episode-bag transitions (SI units, dict obs) -> the actor's normalised coordinates."""
    n = len(data)
    keys = list(data.obs)

    def vectors(obs: dict[str, np.ndarray]) -> np.ndarray:
        rows = [converter.normalized_observation({k: obs[k][i] for k in keys}) for i in range(n)]
        return np.asarray(rows, dtype=np.float32).reshape(n, converter.spec.obs_dim)

    joint_position = data.obs["joint_position"]
    actions = np.asarray(
        [converter.action_from_command(data.actions[i], joint_position[i]) for i in range(n)],
        dtype=np.float32,
    ).reshape(n, converter.spec.act_dim)
    truncateds = np.asarray(data.truncateds, bool)
    terminals = np.asarray(data.dones, bool) & ~truncateds
    episode_ids = np.asarray(data.episode_ids).astype(str)
    return Transitions(
        obs=vectors(data.obs),
        actions=actions,
        rewards=np.asarray(data.rewards, np.float32),
        next_obs=vectors(data.next_obs),
        terminals=terminals,
        truncateds=truncateds,
        episode_ids=episode_ids,
        sources=np.asarray(data.sources).astype(str),
        interventions=np.asarray(data.human_interventions, bool),
        episode_success=np.asarray([success_by_episode.get(e, False) for e in episode_ids]),
    )


def load_episodes(paths, checkpoint, converter=None) -> tuple[Transitions | None, list[dict]]:
    """Read episode bags into Transitions plus a data manifest (which bags and episodes)."""
    from simreal_ros.episodes.dataset import find_bags, load_transitions, read_episode_metadata

    converter = converter or make_converter(checkpoint)
    manifest, success = [], {}
    for bag in find_bags(paths):
        meta = read_episode_metadata(bag)
        if meta is None:
            continue
        success[meta.episode_id] = bool(meta.success)
        manifest.append(
            {
                "episode_id": meta.episode_id,
                "bag": str(bag),
                "source": meta.source,
                "outcome": meta.outcome,
                "condition": meta.condition,
                "steps": int(meta.steps),
                "policy_versions": list(meta.policy_versions),
            }
        )
    data = load_transitions(paths, checkpoint.spec.joint_names)
    if len(data) == 0:
        return None, manifest
    return transitions_from_dataset(data, converter, success), manifest


def policy_actions(actor, noise: float | None = None, exploration_std_max: float = 0.0):
    """The action rule of a collection policy, for ``rollout_transitions``: ``noise`` None
    samples the actor's own tanh-Gaussian, its std capped at ``exploration_std_max`` (the
    learner's shared rule); a number adds N(0, noise) to the mean action instead (0:
    deterministic)."""

    def act(obs, normalized: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        obs_t = torch.as_tensor(normalized, dtype=torch.float32)
        with torch.no_grad():
            if noise is None:
                action = actor.explore(obs_t, exploration_std_max).numpy()
            else:
                action = actor(obs_t).numpy()
                action = action + noise * rng.standard_normal(action.shape)
        return np.clip(action, -1.0, 1.0)

    return act


def expert_actions(expert, converter):
    """The action rule of a scripted expert: its command, as the policy's action."""

    def act(obs, normalized: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return converter.action_from_command(expert.act(obs), obs["joint_position"])

    return act


def rollout_transitions(
    env,
    converter,
    episode_seeds,
    condition: str,
    act,
    *,
    source: str = "sim",
    episode_ids=None,
) -> tuple[Transitions, list[tuple[str, int, bool]]]:
    """Episodes on a gymnasium ``env`` as learner Transitions (the actor's coordinates).

    ``act(obs, normalized_obs, rng)`` gives a normalised action (``policy_actions``,
    ``expert_actions``). Each episode runs under a torch RNG and a numpy ``rng`` seeded by
    its start seed, so two policies that agree draw the same actions (common random
    numbers) and the caller's global torch RNG is left as it was. The recorded action is
    what the arm received, re-expressed as an action (clipping included). Returns the
    transitions and per episode (episode_id, steps, success).
    """
    rows: dict[str, list] = {k: [] for k in ("o", "a", "r", "n", "t", "u", "e", "s")}
    episodes = []
    seeds = [int(s) for s in episode_seeds]
    ids = list(episode_ids) if episode_ids is not None else [f"ep-{s}" for s in seeds]
    for seed, episode_id in zip(seeds, ids, strict=True):
        obs, _ = env.reset(seed=seed, options={"condition": condition})
        start, success, done = len(rows["r"]), False, False
        rng = np.random.default_rng(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            while not done:
                o = converter.normalized_observation(obs)
                q = obs["joint_position"]
                command = converter.command_from_action(act(obs, o, rng), q)
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
        obs=np.asarray(rows["o"], np.float32).reshape(n, converter.spec.obs_dim),
        actions=np.asarray(rows["a"], np.float32).reshape(n, converter.spec.act_dim),
        rewards=np.asarray(rows["r"], np.float32),
        next_obs=np.asarray(rows["n"], np.float32).reshape(n, converter.spec.obs_dim),
        terminals=np.asarray(rows["t"], bool),
        truncateds=np.asarray(rows["u"], bool),
        episode_ids=np.asarray(rows["e"]),
        sources=np.asarray([source] * n),
        interventions=np.zeros(n, bool),
        episode_success=np.asarray(rows["s"], bool),
    )
    return transitions, episodes


def collect_sim_transitions(
    checkpoint,
    task: str,
    episodes: int,
    seed: int = 0,
    profile: str = "nominal",
    noise: float | None = None,
    converter=None,
    episode_seconds: float | None = None,
    exploration_std_max: float = LearnerConfig.exploration_std_max,
) -> Transitions:
    """Roll out the base policy in sim (train condition, seeds seed..): replay/EWC data.
    Exploration as ``policy_actions``."""
    from simreal_ros.sim.gym_env import ArmTaskEnv

    converter = converter or make_converter(checkpoint)
    kwargs = {} if episode_seconds is None else {"episode_seconds": episode_seconds}
    env = ArmTaskEnv(task=task, profile=profile, **kwargs)
    act = policy_actions(checkpoint.model.actor, noise, exploration_std_max)
    try:
        transitions, _ = rollout_transitions(
            env,
            converter,
            range(seed, seed + episodes),
            "train",
            act,
            episode_ids=[f"sim-{seed}-{e}" for e in range(episodes)],
        )
    finally:
        env.close()
    return transitions


# ---------------------------------------------------------------- candidates
@dataclasses.dataclass
class Candidate:
    version: str
    parent_version: str | None
    method: str
    adapter_dir: Path  # staging directory until committed
    metadata: dict[str, Any]
    metrics: dict[str, float]


@dataclasses.dataclass
class RoundResult:
    round: int
    candidate: Candidate
    decision: GateDecision
    stored: StoredVersion
    metrics: dict[str, float]


def actor_mean(actor, obs):
    return actor(obs)


def actor_sample(actor, obs):
    return actor.sample(obs)[0]


def twin_q(critic, obs, action):
    return critic(obs, action)


class LearnerSession:
    """State kept across rounds: base checkpoint, V_sim, critic, running adapter, store."""

    def __init__(
        self,
        config: LearnerConfig,
        checkpoint=None,
        sim_data: Transitions | None = None,
        store: AdapterStore | None = None,
    ) -> None:
        from simreal_ros.policy.checkpoint import load_checkpoint, shipped_checkpoint

        self.config = config
        torch.manual_seed(config.seed)
        if checkpoint is None:
            path = config.checkpoint_dir or str(shipped_checkpoint(config.task))
            checkpoint = load_checkpoint(path)
        self.checkpoint = checkpoint
        self.checkpoint_dir = Path(checkpoint.path) if checkpoint.path else None
        self.gamma = self._check_gamma(config.gamma, float(checkpoint.gamma))
        self.store = store or AdapterStore(config.store_root)
        self.store.clean_staging()
        self.round = 0
        self.log: list[dict[str, Any]] = []
        self.sim_data = sim_data
        self.monitor = ValueExploitMonitor(config.value_exploit_window)
        self._seen_episodes: set[str] = set()
        self.baseline_cache: dict = {}
        # Running version: what the store says is active (None = the base checkpoint).
        self.running_version = self.store.current()
        init = self.store.load(self.running_version).path if self.running_version else None
        self.actor_peft = lora.wrap(
            checkpoint.model.actor,
            config.lora_rank,
            config.lora_alpha,
            config.lora_dropout,
            config.lora_targets,
            init_adapter=init,
        )
        self.running_state = lora.adapter_state(self.actor_peft)
        self.base_actor: torch.nn.Module | None = None
        if config.method in ACTOR_CRITIC_METHODS and config.anchor_weight > 0:
            self.base_actor = checkpoint.model.actor  # lora.wrap worked on a copy
        self.v_sim: FrozenSimValue | None = None
        if config.method == "sgft":
            self.v_sim = FrozenSimValue(
                checkpoint.model.actor,
                checkpoint.model.critic,
                actor_mean,
                twin_q,
                actor_sample,
                config.v_sim_action_samples,
                seed=config.seed,
            )
        self.critic_warning = self._check_critic_trained()
        self.reward_scale = 1.0
        self._scale_source = "constant 1 (bc trains on no reward)"
        if self.sim_data is not None and self.v_sim is not None:
            self.v_sim.annotate(self.sim_data)
        # Fixed once, the same rule for every method (see the settings' descriptions).
        self.failure_value: float | None = config.failure_value or None
        if self.failure_value is None and self.sim_data is not None and len(self.sim_data):
            self.failure_value = self._auto_failure_value(self.sim_data)
        if config.method in ACTOR_CRITIC_METHODS:
            self.reward_scale, self._scale_source = self._fixed_scale()
        self._real_transitions_seen = 0
        self.critic = self._make_critic() if config.method in ACTOR_CRITIC_METHODS else None
        # The best available model of the arm (a profile YAML), and how it was obtained.
        self.identified_profile: str = config.identified_profile
        self.identification: dict[str, Any] = {}
        self.sysid_data: Transitions | None = None  # method sysid: identified-sim episodes
        self.tuner: ActorCriticFineTuner | None = None
        self.ewc: ElasticWeightConsolidation | None = None
        if config.learning_rate > config.learning_rate_cap:
            log.warning(
                "learning_rate %.3g clipped to the cap %.3g",
                config.learning_rate,
                config.learning_rate_cap,
            )

    # -------------------------------------------------------------- setup
    @staticmethod
    def _check_gamma(configured: float, pretraining: float) -> float:
        if configured and abs(configured - pretraining) > 1e-9:
            raise ValueError(
                f"gamma {configured} differs from the checkpoint's pretraining gamma "
                f"{pretraining}; V_sim and the shaped reward need the same gamma. Set gamma "
                "to 0 (take it from the checkpoint) or to the same value."
            )
        return pretraining

    def _check_critic_trained(self) -> str:
        """V_sim (and an RL warm start) need critics that pretraining actually trained."""
        training = (self.checkpoint.metadata or {}).get("training", {}) or {}
        if training.get("sac_steps") == 0 and not training.get("critic_steps"):
            uses = self.config.method == "sgft" or self.config.resolved_critic_init != "fresh"
            if uses:
                warning = (
                    f"checkpoint {self.checkpoint.version}: its critics were never trained "
                    "(training.sac_steps = 0), so V_sim / the critic warm start carry no value "
                    "information; pretrain with SAC steps (or refit the critics in sim) first."
                )
                log.warning(warning)
                return warning
        return ""

    def _auto_failure_value(self, data: Transitions) -> float:
        values = None
        if data.v_sim is not None and data.v_sim_next is not None:
            values = np.concatenate([data.v_sim, data.v_sim_next])
        return auto_failure_value(data.rewards, values, self.gamma)

    def _fixed_scale(self) -> tuple[float, str]:
        if self.config.reward_scale > 0:
            return self.config.reward_scale, "configured"
        sim = self.sim_data
        if sim is None or len(sim) < 2:
            return 1.0, "1 (no sim data to fix it from)"
        rewards = with_failure_value(sim.rewards, sim.failures, self.gamma, self.failure_value)
        shaped = self.config.method == "sgft"
        scale = fixed_reward_scale(
            rewards,
            sim.v_sim if shaped else None,
            sim.v_sim_next if shaped else None,
            sim.terminals,
            self.gamma,
        )
        kind = "r~" if shaped else "r"
        return scale, f"1/std of {kind} over {len(sim)} sim transitions"

    def _make_critic(self) -> torch.nn.Module:
        arch = self.checkpoint.arch
        horizon = self.config.horizon_or_none if self.config.method == "sgft" else None
        init = self.config.resolved_critic_init
        if init == "fresh":
            return HorizonCritic(
                arch.obs_dim, arch.act_dim, horizon, arch.critic_hidden, layer_norm=True
            )
        if init == "sim_advantage":
            return SimAdvantageCritic(
                self.checkpoint.model.actor,
                self.checkpoint.model.critic,
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
        import copy

        critic = copy.deepcopy(self.checkpoint.model.critic)
        if init == "checkpoint_lora":
            critic = lora.wrap(
                critic, self.config.lora_rank, self.config.lora_alpha, self.config.lora_dropout
            )
        else:
            for p in critic.parameters():
                p.requires_grad_(True)
        return ColumnCritic(critic, self.reward_scale).train()

    def _make_ewc(self) -> ElasticWeightConsolidation | None:
        if not self.config.ewc:
            return None
        sim = self.sim_data
        if sim is None or len(sim) == 0:
            log.warning("EWC is on but there is no sim data to estimate the Fisher; EWC off.")
            return None
        rng = np.random.default_rng(self.config.seed)
        rows = rng.choice(len(sim), min(self.config.ewc_fisher_samples, len(sim)), replace=False)
        return ElasticWeightConsolidation(
            lora.trainable_parameters(self.actor_peft),
            lora.inner(self.actor_peft).distribution,
            torch.as_tensor(sim.obs[rows], dtype=torch.float32),
            self.config.ewc_weight,
        )

    @property
    def converter(self):
        """Observation/action conversions of the checkpoint (built once)."""
        if getattr(self, "_converter", None) is None:
            self._converter = make_converter(self.checkpoint)
        return self._converter

    def add_sim_data(self, sim: Transitions) -> None:
        """More sim transitions (e.g. sim episodes recorded by the graph) for replay/EWC."""
        if self.v_sim is not None and sim.v_sim is None:
            self.v_sim.annotate(sim)
        self.sim_data = (
            sim if self.sim_data is None else Transitions.concatenate([self.sim_data, sim])
        )

    # -------------------------------------------------------------- one round
    def training_data(self, real: Transitions | None) -> Transitions:
        parts = [p for p in (real, self.sim_data) if p is not None and len(p)]
        if not parts:
            raise ValueError("no transitions to train on: record episodes first.")
        data = Transitions.concatenate(parts)
        if self.v_sim is not None and (real is not None and len(real)):
            if real.v_sim is None:
                self.v_sim.annotate(real)
            data = Transitions.concatenate(parts)
        return data

    def finetune(
        self, real: Transitions | None, manifest: Sequence[dict] = (), version: str | None = None
    ) -> Candidate:
        """Train one candidate adapter from the running one and stage it in the store."""
        cfg = self.config
        started = time.time()
        if cfg.method == "sysid":
            real = self._identified_sim_episodes()  # no real transition reaches the update
        data = self.training_data(real)
        self.round += 1
        if self.ewc is None:
            self.ewc = self._make_ewc()
        if self.failure_value is None:  # no sim data: bound it by the data at hand
            self.failure_value = self._auto_failure_value(data)
        real_now = int(data.real_mask().sum())
        new_real = max(0, real_now - self._real_transitions_seen)
        self._real_transitions_seen = real_now
        updates = max(cfg.updates_per_round, math.ceil(cfg.update_to_data * new_real))
        metrics: dict[str, float] = {"updates": float(updates), "new_real_transitions": new_real}
        if cfg.method == "bc":
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
                seed=cfg.seed + self.round,
            )
            metrics.update(trainer.train(updates))
        else:
            if self.tuner is None:
                self.tuner = ActorCriticFineTuner(
                    self.actor_peft,
                    self.critic,
                    data,
                    gamma=self.gamma,
                    horizon=cfg.horizon_or_none if cfg.method == "sgft" else None,
                    shaping=cfg.method == "sgft",
                    reward_scale=self.reward_scale,
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
                    base_actor=self.base_actor,
                    anchor_weight=cfg.anchor_weight,
                    failure_value=self.failure_value,
                    entropy_backup=cfg.entropy_backup,
                )
            else:
                self.tuner.set_data(data, seed=cfg.seed + self.round)
            self.tuner.anchor_weight = self.anchor_weight(real_now)
            metrics["anchor_weight"] = self.tuner.anchor_weight
            if cfg.model_rollouts and cfg.method == "sgft" and real is not None and len(real):
                metrics.update(self._model_rollouts(real))
            metrics.update(self.tuner.train(updates))
        if self.v_sim is not None:
            self.v_sim.check_frozen()
            metrics.update(self._watch_value(real))
        metrics.update(self.forgetting_guards())
        metrics["round"] = float(self.round)
        metrics["train_seconds"] = time.time() - started
        version = version or self.store.next_version()
        staging = self.store.new_staging(version)
        lora.save(self.actor_peft, staging)
        metadata = self._metadata(version, data, manifest, metrics)
        from simreal_ros.policy.checkpoint import write_adapter_metadata

        metadata = write_adapter_metadata(
            staging, self.checkpoint, version, self.running_version, **metadata
        )
        self.log.append({"round": self.round, "version": version, **metrics})
        return Candidate(version, self.running_version, cfg.method, staging, metadata, metrics)

    # -------------------------------------------------------------- identified sim
    @property
    def screening_profile(self) -> str:
        """Screening runs in the best available model of the arm: the identified profile
        when there is one, else ``screen_profile`` (randomised by default)."""
        return self.identified_profile or self.config.screen_profile

    def identify(self, bags: Sequence[str | Path]) -> str | None:
        """System identification from the newest real bags; the profile, or None (and the
        reason in ``identification``) when they cannot be identified from."""
        from simreal_ros.sysid import FitSettings, SysidInputError, identify_bags
        from simreal_ros.sysid.output import identification_summary

        cfg = self.config
        if cfg.identified_profile:
            return cfg.identified_profile
        chosen = [str(b) for b in bags][-cfg.sysid_max_episodes :]
        # Named by time: a learner restarted by the loop counts its rounds from 1 again.
        out = (
            Path(cfg.store_root)
            / "sysid"
            / f"{time.strftime('%Y%m%d-%H%M%S')}-round{self.round + 1}"
        )
        settings = FitSettings(
            restarts=cfg.sysid_restarts,
            evaluations_per_restart=cfg.sysid_evaluations,
            evaluations_resample=max(20, cfg.sysid_evaluations // 2),
            threads=cfg.screen_workers,
            seed=cfg.seed + self.round,
        )
        started = time.time()
        try:
            if len(chosen) < 2:
                raise SysidInputError(f"{len(chosen)} real bags; identification needs 2.")
            result, profile = identify_bags(
                chosen, out, cfg.task, holdout=1 if len(chosen) >= 4 else 0, settings=settings
            )
        except (SysidInputError, ValueError) as error:
            self.identification = {"error": str(error), "profile": self.screening_profile}
            log.warning("identification failed, screening in %s: %s", self.screening_profile,
                        error)  # fmt: skip
            return None
        self.identified_profile = str(profile)
        self.identification = identification_summary(result.to_dict(), str(profile))
        log.info("identified dynamics from %d bags in %.0f s: %s", len(chosen),
                 time.time() - started, profile)  # fmt: skip
        return str(profile)

    def _identified_sim_episodes(self) -> Transitions:
        """method sysid: the running policy (exploring) in the identified sim, accumulated
        over rounds; the data the candidate is fine-tuned on."""
        from simreal_ros.sim.gym_env import ArmTaskEnv

        cfg = self.config
        if not self.identified_profile:
            raise ValueError(
                "method sysid needs an identified profile: record real episodes with "
                "/forward_position_controller/commands (the learner identifies from them) "
                "or set identified_profile to a `simreal sysid` profile.yaml."
            )
        env = ArmTaskEnv(task=cfg.task, profile=self.identified_profile)
        act = policy_actions(lora.inner(self.actor_peft), None, cfg.exploration_std_max)
        first = cfg.seed * 1_000_003 + 500_000 + self.round * cfg.sysid_sim_episodes
        seeds = range(first, first + cfg.sysid_sim_episodes)
        try:
            fresh, _ = rollout_transitions(
                env, self.converter, seeds, "train", act, source="identified_sim",
                episode_ids=[f"sysid-{s}" for s in seeds],
            )  # fmt: skip
        finally:
            env.close()
        # The target domain's data here (real_weight, the trust region's schedule).
        self.sysid_data = (
            fresh if self.sysid_data is None else Transitions.concatenate([self.sysid_data, fresh])
        )
        return self.sysid_data

    def anchor_weight(self, real_transitions: int) -> float:
        """The trust region's weight after this many real transitions: it halves at
        ``anchor_half_transitions``, so a critic fitted on more real data may correct the
        sim policy further (a constant weight caps every correction at ~1/(2w))."""
        cfg = self.config
        if cfg.anchor_half_transitions <= 0:
            return cfg.anchor_weight
        n0 = cfg.anchor_half_transitions
        return cfg.anchor_weight * n0 / (n0 + real_transitions)

    def _model_rollouts(self, real: Transitions) -> dict[str, float]:
        """Fit the dynamics model on all real data, then imagine short rollouts."""
        from simreal_ros.learner.dynamics_model import ModelRollouts

        cfg = self.config
        if getattr(self, "dynamics", None) is None:
            arch = self.checkpoint.arch
            self.dynamics = ModelRollouts(arch.obs_dim, arch.act_dim, seed=cfg.seed)
        loss = self.dynamics.fit(real, cfg.updates_per_round, cfg.batch_size)
        starts = max(1, cfg.batch_size // cfg.rollout_length)
        rollouts = self.dynamics.rollout(
            lora.inner(self.actor_peft), real, starts, cfg.rollout_length, self.v_sim
        )
        self.tuner.extra_batches = self.dynamics.batches(cfg.rollout_fraction)
        return {"dynamics_loss": loss, "model_transitions": float(len(rollouts))}

    def forgetting_guards(self) -> dict[str, float]:
        cfg = self.config
        out = {
            "sim_replay": float(cfg.sim_replay),
            "real_weight": cfg.real_weight,
            "sim_weight": cfg.sim_weight,
            "ewc": float(self.ewc is not None),
            "learning_rate": cfg.effective_learning_rate,
            "learning_rate_clipped": float(cfg.learning_rate > cfg.learning_rate_cap),
        }
        if self.ewc is not None:
            out.update(self.ewc.stats())
        return out

    def _watch_value(self, real: Transitions | None) -> dict[str, float]:
        """Per real episode: r, V_sim and r~; flag V_sim rising while real reward falls."""
        if real is None or real.v_sim is None:
            return {"reward_scale": self.reward_scale}
        shaped = shape_rewards(
            real.rewards,
            real.v_sim,
            real.v_sim_next,
            real.terminals,
            self.gamma,
            self.reward_scale,
        )
        for episode_id, start, stop in real.episode_boundaries():
            if episode_id in self._seen_episodes:
                continue
            self._seen_episodes.add(episode_id)
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
        flag = self.monitor.flag()
        if flag:
            log.warning(flag)
        self.value_flag = flag
        return {"reward_scale": self.reward_scale, "value_exploit_flag": float(bool(flag))}

    def _metadata(self, version, data: Transitions, manifest, metrics) -> dict[str, Any]:
        cfg = self.config
        return {
            "method": cfg.method,
            "round": self.round,
            "created": time.time(),
            "hyperparameters": dataclasses.asdict(cfg),
            "gamma": self.gamma,
            "horizon": cfg.horizon_or_none,
            "reward_scale": self.reward_scale,
            "reward_scale_source": self._scale_source,
            "failure_value": self.failure_value,
            "data_manifest": {
                "episodes": list(manifest),
                "transitions_by_source": data.counts_by_source(),
                "real_sources": list(REAL_SOURCES),
            },
            "metrics": {k: float(v) for k, v in metrics.items()},
            "value_exploit_flag": getattr(self, "value_flag", ""),
            # Where the candidate is screened (and, method sysid, trained): how it was found.
            "screening_profile": self.screening_profile,
            "identification": self.identification,
            "critic_warning": self.critic_warning,
            # Per real episode: return, mean V_sim, shaped return (SGFT only).
            "value_watch": self.monitor.episodes[-50:],
            "checkpoint_dir": str(self.checkpoint_dir) if self.checkpoint_dir else "",
        }

    # -------------------------------------------------------------- gate and store
    def screen(self, candidate: Candidate, evaluator: Evaluator) -> GateDecision:
        cfg = self.config
        running = self.store.load(self.running_version).path if self.running_version else None
        seeds = [cfg.screen_first_seed + i for i in range(cfg.screen_seeds)]
        return gate_screen(
            evaluator,
            self.checkpoint_dir,
            candidate.adapter_dir,
            running,
            cfg.screen_conditions,
            seeds,
            cfg.promote_ci_low,
            cfg.promote_tolerance,
            self.screening_profile,
            self.baseline_cache,
            gate_settings(cfg),
        )

    def commit(self, candidate: Candidate, decision: GateDecision) -> StoredVersion:
        """Store the candidate with its decision; activate it if promoted, else drop it."""
        stored = self.store.commit(
            candidate.adapter_dir, candidate.version, candidate.metadata, decision.to_dict()
        )
        if decision.promoted:
            self.store.activate(candidate.version, "promoted")
            self.running_version = candidate.version
            self.running_state = lora.adapter_state(self.actor_peft)
            # The base's screening stays valid; the old running version's is not needed.
            self.baseline_cache = {k: v for k, v in self.baseline_cache.items() if k[0] == "None"}
        else:
            # Continue from the running adapter, not from the rejected one.
            lora.set_adapter_weights(self.actor_peft, self.running_state)
        return stored

    def discard(self, candidate: Candidate) -> None:
        self.store.discard(candidate.adapter_dir)
        lora.set_adapter_weights(self.actor_peft, self.running_state)

    def run_round(
        self, real: Transitions | None, evaluator: Evaluator, manifest: Sequence[dict] = ()
    ) -> RoundResult:
        candidate = self.finetune(real, manifest)
        try:
            decision = self.screen(candidate, evaluator)
        except BaseException:
            self.discard(candidate)
            raise
        stored = self.commit(candidate, decision)
        log.info("round %d: %s %s", self.round, candidate.version, decision.reason)
        return RoundResult(self.round, candidate, decision, stored, candidate.metrics)


# ---------------------------------------------------------------- evaluation in sim
def gate_settings(config: LearnerConfig) -> GateSettings:
    """The gate's thresholds from the learner's settings."""
    return GateSettings(
        rule=config.gate_rule,
        success_floor=config.promote_success_floor,
        ci_low=config.promote_ci_low,
        tolerance=config.promote_tolerance,
        max_intervention_rate=config.screen_max_intervention_rate,
        max_saturated_share=config.screen_max_saturated_share,
        max_divergence=config.screen_max_divergence,
    )


def policy_evaluator(config: LearnerConfig, profile: Callable[[], str] | None = None) -> Evaluator:
    """The gate's evaluator: the policy package's parallel spawned-worker sim evaluation
    (the deployed, merged form of base + adapter, with the adapter's checksum checked) in
    ``screen_profile`` (a shipped name or a profile YAML, e.g. an identified one). An
    adapter's actions are compared with the base's on its own states (divergence)."""
    from simreal_ros.policy.evaluate import PolicySource, evaluate_policy

    def evaluate(checkpoint_dir, adapter_dir, condition, seeds) -> EvaluationSummary:
        source = PolicySource(
            str(checkpoint_dir), None if adapter_dir is None else str(adapter_dir)
        )
        result = evaluate_policy(
            source,
            profile=profile() if profile else config.screen_profile,
            condition=condition,
            seeds=list(seeds),
            workers=config.screen_workers,
            safety_filter=config.screen_safety_filter,
            reference=None if adapter_dir is None else PolicySource(str(checkpoint_dir)),
        )
        return summary_from_evaluation(result)

    return evaluate


def summary_from_evaluation(result) -> EvaluationSummary:
    """``simreal_ros.policy.evaluate.EvaluationResult`` -> the gate's summary (divergence:
    the step-weighted mean over the episodes that measured it)."""
    records = result.records
    compared = [r for r in records if r.divergence is not None and r.action_components]
    weight = sum(r.action_components for r in compared)
    divergence = (
        sum(r.divergence * r.action_components for r in compared) / weight if weight else None
    )
    return EvaluationSummary(
        episodes=int(result.episodes),
        successes=int(result.successes),
        mean_return=float(result.mean_return),
        per_seed_success=[bool(r.success) for r in records],
        steps=sum(int(r.length) for r in records),
        intervened_steps=sum(int(r.intervened_steps) for r in records),
        action_components=sum(int(r.action_components) for r in records),
        saturated_actions=sum(int(r.saturated_actions) for r in records),
        nonfinite_steps=sum(int(r.nonfinite_steps) for r in records),
        divergence=divergence,
    )


# ---------------------------------------------------------------- one-shot API
def finetune(
    method: str,
    checkpoint_dir: str | Path,
    episodes: Transitions | str | Path | Iterable[str | Path] | None,
    sim_data: Transitions | None = None,
    config: LearnerConfig | None = None,
) -> tuple[LearnerSession, Candidate]:
    """One fine-tuning run; returns the session (for screen/commit) and the candidate."""
    from simreal_ros.config_schema import from_mapping

    base = dataclasses.asdict(config) if config else {}
    base.update(method=method, checkpoint_dir=str(checkpoint_dir))
    cfg = from_mapping(LearnerConfig, base)
    session = LearnerSession(cfg, sim_data=sim_data)
    manifest: list[dict] = []
    if episodes is None or isinstance(episodes, Transitions):
        real = episodes
    else:
        real, manifest = load_episodes(episodes, session.checkpoint)
    return session, session.finetune(real, manifest)


def screen(session: LearnerSession, candidate: Candidate, evaluator: Evaluator | None = None):
    """Gate ``candidate`` and store it with its decision; returns (decision, stored)."""
    evaluator = evaluator or policy_evaluator(session.config, lambda: session.screening_profile)
    decision = session.screen(candidate, evaluator)
    return decision, session.commit(candidate, decision)
