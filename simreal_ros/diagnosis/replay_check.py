"""The open-loop replay check: does the policy's action convention match the arm's?

``replay_check(policy, episodes, profile, robot=arm) -> ReplayResult``

For each successful recorded episode (``RecordedEpisode``; from bags or fresh scripted
demonstrations):

1. teacher forcing: the policy's command for every recorded observation;
2. open-loop replay in sim, from the episode's start state (its seed, or the first
   recorded observation for bags), of (a) the policy's commands and (b) the recorded
   commands (the baseline: what replaying in this sim profile costs by itself);
3. trajectory errors against the recorded trajectory: tool RMS [m], arm joint RMS [rad],
   object final error [m], and whether each replay reaches the goal;
4. the policy closed loop from the same start: whether it reaches the goal when its
   commands are computed on its own states (a goal missed only open loop is not a
   convention error).

A policy that imitates the recorded behaviour reproduces the trajectory about as well as
the recorded commands do. One whose actions are read in another convention (scaled,
offset, joints in another order) does not. ``fit_action_convention`` then explains the
policy's commanded steps (command - measured joints) by the recorded ones, per joint:
``policy_step[j] = scale[j] * recorded_step[permutation[j]] + offset[j]``; the best
permutation is searched exhaustively over the joints that move. A high fitted R² with
scale != 1, an offset or a permutation says which convention is off ("actions are the
recorded ones x 0.5", "joints 2 and 3 swapped"); blended (mode-collapsed) actions are not
explained by any such map, so they are not mistaken for a convention error.
``ConventionFit.faulty_joints`` judges each joint on its own (its map against its steps
as they are), so a bug on one joint of six is not diluted by the five healthy ones.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from simreal_ros.diagnosis.episodes import RecordedEpisode, tool_positions_of
from simreal_ros.robot.description_record import RobotDescription

EXPLAINED_JOINT_R2 = 0.5  # a joint's own fit below this says nothing about conventions
MIN_SHARE_OF_MOTION = 0.05  # a joint whose steps vary less than this share of the largest
# joint's is uninformative for the fit (it barely moves in these episodes)


@dataclasses.dataclass
class ConventionFit:
    """How the policy's commanded steps relate to the recorded ones (see module docstring)."""

    joint_names: list[str]  # the joints that move (the fit uses only these)
    identity_r2: float  # policy steps explained by the recorded steps as they are
    fitted_r2: float  # explained by the best per-joint scale/offset and permutation
    permutation: list[int]  # policy joint joint_names[i] follows recorded joint_names[p[i]]
    scale: list[float]
    offset: list[float]
    joint_r2: list[float]
    samples: int
    # Each joint's steps explained by the recorded steps of the same joint as they are.
    joint_identity_r2: list[float] = dataclasses.field(default_factory=list)

    @property
    def permuted(self) -> bool:
        return self.permutation != list(range(len(self.permutation)))

    def swaps(self) -> list[tuple[str, str]]:
        """Pairs / cycles of joints whose actions landed on each other."""
        seen: set[int] = set()
        out = []
        for start in range(len(self.permutation)):
            if start in seen or self.permutation[start] == start:
                continue
            cycle, i = [], start
            while i not in seen:
                seen.add(i)
                cycle.append(i)
                i = self.permutation[i]
            out.append(tuple(self.joint_names[i] for i in cycle))
        return out

    def explained(self, min_joint_r2: float = EXPLAINED_JOINT_R2) -> np.ndarray:
        """Joints whose own fit is good; the others' scales are noise, not a convention."""
        return np.asarray(self.joint_r2, dtype=float) >= min_joint_r2

    def faulty_joints(
        self,
        min_r2: float = 0.8,
        min_gain: float = 0.2,
        scale_tolerance: float = 0.2,
        offset_tolerance: float = 0.01,
    ) -> list[str]:
        """Joints whose steps follow a non-identity map (sign, scale, offset or another
        joint's steps) that explains ``min_gain`` more of their own variance than the
        identity, at an R² of at least ``min_r2``. Judged per joint: a bug on one joint of
        six barely moves the pooled R²."""
        if not self.joint_identity_r2:
            return []
        out = []
        for i, name in enumerate(self.joint_names):
            if self.joint_r2[i] < min_r2:
                continue
            off_map = (
                self.permutation[i] != i
                or abs(self.scale[i] - 1.0) > scale_tolerance
                or abs(self.offset[i]) > offset_tolerance
            )
            gain = self.joint_r2[i] - max(self.joint_identity_r2[i], 0.0)
            if off_map and gain >= min_gain:
                out.append(name)
        return out

    def reordered_joints(self, min_gain: float = 0.2) -> list[str]:
        """Joints of the permutation's cycles in which some joint's own fit is explained
        (R² >= EXPLAINED_JOINT_R2) and gains ``min_gain`` over its steps as they are: a
        joint-order error that the steps themselves show, not one found in noise."""
        good = self.explained()
        out: list[str] = []
        for cycle in self.swaps():
            members = [self.joint_names.index(name) for name in cycle]
            if any(
                good[i] and self.joint_r2[i] - max(self.joint_identity_r2[i], 0.0) >= min_gain
                for i in members
            ):
                out += list(cycle)
        return out

    def common_scale(self) -> float:
        good = np.asarray(self.scale, dtype=float)[self.explained()]
        return float(np.median(good)) if good.size else float("nan")

    def describe(
        self, scale_tolerance: float = 0.2, offset_tolerance: float = 0.01, min_r2: float = 0.8
    ) -> str:
        """One sentence: the systematic relation, e.g. 'actions are the recorded ones x 0.50'."""
        if not self.joint_names:
            return "no joint moved in the recorded episodes; nothing to fit"
        parts = []
        flipped = [
            n
            for n, s, g in zip(self.joint_names, self.scale, self.explained(), strict=True)
            if g and s < 0
        ]
        if flipped:
            parts.append(f"sign flipped on {', '.join(flipped)}")
        for cycle in self.swaps():
            parts.append(
                f"joints {' and '.join(cycle)} swapped"
                if len(cycle) == 2
                else f"joints {' -> '.join(cycle)} rotated"
            )
        scales = np.asarray(self.scale)
        good = self.explained()
        common = self.common_scale()
        # Most joints sharing one scale is a normalisation error; name the rest separately.
        shared = good & (np.abs(scales - common) <= scale_tolerance * max(abs(common), 1e-9))
        if shared.sum() * 2 >= good.sum() > 0 and abs(common - 1.0) > scale_tolerance:
            names = [n for n, s in zip(self.joint_names, shared, strict=True) if s]
            which = "" if shared.sum() == good.sum() else f" on {', '.join(names)}"
            parts.append(f"actions are the recorded ones x {common:.2f}{which}")
            rest = good & ~shared
        else:
            rest = good
        odd = [
            f"{name} x {s:.2f}"
            for name, s, r in zip(self.joint_names, self.scale, rest, strict=True)
            if r
            and abs(s - 1.0) > scale_tolerance
            and not (s < 0 and abs(s + 1.0) <= scale_tolerance)
        ]
        if odd:
            parts.append("per-joint scales " + ", ".join(odd))
        offsets = [
            f"{name} {b:+.3f}"
            for name, b, g in zip(self.joint_names, self.offset, good, strict=True)
            if g and abs(b) > offset_tolerance
        ]
        if offsets:
            parts.append("offsets " + ", ".join(offsets))
        if not parts:
            parts.append("actions match the recorded ones (scale 1, no offset, same joint order)")
        unexplained = [n for n, g in zip(self.joint_names, good, strict=True) if not g]
        if unexplained:
            parts.append(f"{', '.join(unexplained)} not explained (R² < {EXPLAINED_JOINT_R2})")
        text = "; ".join(parts)
        if self.fitted_r2 < min_r2:
            text = f"no scale/offset/joint permutation explains the actions (best fit: {text})"
        return text + f" (fitted R² {self.fitted_r2:.2f}, as-is R² {self.identity_r2:.2f})"

    def is_systematic_error(
        self,
        min_r2: float = 0.8,
        min_gain: float = 0.2,
        scale_tolerance: float = 0.2,
        offset_tolerance: float = 0.01,
    ) -> bool:
        """True when a scale/offset/permutation explains the policy's steps well and the
        steps as they are do not: the signature of a convention mismatch."""
        if not self.joint_names or self.fitted_r2 < min_r2:
            return False
        if self.fitted_r2 - max(self.identity_r2, 0.0) < min_gain:
            return False
        good = self.explained()
        off_scale = any(
            g and abs(s - 1.0) > scale_tolerance for s, g in zip(self.scale, good, strict=True)
        )
        off_offset = any(
            g and abs(b) > offset_tolerance for b, g in zip(self.offset, good, strict=True)
        )
        return self.permuted or off_scale or off_offset

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["swaps"] = [list(c) for c in self.swaps()]
        out["description"] = self.describe()
        return out


