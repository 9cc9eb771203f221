"""Item functions for test_sim_executor.py, importable by worker processes and Ray workers
(``from core.executor_tasks import ...``, as the tests' import path has ``test/``)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def square_with_pid(item: int) -> tuple[int, int]:
    return item * item, os.getpid()


def reject_three(item: int) -> int:
    if item == 3:
        raise ValueError(f"item {item} is bad input")
    return item


def slow_square(item: tuple[int, str, float]) -> tuple[int, int]:
    """Announces (index, pid) in a file under ``directory`` as it starts, so a test can kill
    the worker that runs it; then takes ``seconds``."""
    index, directory, seconds = item
    pid = os.getpid()
    started = Path(directory) / f"started-{index}-{pid}"
    started.write_text("", encoding="utf-8")
    time.sleep(seconds)
    return index * index, pid
