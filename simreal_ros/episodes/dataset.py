"""Episode bags as training data: aligned transitions at the policy rate, as numpy arrays.

No rclpy: bags are read with rosbags (closed bags) or the ``mcap`` stream reader (bags
whose recorder was killed: used up to their last valid message) and deserialized with the
project typestore.

API::

    data = load_transitions("~/simreal_data/episodes", joint_names=robot.joint_names,
                            where=EpisodeFilter(sources=("real",), outcomes=("success",)))
    data.obs["joint_position"]      # (N, J) rad, in ``joint_names`` order
    data.actions                    # (N, J) absolute joint position targets (PolicyAction)
    data.rewards, data.dones, data.truncateds, data.next_obs, data.policy_versions,
    data.safety_interventions, data.safety_penalties, data.human_interventions,
    data.episode_ids, data.sources, data.conditions, data.steps

One transition per policy action (``/policy/action``, one per control tick). With the
action logged at time a_i and the next at a_{i+1} (receive times):

- ``obs``: the newest joint state, object pose and task goal received at or before a_i;
- ``action``: the PolicyAction values; when a takeover message arrived in (a_{i-1}, a_i],
  the takeover's values, with ``human_interventions`` set (so does an action that says
  ``human_intervention``);
- ``reward``, ``done``, ``truncated``: summed / any-of the task statuses in (a_i, a_{i+1}]
  (only statuses carrying this episode's id, when the task and the recorder share ids);
  the episode ends at the first ``done`` or ``truncated`` (time limit); a recording that
  stops without either marks its last transition ``truncated``;
- ``safety_interventions`` / ``safety_penalties``: interventions in (a_i, a_{i+1}] and the
  sum of their ``excess``;
- ``next_obs``: ``obs`` of the next transition (for the last one, the last state recorded).

Camera frames only when asked for (``frames=True``; otherwise ``frames`` and
``frame_ages`` are None and nothing else changes): ``frames`` (N, H, W, 3) uint8 RGB
decoded from the bag's CompressedImage topic (``DatasetTopics.camera``; a raw Image topic
works too), and ``frame_ages`` (N,) seconds. A tick's frame is the newest frame whose stamp
is not after the tick's stamp: header stamps (the action's stamp is its observation's
stamp), or receive times where either is unstamped. ``frame_ages`` is the tick's stamp
minus its frame's; a tick before the episode's first frame gets a black frame and age NaN.
The next tick's frame is the next row. An episode without a single frame raises
``NoFramesError``.

Joint names and order are checked against ``joint_names`` (the policy's convention): joint
states are reordered by name, but a missing joint, an action with a different
``joint_names`` order or different recorded units raise ``JointSpecMismatch``. Unreadable
bags are skipped and truncated ones used up to their last valid message, each with a
``BagWarning`` naming the file.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from simreal_ros.episodes.bag_reader import bag_state, iter_mcap_records, mcap_file
from simreal_ros.episodes.metadata import METADATA_TOPIC, METADATA_TYPE, EpisodeMetadata
from simreal_ros.episodes.typestore import project_typestore
from simreal_ros.robot.joint_order import JointOrder
from simreal_ros.robot.observation import RAW_FIELDS, field_size


class BagWarning(UserWarning):
    """A bag was skipped or only partly used; the message names the file."""


class JointSpecMismatch(ValueError):
    """The bag's joints (names, order or units) differ from what the policy expects."""


class NoFramesError(ValueError):
    """Frames were asked for, but an episode's bag holds none on the camera topic."""


@dataclasses.dataclass(frozen=True)
class DatasetTopics:
    joint_states: str = "/joint_states"
    action: str = "/policy/action"
    takeover: str = "/operator/takeover"
    object_pose: str = "/object/pose"
    task_status: str = "/task/status"
    safety_status: str = "/safety/status"
    camera: str = "/camera/image_raw/compressed"