def _pair_fit(y: np.ndarray, x: np.ndarray) -> tuple[float, float, float]:
    """Least-squares y = s x + b: (s, b, R²)."""
    vx, vy = float(x.var()), float(y.var())
    if vy <= 1e-16:
        return 0.0, float(y.mean()), 1.0 if vx <= 1e-16 else 0.0
    if vx <= 1e-16:
        return 0.0, float(y.mean()), 0.0
    cov = float(((x - x.mean()) * (y - y.mean())).mean())
    s = cov / vx
    return s, float(y.mean() - s * x.mean()), cov * cov / (vx * vy)


def fit_action_convention(
    recorded_steps: np.ndarray, policy_steps: np.ndarray, joint_names: Sequence[str]
) -> ConventionFit:
    """Explain the policy's steps by the recorded ones (see the module docstring)."""
    x = np.asarray(recorded_steps, dtype=np.float64)
    y = np.asarray(policy_steps, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"step arrays differ in shape: {x.shape} vs {y.shape}.")
    spread = np.maximum(x.std(0), y.std(0))
    if len(x) < 3 or spread.max() <= 1e-12:
        return ConventionFit([], float("nan"), float("nan"), [], [], [], [], len(x))
    moving = [j for j in range(x.shape[1]) if spread[j] >= MIN_SHARE_OF_MOTION * spread.max()]
    fits = {(j, k): _pair_fit(y[:, j], x[:, k]) for j in moving for k in moving}
    best, best_score = tuple(range(len(moving))), -math.inf
    if len(moving) <= 8:
        candidates = itertools.permutations(range(len(moving)))
    else:  # 9+ moving joints: greedy instead of exhaustive
        candidates = iter([tuple(range(len(moving)))])
    for perm in candidates:
        score = sum(fits[(moving[i], moving[p])][2] for i, p in enumerate(perm))
        if score > best_score + 1e-9:
            best, best_score = perm, score
    ym = y[:, moving]
    total = float(((ym - ym.mean(0)) ** 2).sum())
    identity_residual = float(((ym - x[:, moving]) ** 2).sum())
    scale, offset, r2, identity_r2 = [], [], [], []
    fitted_residual = 0.0
    for i, p in enumerate(best):
        yj = y[:, moving[i]]
        s, b, r = _pair_fit(yj, x[:, moving[p]])
        scale.append(s)
        offset.append(b)
        r2.append(r)
        fitted_residual += float(((yj - s * x[:, moving[p]] - b) ** 2).sum())
        spread_j = max(float(((yj - yj.mean()) ** 2).sum()), 1e-16)
        identity_r2.append(1.0 - float(((yj - x[:, moving[i]]) ** 2).sum()) / spread_j)
    total = max(total, 1e-16)
    return ConventionFit(
        joint_names=[joint_names[j] for j in moving],
        identity_r2=1.0 - identity_residual / total,
        fitted_r2=1.0 - fitted_residual / total,
        permutation=list(best),
        scale=scale,
        offset=offset,
        joint_r2=r2,
        samples=len(x),
        joint_identity_r2=identity_r2,
    )


