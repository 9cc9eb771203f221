"""Per-episode metadata, stored in the bag itself so it travels with the data.

It is written twice into the MCAP, as JSON on ``METADATA_TOPIC`` (std_msgs/msg/String):
once at start (so a bag killed before close still says what it is) and once at stop with
the outcome. On close it also goes to ``custom_data`` in metadata.yaml, one key per field.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

METADATA_TOPIC = "/episode/metadata"
METADATA_TYPE = "std_msgs/msg/String"
CUSTOM_DATA_PREFIX = "simreal."

SOURCES = ("sim", "real_twin", "real")
CONDITIONS = ("train", "shifted")
# What stop may say; "incomplete" is only given by recovery after a crash.
OUTCOMES = ("success", "failure", "aborted")
ALL_OUTCOMES = (*OUTCOMES, "incomplete")
NAMED_FAILURE_MODES = ("over_specialization", "mode_collapse", "action_convention_mismatch")

_EPISODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_episode_id(episode_id: str) -> str:
    """An id is also a directory name: letters, digits, ``_ . -``; no path separators."""
    if not _EPISODE_ID.match(episode_id) or episode_id in {".", ".."}:
        raise ValueError(
            f"episode id {episode_id!r} is not usable as a directory name; use letters, "
            "digits, '_', '.' and '-' (at most 128 characters), or leave it empty to generate one."
        )
    return episode_id


def normalize_failure_mode(text: str) -> str:
    """Map spellings of the three named modes to their label; other free text is kept."""
    text = text.strip()
    key = re.sub(r"[\s\-]+", "_", text.lower())
    aliases = {
        "overspecialization": "over_specialization",
        "over_specialisation": "over_specialization",
        "action_mismatch": "action_convention_mismatch",
        "convention_mismatch": "action_convention_mismatch",
    }
    key = aliases.get(key, key)
    return key if key in NAMED_FAILURE_MODES else text


def check_choice(name: str, value: str, choices: tuple[str, ...], allow_empty: bool) -> str:
    if (allow_empty and value == "") or value in choices:
        return value
    empty = " or empty" if allow_empty else ""
    raise ValueError(f"{name} {value!r} is not one of {', '.join(choices)}{empty}.")


@dataclasses.dataclass
class EpisodeMetadata:
    """What is known about one episode. Times are nanoseconds since the epoch."""

    episode_id: str
    source: str = "sim"
    profile: str = ""
    condition: str = ""
    task: str = ""
    seed: int = 0
    note: str = ""
    outcome: str = ""
    success: bool = False
    failure_mode: str = ""
    start_time_ns: int = 0
    end_time_ns: int = 0
    policy_versions: list[str] = dataclasses.field(default_factory=list)
    message_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    dropped: int = 0
    # Size of the bag's MCAP when the recording stopped: every recorded message (the
    # closing summary, a few KiB, follows). 0 when unknown (recovered bags).
    bag_bytes: int = 0
    steps: int = 0  # control steps (simreal_ros.episodes.steps)
    human_interventions: int = 0
    # Joint order and units of /joint_states and actions as recorded (from the robot model).
    joint_names: list[str] = dataclasses.field(default_factory=list)
    joint_units: list[str] = dataclasses.field(default_factory=list)
    # False until stop wrote the outcome; recovery leaves it False and says "incomplete".
    complete: bool = False
    # True when `simreal episodes recover` rebuilt the bag from an unclosed recording.
    recovered: bool = False
    storage: str = "mcap"

    def __post_init__(self) -> None:
        check_episode_id(self.episode_id)
        check_choice("source", self.source, SOURCES, allow_empty=False)
        check_choice("condition", self.condition, CONDITIONS, allow_empty=True)
        check_choice("outcome", self.outcome, ALL_OUTCOMES, allow_empty=True)

    @property
    def duration_s(self) -> float:
        if not self.end_time_ns or not self.start_time_ns:
            return 0.0
        return max(0.0, (self.end_time_ns - self.start_time_ns) * 1e-9)

    @property
    def messages(self) -> int:
        return sum(self.message_counts.values())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeMetadata:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> EpisodeMetadata:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("episode metadata JSON is not an object.")
        return cls.from_dict(data)

    def to_custom_data(self) -> dict[str, str]:
        """Flat string map for rosbag2's ``custom_data`` (lists and dicts as JSON)."""
        out = {}
        for key, value in self.to_dict().items():
            text = value if isinstance(value, str) else json.dumps(value)
            out[CUSTOM_DATA_PREFIX + key] = text
        return out

    @classmethod
    def from_custom_data(cls, custom: dict[str, str]) -> EpisodeMetadata | None:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        data: dict[str, Any] = {}
        for key, text in (custom or {}).items():
            if not key.startswith(CUSTOM_DATA_PREFIX):
                continue
            name = key[len(CUSTOM_DATA_PREFIX) :]
            if name not in fields:
                continue
            data[name] = text if fields[name].type in ("str", str) else json.loads(text)
        if "episode_id" not in data:
            return None
        return cls.from_dict(data)


def new_episode_id(source: str, now: float | None = None) -> str:
    """Sortable, unique id: ``20261130-193512-sim-4f2a9c`` (UTC time, source, random)."""
    import secrets
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{source or 'episode'}-{secrets.token_hex(3)}"
