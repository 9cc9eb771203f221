"""Recorded episodes as system identification needs them: commands and measured states.

``read_replay_episodes(bags, robot, task) -> list[ReplayEpisode]``

From each bag: the commands the arm received (``/forward_position_controller/commands``,
absolute targets in the controller's joint order, at their receive times), and the
measured trajectory (``/joint_states`` reordered by name, ``/object/pose``, at their
header stamps). The first joint state is the start state. Every bag is checked before any
is used; a bag from another robot, task or joint order, one without commands or states,
or an empty one raises ``SysidInputError`` naming the bag and what to do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from simreal_ros.episodes.dataset import (
    find_bags,
    iter_bag_messages,
    read_episode_metadata,
    stamp_ns,
)
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.robot.joint_order import JointOrder

COMMAND_TOPIC = "/forward_position_controller/commands"
JOINT_STATE_TOPIC = "/joint_states"
OBJECT_POSE_TOPIC = "/object/pose"
MIN_STATES = 10  # fewer measured states than this say nothing about the dynamics


class SysidInputError(ValueError):
    """Bags that cannot be identified from; the message names each bag and the fix."""


@dataclasses.dataclass
class ReplayEpisode:
    """One recorded episode, on the clock of its first joint state (seconds)."""

    source: str  # the bag path
    task: str
    condition: str
    command_times: np.ndarray  # (C,) s
    commands: np.ndarray  # (C, J) controller order
    state_times: np.ndarray  # (T,) s, starting at 0.0
    joint_positions: np.ndarray  # (T, J) measured
    joint_velocities: np.ndarray  # (T, J)
    object_positions: np.ndarray  # (T, 3) measured; NaN rows where no pose was recorded
    start_object_orientation: np.ndarray  # (4,) w, x, y, z
    initial_command: np.ndarray  # (J,) what the arm tracked before the first command
    # (T, 4) w, x, y, z per measured state (NaN rows where no pose was recorded): a
    # short-horizon replay restarts the object from them.
    object_orientations: np.ndarray | None = None

    @property
    def duration(self) -> float:
        return float(self.state_times[-1])

    @property
    def has_object(self) -> bool:
        return bool(np.isfinite(self.object_positions).all())


def read_replay_episode(bag: Path, robot: RobotDescription, task: str | None) -> ReplayEpisode:
    """One bag; ``SysidInputError`` says what is wrong with it."""
    names = list(robot.joint_names)
    meta = read_episode_metadata(bag)
    if meta is None:
        raise SysidInputError(f"{bag}: no episode metadata; is this a simreal episode bag?")
    if meta.joint_names and list(meta.joint_names) != names:
        same_set = sorted(meta.joint_names) == sorted(names)
        raise SysidInputError(
            f"{bag}: recorded with joints {meta.joint_names}, but this robot's controller "
            f"order is {names}; "
            + (
                "the commands are in another joint order: record with this robot's "
                "controller order or identify with the robot description they were made for."
                if same_set
                else "it comes from another robot: pass that robot's description (--robot) "
                "or leave these bags out."
            )
        )
    if task and meta.task and meta.task != task:
        raise SysidInputError(
            f"{bag}: an episode of task {meta.task!r}, not {task!r}; identify each task's "
            "bags separately (the object and scene differ), or pass --task "
            f"{meta.task}."
        )
    states, commands, poses = [], [], []
    try:
        for topic, received_ns, msg in iter_bag_messages(
            bag, (JOINT_STATE_TOPIC, COMMAND_TOPIC, OBJECT_POSE_TOPIC)
        ):
            if topic == JOINT_STATE_TOPIC:
                states.append(msg)
            elif topic == COMMAND_TOPIC:
                # No header: the receive time is when the controller got it.
                commands.append((received_ns, np.asarray(msg.data, dtype=float)))
            else:
                poses.append(msg)
    except (OSError, ValueError, KeyError) as error:
        raise SysidInputError(f"{bag}: unreadable ({error}); recover or remove it.") from error
    if not states and not commands:
        raise SysidInputError(
            f"{bag}: empty (no {JOINT_STATE_TOPIC} and no {COMMAND_TOPIC} messages); "
            "remove it, or record with the default topics."
        )
    if not commands:
        raise SysidInputError(
            f"{bag}: no {COMMAND_TOPIC} messages, so there is nothing to replay; record that "
            "topic (it is in the recorder's default topics) or leave the bag out."
        )
    if len(states) < MIN_STATES:
        raise SysidInputError(
            f"{bag}: {len(states)} {JOINT_STATE_TOPIC} messages (need {MIN_STATES}); record "
            "the arm's joint states or leave the bag out."
        )
    measured = set(states[0].name)
    missing = [n for n in names if n not in measured]
    if missing:
        raise SysidInputError(
            f"{bag}: joint states lack {missing} of this robot (they name "
            f"{list(states[0].name)}); the bag comes from another robot: pass its description "
            "or leave these bags out."
        )
    width = {len(values) for _, values in commands}
    if width != {len(names)}:
        raise SysidInputError(
            f"{bag}: commands have {sorted(width)} values, this robot has {len(names)} "
            f"joints ({', '.join(names)}); the bag comes from another robot or controller."
        )
    joint_order = JointOrder(names)
    state_ns = np.array([stamp_ns(m) for m in states], dtype=np.int64)
    positions = [joint_order.reorder(m.name, m.position) for m in states]
    if any(p is None for p in positions):
        raise SysidInputError(
            f"{bag}: some {JOINT_STATE_TOPIC} messages lack joints of this robot or carry "
            "one position per name only partly; record complete joint states."
        )
    q = np.array(positions)
    qd = np.array(
        [
            velocity
            if (velocity := joint_order.reorder(m.name, m.velocity)) is not None
            else np.zeros(len(names))
            for m in states
        ]
    )
    keep = np.concatenate([[True], np.diff(state_ns) > 0])  # drop duplicate stamps
    state_ns, q, qd = state_ns[keep], q[keep], qd[keep]
    t0 = int(state_ns[0])
    state_t = (state_ns - t0) * 1e-9
    command_t = (np.array([t for t, _ in commands], dtype=np.int64) - t0) * 1e-9
    command_values = np.array([values for _, values in commands])
    if not (np.isfinite(q).all() and np.isfinite(command_values).all()):
        raise SysidInputError(f"{bag}: non-finite joint states or commands; leave it out.")
    objects = np.full((len(state_t), 3), np.nan)
    orientations = np.full((len(state_t), 4), np.nan)
    orientation = np.array([1.0, 0.0, 0.0, 0.0])
    if poses:
        pose_t = (np.array([stamp_ns(m) for m in poses], dtype=np.int64) - t0) * 1e-9
        xyz = np.array([[m.pose.position.x, m.pose.position.y, m.pose.position.z] for m in poses])
        wxyz = np.array(
            [[m.pose.orientation.w, m.pose.orientation.x, m.pose.orientation.y,
              m.pose.orientation.z] for m in poses]
        )  # fmt: skip
        idx = np.searchsorted(pose_t, state_t, side="right") - 1
        valid = (idx >= 0) & (np.abs(pose_t[np.clip(idx, 0, None)] - state_t) < 0.02)
        objects[valid] = xyz[idx[valid]]
        orientations[valid] = wxyz[idx[valid]]
        orientation = wxyz[max(0, int(idx[0]))]
    # Before its first command the arm holds where it was (a command stamped with the first
    # state is its first, still subject to the latency).
    before = command_t < -1e-6
    initial = command_values[before][-1] if before.any() else q[0].copy()
    after = command_t > -1e-9
    return ReplayEpisode(
        source=str(bag),
        task=meta.task or (task or ""),
        condition=meta.condition,
        command_times=command_t[after],
        commands=command_values[after],
        state_times=state_t,
        joint_positions=q,
        joint_velocities=qd,
        object_positions=objects,
        start_object_orientation=orientation,
        initial_command=initial,
        object_orientations=orientations,
    )


def read_replay_episodes(
    paths: Path | str | Sequence[Path | str], robot: RobotDescription, task: str | None = None
) -> list[ReplayEpisode]:
    """Every bag under ``paths``; all are checked, and every problem is reported at once."""
    bags = find_bags(paths)
    if not bags:
        raise SysidInputError(
            f"no episode bags under {paths}; give bag directories or a folder of them "
            "(each holds metadata.yaml and an .mcap file)."
        )
    episodes, problems = [], []
    for bag in bags:
        try:
            episodes.append(read_replay_episode(bag, robot, task))
        except SysidInputError as error:
            problems.append(str(error))
    if problems:
        raise SysidInputError(
            f"{len(problems)} of {len(bags)} bags cannot be used; nothing was written:\n  "
            + "\n  ".join(problems)
        )
    tasks = {e.task for e in episodes if e.task}
    if len(tasks) > 1:
        raise SysidInputError(
            f"the bags mix tasks {sorted(tasks)}; identify each task's bags separately "
            "(--task picks one)."
        )
    return episodes