@dataclasses.dataclass
class EpisodeReplay:
    source: str
    seed: int | None
    steps: int
    tool_rms: float  # policy's commands replayed vs the recorded trajectory
    joint_rms: float
    object_final_error: float
    reached_goal: bool
    baseline_tool_rms: float  # recorded commands replayed vs the recorded trajectory
    baseline_joint_rms: float
    baseline_object_final_error: float
    baseline_reached_goal: bool
    # The policy closed loop from the same start (None: not run): does the arm do the task
    # with its commands when they are computed on its own states?
    closed_loop_reached_goal: bool | None = None


@dataclasses.dataclass
class ReplayResult:
    profile: str
    episodes: list[EpisodeReplay]
    fit: ConventionFit

    def _mean(self, field: str) -> float:
        values = [getattr(e, field) for e in self.episodes]
        return float(np.mean(values)) if values else float("nan")

    @property
    def tool_rms(self) -> float:
        return self._mean("tool_rms")

    @property
    def baseline_tool_rms(self) -> float:
        return self._mean("baseline_tool_rms")

    @property
    def tool_rms_excess(self) -> float:
        """Extra tool error of the policy's commands over the recorded commands' replay."""
        return self.tool_rms - self.baseline_tool_rms

    @property
    def joint_rms(self) -> float:
        return self._mean("joint_rms")

    @property
    def baseline_joint_rms(self) -> float:
        return self._mean("baseline_joint_rms")

    @property
    def reached(self) -> int:
        return sum(e.reached_goal for e in self.episodes)

    @property
    def baseline_reached(self) -> int:
        return sum(e.baseline_reached_goal for e in self.episodes)

    @property
    def closed_loop_reached(self) -> int | None:
        values = [e.closed_loop_reached_goal for e in self.episodes]
        return None if any(v is None for v in values) else sum(bool(v) for v in values)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "episodes": len(self.episodes),
            "tool_rms_m": self.tool_rms,
            "baseline_tool_rms_m": self.baseline_tool_rms,
            "tool_rms_excess_m": self.tool_rms_excess,
            "joint_rms_rad": self.joint_rms,
            "baseline_joint_rms_rad": self.baseline_joint_rms,
            "policy_replays_reaching_goal": self.reached,
            "recorded_replays_reaching_goal": self.baseline_reached,
            "closed_loop_from_same_starts_reaching_goal": self.closed_loop_reached,
            "fit": self.fit.to_dict(),
            "per_episode": [dataclasses.asdict(e) for e in self.episodes],
        }


