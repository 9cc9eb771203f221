"""`simreal loop` ends every way with one line naming the cause and a non-zero exit, never
a bare traceback: the graph (rclpy) replaced by one that fails the chosen way."""

from __future__ import annotations

import contextlib

import pytest

from simreal_ros.cli.main import main
from simreal_ros.loop.stops import NoArmData
from simreal_ros.nodes import loop_graph


class FailingGraph:
    """A graph whose first check raises ``error``; nothing else of it is reached."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def pause_sim(self, paused: bool) -> bool:
        return True

    def check_nodes(self) -> None:
        raise self.error


CASES = {
    "no arm data": (NoArmData("the 8 episode(s) announced are labelled sim 8"), "labelled sim 8"),
    "round timeout": (TimeoutError("the learner gave no decision within 900 s"), "within 900 s"),
    "dead node": (RuntimeError("node 'policy' exited with code 1"), "'policy' exited"),
    "a defect": (KeyError("missing"), "KeyError: 'missing' (traceback in"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_way_the_loop_stops_is_one_line_and_exit_1(case, tmp_path, monkeypatch, capsys):
    error, cause = CASES[case]

    @contextlib.contextmanager
    def failing_graph(config, run, method, say):
        yield FailingGraph(error)

    monkeypatch.setattr(loop_graph, "ros_loop_graph", failing_graph)
    argv = ["loop", "--task", "reach", "--rounds", "1", "--runs-dir", str(tmp_path)]
    assert main([*argv, "--run-id", "t"]) == 1
    out, err = capsys.readouterr()
    assert "the arm is the stand-in real_twin" in out.splitlines()[0]
    stopped = [line for line in err.splitlines() if line.startswith("[simreal loop] stopped:")]
    assert len(stopped) == 1 and cause in stopped[0], err
    assert "Traceback" not in out + err
    if case == "a defect":
        assert "KeyError" in (tmp_path / "t" / "loop-error.txt").read_text()


def test_a_profile_that_is_no_stand_in_is_refused_before_anything_runs(tmp_path, capsys):
    profile = tmp_path / "my_sim.yaml"
    profile.write_text("profile: my_sim\nscale: {mass.cube: 2.0}\n")
    argv = ["loop", "--stand-in-profile", str(profile), "--runs-dir", str(tmp_path / "runs")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "does not say stand_in: true" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()
