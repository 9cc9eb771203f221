"""The suite's time: a pytest plugin that holds it to a budget, and a report by tier and file.

As a plugin (loaded by conftest.py) it sums each test file's time over setup, call and
teardown and, given ``--suite-times PATH`` (as `make test` gives it), writes them with the
session's wall time to PATH and checks the wall time against the ``suite_budget_s`` ini
setting. Over budget it names the files that grew most against the committed baseline
(test/suite_baseline.json). On a developer's machine that is a warning line; in CI (``CI``
set) the run fails only when the budget is passed by more than ``suite_budget_slack``.

The budget is in the baseline host's seconds: a slow host must not reject good work. The
plugin times a fixed workload (``host_seconds``) when the session starts and ends; on a
host slower at it than the baseline's (``host_seconds`` in the baseline file) the budget
grows by the ratio, at most ``MAX_HOST_SCALE`` times. Hosts of one CI pool differed 2x.

As a script it prints a saved run by tier (core, node, graph) and by file, and can make
that run the new baseline::

    .venv/bin/python test/suite_timing.py build/suite-times.json [--save-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

BASELINE = Path(__file__).with_name("suite_baseline.json")
TIERS = ("core", "node", "graph")
MAX_HOST_SCALE = 3.0


def test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def tier_of(path: str) -> str:
    parts = Path(path).parts
    return next((part for part in parts if part in TIERS), "other")


def grown_files(
    files: dict[str, float], baseline: dict[str, float], count: int = 10
) -> list[tuple[str, float, float | None]]:
    """The files whose time grew most against ``baseline`` (new files count in full)."""
    growth = [(path, seconds, baseline.get(path)) for path, seconds in files.items()]
    growth.sort(key=lambda row: row[1] - (row[2] or 0.0), reverse=True)
    return [row for row in growth[:count] if row[1] - (row[2] or 0.0) > 0.0]


def host_seconds(repeats: int = 3) -> float:
    """Seconds this host takes for a fixed workload like the suite's (interpreted Python
    and small numpy calls, one BLAS product), the median of ``repeats`` runs of about
    0.1 s on the baseline host."""
    import numpy as np

    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((160, 160))
    vector = rng.standard_normal(7)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        table: dict[int, float] = {}
        for i in range(400_000):
            table[i % 97] = table.get(i % 97, 0.0) + i * 0.5
        for _ in range(20_000):
            vector = np.clip(vector * 0.99 + 0.01, -1.0, 1.0)
        for _ in range(200):
            matrix = np.tanh(matrix @ matrix * 0.01)
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def host_scale(host_s: float | None, baseline_host_s: float | None) -> float:
    """How many times slower than the baseline's this host ran ``host_seconds``: at least 1
    (a fast host keeps the budget), at most ``MAX_HOST_SCALE``; 1 when either is unknown."""
    if not host_s or not baseline_host_s:
        return 1.0
    return min(max(host_s / baseline_host_s, 1.0), MAX_HOST_SCALE)


def _baseline() -> dict:
    return json.loads(BASELINE.read_text()) if BASELINE.exists() else {}


def budget_verdict(wall_s: float, budget_s: float, slack: float, ci: bool) -> str:
    """``ok``, ``warn`` (over budget) or ``fail`` (CI only, over budget by more than slack)."""
    if wall_s <= budget_s:
        return "ok"
    return "fail" if ci and wall_s > budget_s * (1.0 + slack) else "warn"


# --- the plugin ---------------------------------------------------------------------------


def pytest_addoption(parser):
    parser.addoption(
        "--suite-times",
        default=None,
        metavar="PATH",
        help="write the session's wall time and each test file's time to PATH (JSON)",
    )
    parser.addoption(
        "--suite-times-append",
        action="store_true",
        help="add this session to the times already in --suite-times PATH (a second run of "
        "the same suite, such as the serial tests), and judge the budget on the sum",
    )
    parser.addini("suite_budget_s", "the suite's wall-time budget in seconds", default="0")
    parser.addini(
        "suite_budget_slack",
        "in CI, fail only when the budget is passed by more than this fraction",
        default="0.25",
    )
    parser.addini(
        "suite_budget_host_scaled",
        "grow the budget on a host slower than the baseline's (see host_seconds)",
        type="bool",
        default=True,
    )


class SuiteClock:
    def __init__(self, config):
        self.config = config
        self.files: dict[str, float] = defaultdict(float)
        self.tests: dict[str, float] = defaultdict(float)
        self.wall_s = 0.0
        self.verdict = "ok"
        self.budget_s = float(config.getini("suite_budget_s"))
        self.host_s: list[float] = []
        self.scale = 1.0  # the budget's growth on a slow host
        if self.budget_s > 0 and config.getoption("--suite-times"):
            self.host_s.append(host_seconds())  # before the workers start
        self.start = time.monotonic()

    def pytest_runtest_logreport(self, report):
        self.files[test_file(report.nodeid)] += report.duration
        self.tests[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session):
        self.wall_s = time.monotonic() - self.start
        if self.host_s:
            self.host_s.append(host_seconds())
        path = self.config.getoption("--suite-times")
        if path and self.config.getoption("--suite-times-append") and Path(path).is_file():
            before = json.loads(Path(path).read_text())
            self.wall_s += before["wall_s"]
            self.host_s += before.get("host_s", [])
            for key, mine in (("files", self.files), ("tests", self.tests)):
                for name, seconds in before[key].items():
                    mine[name] += seconds
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            record = {"wall_s": self.wall_s, "files": dict(self.files), "tests": dict(self.tests),
                      "host_s": self.host_s}  # fmt: skip
            Path(path).write_text(json.dumps(record, indent=1, sort_keys=True))
        if self.budget_s > 0 and path:
            if self.config.getini("suite_budget_host_scaled"):
                host_s = sum(self.host_s) / len(self.host_s) if self.host_s else None
                self.scale = host_scale(host_s, _baseline().get("host_seconds"))
                self.budget_s *= self.scale
            slack = float(self.config.getini("suite_budget_slack"))
            ci = bool(os.environ.get("CI"))
            self.verdict = budget_verdict(self.wall_s, self.budget_s, slack, ci)
            if self.verdict == "fail" and session.exitstatus == 0:
                session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter):
        if self.budget_s <= 0 or not self.config.getoption("--suite-times"):
            return
        write = terminalreporter.write_line
        note = ""
        if self.scale > 1.0:
            note = (f" ({float(self.config.getini('suite_budget_s')):.0f} s on the baseline's "
                    f"host; this one ran the calibration {self.scale:.2f}x slower)")  # fmt: skip
        write(f"suite time {self.wall_s:.0f} s against a budget of {self.budget_s:.0f} s{note}")
        if self.verdict == "ok":
            return
        label = "FAILED: over budget in CI" if self.verdict == "fail" else "WARNING: over budget"
        write(f"{label}; the files that grew most against {BASELINE.name}:")
        baseline = _baseline().get("files", {})
        for path, seconds, before in grown_files(self.files, baseline):
            was = "new" if before is None else f"{before:.0f} s"
            write(f"  {path}: {seconds:.0f} s (was {was})")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        config.pluginmanager.register(SuiteClock(config), "suite-clock")


def slowest_files_first(nodeids: list[str], baseline: dict[str, float]) -> list[int]:
    """The order (indices into ``nodeids``) that runs whole files longest first, tests
    within a file as collected. Files the baseline does not know go first: they may be
    slow."""
    unknown = max(baseline.values(), default=0.0) + 1.0
    return sorted(
        range(len(nodeids)),
        key=lambda i: -baseline.get(test_file(nodeids[i]), unknown),
    )


def pytest_collection_modifyitems(session, config, items):
    """In xdist workers (`make test` runs them with --no-loadscope-reorder, so files are
    handed out in this order): longest first. xdist's own order, most tests first, put the
    one-test graph files of three minutes last, where they set the wall time alone."""
    if not hasattr(config, "workerinput") or not BASELINE.exists():
        return
    baseline = _baseline().get("files", {})
    order = slowest_files_first([item.nodeid for item in items], baseline)
    items[:] = [items[i] for i in order]


# --- the report ---------------------------------------------------------------------------


def report(record: dict) -> str:
    files: dict[str, float] = record["files"]
    by_tier: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for nodeid in record.get("tests", {}):
        count[tier_of(test_file(nodeid))] += 1
    for path, seconds in files.items():
        by_tier[tier_of(path)] += seconds
    total = sum(files.values())
    lines = [f"wall time {record['wall_s']:.0f} s; test time {total:.0f} s over all workers", ""]
    lines.append(f"{'tier':<8}{'tests':>7}{'seconds':>10}{'share':>8}")
    for tier in (*TIERS, "other"):
        if tier in by_tier:
            share = by_tier[tier] / total if total else 0.0
            lines.append(f"{tier:<8}{count[tier]:>7}{by_tier[tier]:>10.1f}{share:>8.0%}")
    lines += ["", f"{'file':<60}{'seconds':>10}"]
    for path, seconds in sorted(files.items(), key=lambda item: item[1], reverse=True):
        lines.append(f"{path:<60}{seconds:>10.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("times", type=Path, help="a file written by pytest --suite-times")
    parser.add_argument(
        "--save-baseline", action="store_true", help=f"make this run {BASELINE.name}"
    )
    args = parser.parse_args(argv)
    if not args.times.is_file():
        print(
            f"{args.times} does not exist: run `make test` (it writes build/suite-times.json)"
            " or pytest with --suite-times PATH first",
            file=sys.stderr,
        )
        return 2
    record = json.loads(args.times.read_text())
    print(report(record))
    if args.save_baseline:
        files = {path: round(seconds, 1) for path, seconds in sorted(record["files"].items())}
        host = record.get("host_s") or [host_seconds()]
        saved = {"host_seconds": round(sum(host) / len(host), 4), "files": files}
        BASELINE.write_text(json.dumps(saved, indent=1) + "\n")
        print(f"\nwrote {BASELINE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