def _restore_start(env, episode: RecordedEpisode) -> None:
    if episode.seed is not None:
        env.reset(seed=episode.seed, condition=episode.condition)
        return
    first = episode.observations[0]
    env.reset(seed=0, condition=episode.condition if episode.condition else "train")
    w, _, _, z = np.asarray(first["object_orientation"], dtype=np.float64)
    env.physics.reset(
        joint_positions=np.asarray(first["joint_position"], dtype=np.float64),
        cube_position=np.asarray(first["object_position"], dtype=np.float64),
        cube_yaw=float(2.0 * math.atan2(z, w)),
        goal=np.asarray(first["goal_position"], dtype=np.float64),
    )


def _open_loop(env, episode: RecordedEpisode, commands: np.ndarray, fk):
    """Replay ``commands`` from the episode's start; (joints, tool, object, reached goal)."""
    _restore_start(env, episode)
    observation = env.observation()
    joints = [np.array(observation["joint_position"], dtype=np.float64)]
    objects = [np.array(observation["object_position"], dtype=np.float64)]
    reached = False
    for command in commands:
        step = env.step(command)
        joints.append(np.array(step.observation["joint_position"], dtype=np.float64))
        objects.append(np.array(step.observation["object_position"], dtype=np.float64))
        reached = reached or step.success
    joints_arr = np.array(joints)
    return joints_arr, tool_positions_of(joints_arr, fk), np.array(objects), reached


