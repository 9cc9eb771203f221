"""Action statistics of one episode: how the arm moved under the policy's commands.

``action_statistics(commands, positions, tool_positions, goal, dt) -> ActionStats``

- ``commands``: (T, J) absolute joint position targets the policy sent;
- ``positions``: measured joint positions, (T+1, J) with the start state first (or (T, J),
  the state each command was computed from);
- ``tool_positions``: tool centre point, same rows as ``positions``;
- ``goal``: (3,) goal position; ``object_positions`` (optional, same rows): when given,
  progress is measured on the object (push), else on the tool (reach);
- ``dt``: control period in seconds.

What the numbers say about mode collapse: a policy that averages incompatible
demonstrations either stops (``frozen_fraction``: share of steps with the tool slower than
``frozen_speed``; ``blocked_fraction``: share of steps frozen while still commanding a
step larger than ``blocked_command`` rad, i.e. driving into something), or dithers
between modes (``reversal_rate``: share of moving steps whose tool displacement turns
back by more than 120 degrees), and makes little ``progress`` towards the goal (1 =
reached, 0 = no closer than at the start, negative = further away).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

FROZEN_SPEED = 0.01  # m/s of the tool: slower counts as standing still
BLOCKED_COMMAND = 0.05  # rad: a commanded step this large that produces no motion is blocked
REVERSAL_COSINE = -0.5  # consecutive displacements at more than 120 degrees


@dataclasses.dataclass(frozen=True)
class ActionStats:
    steps: int
    duration_s: float
    joint_travel: float  # rad, summed over arm joints and steps
    tool_travel: float  # m
    net_displacement: float  # m, tool start to end
    frozen_fraction: float
    blocked_fraction: float
    reversals: int
    reversal_rate: float
    command_reversal_rate: float  # sign flips of each joint's commanded step
    start_distance: float  # m, to the goal (object or tool)
    final_distance: float
    progress: float

    @property
    def path_efficiency(self) -> float:
        """Net tool displacement / tool travel (1 = straight line)."""
        return self.net_displacement / self.tool_travel if self.tool_travel > 1e-9 else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["path_efficiency"] = self.path_efficiency
        return out


def _with_start(rows: np.ndarray, steps: int, what: str) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] not in (steps, steps + 1):
        raise ValueError(
            f"{what} has shape {rows.shape}; give T+1 rows (start state first) or T rows "
            f"for T = {steps} commands."
        )
    if rows.shape[0] == steps:  # no state after the last command: hold the last one
        rows = np.vstack([rows, rows[-1:]])
    return rows


def action_statistics(
    commands,
    positions,
    tool_positions,
    goal,
    dt: float,
    object_positions=None,
    arm_joints: int = 6,
    frozen_speed: float = FROZEN_SPEED,
    blocked_command: float = BLOCKED_COMMAND,
) -> ActionStats:
    """Statistics of one episode (see the module docstring for the arguments)."""
    commands = np.asarray(commands, dtype=np.float64)
    if commands.ndim != 2 or len(commands) == 0:
        raise ValueError(f"commands has shape {commands.shape}; give (T, J) with T >= 1.")
    if not dt > 0:
        raise ValueError(f"dt = {dt}; the control period must be positive.")
    steps = len(commands)
    q = _with_start(positions, steps, "positions")
    tool = _with_start(tool_positions, steps, "tool_positions")
    goal = np.asarray(goal, dtype=np.float64).reshape(-1)[:3]
    arm = slice(0, min(arm_joints, commands.shape[1]))

    joint_travel = float(np.abs(np.diff(q[:, arm], axis=0)).sum())
    displacement = np.diff(tool, axis=0)  # (T, 3): motion caused by each command
    step_length = np.linalg.norm(displacement, axis=1)
    tool_travel = float(step_length.sum())
    frozen = step_length < frozen_speed * dt
    commanded = np.linalg.norm(commands[:, arm] - q[:-1, arm], axis=1)
    blocked = frozen & (commanded > blocked_command)

    moving = ~frozen
    both = moving[1:] & moving[:-1]
    cosine = np.einsum("ij,ij->i", displacement[1:], displacement[:-1]) / np.maximum(
        step_length[1:] * step_length[:-1], 1e-12
    )
    reversals = int(np.count_nonzero(both & (cosine < REVERSAL_COSINE)))
    reversal_rate = reversals / max(1, int(np.count_nonzero(both)))

    step = commands[:, arm] - q[:-1, arm]
    active = np.abs(step) > 0.1 * blocked_command
    pairs = active[1:] & active[:-1]
    flips = pairs & (np.sign(step[1:]) != np.sign(step[:-1]))
    command_reversal_rate = float(flips.sum()) / max(1, int(pairs.sum()))

    tracked = tool
    if object_positions is not None:
        tracked = _with_start(object_positions, steps, "object_positions")
    start_distance = float(np.linalg.norm(tracked[0] - goal))
    final_distance = float(np.linalg.norm(tracked[-1] - goal))
    progress = (start_distance - final_distance) / max(start_distance, 1e-6)
    return ActionStats(
        steps=steps,
        duration_s=steps * dt,
        joint_travel=joint_travel,
        tool_travel=tool_travel,
        net_displacement=float(np.linalg.norm(tool[-1] - tool[0])),
        frozen_fraction=float(frozen.mean()),
        blocked_fraction=float(blocked.mean()),
        reversals=reversals,
        reversal_rate=float(reversal_rate),
        command_reversal_rate=command_reversal_rate,
        start_distance=start_distance,
        final_distance=final_distance,
        progress=float(progress),
    )


@dataclasses.dataclass(frozen=True)
class MotionSummary:
    """Action statistics summarised over a set of episodes (e.g. failing train episodes)."""

    episodes: int
    frozen_episodes: int  # frozen_fraction >= the threshold
    hesitant_episodes: int  # reversal_rate >= the threshold
    blocked_episodes: int  # blocked_fraction >= half the frozen threshold
    collapsed_episodes: int  # frozen or hesitant
    mean_frozen_fraction: float
    mean_blocked_fraction: float
    mean_reversal_rate: float
    mean_command_reversal_rate: float
    mean_progress: float
    mean_tool_travel: float
    mean_joint_travel: float

    @property
    def collapsed_share(self) -> float:
        return self.collapsed_episodes / self.episodes if self.episodes else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["collapsed_share"] = self.collapsed_share
        return out


def summarize(
    stats: Sequence[ActionStats], frozen_fraction: float = 0.4, reversal_rate: float = 0.25
) -> MotionSummary:
    """How many episodes stood still, dithered or drove into something, and the means."""
    n = len(stats)

    def mean(values) -> float:
        values = list(values)
        return float(np.mean(values)) if values else float("nan")

    frozen = [s.frozen_fraction >= frozen_fraction for s in stats]
    hesitant = [s.reversal_rate >= reversal_rate for s in stats]
    return MotionSummary(
        episodes=n,
        frozen_episodes=sum(frozen),
        hesitant_episodes=sum(hesitant),
        blocked_episodes=sum(s.blocked_fraction >= 0.5 * frozen_fraction for s in stats),
        collapsed_episodes=sum(f or h for f, h in zip(frozen, hesitant, strict=True)),
        mean_frozen_fraction=mean(s.frozen_fraction for s in stats),
        mean_blocked_fraction=mean(s.blocked_fraction for s in stats),
        mean_reversal_rate=mean(s.reversal_rate for s in stats),
        mean_command_reversal_rate=mean(s.command_reversal_rate for s in stats),
        mean_progress=mean(s.progress for s in stats),
        mean_tool_travel=mean(s.tool_travel for s in stats),
        mean_joint_travel=mean(s.joint_travel for s in stats),
    )
