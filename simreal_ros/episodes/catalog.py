"""What is in a data directory: episode bags, their state, metadata and message counts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from simreal_ros.episodes.bag_reader import bag_state, mcap_file, scan_mcap
from simreal_ros.episodes.dataset import find_bags, read_episode_metadata
from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.episodes.steps import CONTROL_STEPS


@dataclasses.dataclass
class EpisodeEntry:
    bag_dir: Path
    state: str  # closed, unclosed (needs `simreal episodes recover`) or corrupt
    metadata: EpisodeMetadata | None
    size_bytes: int


def list_episodes(data_dir: Path | str) -> list[EpisodeEntry]:
    """Every episode bag under ``data_dir`` (a folder of bags, or one bag), oldest first."""
    entries = [_entry(bag) for bag in find_bags(data_dir)]
    entries.sort(key=lambda e: (e.metadata.start_time_ns if e.metadata else 0, str(e.bag_dir)))
    return entries


def format_table(entries: list[EpisodeEntry]) -> str:
    header = f"{'episode':36} {'state':9} {'source':9} {'cond':7} {'outcome':10} "
    header += f"{CONTROL_STEPS:>13} {'secs':>6} {'drop':>4} {'MiB':>7}  policy versions"
    lines = [header]
    for e in entries:
        m = e.metadata
        if m is None:
            lines.append(f"{e.bag_dir.name:36} {e.state:9} (no readable metadata)")
            continue
        lines.append(
            f"{m.episode_id:36} {e.state:9} {m.source:9} {m.condition or '-':7} "
            f"{m.outcome or '-':10} {m.steps:13d} {m.duration_s:6.1f} {m.dropped:4d} "
            f"{e.size_bytes / 2**20:7.1f}  {','.join(m.policy_versions) or '-'}"
        )
    successes = sum(1 for e in entries if e.metadata and e.metadata.success)
    lines.append(f"{len(entries)} episodes, {successes} successes")
    return "\n".join(lines)


def find_episode(reference: str, data_dir: Path | str) -> Path:
    """The bag ``reference`` names: a bag directory's path, or an episode id (as
    ``simreal episodes list`` prints it, or a unique prefix of one) under ``data_dir``."""
    path = Path(reference).expanduser()
    if path.is_dir():
        return path
    data_dir = Path(data_dir).expanduser()
    candidates = find_bags(data_dir) if data_dir.is_dir() else []
    exact = [bag for bag in candidates if bag.name == reference]
    if not exact:
        exact = [
            entry.bag_dir
            for entry in (_entry(bag) for bag in candidates)
            if entry.metadata is not None and entry.metadata.episode_id == reference
        ]
    prefixed = [bag for bag in candidates if bag.name.startswith(reference)]
    found = exact or prefixed
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise ValueError(
            f"{reference!r} matches {len(found)} episodes under {data_dir} "
            f"({', '.join(b.name for b in found[:5])}, ...); give more of the id."
        )
    raise FileNotFoundError(
        f"no episode bag at {path} and no episode with id {reference!r} under {data_dir}; "
        "`simreal episodes list --data-dir DIR` shows the ids."
    )


def _entry(bag: Path) -> EpisodeEntry:
    state = bag_state(bag)
    meta = read_episode_metadata(bag) if state != "corrupt" else None
    size = sum(p.stat().st_size for p in bag.iterdir() if p.is_file())
    return EpisodeEntry(bag, state, meta, size)


def episode_info(bag_dir: Path | str) -> dict:
    """State, metadata and per-topic message counts (from the file itself) of one bag."""
    bag_dir = Path(bag_dir)
    if not bag_dir.is_dir():
        raise FileNotFoundError(f"{bag_dir} is not an episode bag directory.")
    state = bag_state(bag_dir)
    info: dict = {"bag": str(bag_dir), "state": state}
    if state == "corrupt":
        return info
    scan = scan_mcap(mcap_file(bag_dir))
    info["topics"] = {
        scan.channels[cid].topic: {
            "type": scan.schemas[scan.channels[cid].schema_id].name
            if scan.channels[cid].schema_id in scan.schemas
            else "",
            "messages": count,
        }
        for cid, count in sorted(scan.message_counts.items())
    }
    if scan.error:
        info["read_stopped_at"] = scan.error
    meta = read_episode_metadata(bag_dir)
    info["metadata"] = meta.to_dict() if meta else None
    return info
