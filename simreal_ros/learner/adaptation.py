"""Sim-side adaptation: adapt the running policy in the identified simulator, at scale.

The hybrid pipeline's middle step (DESIGN.md, "The loop it exists for"): after system
identification has fitted the arm's dynamics from its bags, the policy is re-trained in
the identified simulator before the arm spends any more time on it.

1. ``adaptation_profile``: the identified profile with narrow randomisation around each
   identified value (its restart spread from ``sysid.json`` beside it, at least a floor),
   the values the data bound but do not fix over the range identification gave them, and
   the unidentified parameters drawn from the prior (``randomized``), the way the
   identification writes them.
2. ``search_teacher``: the scripted teacher's settings (``sim.expert.ExpertTuning``) are
   re-tuned by a race over a grid in that simulator, at each per-tick step the student
   may run with (``step_choices``: the base's action scale, the running version's, and
   the arm joints' velocity limit): the teacher must be able to show what the student
   can do. An arm that follows its targets slowly needs the wider step; the chosen step
   becomes the candidate's (``action_scale`` in its metadata, ``policy.spec.version_spec``).
   The running policy runs the race too, on the same seeds; where it already matches
   the best teacher, imitation would only pull it down, and it stands unchanged.
3. ``dagger``: the project's own sim training recipe (``training.pretrain``'s DAgger: roll
   out the student mixed with the teacher with a decaying probability, label every
   visited state with the teacher's action, behaviour-clone on everything) on the
   running policy's LoRA adapter, starting from it. Episodes mix the training and the
   shifted start conditions, so shifted starts are covered at no arm cost.
4. optionally (the learner's ``adapt.polish_rounds``), ``sim_polish.polish``: an RL step
   on the task's reward from the DAgger student in the same profile, kept only where it
   beats that student there.

``sac_finetune`` does the arm-data step (method rl/sgft on the arm's own episodes, anchored
to the adapted policy, in its units).

Every profile read here is refused if it is a stand-in (``stand_in: true``): adaptation
never sees the stand-in's dynamics, only what identification made of its bags.

Sim work is a ``map`` over picklable items (one episode each, its seed inside) on one
``simreal_ros.executor`` executor: local processes by default, or the caller's (Ray).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from simreal_ros.learner import lora
from simreal_ros.robot.description import robot_reference
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sim.profiles import DynamicsProfile, load_profile

log = logging.getLogger("simreal_ros.learner")

PRIOR_PROFILE = "randomized"
LATENCY = "latency_steps"


class StandInProfileError(ValueError):
    """A stand-in profile (``stand_in: true``) was given where only a model may go."""


def model_profile(name_or_path: str | Path) -> DynamicsProfile:
    """The profile, refused if it plays the arm: adaptation trains on models only."""
    profile = load_profile(name_or_path)
    if profile.is_stand_in:
        raise StandInProfileError(
            f"profile {name_or_path!r} is a stand-in for the arm (stand_in: true): "
            "adaptation never reads it. Give the profile identification wrote "
            "(`simreal sysid`, or the learner's own identification)."
        )
    return profile


# ---------------------------------------------------------------- the simulator
def identified_spread(profile_path: str | Path) -> dict[str, float]:
    """Per identified parameter, the restarts' spread from ``sysid.json`` beside the
    profile (log of a factor, or latency steps), by the profile's keys (a group of joints
    fitted as one, ``gain.a|gain.b``, gives each joint its spread); empty when none."""
    report = Path(profile_path).with_name("sysid.json")
    if not report.is_file():
        return {}
    try:
        parameters = json.loads(report.read_text()).get("parameters", [])
    except (OSError, ValueError):
        return {}
    out = {}
    for p in parameters:
        std = p.get("std")
        if p.get("identifiable") and isinstance(std, int | float) and math.isfinite(std):
            for key in str(p["pattern"]).split("|"):
                out[key] = float(std)
    return out


def adaptation_profile(
    identified: str | Path,
    out_dir: str | Path,
    log_spread_floor: float = 0.1,
    latency_spread_floor: float = 2.0,
    prior: str = PRIOR_PROFILE,
) -> Path:
    """Write the profile adaptation trains in: each fixed value of ``identified`` becomes a
    range of +-max(floor, 2 x its spread) (a factor in log space; latency in steps), every
    range stays (the prior's, for what was not identified), every tie stays, and prior
    parameters the profile does not name are drawn from the prior. Returns the YAML's
    path."""
    profile = model_profile(identified)
    prior_profile = load_profile(prior)
    spread = identified_spread(identified)
    scale: dict[str, Any] = {}
    for key, entry in profile.scale.items():
        if isinstance(entry, tuple):
            scale[key] = list(entry)
            continue
        width = max(log_spread_floor, 2.0 * spread.get(key, 0.0))
        scale[key] = [round(entry * math.exp(-width), 6), round(entry * math.exp(width), 6)]
    for key, entry in prior_profile.scale.items():
        scale.setdefault(key, list(entry) if isinstance(entry, tuple) else entry)
    values: dict[str, Any] = {}
    for key, entry in profile.set.items():
        if isinstance(entry, tuple):
            values[key] = list(entry)
        elif key == LATENCY:
            width = max(latency_spread_floor, 2.0 * spread.get(key, 0.0))
            values[key] = [max(0.0, entry - width), entry + width]
        else:
            values[key] = entry
    for key, entry in prior_profile.set.items():
        values.setdefault(key, list(entry) if isinstance(entry, tuple) else entry)
    document = {
        "profile": f"{profile.name}-adaptation",
        "stand_in": False,
        "randomize_each_reset": True,
        "scale": scale,
        "set": values,
    }
    if profile.tied:  # a pair the data fix only in combination stays on its valley
        document["tied"] = {
            key: {"with": tie.partner, "points": [list(point) for point in tie.points]}
            for key, tie in profile.tied.items()
        }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "adaptation_profile.yaml"
    header = f"# Adaptation's simulator: {profile.name} with narrow randomisation.\n"
    path.write_text(header + yaml.safe_dump(document, sort_keys=False))
    model_profile(path)
    return path


# ---------------------------------------------------------------- running sim work
def run_map(
    fn: Callable[[Any], Any], items: Sequence[Any], workers: int, executor: Any = None,
    label: str = "",
) -> list[Any]:  # fmt: skip
    """``fn`` over ``items`` in item order on ``executor`` (``simreal_ros.executor``: local
    processes, Ray or serial), else on local processes (``workers``) for this call."""
    from simreal_ros.executor import make_executor

    if executor is not None:
        return list(executor.map(fn, list(items), progress=label))
    with make_executor("local", workers) as local:
        return list(local.map(fn, list(items), progress=label))


@dataclasses.dataclass(frozen=True)
class EpisodeJob:
    """One sim episode: the teacher alone (``actor_state`` None) or the student mixed with
    the teacher (per step with ``teacher_probability``), every state labelled by the
    teacher. Picklable; everything random derives from ``seed``."""

    checkpoint_dir: str
    profile: str
    task: str
    seed: int
    condition: str
    tuning: tuple[float, float, tuple[float, ...]]  # lead, speed, max joint step
    actor_state: dict[str, np.ndarray] | None = None
    teacher_probability: float = 0.0
    robot: str = ""  # the arm, as ``robot_reference`` names it (required; a worker loads it)
    safety_filter: bool = False  # behind the safety filter, as the graph runs the policy
    action_scale: tuple[float, ...] | None = None  # the student's per-tick step (None: spec's)
    exploration: float = 0.0  # std of Gaussian noise on the student's normalised action


@dataclasses.dataclass
class EpisodeData:
    seed: int
    condition: str
    success: bool
    steps: int
    obs: np.ndarray  # normalised observations
    labels: np.ndarray  # the teacher's normalised actions
    # The transitions as run (the RL polish's data): the normalised action sent, the
    # task's reward after it, the next normalised observation, and how the step ended.
    actions: np.ndarray | None = None
    rewards: np.ndarray | None = None
    next_obs: np.ndarray | None = None
    terminals: np.ndarray | None = None
    truncateds: np.ndarray | None = None


_WORKER_CACHE: dict[str, Any] = {}


def run_episode(job: EpisodeJob) -> EpisodeData:
    """One ``EpisodeJob`` (a picklable top-level function for ``run_map``)."""
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.expert import ExpertTuning, make_expert
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.sim.rollout import rollout
    from simreal_ros.training.evaluate import PolicySource, build_policy

    if not job.robot:
        raise ValueError("an EpisodeJob names its arm (robot_reference of its robot.yaml).")
    robot = load_robot_description(job.robot)
    model_profile(job.profile)
    policy = build_policy(
        PolicySource(
            job.checkpoint_dir,
            actor_state=job.actor_state,
            version="student",
            action_scale=job.action_scale,
        ),
        robot=robot,
    )
    converter = policy.converter
    rate = converter.spec.control_rate_hz
    key = f"{job.robot}|{job.task}|{job.profile}|{rate}|{job.safety_filter}"
    env = _WORKER_CACHE.get(key)
    if env is None:
        env = ArmTaskEnv(
            task=job.task, profile=job.profile, control_rate_hz=converter.spec.control_rate_hz,
            safety_filter=job.safety_filter, robot=robot,
        )  # fmt: skip
        _WORKER_CACHE.clear()
        _WORKER_CACHE[key] = env
    lead, speed, step = job.tuning
    teacher = make_expert(
        job.task,
        robot,
        tuning=ExpertTuning(command_lead=lead, speed_scale=speed, max_joint_step=tuple(step)),
        control_rate_hz=converter.spec.control_rate_hz,
    )
    rng = np.random.default_rng(job.seed)
    obs_rows: list[np.ndarray] = []
    label_rows: list[np.ndarray] = []
    action_rows: list[np.ndarray] = []
    ends: list[tuple[float, bool, bool]] = []
    last_next: list[np.ndarray] = []

    class Mixed:
        def act(self, observation):
            q = np.asarray(observation["joint_position"], dtype=np.float64)
            command = teacher.act(observation)
            normalized = converter.normalized_observation(observation)
            label = converter.action_from_command(command, q)
            obs_rows.append(np.asarray(normalized, np.float32))
            label_rows.append(np.asarray(label, np.float32))
            if job.actor_state is None or rng.random() < job.teacher_probability:
                action_rows.append(label_rows[-1])
                return command
            action = np.asarray(policy.actor(normalized), dtype=np.float64)
            if job.exploration > 0:
                noise = rng.normal(0.0, job.exploration, action.shape)
                action = np.clip(action + noise, -1.0, 1.0)
            action_rows.append(np.asarray(action, np.float32))
            return converter.command_from_action(action, q)

    def on_step(step) -> None:
        ends.append((step.reward, step.terminated, step.truncated))
        if step.terminated or step.truncated:
            last_next.append(converter.normalized_observation(step.next_observation))

    outcome = rollout(env, Mixed(), job.seed, job.condition, on_step)
    obs = np.asarray(obs_rows, np.float32)
    next_obs = np.concatenate([obs[1:], np.asarray(last_next, np.float32)[:1]])
    return EpisodeData(
        seed=job.seed,
        condition=job.condition,
        success=outcome.success,
        steps=outcome.steps,
        obs=obs,
        labels=np.asarray(label_rows, np.float32),
        actions=np.asarray(action_rows, np.float32),
        rewards=np.asarray([e[0] for e in ends], np.float32),
        next_obs=next_obs.reshape(obs.shape),
        terminals=np.asarray([e[1] for e in ends], bool),
        truncateds=np.asarray([e[2] for e in ends], bool),
    )


# ---------------------------------------------------------------- settings
@dataclasses.dataclass(frozen=True)
class AdaptationSettings:
    """The adaptation's budget; the learner's ``adapt_*`` settings fill it."""

    teacher_episodes: int = 16  # per grid point (shifted_share of them shifted)
    iterations: int = 8  # DAgger rounds
    episodes: int = 64  # student episodes per DAgger round
    bc_steps: int = 2000  # BC updates per DAgger round
    batch_size: int = 256
    learning_rate: float = 1e-3
    shifted_share: float = 0.3  # of the episodes that start shifted
    teacher_mix: float = 0.3  # the teacher's share of the first round's steps (decays)
    log_spread_floor: float = 0.1
    latency_spread_floor: float = 2.0
    seed: int = 0
    workers: int = 2
    safety_filter: bool = False  # training behind the filter fitted the stand-in no better


def conditions_for(count: int, shifted_share: float) -> list[str]:
    """``count`` start conditions, ``shifted_share`` of them shifted, spread evenly."""
    return [
        "shifted"
        if math.floor((i + 1) * shifted_share) > math.floor(i * shifted_share)
        else "train"
        for i in range(count)
    ]


# ---------------------------------------------------------------- the teacher
def teacher_grid(step: Sequence[float]) -> list[tuple[float, float, tuple[float, ...]]]:
    """The expert's tuning grid (``sim.expert.tuning_grid``) as picklable tuples."""
    from simreal_ros.sim.expert import tuning_grid

    return [(t.command_lead, t.speed_scale, tuple(t.max_joint_step)) for t in tuning_grid(step)]


def step_choices(spec, robot: RobotDescription, parent_scale: Sequence[float]) -> list[tuple]:
    """The per-tick steps (whole ``action_scale`` tuples) a teacher and its student may use,
    gentlest first: the base's, the running version's, and the arm joints widened to their
    velocity limit. An arm that follows its targets slowly needs the wider step: within
    the base's, the scripted teacher reaches 77% of the real_twin stand-in's starts, and
    28 of 30 with the step at the velocity limit (docs/results.md)."""
    from simreal_ros.policy.spec import widest_action_scale

    widest = widest_action_scale(spec, robot, robot.arm_indices)
    choices: list[tuple] = []
    for scale in (spec.action_scale, parent_scale, widest):
        scale = tuple(float(v) for v in scale)
        if scale not in choices:
            choices.append(scale)
    return choices


def step_factor(scale: Sequence[float], spec, robot: RobotDescription) -> float:
    """How many times the base's per-tick step ``scale`` allows, at most over the arm joints."""
    return max(float(scale[i]) / float(spec.action_scale[i]) for i in robot.arm_indices)


def search_teacher(
    checkpoint_dir: str,
    checkpoint,
    profile: str,
    settings: AdaptationSettings,
    robot: RobotDescription,
    executor: Any = None,
    student_state: dict[str, np.ndarray] | None = None,
    parent_scale: Sequence[float] | None = None,
) -> dict[str, Any]:
    """``robot``'s teacher's best grid point in ``profile``, by ``sim.expert.race`` (ties
    to the smaller step, lead and speed: the gentler teacher). The grid is the tuning grid
    at each of ``step_choices``; a teacher's step is the one its student will run with.
    With ``student_state`` (the running policy, at its step ``parent_scale``) the student
    runs every stage of the race on the same seeds, so the two compare on equal evidence.
    Returns the chosen tuning and step, every point's tally, the teacher's success and the
    student's (None without it)."""
    from simreal_ros.sim.expert import arm_joint_step, race

    model_profile(profile)
    spec = checkpoint.spec
    parent_scale = tuple(parent_scale or spec.action_scale)
    grid, scales = [], []
    for scale in step_choices(spec, robot, parent_scale):
        grid += teacher_grid(arm_joint_step(robot, scale))
        scales += [scale] * (len(grid) - len(scales))
    reference = robot_reference(robot.source)
    student = len(grid)  # the race's last point, when there is a student
    points = len(grid) + (student_state is not None)

    def run(indices: Sequence[int], count: int, seed: int) -> list[int]:
        conditions = conditions_for(count, settings.shifted_share)
        jobs = [
            EpisodeJob(checkpoint_dir, str(profile), spec.task, seed + i, conditions[i],
                       grid[g] if g < student else grid[0],
                       None if g < student else student_state, 0.0, reference,
                       settings.safety_filter, scales[g] if g < student else parent_scale)
            for g in indices
            for i in range(count)
        ]  # fmt: skip
        results = run_map(run_episode, jobs, settings.workers, executor, "teacher search")
        return [
            sum(e.success for e in results[k * count : (k + 1) * count])
            for k in range(len(indices))
        ]

    first = settings.seed * 1_000_003 + 300_000
    always = [student] if student_state is not None else []
    best, tally = race(run, points, settings.teacher_episodes, first, always=always)
    table = [
        {"lead": p[0], "speed": p[1], "step_factor": step_factor(scale, spec, robot), **row}
        for p, scale, row in zip(grid, scales, tally[: len(grid)], strict=True)
    ]
    rate = tally[best]["successes"] / tally[best]["episodes"]
    student_rate = None
    if student_state is not None:
        student_rate = tally[student]["successes"] / tally[student]["episodes"]
    return {"tuning": grid[best], "action_scale": scales[best], "table": table,
            "success": rate, "episodes": tally[best]["episodes"],
            "student_success": student_rate}  # fmt: skip


# ---------------------------------------------------------------- DAgger
def episode_jobs(checkpoint_dir: str, checkpoint, profile: str, tuning, robot, state,
                 seeds: Sequence[int], shifted_share: float, action_scale, exploration: float,
                 safety_filter: bool, teacher_share: float = 0.0) -> list[EpisodeJob]:  # fmt: skip
    """The student (``state``) on ``seeds``, ``tuning``'s teacher taking ``teacher_share``
    of the steps and labelling every one."""
    conditions = conditions_for(len(seeds), shifted_share)
    reference = robot_reference(robot.source)
    scale = None if action_scale is None else tuple(action_scale)
    return [
        EpisodeJob(checkpoint_dir, str(profile), checkpoint.spec.task, int(s), conditions[i],
                   tuning, state, teacher_share, reference, safety_filter, scale, exploration)
        for i, s in enumerate(seeds)
    ]  # fmt: skip


def actor_numpy_state(actor: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in actor.state_dict().items()}


def dagger(
    actor_peft,
    checkpoint_dir: str,
    checkpoint,
    profile: str,
    tuning: tuple[float, float, tuple[float, ...]],
    settings: AdaptationSettings,
    robot: RobotDescription,
    executor: Any = None,
    progress: Callable[[str], None] | None = None,
    action_scale: Sequence[float] | None = None,
    arm: tuple[np.ndarray, np.ndarray] | None = None,
    arm_share: float = 0.0,
) -> dict[str, Any]:
    """DAgger on ``actor_peft``'s LoRA weights (in place) toward ``robot``'s teacher
    ``tuning`` in ``profile``, from its current weights, the student acting (and labelled)
    at the per-tick step ``action_scale`` (None: the spec's); the per-round history.
    ``arm``: the arm's recorded states and the same teacher's labels on them
    (``arm_teacher_labels``), ``arm_share`` of every batch (co-training)."""
    if arm_share and (arm is None or not len(arm[0])):
        raise ValueError("co-training needs the arm's labelled states; none were given.")
    arm_rows = 0 if arm is None else round(settings.batch_size * arm_share)
    arm_tensors = tuple(torch.as_tensor(a) for a in arm) if arm_rows else None
    model_profile(profile)
    actor = lora.inner(actor_peft)
    params = [p for p in actor_peft.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=settings.learning_rate)
    rng = np.random.default_rng(settings.seed + 17)
    obs_parts: list[np.ndarray] = []
    label_parts: list[np.ndarray] = []
    history = []
    first = settings.seed * 1_000_003 + 400_000
    for it in range(settings.iterations):
        mix = max(0.0, settings.teacher_mix * (1.0 - it / max(1, settings.iterations - 1)))
        state = actor_numpy_state(lora.merged(actor_peft))
        seeds = range(first + it * settings.episodes, first + (it + 1) * settings.episodes)
        jobs = episode_jobs(checkpoint_dir, checkpoint, profile, tuning, robot, state, seeds,
                            settings.shifted_share, action_scale, 0.0, settings.safety_filter,
                            mix)  # fmt: skip
        results = run_map(run_episode, jobs, settings.workers, executor, f"dagger {it + 1}")
        obs_parts += [r.obs for r in results if r.steps]
        label_parts += [r.labels for r in results if r.steps]
        obs = torch.as_tensor(np.concatenate(obs_parts))
        labels = torch.as_tensor(np.concatenate(label_parts))
        actor_peft.train()
        loss = behaviour_cloning(
            actor, optimizer, (obs, labels), settings.bc_steps, settings.batch_size, rng,
            arm_tensors, arm_rows,
        )  # fmt: skip
        row = {
            "round": it,
            "teacher_mix": mix,
            "success": float(np.mean([r.success for r in results])),
            "bc_loss": loss,
            "rows": len(obs),
        }
        history.append(row)
        if progress is not None:
            progress(
                f"adaptation: DAgger round {it + 1}/{settings.iterations}: student+teacher "
                f"success {row['success']:.0%} (teacher share {mix:.2f}), bc {loss:.4f}"
            )
    return {"history": history, "obs": np.concatenate(obs_parts)}


def behaviour_cloning(
    actor: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data: tuple[torch.Tensor, torch.Tensor],
    steps: int,
    batch_size: int,
    rng: np.random.Generator,
    arm: tuple[torch.Tensor, torch.Tensor] | None = None,
    arm_rows: int = 0,
) -> float:
    """``steps`` MSE updates of ``actor`` toward ``data``'s labels, ``arm_rows`` of every
    ``batch_size`` drawn from ``arm`` instead (co-training: the arm's states keep their
    weight however few they are beside the sim's). Returns the last batch's loss."""
    obs, labels = data
    loss = 0.0
    for _ in range(steps):
        index = torch.as_tensor(rng.integers(0, len(obs), batch_size - arm_rows))
        batch_obs, batch_labels = obs[index], labels[index]
        if arm is not None and arm_rows:
            at = torch.as_tensor(rng.integers(0, len(arm[0]), arm_rows))
            batch_obs = torch.cat([batch_obs, arm[0][at]])
            batch_labels = torch.cat([batch_labels, arm[1][at]])
        bc = torch.nn.functional.mse_loss(actor(batch_obs), batch_labels)
        optimizer.zero_grad(set_to_none=True)
        bc.backward()
        optimizer.step()
        loss = float(bc.detach())
    return loss


def arm_teacher_labels(
    bags: Sequence[str | Path],
    checkpoint,
    tuning: tuple[float, float, tuple[float, ...]],
    robot: RobotDescription,
    action_scale: Sequence[float],
) -> tuple[np.ndarray, np.ndarray, int]:
    """The arm's recorded states in ``bags`` (normalised) and ``tuning``'s teacher's
    labels on them at the per-tick step ``action_scale``: what it would have commanded
    where the arm actually was. The teacher reads only the observation (joints, cube pose,
    goal), so it labels recorded states offline, as DAgger labels sim states. Steps
    without a cube pose or a goal are left out. Returns (obs, labels, episodes read)."""
    from simreal_ros.episodes.dataset import read_episode
    from simreal_ros.policy.spec import SpecConverter, version_spec
    from simreal_ros.sim.expert import ExpertTuning, make_expert

    kinematics = SpecConverter.for_robot(checkpoint.spec, robot).forward_kinematics
    spec = version_spec(checkpoint.spec, {"action_scale": list(action_scale)}, robot)
    converter = SpecConverter(spec, kinematics)
    lead, speed, step = tuning
    teacher = make_expert(
        spec.task, robot,
        tuning=ExpertTuning(command_lead=lead, speed_scale=speed, max_joint_step=tuple(step)),
        control_rate_hz=spec.control_rate_hz,
    )  # fmt: skip
    obs_rows, label_rows, episodes = [], [], 0
    for bag in bags:
        steps = read_episode(Path(bag), spec.joint_names)
        known = np.isfinite(steps.obs["object_position"]).all(axis=1) & np.isfinite(
            steps.obs["goal_position"]
        ).all(axis=1)
        if not known.any():
            continue
        episodes += 1
        teacher.reset()
        for i in np.flatnonzero(known):
            observation = {key: values[i] for key, values in steps.obs.items()}
            command = teacher.act(observation)
            label = converter.action_from_command(command, observation["joint_position"])
            obs_rows.append(np.asarray(converter.normalized_observation(observation), np.float32))
            label_rows.append(np.asarray(label, np.float32))
    width = (spec.obs_dim, spec.act_dim)
    if not obs_rows:
        return np.zeros((0, width[0]), np.float32), np.zeros((0, width[1]), np.float32), 0
    return np.asarray(obs_rows), np.asarray(label_rows), episodes


@torch.no_grad()
def distance_from_parent(actor_peft, parent: torch.nn.Module, obs, step_ratio=None) -> float:
    """Mean |a - a_parent| per action component, in the parent's normalised units, on up
    to 4096 of ``obs``: how far a candidate moved from the version it started from.
    ``step_ratio`` (per joint): the candidate's per-tick step over the parent's, when the
    candidate runs with another step."""
    obs = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
    if len(obs) == 0:
        return 0.0
    states = obs[:: max(1, len(obs) // 4096)]
    ratio = torch.as_tensor(1.0 if step_ratio is None else np.asarray(step_ratio),
                            dtype=torch.float32)  # fmt: skip
    was_training = actor_peft.training
    actor_peft.eval()
    moved = (lora.inner(actor_peft)(states) * ratio - parent(states)).abs().mean()
    actor_peft.train(was_training)
    return float(moved)


def adapt(
    actor_peft,
    checkpoint_dir: str,
    checkpoint,
    identified: str | Path,
    out_dir: str | Path,
    settings: AdaptationSettings,
    robot: RobotDescription,
    executor: Any = None,
    progress: Callable[[str], None] | None = None,
    parent_scale: Sequence[float] | None = None,
    arm_bags: Sequence[str | Path] = (),
    arm_share: float = 0.0,
) -> dict[str, Any]:
    """The whole stage on ``actor_peft`` (trained in place from its current weights, which
    run at the per-tick step ``parent_scale``; None: the spec's): the adaptation profile,
    the teacher's search, DAgger. With ``arm_bags`` (co-training), the arm's recorded
    states labelled by the retuned teacher make ``arm_share`` of every DAgger batch: they
    are the states the identified sim does not produce. Returns the metrics and the
    candidate's step (``action_scale``, its metadata's)."""
    from simreal_ros.executor import make_executor

    if executor is None:  # one pool for the whole stage
        with make_executor("local", settings.workers) as local:
            return adapt(actor_peft, checkpoint_dir, checkpoint, identified, out_dir,
                         settings, robot, local, progress, parent_scale, arm_bags,
                         arm_share)  # fmt: skip
    parent_scale = tuple(float(v) for v in (parent_scale or checkpoint.spec.action_scale))
    say = progress or (lambda text: log.info(text))
    started = time.time()
    parent = lora.merged(actor_peft)
    profile = adaptation_profile(
        identified, out_dir, settings.log_spread_floor, settings.latency_spread_floor
    )
    say(f"adaptation: training in {profile} (around {identified})")
    search = search_teacher(
        checkpoint_dir, checkpoint, str(profile), settings, robot, executor,
        actor_numpy_state(parent), parent_scale,
    )  # fmt: skip
    lead, speed, _ = search["tuning"]
    teacher, student = search["success"], search["student_success"]
    factor = step_factor(search["action_scale"], checkpoint.spec, robot)
    say(
        f"adaptation: teacher retuned in the identified sim: lead {lead}, speed {speed}, "
        f"step x{factor:.2g} ({teacher:.0%} of {search['episodes']}; the running policy "
        f"{student:.0%}; {time.time() - started:.0f} s)"
    )
    # Imitating a teacher the student already matches can only pull it down to the
    # teacher: the running policy then stands as the candidate. Co-training imitates
    # anyway: the arm's states are where it falls short.
    arm, arm_episodes = None, 0
    if arm_bags:
        obs, labels, arm_episodes = arm_teacher_labels(
            arm_bags, checkpoint, search["tuning"], robot, search["action_scale"]
        )
        arm = (obs, labels) if len(obs) else None
        say(
            f"adaptation: {len(obs)} arm states from {arm_episodes} episodes labelled by the "
            f"retuned teacher ({arm_share:.0%} of every batch)"
        )
    imitate = teacher > student or arm is not None
    scale = search["action_scale"] if imitate else parent_scale
    if imitate:
        result = dagger(
            actor_peft, checkpoint_dir, checkpoint, str(profile), search["tuning"], settings,
            robot, executor, say, scale, arm=arm, arm_share=arm_share if arm else 0.0,
        )  # fmt: skip
    else:
        say("adaptation: the running policy matches the best teacher here; no DAgger")
        result = {"history": [], "obs": np.zeros((0, 0), np.float32)}
    ratio = np.asarray(scale) / np.asarray(parent_scale)
    moved = distance_from_parent(actor_peft, parent, result["obs"], ratio)
    last = result["history"][-1] if result["history"] else {}
    metrics = {
        "adapt_teacher_lead": float(lead),
        "adapt_teacher_speed": float(speed),
        "adapt_step_factor": step_factor(scale, checkpoint.spec, robot),
        "adapt_teacher_success": float(teacher),
        "adapt_parent_success": float(student),
        "adapt_imitated": float(imitate),
        "adapt_dagger_success": float(last.get("success", 0.0)),
        "adapt_bc_loss": float(last.get("bc_loss", 0.0)),
        "adapt_rows": float(last.get("rows", 0)),
        "distance_from_parent": moved,
        "adapt_arm_episodes": float(arm_episodes),
        "adapt_arm_states": float(0 if arm is None else len(arm[0])),
        "adapt_seconds": time.time() - started,
    }
    say(f"adaptation: done in {metrics['adapt_seconds']:.0f} s; moved {moved:.3f} from parent")
    return {"metrics": metrics, "profile": str(profile), "teacher": search,
            "action_scale": [float(v) for v in scale]}  # fmt: skip
