"""Files replaced atomically: a kill leaves the old content or the new, never half of one.

The text goes to a temporary file beside the target, is flushed to disk, renamed over the
target, and the directory entry is flushed too.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def fsync_directory(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text_atomic(path: Path | str, text: str) -> None:
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as stream:
        stream.write(text)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(temporary, path)
    fsync_directory(path.parent)


def write_json_atomic(path: Path | str, data: Any, sort_keys: bool = False) -> None:
    """JSON (numpy scalars as floats) written with ``write_text_atomic``."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=sort_keys, default=float) + "\n")
