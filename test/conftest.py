"""Shared test setup: isolated DDS domain, fast discovery, one torch thread, rclpy fixtures.

Tiers: test/core (no ROS), test/node (rclpy in one process), test/graph (processes on DDS).
"""

from __future__ import annotations

import os
import random

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


def pytest_configure(config):
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


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
