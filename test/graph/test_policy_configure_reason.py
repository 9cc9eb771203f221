"""A policy node whose configure fails says why in its log (issue 28): an arm without a
shipped checkpoint used to fail configure with nothing logged."""

from __future__ import annotations

import sys

import pytest
from user_arm import write_user_arm

from simreal_ros.graph.bringup import STARTUP_FAILED_EXIT_CODE
from simreal_ros.graph.processes import NodeProcess, graph_environment

pytestmark = pytest.mark.graph


def test_configure_failure_reason_is_logged(tmp_path):
    arm = write_user_arm(tmp_path)
    argv = [
        sys.executable, "-m", "simreal_ros.nodes.policy", "--ros-args",
        "-p", f"robot:={arm}", "-p", "autostart:=true",
    ]  # fmt: skip
    policy = NodeProcess("policy", argv, graph_environment())
    try:
        assert policy.wait_for_output("configure refused", 60.0), policy.output()[-3000:]
        assert "no push checkpoint is shipped for the robot 'desk_arm'" in policy.output()
    finally:
        policy.stop()


def test_the_lifecycle_managers_message_says_why_configure_failed():
    argv = [
        sys.executable, "-m", "simreal_ros.cli.main", "up", "--only", "policy,lifecycle_manager",
        "--set", "policy.control_rate_hz=100",  # the shipped checkpoint runs at 20 Hz
    ]  # fmt: skip
    up = NodeProcess("simreal-up", argv, graph_environment())
    try:
        assert up.wait_for_output("configure of 'policy' failed", 60.0), up.output()[-3000:]
        assert up.wait_for_output("See that node's log", 5.0)
        line = next(li for li in up.output().splitlines() if "configure of 'policy'" in li)
        assert "configure refused" in line and "control_rate_hz" in line, line
        # A required node that never became active stops the graph, with a non-zero exit.
        assert up.wait_for_output("never became active", 30.0), up.output()[-3000:]
        assert up.process.wait(timeout=30) == STARTUP_FAILED_EXIT_CODE, up.output()[-3000:]
    finally:
        up.stop()