@dataclasses.dataclass(frozen=True)
class EpisodeFilter:
    """Which episodes to use; an empty tuple means any."""

    sources: tuple[str, ...] = ()
    conditions: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    policy_versions: tuple[str, ...] = ()
    include_incomplete: bool = True

    def accepts(self, meta: EpisodeMetadata) -> bool:
        if self.sources and meta.source not in self.sources:
            return False
        if self.conditions and meta.condition not in self.conditions:
            return False
        if self.outcomes and meta.outcome not in self.outcomes:
            return False
        if self.policy_versions and not set(meta.policy_versions) & set(self.policy_versions):
            return False
        return self.include_incomplete or meta.outcome != "incomplete"


@dataclasses.dataclass
class RecordedSteps:
    """Aligned transitions of one or more episodes; row i of every array is one step."""

    joint_names: tuple[str, ...]
    obs: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    truncateds: np.ndarray
    next_obs: dict[str, np.ndarray]
    policy_versions: np.ndarray
    safety_interventions: np.ndarray
    safety_penalties: np.ndarray
    human_interventions: np.ndarray
    episode_ids: np.ndarray
    sources: np.ndarray
    conditions: np.ndarray
    steps: np.ndarray
    # Only when frames were asked for (see the module docstring).
    frames: np.ndarray | None = None
    frame_ages: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.actions)

    @classmethod
    def empty(cls, joint_names: Sequence[str]) -> RecordedSteps:
        j = len(joint_names)
        obs = {k: np.zeros((0, field_size(k, j))) for k in RAW_FIELDS}
        return cls(
            tuple(joint_names),
            obs,
            np.zeros((0, j)),
            np.zeros(0),
            np.zeros(0, bool),
            np.zeros(0, bool),
            {k: v.copy() for k, v in obs.items()},
            np.zeros(0, dtype=str),
            np.zeros(0, np.int64),
            np.zeros(0),
            np.zeros(0, bool),
            np.zeros(0, dtype=str),
            np.zeros(0, dtype=str),
            np.zeros(0, dtype=str),
            np.zeros(0, np.int64),
        )

    @classmethod
    def concatenate(
        cls, parts: Sequence[RecordedSteps], joint_names: Sequence[str]
    ) -> RecordedSteps:
        if not parts:
            return cls.empty(joint_names)
        out = {}
        for field in dataclasses.fields(cls):
            values = [getattr(p, field.name) for p in parts]
            if field.name == "joint_names":
                out[field.name] = tuple(joint_names)
            elif field.name == "frames":
                out[field.name] = _concatenate_frames(values)
            elif any(v is None for v in values):
                out[field.name] = None  # only present when every part has it
            elif isinstance(values[0], dict):
                out[field.name] = {k: np.concatenate([v[k] for v in values]) for k in values[0]}
            else:
                out[field.name] = np.concatenate(values)
        return cls(**out)

    def select(self, mask: np.ndarray) -> RecordedSteps:
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, dict):
                out[field.name] = {k: v[mask] for k, v in value.items()}
            elif isinstance(value, np.ndarray):
                out[field.name] = value[mask]
            else:
                out[field.name] = value
        return RecordedSteps(**out)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat name -> array mapping (``obs.joint_position`` ...), e.g. for ``np.savez``."""
        flat: dict[str, np.ndarray] = {"joint_names": np.array(self.joint_names)}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, dict):
                flat.update({f"{field.name}.{k}": v for k, v in value.items()})
            elif isinstance(value, np.ndarray):
                flat[field.name] = value
        return flat


def _concatenate_frames(parts: list[np.ndarray | None]) -> np.ndarray | None:
    if any(p is None for p in parts):
        return None
    shapes = {p.shape[1:] for p in parts if len(p)}
    if len(shapes) > 1:
        raise ValueError(
            f"episodes' frames differ in size ({', '.join(map(str, sorted(shapes)))}); "
            "load episodes of one camera resolution together, or resize them first."
        )
    filled = [p for p in parts if len(p)]
    return np.concatenate(filled) if filled else parts[0]


# ---- reading bags -------------------------------------------------------------------------


def iter_bag_messages(bag_dir: Path, topics: Iterable[str]) -> Iterator[tuple[str, int, object]]:
    """(topic, receive time ns, deserialized message) in file order, for ``topics`` only.

    Closed bags go through rosbags' reader; unclosed ones through the MCAP stream reader.
    Raises ValueError for a bag with nothing readable; warns (BagWarning) when a bag is
    used only up to its last valid message.
    """
    bag_dir = Path(bag_dir)
    wanted = set(topics)
    store = project_typestore()
    state = bag_state(bag_dir)
    if state == "corrupt":
        raise ValueError(f"{bag_dir}: no readable MCAP file (missing, or bad magic bytes).")
    if state == "closed":
        from rosbags.rosbag2 import Reader

        try:
            with Reader(bag_dir) as reader:
                conns = [c for c in reader.connections if c.topic in wanted]
                for conn, stamp, data in reader.messages(connections=conns):
                    yield conn.topic, stamp, store.deserialize_cdr(data, conn.msgtype)
            return
        except GeneratorExit:
            raise
        except Exception as error:
            warnings.warn(
                f"{mcap_file(bag_dir)}: closed bag is damaged ({error}); reading it as a "
                "stream up to its last valid message instead.",
                BagWarning,
                stacklevel=2,
            )
    else:
        warnings.warn(
            f"{mcap_file(bag_dir)}: bag was not closed (recorder killed?); using it up to its "
            "last valid message. Run `simreal episodes recover` on it to close it.",
            BagWarning,
            stacklevel=2,
        )
    yield from _stream_messages(bag_dir, wanted, store)


def _stream_messages(bag_dir: Path, wanted: set[str], store) -> Iterator[tuple[str, int, object]]:
    from mcap.records import Message

    from simreal_ros.episodes.bag_reader import ScanResult

    scan = ScanResult({}, {}, __import__("collections").Counter(), False, "")
    path = mcap_file(bag_dir)
    for record in iter_mcap_records(path, scan):
        if not isinstance(record, Message):
            continue
        channel = scan.channels[record.channel_id]
        if channel.topic not in wanted:
            continue
        schema = scan.schemas.get(channel.schema_id)
        try:
            msg = store.deserialize_cdr(record.data, schema.name)
        except Exception as error:
            warnings.warn(
                f"{path}: message on {channel.topic} does not deserialize ({error}); "
                "using the bag up to the message before it.",
                BagWarning,
                stacklevel=3,
            )
            return
        yield channel.topic, record.log_time, msg
    if scan.error and not scan.complete:
        warnings.warn(
            f"{path}: reading stopped at an unreadable record ({scan.error}); "
            "the messages before it are used.",
            BagWarning,
            stacklevel=3,
        )


COMMAND_TOPIC = "/forward_position_controller/commands"


def start_command_gap(
    bag_dir: Path, controller_joints: Sequence[str], checked: Sequence[str] | None = None
) -> float:
    """How far (rad) an episode's first arm command is from its first measured joint state.

    Commands are in ``controller_joints`` order; ``checked`` (default: all of them) are the
    joints compared, by name. A reset that the safety filter resynced to starts at ~0; a
    filter still on the previous episode's trajectory starts far away.
    """
    checked = list(controller_joints if checked is None else checked)
    first: dict[str, dict[str, float]] = {}
    for topic, _, message in iter_bag_messages(bag_dir, [COMMAND_TOPIC, "/joint_states"]):
        if topic in first:
            continue
        if topic == COMMAND_TOPIC:
            first[topic] = dict(zip(controller_joints, message.data, strict=True))
        else:
            first[topic] = dict(zip(message.name, message.position, strict=True))
        if len(first) == 2:
            break
    if len(first) < 2:
        raise ValueError(f"{bag_dir}: no {COMMAND_TOPIC} or no /joint_states recorded.")
    command, state = first[COMMAND_TOPIC], first["/joint_states"]
    return max(abs(command[name] - state[name]) for name in checked)


def read_episode_metadata(bag_dir: Path) -> EpisodeMetadata | None:
    """The episode's metadata: from metadata.yaml's custom_data, else the newest record in
    the MCAP itself (an unclosed bag carries what was known at start)."""
    bag_dir = Path(bag_dir)
    yaml_path = bag_dir / "metadata.yaml"
    if yaml_path.exists():
        import yaml

        try:
            info = yaml.safe_load(yaml_path.read_text()) or {}
            custom = info.get("rosbag2_bagfile_information", {}).get("custom_data") or {}
            meta = EpisodeMetadata.from_custom_data(custom)
            if meta is not None:
                return meta
        except (yaml.YAMLError, ValueError, AttributeError):
            pass
    newest = None
    try:
        mcap = mcap_file(bag_dir)
    except FileNotFoundError:
        return None
    from mcap.records import Message

    from simreal_ros.episodes.bag_reader import ScanResult

    store = project_typestore()
    scan = ScanResult({}, {}, __import__("collections").Counter(), False, "")
    for record in iter_mcap_records(mcap, scan):
        if (
            isinstance(record, Message)
            and scan.channels[record.channel_id].topic == METADATA_TOPIC
        ):
            try:
                text = store.deserialize_cdr(record.data, METADATA_TYPE).data
                newest = EpisodeMetadata.from_json(text)
            except Exception:
                continue
    return newest


# ---- alignment ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Series:
    times: list[int] = dataclasses.field(default_factory=list)
    rows: list = dataclasses.field(default_factory=list)

    def add(self, t: int, row) -> None:
        self.times.append(t)
        self.rows.append(row)

    def latest_index(self, at: np.ndarray) -> np.ndarray:
        """Index of the newest entry at or before each time (-1 when none)."""
        return np.searchsorted(np.asarray(self.times, np.int64), at, side="right") - 1


def _check_spec(path: Path, what: str, found: Sequence[str], expected: Sequence[str]) -> None:
    if list(found) != list(expected):
        raise JointSpecMismatch(
            f"{path}: {what} joint names {list(found)} differ from the expected "
            f"{list(expected)} (names and order must match; retrain or remap the policy's "
            "joint convention before using this bag)."
        )


def read_episode(
    bag_dir: Path,
    joint_names: Sequence[str],
    joint_units: Sequence[str] = (),
    topics: DatasetTopics = DatasetTopics(),
    meta: EpisodeMetadata | None = None,
    frames: bool = False,
) -> RecordedSteps:
    """The recorded steps of one episode bag (see the module docstring for the alignment);
    with ``frames``, the camera frame of each step too."""
    bag_dir = Path(bag_dir)
    joint_names = list(joint_names)
    meta = meta or read_episode_metadata(bag_dir) or EpisodeMetadata(episode_id="unknown")
    if meta.joint_names:
        _check_spec(bag_dir, "recorded (metadata)", meta.joint_names, joint_names)
    if joint_units and meta.joint_units and list(meta.joint_units) != list(joint_units):
        raise JointSpecMismatch(
            f"{bag_dir}: recorded joint units {meta.joint_units} differ from the expected "
            f"{list(joint_units)}; convert the data or the policy before training."
        )
    states, actions, takeovers = _Series(), _Series(), _Series()
    poses, statuses, safety = _Series(), _Series(), _Series()
    camera = _Series() if frames else None
    joint_order = JointOrder(joint_names)
    wanted = [topics.joint_states, topics.action, topics.takeover, topics.object_pose,
              topics.task_status, topics.safety_status]  # fmt: skip
    if frames:
        wanted.append(topics.camera)
    for topic, t, msg in iter_bag_messages(bag_dir, wanted):
        if topic == topics.joint_states:
            order, missing = joint_order.index(msg.name)
            if missing:
                raise JointSpecMismatch(
                    f"{bag_dir}: /joint_states has joints {list(msg.name)}, missing "
                    f"{missing} of the expected {joint_names}; this bag is from a "
                    "different arm or joint naming."
                )
            pos = np.asarray(msg.position, float)
            vel = joint_order.reorder(msg.name, msg.velocity)
            vel = np.full(len(order), np.nan) if vel is None else vel
            states.add(t, (pos[order], vel, stamp_ns(msg)))
        elif topic in (topics.action, topics.takeover):
            if len(msg.joint_names):
                _check_spec(bag_dir, f"{topic}", msg.joint_names, joint_names)
            values = np.asarray(msg.values, float)
            if len(values) != len(joint_names):
                raise JointSpecMismatch(
                    f"{bag_dir}: {topic} carries {len(values)} values, expected "
                    f"{len(joint_names)} ({joint_names})."
                )
            series = actions if topic == topics.action else takeovers
            series.add(
                t, (values, msg.policy_version, bool(msg.human_intervention), stamp_ns(msg))
            )
        elif topic == topics.object_pose:
            p, q = msg.pose.position, msg.pose.orientation
            poses.add(t, (np.array([p.x, p.y, p.z]), np.array([q.w, q.x, q.y, q.z])))
        elif topic == topics.task_status:
            g = msg.goal
            statuses.add(
                t,
                (np.array([g.x, g.y, g.z]), msg.reward, msg.done, msg.truncated, msg.episode_id),
            )
        elif topic == topics.safety_status:
            excess = sum(float(i.excess) for i in msg.interventions if np.isfinite(i.excess))
            safety.add(t, (len(msg.interventions), excess))
        elif camera is not None and topic == topics.camera:
            camera.add(t, (stamp_ns(msg), msg))
    if camera is not None and not camera.times:
        raise NoFramesError(
            f"{bag_dir}: frames were asked for, but the bag has no frames on {topics.camera}; "
            "record with the camera publishing (recorder record_images), select episodes "
            "that have frames, or read without frames."
        )
    statuses = _own_statuses(statuses, meta.episode_id)
    steps, ticks = _align(
        bag_dir, joint_names, meta, states, actions, takeovers, poses, statuses, safety
    )
    if camera is not None:
        steps.frames, steps.frame_ages = _aligned_frames(bag_dir, camera, *ticks)
    return steps


def _own_statuses(statuses: _Series, episode_id: str) -> _Series:
    """Task statuses of this episode only, when they carry its id: a late status of the
    previous episode (done!) must not end this one."""
    if not any(row[4] == episode_id for row in statuses.rows):
        return statuses  # ids not shared between task and recorder: keep every status
    own = _Series()
    for t, row in zip(statuses.times, statuses.rows, strict=True):
        if row[4] == episode_id:
            own.add(t, row)
    return own


def stamp_ns(msg) -> int:
    """A message's header stamp in whole nanoseconds (seconds as a float would lose the
    sub-microsecond part that decides which physics step a command falls on)."""
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


def _observation_index(states: _Series, actions: _Series, a_times: np.ndarray) -> np.ndarray:
    """The joint state each action was computed from.

    An action's header stamp is the stamp of its observation, so match on header stamps
    (immune to the order in which callbacks ran); fall back to receive times when stamps
    are unset or not monotonic.
    """
    state_stamps = np.array([row[2] for row in states.rows], np.int64)
    action_stamps = np.array([row[3] for row in actions.rows], np.int64)
    if (action_stamps > 0).all() and (np.diff(state_stamps) >= 0).all():
        return np.searchsorted(state_stamps, action_stamps, side="right") - 1
    return states.latest_index(a_times)


def _align(bag_dir, joint_names, meta, states, actions, takeovers, poses, statuses, safety):
    """The steps, and each step's tick (receive time, header stamp) for aligning frames."""
    no_ticks = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if not actions.times or not states.times:
        return RecordedSteps.empty(joint_names), no_ticks
    a_times = np.asarray(actions.times, np.int64)
    state_idx = _observation_index(states, actions, a_times)
    keep = state_idx >= 0  # actions before the first joint state have no observation
    if not keep.any():
        return RecordedSteps.empty(joint_names), no_ticks
    a_times, state_idx = a_times[keep], state_idx[keep]
    action_rows = [r for r, k in zip(actions.rows, keep, strict=True) if k]
    n = len(a_times)
    window_end = np.append(a_times[1:], np.iinfo(np.int64).max)

    rewards = np.zeros(n)
    dones = np.zeros(n, bool)
    truncateds = np.zeros(n, bool)
    if statuses.times:
        s_times = np.asarray(statuses.times, np.int64)
        lo = np.searchsorted(s_times, a_times, side="right")
        hi = np.searchsorted(s_times, window_end, side="right")
        for i in range(n):
            for j in range(lo[i], hi[i]):
                _, reward, done, truncated, _ = statuses.rows[j]
                rewards[i] += reward
                dones[i] |= bool(done)
                truncateds[i] |= bool(truncated)
    ended = np.flatnonzero(dones | truncateds)
    if len(ended):  # the episode ends at its first done or time limit; later ticks belong to none
        n = int(ended[0]) + 1
    else:
        truncateds[n - 1] = True
    a_times, state_idx, action_rows = a_times[:n], state_idx[:n], action_rows[:n]
    rewards, dones, truncateds = rewards[:n], dones[:n], truncateds[:n]
    window_end = window_end[:n]

    penalties = np.zeros(n)
    interventions = np.zeros(n, np.int64)
    if safety.times:
        f_times = np.asarray(safety.times, np.int64)
        lo = np.searchsorted(f_times, a_times, side="right")
        hi = np.searchsorted(f_times, window_end, side="right")
        for i in range(n):
            for j in range(lo[i], hi[i]):
                interventions[i] += safety.rows[j][0]
                penalties[i] += safety.rows[j][1]

    acts = np.stack([row[0] for row in action_rows])
    versions = np.array([row[1] for row in action_rows], dtype=str)
    human = np.array([row[2] for row in action_rows], bool)
    if takeovers.times:
        t_idx = takeovers.latest_index(a_times)
        prev = np.append(np.iinfo(np.int64).min, a_times[:-1])
        t_times = np.asarray(takeovers.times, np.int64)
        for i in range(n):
            if t_idx[i] >= 0 and t_times[t_idx[i]] > prev[i]:
                acts[i] = takeovers.rows[t_idx[i]][0]
                human[i] = True

    obs = _observations(states, poses, statuses, a_times, state_idx)
    # next observation: the state seen by the next tick; after the last, the last state.
    last_t = np.array([max(states.times[-1], a_times[-1])], np.int64)
    next_times = np.concatenate([a_times[1:], last_t])
    next_obs = _observations(states, poses, statuses, next_times, states.latest_index(next_times))
    ids = np.full(n, meta.episode_id)
    tick_stamps = np.array([row[3] for row in action_rows], np.int64)
    steps = RecordedSteps(
        tuple(joint_names),
        obs,
        acts,
        rewards,
        dones,
        truncateds,
        next_obs,
        versions,
        interventions,
        penalties,
        human,
        ids,
        np.full(n, meta.source),
        np.full(n, meta.condition),
        np.arange(n, dtype=np.int64),
    )
    return steps, (a_times, tick_stamps)


