"""Policies with a deliberately induced failure, built with the policy package's own tools.

They exist to prove that the diagnosis tells failure modes apart (tests, demos):

- ``scaled_action_checkpoint``: the same weights, with the action normalisation in the
  metadata multiplied by a factor (an action-normalisation mismatch);
- ``permuted_action_checkpoint``: the action head's output rows permuted (joints swapped),
  metadata unchanged (a joint-order mismatch);
- ``convention_bug_checkpoint``: any of ``CONVENTION_BUGS`` on chosen joints (sign flip,
  step offset, action scale, joint order, wrong observation mean or std of the joints'
  position and velocity readings);
- ``train_bc_checkpoint``: a fresh policy regressed with plain MSE on demonstrations
  (``RecordedEpisode``s), e.g. bimodal ones (mode collapse) or a narrow slice of starts
  (over-specialisation).

Each writes an ordinary checkpoint with
``simreal_ros.training.torch_checkpoint.save_checkpoint`` (safetensors + policy.json), so
the policy runs through ``build_policy`` like any other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from simreal_ros.policy.spec import DEFAULT_OBSERVATION_FIELDS, SpecConverter, default_spec
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.training.model import ActorCritic, Architecture
from simreal_ros.training.torch_checkpoint import load_checkpoint, save_checkpoint


def _resave(base, out: Path, spec, version: str, note: str) -> Path:
    return save_checkpoint(
        out,
        base.model,
        spec,
        version=version,
        gamma=base.gamma,
        training={"derived_from": base.version, "induced_failure": note},
        parent_version=base.version,
    )


def scaled_action_checkpoint(
    checkpoint_dir: str | Path, out: str | Path, factor: float = 0.5
) -> Path:
    """Copy of a checkpoint whose spec's action_scale (and offset) is ``factor`` x the
    original: the weights are unchanged, so every commanded step is scaled."""
    base = load_checkpoint(checkpoint_dir)
    spec = base.spec
    spec = dataclasses.replace(
        spec,
        action_scale=tuple(float(s) * factor for s in spec.action_scale),
        action_offset=tuple(float(o) * factor for o in spec.action_offset),
    )
    return _resave(base, Path(out), spec, f"{base.version}-scaled{factor:g}", f"x{factor:g}")


def permuted_action_checkpoint(
    checkpoint_dir: str | Path, out: str | Path, permutation: Sequence[int]
) -> Path:
    """Copy of a checkpoint whose action output i drives joint ``permutation[i]``'s slot
    read from output ``permutation[i]``: rows of the mean head are reordered, the
    metadata (joint order) is not."""
    base = load_checkpoint(checkpoint_dir)
    order = list(permutation)
    if sorted(order) != list(range(base.spec.act_dim)):
        raise ValueError(
            f"permutation {order} is not a permutation of 0..{base.spec.act_dim - 1}."
        )
    head = base.model.actor.mean_head
    with torch.no_grad():
        head.weight.copy_(head.weight[order].clone())
        head.bias.copy_(head.bias[order].clone())
    note = f"action head rows permuted {order}"
    return _resave(base, Path(out), base.spec, f"{base.version}-permuted", note)


CONVENTION_BUGS = ("sign", "offset", "scale", "permutation", "obs_mean", "obs_std")
DEFAULT_AMOUNTS = {"offset": 0.5, "scale": 0.5, "obs_mean": 2.0, "obs_std": 3.0}


def _joint_slots(spec, joint: int) -> list[int]:
    """Observation-vector entries that read joint ``joint`` (its position and velocity)."""
    slots = []
    for field, start, _ in spec.layout():
        if field in ("joint_position", "joint_velocity"):
            slots.append(start + joint)
    return slots


def convention_bug_checkpoint(
    checkpoint_dir: str | Path,
    out: str | Path,
    kind: str,
    joints: Sequence[int],
    amount: float | None = None,
) -> Path:
    """Copy of a checkpoint with one convention bug on ``joints`` (indices in controller
    order); everything else is the original. ``kind``:

    - ``sign``: those joints' actions negated (action head rows x -1);
    - ``offset``: a constant bias of ``amount`` (normalised action units, before the tanh
      squash) on those joints' commanded steps (action head bias);
    - ``scale``: those joints' ``action_scale`` x ``amount`` in the metadata (a wrong
      action std; in delta mode the action mean, ``action_offset``, is unused);
    - ``permutation``: those joints' actions rotated one place (two joints: swapped);
    - ``obs_mean``: the stored observation mean of those joints' position and velocity
      readings shifted by ``amount`` stds (the policy reads them off by that much);
    - ``obs_std``: the stored observation std of those readings x ``amount``.
    """
    if kind not in CONVENTION_BUGS:
        raise ValueError(f"unknown bug {kind!r}; use one of {', '.join(CONVENTION_BUGS)}.")
    base = load_checkpoint(checkpoint_dir)
    spec = base.spec
    joints = [int(j) for j in joints]
    if (
        not joints
        or any(not 0 <= j < spec.act_dim for j in joints)
        or len(set(joints)) < len(joints)
    ):
        raise ValueError(f"joints {joints}: give distinct indices in 0..{spec.act_dim - 1}.")
    if kind == "permutation" and len(joints) < 2:
        raise ValueError("a permutation needs at least two joints.")
    amount = DEFAULT_AMOUNTS.get(kind) if amount is None else float(amount)
    head = base.model.actor.mean_head
    with torch.no_grad():
        if kind == "sign":
            head.weight[joints] *= -1.0
            head.bias[joints] *= -1.0
        elif kind == "offset":
            head.bias[joints] += amount
        elif kind == "permutation":
            order = list(range(spec.act_dim))
            for i, j in enumerate(joints):  # joint j is driven by the next one's output
                order[j] = joints[(i + 1) % len(joints)]
            head.weight.copy_(head.weight[order].clone())
            head.bias.copy_(head.bias[order].clone())
    if kind == "scale":
        scale = [float(s) for s in spec.action_scale]
        for j in joints:
            scale[j] *= amount
        spec = dataclasses.replace(spec, action_scale=tuple(scale))
    elif kind in ("obs_mean", "obs_std"):
        mean, std = list(spec.obs_mean), list(spec.obs_std)
        for j in joints:
            for slot in _joint_slots(spec, j):
                if kind == "obs_mean":
                    mean[slot] += amount * std[slot]
                else:
                    std[slot] *= amount
        spec = dataclasses.replace(spec, obs_mean=tuple(mean), obs_std=tuple(std))
    names = ", ".join(spec.joint_names[j] for j in joints)
    note = f"{kind} bug on {names}" + ("" if kind in ("sign", "permutation") else f" ({amount:g})")
    return _resave(base, Path(out), spec, f"{base.version}-{kind}", note)


def demonstration_arrays(episodes, converter: SpecConverter) -> tuple[np.ndarray, np.ndarray]:
    """Raw observation vectors and normalised action labels of every demonstrated step."""
    vectors, labels = [], []
    for episode in episodes:
        for observation, command in zip(episode.observations, episode.commands, strict=True):
            vectors.append(converter.observation_vector(observation))
            labels.append(converter.action_from_command(command, observation["joint_position"]))
    if not vectors:
        raise ValueError("no demonstrated steps to learn from; record some episodes first.")
    return np.array(vectors), np.array(labels)


def train_bc_checkpoint(
    out: str | Path,
    task: str,
    episodes,
    hidden: tuple[int, ...] = (64, 64),
    steps: int = 1500,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    seed: int = 0,
    version: str = "bc",
    observation_fields: Sequence[str] = DEFAULT_OBSERVATION_FIELDS,
    *,
    robot: RobotDescription,
) -> Path:
    """Plain MSE behaviour cloning of ``episodes``' commands (of ``robot``); writes a
    checkpoint."""
    from simreal_ros.robot.kinematics import ToolKinematics

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    spec = default_spec(robot, task, observation_fields=observation_fields)
    converter = SpecConverter(spec, ToolKinematics.for_robot(robot))
    raw, labels = demonstration_arrays(episodes, converter)
    spec = spec.with_statistics(raw.mean(0), raw.std(0))
    converter = SpecConverter(spec, converter.forward_kinematics)
    obs = torch.as_tensor(converter.normalize(raw), dtype=torch.float32)
    target = torch.as_tensor(labels, dtype=torch.float32)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, hidden, hidden))
    optimizer = torch.optim.Adam(model.actor.parameters(), lr=learning_rate)
    loss = torch.zeros(())
    for _ in range(steps):
        index = torch.as_tensor(rng.integers(0, len(obs), size=min(batch_size, len(obs))))
        loss = torch.nn.functional.mse_loss(model.actor(obs[index]), target[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    return save_checkpoint(
        out,
        model,
        spec,
        version=version,
        gamma=0.99,
        training={
            "method": "plain MSE behaviour cloning on scripted demonstrations",
            "episodes": len(episodes),
            "steps": steps,
            "final_loss": float(loss.detach()),
            "seed": seed,
        },
    )


class _NoisyExecution:
    """Executes the expert's command plus Gaussian noise; remembers the clean labels (DART)."""

    def __init__(self, expert, noise: float, rng: np.random.Generator) -> None:
        self.expert, self.noise, self.rng = expert, noise, rng
        self.labels: list[np.ndarray] = []

    def reset(self, env=None) -> None:
        self.labels = []
        self.expert.reset(env)

    def act(self, observation) -> np.ndarray:
        label = np.asarray(self.expert.act(observation), dtype=np.float64)
        self.labels.append(label)
        noise = self.rng.normal(0.0, self.noise, label.shape)
        noise[-1] = 0.0  # leave the gripper alone
        return label + noise


