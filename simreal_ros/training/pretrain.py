"""Pretraining in sim: expert demonstrations, DAgger, then SAC with a BC regulariser.

Why this route: on a couple of CPU cores, SAC from scratch on push needs far more steps
than we can afford. The scripted expert (privileged IK controller) labels any state, so:

1. ``demos``: expert episodes in the training profile (``randomized`` by default) fix the
   observation normalisation and seed the dataset.
2. ``dagger``: roll out the actor (mixed with the expert with a decaying probability),
   label every visited state with the expert's action, retrain BC on everything.
3. ``sac``: off-policy actor-critic with twin critics and an automatically tuned entropy
   temperature, on all data collected so far plus new stochastic rollouts. The actor
   loss is SAC's plus ``bc_weight`` x the squared error to the expert label of the same
   state (TD3+BC style), so the critics (V_sim for SGFT) learn while the actor keeps the
   expert's competence. Rewards are the env's dense reward, gamma fixed and recorded.

Actions are normalised deltas (see ``spec.py``); the env receives absolute targets via
the same ``SpecConverter`` the node uses. State for ``--resume`` lives in
``<out>/train_state/`` (torch tensors loaded with ``weights_only=True``, numpy arrays
without pickle).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from simreal_ros.config_schema import setting, validate
from simreal_ros.policy.spec import SpecConverter, default_spec
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.training.model import ActorCritic, Architecture, soft_update
from simreal_ros.training.torch_checkpoint import save_checkpoint

STATE_DIR = "train_state"


@dataclasses.dataclass
class PretrainConfig:
    task: str = setting("push", "task to learn", choices=("push", "reach"))
    profile: str = setting(
        "randomized",
        "dynamics profile to train in: nominal, randomized or a YAML path (for example an "
        "identified profile); never a stand-in, which plays the arm and stays hidden",
    )
    seed: int = setting(0, "seed of networks, rollouts and episode seeds", low=0)
    demo_episodes: int = setting(150, "expert episodes before DAgger", low=1)
    dagger_iterations: int = setting(8, "DAgger rounds", low=0)
    dagger_episodes: int = setting(40, "policy episodes per DAgger round", low=1)
    bc_steps: int = setting(1500, "BC gradient steps after demos and per DAgger round", low=1)
    sac_steps: int = setting(20000, "SAC gradient steps (one env step each)", low=0)
    batch_size: int = setting(256, "minibatch size", low=8)
    hidden: int = setting(256, "width of the two hidden layers (actor and critics)", low=8)
    gamma: float = setting(0.99, "discount", low=0.0, high=1.0)
    learning_rate: float = setting(3e-4, "Adam learning rate", low=1e-6, high=1e-1)
    tau: float = setting(0.005, "target critic averaging rate", low=0.0, high=1.0)
    bc_weight: float = setting(2.0, "weight of the expert-label term in the SAC actor loss")
    actor_rl_weight: float = setting(
        0.0,
        "weight of SAC's term (alpha log pi - Q, scaled by mean |Q|) in the actor loss; 0 "
        "keeps the actor on the expert labels and the critics evaluate it (TD3-style "
        "smoothed deterministic targets)",
        low=0.0,
    )
    exploration_noise: float = setting(
        0.1, "std of the Gaussian added to the actor's action in critic-only rollouts", low=0.0
    )
    initial_alpha: float = setting(0.02, "initial entropy temperature", low=0.0)
    exploration_log_std: float = setting(-1.6, "initial log std of the actor's Gaussian")
    save_every: int = setting(2500, "SAC steps between checkpoints", low=1)
    control_rate_hz: float = setting(20.0, "control rate of the policy", low=1.0, high=1000.0)
    capacity: int = setting(300_000, "replay capacity (transitions)", low=1000)

    def __post_init__(self) -> None:
        validate(self)
        from simreal_ros.sim.profiles import load_profile

        if load_profile(self.profile).is_stand_in:
            raise ValueError(
                f"profile {self.profile!r} is a stand-in for the arm (stand_in: true): "
                "training must never see it. Pretrain in nominal, randomized or your own "
                "profile."
            )


class Replay:
    """Transitions as raw observation vectors; every state carries the expert's label."""

    FIELDS = ("obs", "next_obs", "action", "expert", "reward", "terminal")

    def __init__(self, capacity: int, obs_dim: int, act_dim: int) -> None:
        self.capacity = capacity
        self.size = 0
        self.position = 0
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.action = np.zeros((capacity, act_dim), np.float32)
        self.expert = np.zeros((capacity, act_dim), np.float32)
        self.reward = np.zeros(capacity, np.float32)
        self.terminal = np.zeros(capacity, np.float32)

    def add(self, obs, next_obs, action, expert, reward, terminal) -> None:
        i = self.position
        self.obs[i], self.next_obs[i] = obs, next_obs
        self.action[i], self.expert[i] = action, expert
        self.reward[i], self.terminal[i] = reward, float(terminal)
        self.position = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        index = rng.integers(0, self.size, size=n)
        return {name: getattr(self, name)[index] for name in self.FIELDS}

    def save(self, path: Path) -> None:
        arrays = {name: getattr(self, name)[: self.size] for name in self.FIELDS}
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, position=np.array(self.position), **arrays)
        os.replace(tmp, path)

    def load(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as data:
            size = data["obs"].shape[0]
            for name in self.FIELDS:
                getattr(self, name)[:size] = data[name]
            self.size = size
            self.position = int(data["position"])


@dataclasses.dataclass
class Progress:
    phase: str = "demos"  # demos -> dagger -> sac -> done
    dagger_round: int = 0
    sac_step: int = 0
    env_steps: int = 0
    episodes: int = 0
    next_seed: int = 0
    wall_time_s: float = 0.0
    history: list = dataclasses.field(default_factory=list)


class Pretrainer:
    def __init__(
        self,
        config: PretrainConfig,
        out: str | Path,
        command: str = "",
        *,
        robot: RobotDescription,
    ) -> None:
        """Trains a policy for ``robot`` (the arm the checkpoint is for)."""
        from simreal_ros.robot.kinematics import ToolKinematics
        from simreal_ros.sim.expert import make_expert
        from simreal_ros.sim.gym_env import ArmTaskEnv

        self.config = config
        self.out = Path(out)
        self.command = command
        self.robot = robot
        torch.manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        self.env = ArmTaskEnv(
            task=config.task,
            profile=config.profile,
            condition="train",
            control_rate_hz=config.control_rate_hz,
            robot=robot,
        )
        self.expert = make_expert(config.task, self.robot, config.control_rate_hz)
        self.spec = default_spec(self.robot, config.task, config.control_rate_hz)
        kinematics = ToolKinematics.for_robot(robot) if self.spec.needs_kinematics else None
        self.converter = SpecConverter(self.spec, kinematics)
        hidden = (config.hidden, config.hidden)
        self.arch = Architecture(self.spec.obs_dim, self.spec.act_dim, hidden, hidden)
        self.model = ActorCritic(self.arch)
        with torch.no_grad():  # start exploration narrow; SAC tunes it from here
            self.model.actor.log_std_head.weight.zero_()
            self.model.actor.log_std_head.bias.fill_(config.exploration_log_std)
        self.target_critic = copy.deepcopy(self.model.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(np.log(max(config.initial_alpha, 1e-8)), requires_grad=True)
        self.actor_opt = torch.optim.Adam(self.model.actor.parameters(), lr=config.learning_rate)
        self.critic_opt = torch.optim.Adam(self.model.critic.parameters(), lr=config.learning_rate)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.learning_rate)
        self.target_entropy = -float(self.spec.act_dim)
        self.replay = Replay(config.capacity, self.spec.obs_dim, self.spec.act_dim)
        self.progress = Progress(next_seed=config.seed * 1_000_000)
        self._started = time.perf_counter()
        self._wall_before = 0.0
        self.recent: list[tuple[float, bool]] = []

    # --- data ---------------------------------------------------------------------

    def _set_statistics(self) -> None:
        data = self.replay.obs[: self.replay.size].astype(np.float64)
        self.spec = self.spec.with_statistics(data.mean(0), data.std(0))
        self.converter = SpecConverter(self.spec, self.converter.forward_kinematics)

    def _normalize(self, raw: np.ndarray) -> torch.Tensor:
        """The spec's normalisation (``SpecConverter.normalize``), as a float32 tensor."""
        return torch.as_tensor(self.converter.normalize(raw), dtype=torch.float32)

    def rollout(self, mode: str, expert_probability: float = 0.0) -> tuple[float, bool]:
        """One episode; every visited state is stored with the expert's label.

        mode: "expert" (execute expert labels), "policy" (deterministic actor, mixed with
        the expert with ``expert_probability`` per step), "explore" (stochastic actor).
        """
        seed = self.progress.next_seed
        self.progress.next_seed += 1
        observation, _ = self.env.reset(seed=seed, options={"condition": "train"})
        self.expert.reset()
        total, success, done = 0.0, False, False
        vector = self.converter.observation_vector(observation)
        while not done:
            q = np.asarray(observation["joint_position"], dtype=np.float64)
            label = self.converter.action_from_command(self.expert.act(observation), q)
            if mode == "expert" or (mode == "policy" and self.rng.random() < expert_probability):
                action = label
            else:
                with torch.no_grad():
                    obs_t = self._normalize(vector)
                    if mode == "explore" and self.config.actor_rl_weight > 0:
                        action = self.model.actor.sample(obs_t)[0].numpy().astype(np.float64)
                    elif mode == "explore":
                        action = self.model.actor(obs_t).numpy().astype(np.float64)
                        noise = self.rng.normal(0.0, self.config.exploration_noise, action.shape)
                        action = np.clip(action + noise, -1.0, 1.0)
                    else:
                        action = self.model.actor(obs_t).numpy().astype(np.float64)
            target = self.converter.command_from_action(action, q)
            executed = self.converter.action_from_command(target, q)  # after clipping
            observation, reward, terminated, truncated, info = self.env.step(target)
            next_vector = self.converter.observation_vector(observation)
            self.replay.add(vector, next_vector, executed, label, reward, terminated)
            vector = next_vector
            total += float(reward)
            success = success or bool(info["success"])
            done = terminated or truncated
            self.progress.env_steps += 1
        self.progress.episodes += 1
        self.recent = ([*self.recent, (total, success)])[-50:]
        return total, success

    # --- learning -----------------------------------------------------------------

    def _batch(self) -> dict[str, torch.Tensor]:
        raw = self.replay.sample(self.rng, self.config.batch_size)
        batch = {k: torch.as_tensor(v) for k, v in raw.items() if k not in ("obs", "next_obs")}
        batch["obs"] = self._normalize(raw["obs"])
        batch["next_obs"] = self._normalize(raw["next_obs"])
        return batch

    def bc_step(self) -> float:
        batch = self._batch()
        loss = nn.functional.mse_loss(self.model.actor(batch["obs"]), batch["expert"])
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        return float(loss.detach())

    def sac_step(self) -> dict[str, float]:
        batch = self._batch()
        actor, critic = self.model.actor, self.model.critic
        rl_weight = self.config.actor_rl_weight
        alpha = self.log_alpha.exp().detach() if rl_weight > 0 else torch.tensor(0.0)
        with torch.no_grad():
            if rl_weight > 0:
                next_action, next_log_prob = actor.sample(batch["next_obs"])
            else:
                # Evaluate the deterministic actor: smoothed target action, no entropy.
                mean = actor(batch["next_obs"])
                noise = (torch.randn_like(mean) * 0.1).clamp(-0.25, 0.25)
                next_action, next_log_prob = (mean + noise).clamp(-1.0, 1.0), 0.0
            q1_t, q2_t = self.target_critic(batch["next_obs"], next_action)
            next_value = torch.minimum(q1_t, q2_t) - alpha * next_log_prob
            target = batch["reward"] + self.config.gamma * (1 - batch["terminal"]) * next_value
        q1, q2 = critic(batch["obs"], batch["action"])
        critic_loss = nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        bc = nn.functional.mse_loss(actor(batch["obs"]), batch["expert"])
        actor_loss = self.config.bc_weight * bc
        q_mean = 0.0
        if rl_weight > 0:
            action, log_prob = actor.sample(batch["obs"])
            q1_pi, q2_pi = critic(batch["obs"], action)
            q_pi = torch.minimum(q1_pi, q2_pi)
            q_scale = q_pi.abs().mean().detach().clamp_min(1e-3)
            actor_loss = actor_loss + rl_weight * (alpha * log_prob - q_pi).mean() / q_scale
            q_mean = float(q_pi.detach().mean())
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        if rl_weight > 0:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()

        soft_update(self.target_critic, critic, self.config.tau)
        with torch.no_grad():
            if rl_weight <= 0:
                q_mean = float(torch.minimum(q1, q2).mean())
        return {"critic": float(critic_loss.detach()), "bc": float(bc.detach()), "q": q_mean}

    # --- the schedule ---------------------------------------------------------------

    def total_units(self) -> int:
        c = self.config
        return c.demo_episodes + c.dagger_iterations + c.sac_steps

    def done_units(self) -> int:
        p, c = self.progress, self.config
        if p.phase == "demos":
            return 0
        return c.demo_episodes + p.dagger_round + p.sac_step

    def run(self, bar: Any = None) -> Path:
        c, p = self.config, self.progress

        def update_bar(n: int, **extra: Any) -> None:
            if bar is None:
                return
            returns = [r for r, _ in self.recent] or [0.0]
            wins = [s for _, s in self.recent] or [False]
            bar.set_postfix(
                phase=p.phase,
                ret=f"{np.mean(returns):.2f}",
                success=f"{np.mean(wins):.0%}",
                **extra,
            )
            bar.update(n)

        if p.phase == "demos":
            for _ in range(c.demo_episodes):
                self.rollout("expert")
                update_bar(1)
            self._set_statistics()
            for _ in range(c.bc_steps):
                self.bc_step()
            p.phase = "dagger"
            self.save()
        while p.phase == "dagger" and p.dagger_round < c.dagger_iterations:
            mix = max(0.0, 0.5 - 0.15 * p.dagger_round)
            self.recent = []
            for _ in range(c.dagger_episodes):
                self.rollout("policy", expert_probability=mix)
            loss = 0.0
            for _ in range(c.bc_steps):
                loss = self.bc_step()
            p.history.append(
                {
                    "phase": "dagger",
                    "round": p.dagger_round,
                    "expert_mix": mix,
                    "success": float(np.mean([s for _, s in self.recent])),
                    "return": float(np.mean([r for r, _ in self.recent])),
                    "bc_loss": loss,
                }
            )
            p.dagger_round += 1
            update_bar(1, bc=f"{loss:.4f}")
            self.save()
        if p.phase == "dagger":
            p.phase = "sac"
            self.save()
        if p.phase == "sac":
            self.recent = []
            losses: dict[str, float] = {}
            while p.sac_step < c.sac_steps:
                # One exploratory episode, then as many updates as it had steps.
                before = p.env_steps
                self.rollout("explore")
                steps = min(p.env_steps - before, c.sac_steps - p.sac_step)
                for _ in range(steps):
                    losses = self.sac_step()
                    p.sac_step += 1
                    if p.sac_step % c.save_every == 0:
                        self.save()
                update_bar(steps, **{k: f"{v:.3f}" for k, v in losses.items()})
            p.history.append({"phase": "sac", "steps": p.sac_step, **losses})
            p.phase = "done"
        self.save()
        return self.out

    # --- saving and resuming ----------------------------------------------------------

    def wall_time(self) -> float:
        return self._wall_before + time.perf_counter() - self._started

    def training_record(self) -> dict[str, Any]:
        c, p = self.config, self.progress
        return {
            "command": self.command,
            "robot": self.robot.name,
            "seed": c.seed,
            "config": dataclasses.asdict(c),
            "data": {
                "source": "simreal_ros.sim.expert (scripted IK expert) labels + own rollouts",
                "profile": c.profile,
                "condition": "train",
                "episodes": p.episodes,
                "env_steps": p.env_steps,
                "transitions_kept": self.replay.size,
                "episode_seeds": [c.seed * 1_000_000, p.next_seed - 1],
            },
            "reward": {"kind": "dense", "terminate_on_success": True, "gamma": c.gamma},
            "method": self.method(),
            "phase": p.phase,
            "sac_steps": p.sac_step,
            "history": p.history,
            "wall_time_s": round(self.wall_time(), 1),
            "versions": {
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
        }

    def method(self) -> str:
        if self.config.actor_rl_weight > 0:
            return (
                "BC on expert demos + DAgger, then SAC (twin critics, tuned entropy) with a "
                f"BC term (bc_weight {self.config.bc_weight}, rl_weight "
                f"{self.config.actor_rl_weight})"
            )
        return (
            "BC on expert demos + DAgger, then off-policy twin-critic learning of the actor's "
            "value (TD3-style smoothed targets) while the actor keeps training on expert "
            "labels of every visited state (no RL term in the actor loss)"
        )

    def value_statistics(self) -> dict[str, float]:
        if self.replay.size == 0:
            return {}
        index = self.rng.integers(0, self.replay.size, size=min(4096, self.replay.size))
        obs = self._normalize(self.replay.obs[index])
        values = self.model.v_sim(obs)
        return {
            "mean": float(values.mean()),
            "std": float(values.std()),
            "min": float(values.min()),
            "max": float(values.max()),
        }

    def save(self) -> None:
        self.model.eval()
        save_checkpoint(
            self.out,
            self.model,
            self.spec,
            version=f"{self.config.task}-base",
            gamma=self.config.gamma,
            training=self.training_record(),
            extra={"value_statistics": self.value_statistics()},
        )
        self.model.train()
        state_dir = self.out / STATE_DIR
        staging = self.out / (STATE_DIR + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        torch.save(
            {
                "model": self.model.state_dict(),
                "target_critic": self.target_critic.state_dict(),
                "log_alpha": self.log_alpha.detach().clone(),
                "actor_opt": self.actor_opt.state_dict(),
                "critic_opt": self.critic_opt.state_dict(),
                "alpha_opt": self.alpha_opt.state_dict(),
                "torch_rng": torch.get_rng_state(),
            },
            staging / "state.pt",
        )
        self.replay.save(staging / "replay.npz")
        progress = dataclasses.asdict(self.progress)
        progress["wall_time_s"] = self.wall_time()
        progress["numpy_rng"] = self.rng.bit_generator.state
        progress["config"] = dataclasses.asdict(self.config)
        progress["spec"] = self.spec.to_dict()
        (staging / "progress.json").write_text(json.dumps(progress, indent=1))
        shutil.rmtree(state_dir, ignore_errors=True)
        os.replace(staging, state_dir)

    def resume(self) -> None:
        from simreal_ros.policy.spec import PolicySpec

        state_dir = self.out / STATE_DIR
        if not (state_dir / "progress.json").is_file():
            raise FileNotFoundError(
                f"nothing to resume: {state_dir}/progress.json is missing; run without --resume."
            )
        progress = json.loads((state_dir / "progress.json").read_text())
        saved = progress.pop("config")
        mismatched = [
            k
            for k, v in saved.items()
            if k not in ("sac_steps", "save_every") and getattr(self.config, k) != v
        ]
        if mismatched:
            raise ValueError(
                f"--resume with different settings ({', '.join(mismatched)}) than the run in "
                f"{self.out}; use the same settings (only --steps may grow)."
            )
        self.spec = PolicySpec.from_dict(progress.pop("spec"))
        self.converter = SpecConverter(self.spec, self.converter.forward_kinematics)
        self.rng.bit_generator.state = progress.pop("numpy_rng")
        self._wall_before = float(progress.pop("wall_time_s"))
        self.progress = Progress(**progress)
        if self.progress.phase == "done" and self.progress.sac_step < self.config.sac_steps:
            self.progress.phase = "sac"
        state = torch.load(state_dir / "state.pt", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.target_critic.load_state_dict(state["target_critic"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        torch.set_rng_state(state["torch_rng"])
        self.replay.load(state_dir / "replay.npz")
