"""Shared test setup: isolated DDS domain, fast discovery, one torch thread, rclpy fixtures.

Tiers: test/core (no ROS), test/node (rclpy in one process), test/graph (processes on DDS).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import random
from pathlib import Path

import pytest

from simreal_ros.graph.processes import graph_environment

pytest_plugins = ["pytester", "suite_timing"]


def _domain_id() -> int:
    """One DDS domain per pytest process, so concurrent runs and xdist workers never
    cross-talk. The controller draws a base once (pid and a random draw) and its workers
    inherit it; worker gwN takes base + 1 + N. 1..100 keeps Fast DDS ports valid."""
    base = os.environ.get("SIMREAL_TEST_DOMAIN_BASE")
    if base is None:
        base = str((os.getpid() * 7 + random.randrange(100)) % 100)
        os.environ["SIMREAL_TEST_DOMAIN_BASE"] = base
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    offset = 1 + int(worker[2:]) if worker.startswith("gw") else 0
    return 1 + (int(base) + offset) % 100


_DOMAIN_ID = _domain_id()
os.environ.update(graph_environment(domain_id=_DOMAIN_ID))


# pytest-timeout's signal fires once per test, and only between Python bytecodes: a test
# blocked in native code (DDS, a C++ wait), or whose teardown hangs after the timeout fired,
# never ends, and one worker that never ends holds the whole run (a CI run once hung for
# 75 minutes). faulthandler's watchdog is a thread of its own: past the hard limit it writes
# every thread's stack to build/stuck-tests/ and ends the worker, which xdist reports as a
# crash of that test; the controller prints the stacks in its summary.
# Each run writes under a directory of its own (the controller's pid, handed to the workers
# in the environment), so two runs in one checkout never remove each other's records.
STUCK_ROOT = Path(__file__).resolve().parents[1] / "build" / "stuck-tests"
STUCK_DIR_VARIABLE = "SIMREAL_STUCK_TESTS_DIR"
HARD_LIMIT_MARGIN_S = 120.0
_stuck_log = None


def _stuck_dir() -> Path:
    return Path(os.environ.setdefault(STUCK_DIR_VARIABLE, str(STUCK_ROOT / f"run-{os.getpid()}")))


def pytest_configure(config):
    global _stuck_log
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    stuck_dir = _stuck_dir()  # the controller sets it before its workers start
    if worker is not None or config.getoption("numprocesses", None) in (None, 0):
        stuck_dir.mkdir(parents=True, exist_ok=True)
        _stuck_log = open(stuck_dir / f"{worker or 'main'}-{os.getpid()}.txt", "w")  # noqa: SIM115


def pytest_unconfigure(config):
    if _stuck_log is not None:
        _stuck_log.close()
        record = Path(_stuck_log.name)
        if record.exists() and record.stat().st_size == 0:
            record.unlink()
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        with contextlib.suppress(OSError):
            _stuck_dir().rmdir()  # only when no record is left in it


def _hard_limit_s(item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        limit = float(marker.args[0])
    else:
        limit = float(item.config.getoption("timeout", None) or item.config.getini("timeout") or 0)
    return limit + HARD_LIMIT_MARGIN_S if limit > 0 else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    limit = _hard_limit_s(item)
    if _stuck_log is not None and limit is not None:
        _stuck_log.write(f"{item.nodeid}: past its hard limit of {limit:.0f} s\n")
        _stuck_log.flush()
        faulthandler.dump_traceback_later(limit, file=_stuck_log, exit=True)
    try:
        yield
    finally:
        if _stuck_log is not None and limit is not None:
            faulthandler.cancel_dump_traceback_later()
            _stuck_log.seek(0)
            _stuck_log.truncate()


def pytest_terminal_summary(terminalreporter):
    stuck_dir = _stuck_dir()
    if os.environ.get("PYTEST_XDIST_WORKER") is not None or not stuck_dir.is_dir():
        return
    for record in sorted(stuck_dir.glob("*.txt")):
        text = record.read_text(errors="replace").strip()
        if text:
            terminalreporter.section(f"stuck test, ended by the watchdog ({record.name})")
            terminalreporter.line(text)


def pytest_report_header(config):
    return f"ROS_DOMAIN_ID={_DOMAIN_ID} (localhost discovery, UDPv4)"


@pytest.fixture(scope="session")
def ros_domain_id() -> int:
    return _DOMAIN_ID


@pytest.fixture
def rclpy_context():
    """A fresh rclpy Context per test, shut down afterwards even when the test fails."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context)
    try:
        yield context
    finally:
        if context.ok():
            rclpy.shutdown(context=context)


@pytest.fixture
def executor(rclpy_context):
    """A single-threaded executor on the test's context; spin it with ``spin_until``."""
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor(context=rclpy_context)
    try:
        yield executor
    finally:
        for node in list(executor.get_nodes()):
            executor.remove_node(node)
            node.destroy_node()
        executor.shutdown()


@pytest.fixture(scope="session")
def shipped_reach():
    """The shipped reach checkpoint; it is the project's own, so its absence fails."""
    from simreal_ros.policy.checkpoint import shipped_checkpoint

    path = shipped_checkpoint("reach")
    assert (path / "policy.json").is_file(), f"the shipped reach checkpoint is missing at {path}"
    return path