def _closed_loop(env, episode: RecordedEpisode, policy) -> bool:
    """Run ``policy`` closed loop from the episode's start until the task ends; success?"""
    _restore_start(env, episode)
    reset = getattr(policy, "reset", None)
    if reset is not None:
        try:
            reset(env)
        except TypeError:
            reset()
    observation = env.observation()
    while True:
        step = env.step(policy.act(observation))
        if step.success:
            return True
        if step.terminated or step.truncated:
            return False
        observation = step.observation


def _rms(a: np.ndarray, b: np.ndarray) -> float:
    n = min(len(a), len(b))
    return float(np.sqrt(np.mean(np.sum((a[1:n] - b[1:n]) ** 2, axis=1)))) if n > 1 else 0.0


def replay_check(
    policy,
    episodes: Sequence[RecordedEpisode],
    profile: str = "nominal",
    task: str | None = None,
    control_rate_hz: float | None = None,
    closed_loop: bool = True,
    *,
    robot: RobotDescription,
) -> ReplayResult:
    """Teacher-force ``policy`` (``act(observation) -> command``) on ``episodes`` of
    ``robot`` and replay its commands open-loop in sim (see the module docstring). Returns
    the raw numbers; ``simreal_ros.diagnosis.classify`` judges them against thresholds."""
    from simreal_ros.diagnosis.scenarios import make_environment
    from simreal_ros.robot.kinematics import ToolKinematics

    episodes = [e for e in episodes if e.length > 0]
    if not episodes:
        raise ValueError(
            "the replay check needs at least one recorded episode with steps; record "
            "successful episodes (or let it use fresh scripted demonstrations)."
        )
    fk = ToolKinematics.for_robot(robot)
    if control_rate_hz is None:  # a DeployedPolicy knows its rate; anything else: 20 Hz
        spec = getattr(getattr(policy, "converter", None), "spec", None)
        control_rate_hz = spec.control_rate_hz if spec is not None else 20.0
    env = make_environment(
        task or episodes[0].task, profile, "train", float(control_rate_hz), robot=robot
    )
    recorded_steps, policy_steps, results = [], [], []
    for episode in episodes:
        commands = np.array([policy.act(o) for o in episode.observations])
        q_seen = np.array([o["joint_position"] for o in episode.observations])
        recorded_steps.append(episode.commands - q_seen)
        policy_steps.append(commands - q_seen)
        joints, tool, objects, reached = _open_loop(env, episode, commands, fk)
        b_joints, b_tool, b_objects, b_reached = _open_loop(env, episode, episode.commands, fk)
        own = _closed_loop(env, episode, policy) if closed_loop else None
        arm = list(robot.arm_indices)
        results.append(
            EpisodeReplay(
                source=episode.source,
                seed=episode.seed,
                steps=episode.length,
                tool_rms=_rms(tool, episode.tool_positions),
                joint_rms=_rms(joints[:, arm], episode.joint_positions[:, arm]),
                object_final_error=float(
                    np.linalg.norm(objects[-1] - episode.object_positions[-1])
                ),
                reached_goal=bool(reached),
                baseline_tool_rms=_rms(b_tool, episode.tool_positions),
                baseline_joint_rms=_rms(b_joints[:, arm], episode.joint_positions[:, arm]),
                baseline_object_final_error=float(
                    np.linalg.norm(b_objects[-1] - episode.object_positions[-1])
                ),
                baseline_reached_goal=bool(b_reached),
                closed_loop_reached_goal=own,
            )
        )
    fit = fit_action_convention(
        np.concatenate(recorded_steps), np.concatenate(policy_steps), robot.joint_names
    )
    return ReplayResult(profile=profile, episodes=results, fit=fit)
