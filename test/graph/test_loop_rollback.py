"""`simreal loop` rolls back a candidate that passed the sim screen but lost on the arm.

The sabotage: the learner trains with a learning rate of 1 (no cap, no trust region), so
its adapter is wrecked; the gate's thresholds are opened wide in this run's learner
settings, so the wreck passes the sim screen and is hot-swapped in. The incumbent (the
shipped reach policy) then replays the candidate's seeds on the stand-in through the
graph, and the paired comparison must roll the candidate back in the policy node and in
the learner's store, diagnose it, and say so in summary.json and report.html.
"""

from __future__ import annotations

import json
import sys

import pytest

from simreal_ros.graph.processes import NodeProcess, graph_environment

pytestmark = [pytest.mark.graph, pytest.mark.slow, pytest.mark.timeout(900)]

PERMISSIVE_GATE = (
    "promote_success_floor=0;promote_ci_low=0;screen_max_intervention_rate=1;"
    "screen_max_saturated_share=1;screen_max_divergence=2"
)
SABOTAGE = "learning_rate=1.0;learning_rate_cap=1.0;anchor_weight=0;bc_use_failures=true"


def test_a_candidate_that_loses_on_the_arm_is_rolled_back(tmp_path, ros_domain_id):
    domain = ros_domain_id  # this pytest process's own domain (one per xdist worker)
    argv = [
        sys.executable, "-m", "simreal_ros.cli.main", "loop", "--task", "reach",
        "--rounds", "1", "--eval-episodes", "4", "--collect-episodes", "2",
        "--updates-per-round", "20", "--screen-seeds", "2", "--real-time-factor", "1.5",
        "--sim-episodes", "2", "--check-episodes", "0", "--methods", "bc,rl",
        "--identify-dynamics", "false",  # bc needs no identified sim; test_loop.py runs it
        "--learner-set", f"{PERMISSIVE_GATE};{SABOTAGE}", "--domain-id", str(domain),
        "--runs-dir", str(tmp_path / "runs"), "--run-id", "rb",
    ]  # fmt: skip
    loop = NodeProcess("loop", argv, graph_environment(domain))
    try:
        loop.process.wait(timeout=800)
    finally:
        loop.stop()  # stops the loop and, through it, every graph node it started
    run = tmp_path / "runs" / "rb"
    output = loop.output()
    assert loop.returncode == 0, output[-4000:]
    summary = json.loads((run / "summary.json").read_text())
    round0, round1 = summary["rounds"]
    assert round1["method"] == "bc" and round1["update"]["promoted"], round1["update"]
    arm = round1["arm_decision"]
    assert arm["kind"] == "passed_sim_lost_on_arm", arm["reason"]
    assert arm["pairs"] == 8 and arm["candidate"] == round1["update"]["version"]
    assert arm["incumbent"] == round0["policy_version"]
    # The policy node runs the incumbent again, and the learner's store agrees.
    assert round1["policy_version"] == round0["policy_version"]
    active = json.loads((run / "models" / "active.json").read_text())
    assert active["current"] is None and active["history"][-1]["reason"] == "rollback"
    # Both versions' trials are recorded; the candidate's are diagnosed on their own.
    roles = [e["role"] for e in round1["episodes"] if e["role"]]
    assert roles.count("candidate") == 8 and roles.count("incumbent") == 8
    assert round1["arm_diagnosis"]["label"]
    assert "restarting the learner (the arm rolled the candidate back; method rl)" in output
    report = (run / "report.html").read_text()
    assert "passed the sim screen and lost on the arm" in report
    print("\n" + arm["reason"])