def _aligned_frames(
    bag_dir: Path, camera: _Series, tick_times: np.ndarray, tick_stamps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each tick's frame (RGB) and its age in seconds: the newest frame whose stamp is not
    after the tick's; header stamps where both are stamped, else receive times."""
    from simreal_ros.episodes.frames import frame_rgb

    frame_stamps = np.array([row[0] for row in camera.rows], np.int64)
    if len(tick_stamps) and (tick_stamps > 0).all() and (frame_stamps > 0).all():
        ticks, at = tick_stamps, frame_stamps
    else:
        ticks, at = tick_times, np.asarray(camera.times, np.int64)
    order = np.argsort(at, kind="stable")
    chosen = np.searchsorted(at[order], ticks, side="right") - 1
    decoded: dict[int, np.ndarray] = {}

    def rgb(k: int) -> np.ndarray:
        if k not in decoded:
            try:
                decoded[k] = frame_rgb(camera.rows[k][1])
            except ValueError as error:
                raise ValueError(f"{bag_dir}: frame {k}: {error}") from None
        return decoded[k]

    used = [int(order[c]) for c in chosen if c >= 0]
    height, width, _ = rgb(used[0] if used else 0).shape
    frames = np.zeros((len(ticks), height, width, 3), np.uint8)
    ages = np.full(len(ticks), np.nan)
    for i, c in enumerate(chosen):
        if c < 0:
            continue  # before the first frame: black, age NaN
        k = int(order[c])
        image = rgb(k)
        if image.shape != frames.shape[1:]:
            raise ValueError(
                f"{bag_dir}: frame {k} is {image.shape[1]}x{image.shape[0]}, the episode's "
                f"others {width}x{height}; the camera changed resolution mid-episode."
            )
        frames[i] = image
        ages[i] = (ticks[i] - at[k]) * 1e-9
    return frames, ages


def _observations(states, poses, statuses, times, state_idx) -> dict[str, np.ndarray]:
    pos = np.stack([states.rows[i][0] for i in state_idx])
    vel = np.stack([states.rows[i][1] for i in state_idx])
    n = len(times)
    obj_p = np.full((n, 3), np.nan)
    obj_q = np.full((n, 4), np.nan)
    if poses.times:
        idx = poses.latest_index(times)
        first = 0  # before the first pose, the first pose (the object has not moved yet)
        for i, k in enumerate(idx):
            obj_p[i], obj_q[i] = poses.rows[k if k >= 0 else first]
    goal = np.full((n, 3), np.nan)
    if statuses.times:
        idx = statuses.latest_index(times)
        for i, k in enumerate(idx):
            goal[i] = statuses.rows[k if k >= 0 else 0][0]
    return {
        "joint_position": pos,
        "joint_velocity": vel,
        "object_position": obj_p,
        "object_orientation": obj_q,
        "goal_position": goal,
    }


# ---- many episodes ------------------------------------------------------------------------


def find_bags(paths: Path | str | Iterable[Path | str]) -> list[Path]:
    """Episode bag directories: each path is a bag directory or a folder of them."""
    if isinstance(paths, str | Path):
        paths = [paths]
    found: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist; give an episode bag or a data dir.")
        if any(path.glob("*.mcap")):
            found.append(path)
        else:
            found += sorted(p for p in path.iterdir() if p.is_dir() and any(p.glob("*.mcap")))
    return found


def load_transitions(
    paths: Path | str | Iterable[Path | str],
    joint_names: Sequence[str],
    where: EpisodeFilter = EpisodeFilter(),
    joint_units: Sequence[str] = (),
    topics: DatasetTopics = DatasetTopics(),
    frames: bool = False,
) -> RecordedSteps:
    """Recorded steps of every selected episode under ``paths``, concatenated in path order.

    Unreadable bags are skipped with a BagWarning naming the file; a joint mismatch raises
    JointSpecMismatch. With ``frames``, each step's camera frame too; an episode without
    frames raises NoFramesError.
    """
    parts = []
    for bag in find_bags(paths):
        meta = read_episode_metadata(bag)
        if meta is None:
            warnings.warn(
                f"{bag}: no episode metadata readable (not a simreal episode bag, or damaged); "
                "skipped.",
                BagWarning,
                stacklevel=2,
            )
            continue
        if not where.accepts(meta):
            continue
        try:
            parts.append(read_episode(bag, joint_names, joint_units, topics, meta, frames))
        except (JointSpecMismatch, NoFramesError):
            raise
        except Exception as error:
            warnings.warn(f"{bag}: skipped, unreadable: {error}", BagWarning, stacklevel=2)
    return RecordedSteps.concatenate(parts, joint_names)
