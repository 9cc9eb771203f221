"""A policy node whose configure fails says why in its log (issue 28): an arm without a
shipped checkpoint used to fail configure with nothing logged."""

from __future__ import annotations

import sys

import pytest
from user_arm import write_user_arm

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
