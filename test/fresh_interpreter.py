"""Run a snippet in a fresh Python from the checkout: nothing pytest imported can hide in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(script: str) -> str:
    """The snippet's stdout; fails the test with its stderr when it exits non-zero."""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
