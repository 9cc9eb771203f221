"""The README's commands that need a running graph, run as written (issue 28): the
Quickstart's `simreal up` in one shell and `simreal trials` in a second, with a tiny budget
appended (one episode; the learner collects no sim episodes at start). The README is read
at test time; test/core/test_readme_commands.py classifies every other command."""

from __future__ import annotations

import re
import subprocess

import pytest
from readme_commands import ROOT, all_commands, key_of, simreal_argv

from simreal_ros.graph import description
from simreal_ros.graph.processes import NodeProcess, graph_environment
from simreal_ros.graph.runner import GRAPH_STOPPED

pytestmark = pytest.mark.graph

NODES = [node.name for node in description.graph("sim")]


def graph_command(key: tuple[str, ...]) -> str:
    found = [c for _doc, c in all_commands() if key_of(simreal_argv(c)) == key]
    assert found, f"the README has no `simreal {' '.join(key)}` command any more"
    return re.sub(r"^(\.venv/bin/)?simreal", str(ROOT / ".venv" / "bin" / "simreal"), found[0])


def test_quickstart_up_and_trials_run_as_written(tmp_path):
    env = graph_environment()
    env["HOME"] = str(tmp_path / "home")  # the fresh user's ~/.simreal
    up_command = graph_command(("up", "--graph"))
    trials_command = graph_command(("trials",))
    up = NodeProcess(
        "readme-up", ["bash", "-c", f"exec {up_command} --set learner.sim_episodes=0"], env
    )
    try:
        # The summary line names what the policy runs before anything starts.
        assert up.wait_for_output("policy runs base push-base from", 30.0), up.output()[-3000:]
        assert up.wait_for_output("autostart: done", 90.0), up.output()[-3000:]
        trials = subprocess.run(
            ["bash", "-c", f"{trials_command} --episodes 1 --timeout 8"],
            env=env, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert trials.returncode == 0, trials.stdout + trials.stderr + up.output()[-3000:]
        assert re.search(r"\d/1 successes", trials.stdout), trials.stdout
        assert "aborted" not in trials.stdout
    finally:
        up.stop(timeout=30.0)  # up stops its six nodes one after another; slow on a busy host
    assert up.returncode == 0, up.output()[-3000:]
    # Ctrl-C (SIGINT, what stop sends first): the last line says so, with every node's exit
    # status, and no node's output carries a coroutine an interrupted executor left behind.
    last = up.output().splitlines()[-1]
    assert f"[simreal up] {GRAPH_STOPPED} (SIGINT from the user): " in last, last
    assert last.endswith("; exit code 0"), last
    for name in NODES:
        assert re.search(rf"[:,] {name} 0[,;]", last), (name, last)  # each stopped by itself
    assert "was never awaited" not in up.output(), up.output()[-3000:]
    assert "dynamics real_twin" in up.output()
    listed = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "simreal"), "episodes", "list"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert listed.returncode == 0 and "1 episodes" in listed.stdout, listed.stdout
