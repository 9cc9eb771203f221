"""Read an episode bag's MCAP: find the file, stream its records tolerantly, say its state.

The normal reading path (dataset, catalog) and crash recovery both read through here; a
stream read stops quietly at the first unreadable record, so a bag whose recorder was
killed still yields everything written before the kill.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from mcap.records import Channel, Footer, Message, Schema
from mcap.stream_reader import StreamReader

MCAP_MAGIC = b"\x89MCAP0\r\n"


@dataclasses.dataclass
class ScanResult:
    """What a tolerant stream read of an MCAP found."""

    schemas: dict[int, Schema]
    channels: dict[int, Channel]
    message_counts: Counter
    complete: bool  # the footer was reached
    error: str  # why reading stopped early ("" when it did not)


def mcap_file(bag_dir: Path) -> Path:
    """The single MCAP file of an episode bag directory."""
    bag_dir = Path(bag_dir)
    if bag_dir.is_file() and bag_dir.suffix == ".mcap":
        return bag_dir
    files = sorted(bag_dir.glob("*.mcap"))
    if len(files) != 1:
        found = ", ".join(f.name for f in files) or "none"
        raise FileNotFoundError(
            f"{bag_dir}: expected exactly one .mcap file in the episode bag, found {found}."
        )
    return files[0]


def iter_mcap_records(path: Path, scan: ScanResult | None = None):
    """Yield MCAP records in file order and stop quietly at the first unreadable one.

    Fills ``scan`` (schemas, channels, counts, whether the footer was reached, the error).
    """
    scan = scan if scan is not None else ScanResult({}, {}, Counter(), False, "")
    with open(path, "rb") as stream:
        reader = StreamReader(stream, record_size_limit=1 << 31)
        try:
            for record in reader.records:
                if isinstance(record, Schema):
                    scan.schemas[record.id] = record
                elif isinstance(record, Channel):
                    scan.channels[record.id] = record
                elif isinstance(record, Message):
                    if record.channel_id not in scan.channels:
                        raise ValueError(f"message on unknown channel {record.channel_id}")
                    scan.message_counts[record.channel_id] += 1
                elif isinstance(record, Footer):
                    scan.complete = True
                yield record
        except Exception as error:  # truncated or corrupted tail: keep what came before
            scan.error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def scan_mcap(path: Path) -> ScanResult:
    scan = ScanResult({}, {}, Counter(), False, "")
    for _ in iter_mcap_records(path, scan):
        pass
    return scan


def bag_state(bag_dir: Path) -> str:
    """``closed`` (metadata.yaml and a complete MCAP), ``unclosed`` or ``corrupt``."""
    bag_dir = Path(bag_dir)
    try:
        path = mcap_file(bag_dir)
    except FileNotFoundError:
        return "corrupt"
    with open(path, "rb") as f:
        head = f.read(8)
        f.seek(max(0, path.stat().st_size - 8))
        tail = f.read(8)
    if head != MCAP_MAGIC:
        return "corrupt"
    if tail == MCAP_MAGIC and (bag_dir / "metadata.yaml").exists():
        return "closed"
    return "unclosed"