def perturbed_demonstrations(
    task: str,
    seeds,
    noise: float = 0.02,
    profile: str = "nominal",
    condition: str = "train",
    seed: int = 0,
    *,
    robot: RobotDescription,
    **expert_options,
):
    """Expert episodes executed with joint noise (rad), labelled with the clean expert
    command at every visited state: demonstrations that also cover small deviations,
    so a cloned policy recovers from its own errors (DART, Laskey et al. 2017).
    ``expert_options`` go to the scenario's expert (e.g. ``side=1`` for reach_around)."""
    from simreal_ros.diagnosis.episodes import record_episode
    from simreal_ros.diagnosis.scenarios import make_demonstrator, make_environment
    from simreal_ros.robot.kinematics import ToolKinematics

    env = make_environment(task, profile, condition, robot=robot)
    expert = make_demonstrator(task, robot=robot, **expert_options)
    actor = _NoisyExecution(expert, noise, np.random.default_rng(seed))
    fk = ToolKinematics.for_robot(robot)
    out = []
    for episode_seed in seeds:
        episode = record_episode(
            env, actor, episode_seed, condition, fk, task=task, source="expert"
        )
        episode.commands = np.array(actor.labels)
        out.append(episode)
    return out


@dataclasses.dataclass(frozen=True)
class BugCase:
    """One case of the convention-bug matrix: a bug (or none) on a shipped checkpoint."""

    task: str
    kind: str  # one of CONVENTION_BUGS, or "none" for a healthy control
    joints: tuple[int, ...] = ()
    amount: float | None = None
    profile: str = "nominal"

    @property
    def name(self) -> str:
        amount = "" if self.amount is None else f" {self.amount:g}"
        where = f" {list(self.joints)}" if self.joints else ""
        return f"{self.task}/{self.profile} {self.kind}{where}{amount}"

    @property
    def expects_mismatch(self) -> bool:
        return self.kind != "none"

    def expected_joints(self, joint_names: Sequence[str]) -> list[str] | None:
        """The joints the fit should blame; None where the bug is on the observation side
        (it changes every output through the network, so no joint is 'the' one)."""
        if self.kind in ("sign", "offset", "scale", "permutation"):
            return [joint_names[j] for j in self.joints]
        return [] if self.kind == "none" else None

    def build(self, out: str | Path) -> Path:
        from simreal_ros.policy.checkpoint import shipped_checkpoint

        base = shipped_checkpoint(self.task)
        if self.kind == "none":
            return base
        return convention_bug_checkpoint(base, out, self.kind, self.joints, self.amount)


def convention_matrix(task: str = "reach") -> list[BugCase]:
    """Every bug kind on single joints and on several, plus healthy controls."""
    cases = [BugCase(task, "none"), BugCase(task, "none", profile="real_twin")]
    singles, several = [(0,), (2,), (3,)], [(1, 2), (0, 3, 4)]
    for kind in ("sign", "offset", "scale", "obs_mean", "obs_std"):
        cases += [BugCase(task, kind, j) for j in singles + several]
    cases += [BugCase(task, "permutation", j) for j in [(1, 2), (0, 3), (2, 3), (0, 3, 4)]]
    cases += [
        BugCase(task, "scale", (1,), 1.8),
        BugCase(task, "scale", (0, 1, 2, 3, 4, 5), 2.0),
        BugCase(task, "offset", (4,), -0.3),
        BugCase(task, "sign", (2,), profile="real_twin"),
        BugCase(task, "scale", (1, 2), profile="real_twin"),
    ]
    return cases
