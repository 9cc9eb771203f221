"""Off-ROS evaluation of a policy over seeds, in parallel worker processes.

``evaluate_policy`` is shared by ``simreal eval`` and the learner's screening gate. A
policy is given as a ``PolicySource``: a checkpoint directory plus an optional peft
adapter directory (``build_policy`` is the one hook that turns a source into a runnable
policy), or an in-memory actor (its weights are shipped to the workers as arrays).
Episodes run the deployed (numpy, merged) form of the policy, the same code the node runs.

Each episode record also carries the screening gate's evidence of brokenness: the safety
filter's interventions (when it runs), actions that are non-finite or at the tanh bound
(``SATURATED``, normalised units), and, given a ``reference`` policy, the mean absolute
difference between the policy's and the reference's normalised actions on the states the
policy visits (the reference acts on them but never steps the arm).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from simreal_ros.executor import SimExecutor, make_executor, split_evenly
from simreal_ros.robot.description import robot_reference
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sim.profiles import check_profile
from simreal_ros.stats import wilson_interval

CONDITIONS = ("train", "shifted")
# |normalised action| at or above this is "at its bound": tanh of a pre-activation >= 2.65.
SATURATED = 0.99
# The filter shapes every 20 Hz step into its 100 Hz trajectory within these limits, for
# a healthy policy too (the shipped ones: every step); the other reasons (position and
# workspace limits, tracking error, refusals, holds) are what ``intervened_steps`` counts.
SHAPING_LIMITS = ("velocity", "acceleration", "jerk")


@dataclasses.dataclass(frozen=True)
class PolicySource:
    """Where a policy comes from; picklable, so worker processes can rebuild it."""

    checkpoint_dir: str
    adapter_dir: str | None = None
    adapter_sha256: str | None = None
    # In-memory actor weights (name -> array) replacing the checkpoint's actor.
    actor_state: dict[str, np.ndarray] | None = None
    version: str | None = None
    # The in-memory actor's per-tick step (None: the checkpoint's); an adapter's comes
    # from its metadata.
    action_scale: tuple[float, ...] | None = None


@dataclasses.dataclass
class EpisodeRecord:
    seed: int
    success: bool
    episode_return: float
    length: int
    failure: bool
    final_goal_distance: float
    interventions: int = 0  # the safety filter's, every reason (0 without the filter)
    intervened_steps: int = 0  # control steps with an intervention not in SHAPING_LIMITS
    saturated_actions: int = 0  # action components with |a| >= SATURATED
    action_components: int = 0  # steps x action dimension
    nonfinite_steps: int = 0  # steps whose action had a NaN or inf (the arm was held)
    divergence: float | None = None  # mean |a - a_reference| per component; None: none


@dataclasses.dataclass
class EvaluationResult:
    task: str
    profile: str
    condition: str
    version: str
    episodes: int
    successes: int
    ci: tuple[float, float]
    mean_return: float
    mean_length: float
    seconds: float
    records: list[EpisodeRecord]

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    def summary(self) -> str:
        low, high = self.ci
        return (
            f"{self.version} {self.task}/{self.profile}/{self.condition}: "
            f"{self.successes}/{self.episodes} = {self.success_rate:.1%} success "
            f"(Wilson 95% CI {low:.1%}..{high:.1%}), mean return {self.mean_return:.2f}, "
            f"mean length {self.mean_length:.1f} steps, {self.seconds:.1f} s"
        )

    def to_dict(self, with_records: bool = False) -> dict[str, Any]:
        out = {
            "task": self.task,
            "profile": self.profile,
            "condition": self.condition,
            "version": self.version,
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "ci95": list(self.ci),
            "mean_return": self.mean_return,
            "mean_length": self.mean_length,
            "seconds": self.seconds,
        }
        if with_records:
            out["records"] = [dataclasses.asdict(r) for r in self.records]
        return out


def build_policy(source: PolicySource, description: Any = None, *, robot: RobotDescription):
    """The evaluation hook: checkpoint (+ optional peft adapter) -> a runnable policy on
    ``robot`` (its tool kinematics convert the observations).

    Returns a ``DeployedPolicy`` (merged numpy weights, the node's code path).
    """
    import torch

    from simreal_ros.policy.inference import NumpyActor, deploy_adapter, deploy_base
    from simreal_ros.policy.spec import SpecConverter, version_spec
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    base = load_checkpoint(source.checkpoint_dir, description=description, with_critic=False)
    kinematics = SpecConverter.for_robot(base.spec, robot).forward_kinematics
    if source.actor_state is not None:
        state = {k: torch.as_tensor(np.asarray(v)) for k, v in source.actor_state.items()}
        base.model.actor.load_state_dict(state)
        deployed = deploy_base(base, kinematics)
        metadata = {} if source.action_scale is None else {"action_scale": source.action_scale}
        spec = version_spec(base.spec, metadata, robot)
        return dataclasses.replace(
            deployed, actor=NumpyActor(base.model.actor), version=source.version or "in-memory",
            converter=SpecConverter(spec, kinematics),
        )  # fmt: skip
    if source.adapter_dir is not None:
        version = source.version or Path(source.adapter_dir).name
        return deploy_adapter(
            base, source.adapter_dir, version, source.adapter_sha256,
            forward_kinematics=kinematics, description=robot,
        )  # fmt: skip
    deployed = deploy_base(base, kinematics)
    if source.version:
        deployed = dataclasses.replace(deployed, version=source.version)
    return deployed


def evaluate_episode(env, policy, seed: int, condition: str, reference=None) -> EpisodeRecord:
    """One episode of ``policy`` on a gymnasium ``env``, with the screening evidence."""
    from simreal_ros.sim.rollout import rollout

    actor = _ScreenedActor(env, policy, reference)
    outcome = rollout(env, actor, seed, condition, actor.on_step)
    return EpisodeRecord(
        seed=outcome.seed,
        success=outcome.success,
        episode_return=outcome.episode_return,
        length=outcome.steps,
        failure=outcome.failure,
        final_goal_distance=outcome.final_goal_distance,
        interventions=int(outcome.info.get("safety_interventions", 0)),
        intervened_steps=actor.intervened_steps,
        saturated_actions=actor.saturated,
        action_components=actor.components,
        nonfinite_steps=actor.nonfinite,
        divergence=actor.divergence(),
    )


def _hard_interventions(env) -> int:
    """The running episode's safety-filter interventions outside ``SHAPING_LIMITS``."""
    safety = getattr(getattr(env, "core", None), "safety", None)
    if safety is None:
        return 0
    return sum(n for limit, n in safety.counts.items() if limit not in SHAPING_LIMITS)


class _ScreenedActor:
    """``policy`` as a rollout actor that gathers one episode's action evidence for the
    screening gate (see the module docstring)."""

    def __init__(self, env, policy, reference) -> None:
        self.env, self.policy, self.reference = env, policy, reference
        self.intervened_steps = self.saturated = self.components = self.nonfinite = 0
        self._difference = 0.0
        self._compared = 0
        self._before = 0

    def act(self, observation) -> np.ndarray:
        self._before = _hard_interventions(self.env)
        policy = self.policy
        if not (hasattr(policy, "converter") and hasattr(policy, "actor")):
            return policy.act(observation)  # a policy without a normalised action
        action = np.asarray(policy.action(observation), dtype=np.float64)
        joints = np.asarray(observation["joint_position"], dtype=np.float64)
        self.components += action.size
        if not np.all(np.isfinite(action)):
            self.nonfinite += 1
            return joints.copy()  # hold, as the safety filter would
        self.saturated += int(np.sum(np.abs(action) >= SATURATED))
        if self.reference is not None:
            other = np.asarray(self.reference.action(observation), dtype=np.float64)
            self._difference += float(np.sum(np.abs(action - other)))
            self._compared += action.size
        return policy.converter.command_from_action(action, joints)

    def on_step(self, step) -> None:
        self.intervened_steps += _hard_interventions(self.env) > self._before

    def divergence(self) -> float | None:
        return self._difference / self._compared if self._compared else None


@dataclasses.dataclass(frozen=True)
class EvaluationChunk:
    """Seeds one executor item evaluates (with one policy build and one environment)."""

    source: PolicySource
    profile: str
    condition: str
    seeds: tuple[int, ...]
    robot: str  # the arm, as ``robot_reference`` names it (a worker loads it)
    safety_filter: bool = False
    reference: PolicySource | None = None


def evaluate_chunk(chunk: EvaluationChunk) -> tuple[str, str, list[EpisodeRecord]]:
    """The executor's item function: (task, policy version, one record per seed)."""
    import torch

    torch.set_num_threads(1)
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.gym_env import ArmTaskEnv

    robot = load_robot_description(chunk.robot)
    policy = build_policy(chunk.source, robot=robot)
    other = None if chunk.reference is None else build_policy(chunk.reference, robot=robot)
    spec = policy.converter.spec
    env = ArmTaskEnv(
        task=spec.task,
        profile=chunk.profile,
        condition=chunk.condition,
        control_rate_hz=spec.control_rate_hz,
        safety_filter=chunk.safety_filter,
        robot=robot,
    )
    if spec.camera is not None:  # a camera policy sees the scene as the profile shows it
        from simreal_ros.sim.profiles import load_profile
        from simreal_ros.sim.visuals import NOMINAL, CameraObservations

        visual = load_profile(chunk.profile).visual or NOMINAL
        camera = spec.camera
        env = CameraObservations(env, camera.camera_name, camera.width, camera.height, visual)
    try:
        records = [
            evaluate_episode(env, policy, seed, chunk.condition, other) for seed in chunk.seeds
        ]
    finally:
        env.close()
    return spec.task, policy.version, records


def evaluate_policy(
    policy: PolicySource | str | Path,
    profile: str = "nominal",
    condition: str = "train",
    seeds: Sequence[int] | int = 100,
    workers: int = 1,
    safety_filter: bool = False,
    reference: PolicySource | str | Path | None = None,
    executor: SimExecutor | None = None,
    *,
    robot: RobotDescription,
) -> EvaluationResult:
    """Run one episode per seed on ``robot``; success rate with a Wilson 95% CI, return and
    length.

    ``policy``: a checkpoint directory or a ``PolicySource``. ``seeds``: a list of seeds,
    or a count N meaning seeds 0..N-1. ``executor`` (``simreal_ros.executor``) runs the
    episodes, in one item per worker; without one, a local executor of ``workers``
    processes does (1: this process).
    ``safety_filter`` puts the safety filter between the policy and the arm, as the
    graph does. ``reference`` (a checkpoint directory or ``PolicySource``): also measure
    each step's action difference to it on the same observation (``divergence``).
    """
    check_profile(profile)
    if condition not in CONDITIONS:
        raise ValueError(f"condition {condition!r}: use one of {', '.join(CONDITIONS)}.")
    source = policy if isinstance(policy, PolicySource) else PolicySource(str(policy))
    if reference is not None and not isinstance(reference, PolicySource):
        reference = PolicySource(str(reference))
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seed_list:
        raise ValueError("no seeds to evaluate; give at least one episode.")
    reference_of_arm = robot_reference(robot.source)
    start = time.perf_counter()
    own = executor is None
    if own:
        executor = make_executor("local", max(1, min(int(workers), len(seed_list))))
    with executor if own else nullcontext(executor):
        chunks = [
            EvaluationChunk(
                source, profile, condition, tuple(c), reference_of_arm, safety_filter, reference
            )
            for c in split_evenly(seed_list, executor.workers)
        ]
        results = executor.map(evaluate_chunk, chunks, progress=f"eval {profile}/{condition}")
    task, version = results[0][0], results[0][1]
    by_seed = {r.seed: r for _, _, rs in results for r in rs}
    records = [by_seed[s] for s in seed_list]
    successes = sum(r.success for r in records)
    return EvaluationResult(
        task=task,
        profile=profile,
        condition=condition,
        version=version,
        episodes=len(records),
        successes=successes,
        ci=wilson_interval(successes, len(records)),
        mean_return=float(np.mean([r.episode_return for r in records])),
        mean_length=float(np.mean([r.length for r in records])),
        seconds=time.perf_counter() - start,
        records=records,
    )
