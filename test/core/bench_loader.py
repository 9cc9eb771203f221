"""bench/sample_efficiency.py as a module, for the tests of what the script itself holds:
its matrix of arms and its CLI (it is a script under bench/, not a package):
``from core.bench_loader import sample_efficiency``. The rounds, the statistics and the
summary it runs are core modules; tests import those directly."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sample_efficiency.py"
NAME = "sample_efficiency_bench"


def load_sample_efficiency():
    """The bench module, loaded once per process and registered in ``sys.modules`` (its
    dataclasses look their module up while being defined)."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    spec = importlib.util.spec_from_file_location(NAME, BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(NAME, None)
        raise
    return module


sample_efficiency = load_sample_efficiency()
