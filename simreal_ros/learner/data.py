"""The learner's data: episode bags and sim rollouts as Transitions in the actor's coordinates.

- ``load_episodes(paths, checkpoint)``: recorded episode bags plus a manifest of them;
- ``rollout_transitions(env, converter, seeds, condition, act)``: sim episodes under an
  action rule (``policy_actions``, ``expert_actions``), run by the sim core's ``rollout``;
- ``collect_sim_transitions(checkpoint, task, episodes)``: the base policy's sim episodes
  (replay / EWC data).
"""

from __future__ import annotations

import numpy as np
import torch

from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.replay import Transitions
from simreal_ros.robot.description_record import RobotDescription


def transitions_from_dataset(data, converter, success_by_episode: dict[str, bool]) -> Transitions:
    """Episode-bag steps (``RecordedSteps``: SI units, dict obs) -> the actor's normalised
    coordinates."""
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


def load_episodes(paths, checkpoint, converter) -> tuple[Transitions | None, list[dict]]:
    """Read episode bags into Transitions plus a data manifest (which bags and episodes);
    ``converter``: the checkpoint's ``SpecConverter`` on the arm the bags were recorded on."""
    from simreal_ros.episodes.dataset import find_bags, load_transitions, read_episode_metadata

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


class ActionRuleActor:
    """An action rule ``act(obs, normalized_obs, rng)`` as a rollout actor (commands in SI
    units); ``normalized`` is the normalised observation of the last ``act``."""

    def __init__(self, converter, rule, rng: np.random.Generator) -> None:
        self.converter, self.rule, self.rng = converter, rule, rng
        self.normalized: np.ndarray | None = None

    def act(self, obs) -> np.ndarray:
        self.normalized = self.converter.normalized_observation(obs)
        action = self.rule(obs, self.normalized, self.rng)
        return self.converter.command_from_action(action, obs["joint_position"])


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
    from simreal_ros.sim.rollout import rollout

    rows: dict[str, list] = {k: [] for k in ("o", "a", "r", "n", "t", "u", "e", "s")}
    episodes = []
    seeds = [int(s) for s in episode_seeds]
    ids = list(episode_ids) if episode_ids is not None else [f"ep-{s}" for s in seeds]
    for seed, episode_id in zip(seeds, ids, strict=True):
        actor = ActionRuleActor(converter, act, np.random.default_rng(seed))

        def record(step, actor=actor, episode_id=episode_id) -> None:
            q = step.observation["joint_position"]
            rows["o"].append(actor.normalized)
            rows["a"].append(converter.action_from_command(step.command, q))
            rows["r"].append(step.reward)
            rows["n"].append(converter.normalized_observation(step.next_observation))
            rows["t"].append(step.terminated)
            rows["u"].append(step.truncated and not step.terminated)
            rows["e"].append(episode_id)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            outcome = rollout(env, actor, seed, condition, record)
        rows["s"] += [outcome.success] * outcome.steps
        episodes.append((episode_id, outcome.steps, outcome.success))
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
    *,
    robot: RobotDescription,
) -> Transitions:
    """Roll out the base policy in sim on ``robot`` (train condition, seeds seed..):
    replay/EWC data. Exploration as ``policy_actions``."""
    from simreal_ros.policy.spec import SpecConverter
    from simreal_ros.sim.gym_env import ArmTaskEnv

    converter = converter or SpecConverter.for_robot(checkpoint.spec, robot)
    kwargs = {} if episode_seconds is None else {"episode_seconds": episode_seconds}
    env = ArmTaskEnv(task=task, profile=profile, robot=robot, **kwargs)
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
