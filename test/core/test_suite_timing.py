"""The suite's time budget: the verdict, the files that grew, and the report by tier."""

from __future__ import annotations

import json

import suite_timing

# The budget as given, whatever this host's speed (the scaling has its own tests).
FIXED_BUDGET = (
    "[pytest]\nsuite_budget_s = {budget}\nsuite_budget_slack = 0.25\n"
    "suite_budget_host_scaled = false\n"
)


def test_within_budget_is_ok_everywhere():
    assert suite_timing.budget_verdict(500.0, 600.0, 0.25, ci=True) == "ok"
    assert suite_timing.budget_verdict(600.0, 600.0, 0.25, ci=False) == "ok"


def test_over_budget_warns_on_a_developer_machine_whatever_the_margin():
    assert suite_timing.budget_verdict(700.0, 600.0, 0.25, ci=False) == "warn"
    assert suite_timing.budget_verdict(6000.0, 600.0, 0.25, ci=False) == "warn"


def test_ci_fails_only_past_the_slack():
    assert suite_timing.budget_verdict(749.0, 600.0, 0.25, ci=True) == "warn"
    assert suite_timing.budget_verdict(751.0, 600.0, 0.25, ci=True) == "fail"


def test_grown_files_rank_growth_and_count_new_files_in_full():
    files = {"test/core/a.py": 30.0, "test/core/b.py": 12.0, "test/graph/new.py": 20.0}
    baseline = {"test/core/a.py": 28.0, "test/core/b.py": 2.0}
    assert suite_timing.grown_files(files, baseline) == [
        ("test/graph/new.py", 20.0, None),
        ("test/core/b.py", 12.0, 2.0),
        ("test/core/a.py", 30.0, 28.0),
    ]


def test_files_that_got_faster_are_not_named():
    assert suite_timing.grown_files({"test/core/a.py": 5.0}, {"test/core/a.py": 9.0}) == []


def test_workers_run_whole_files_longest_first_and_unknown_files_before_known_ones():
    nodeids = [
        "test/core/a.py::t1", "test/core/a.py::t2", "test/graph/slow.py::t",
        "test/core/new.py::t", "test/node/mid.py::t1", "test/node/mid.py::t2",
    ]  # fmt: skip
    baseline = {"test/core/a.py": 1.0, "test/graph/slow.py": 170.0, "test/node/mid.py": 9.0}
    order = [nodeids[i] for i in suite_timing.slowest_files_first(nodeids, baseline)]
    assert order == [
        "test/core/new.py::t", "test/graph/slow.py::t", "test/node/mid.py::t1",
        "test/node/mid.py::t2", "test/core/a.py::t1", "test/core/a.py::t2",
    ]  # fmt: skip


def test_report_sums_by_tier_and_lists_files_slowest_first(tmp_path, capsys):
    record = {
        "wall_s": 100.0,
        "files": {"test/core/test_a.py": 10.0, "test/graph/test_b.py": 30.0},
        "tests": {"test/core/test_a.py::t1": 4.0, "test/core/test_a.py::t2": 6.0,
                  "test/graph/test_b.py::t": 30.0},
    }  # fmt: skip
    path = tmp_path / "times.json"
    path.write_text(json.dumps(record))
    assert suite_timing.main([str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    core = next(line for line in lines if line.startswith("core"))
    graph = next(line for line in lines if line.startswith("graph"))
    assert core.split()[1:3] == ["2", "10.0"] and graph.split()[1:3] == ["1", "30.0"]
    files = [line.split()[0] for line in lines if line.startswith("test/")]
    assert files == ["test/graph/test_b.py", "test/core/test_a.py"]


def test_a_missing_times_file_says_how_to_make_one(tmp_path, capsys):
    assert suite_timing.main([str(tmp_path / "none.json")]) == 2
    assert "make test" in capsys.readouterr().err


def test_the_plugin_writes_the_times_and_fails_ci_past_the_budget(pytester, monkeypatch):
    pytester.makepyfile(test_sleepy="import time\n\ndef test_x():\n    time.sleep(0.2)\n")
    pytester.makeini(FIXED_BUDGET.format(budget=0.05))
    monkeypatch.setenv("CI", "true")
    times = pytester.path / "times.json"
    result = pytester.runpytest("-p", "suite_timing", f"--suite-times={times}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAILED: over budget in CI*", "*test_sleepy.py*(was new)*"])
    assert json.loads(times.read_text())["files"]["test_sleepy.py"] >= 0.2
    monkeypatch.delenv("CI")
    result = pytester.runpytest("-p", "suite_timing", f"--suite-times={times}")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*WARNING: over budget*"])


def test_a_second_run_adds_to_the_first_and_is_judged_on_the_sum(pytester, monkeypatch):
    pytester.makepyfile(test_slow="import time\n\ndef test_x():\n    time.sleep(0.3)\n")
    pytester.makeini(FIXED_BUDGET.format(budget=0.5))
    monkeypatch.setenv("CI", "true")
    times = pytester.path / "times.json"
    assert pytester.runpytest("-p", "suite_timing", f"--suite-times={times}").ret == 0
    result = pytester.runpytest(
        "-p", "suite_timing", f"--suite-times={times}", "--suite-times-append"
    )
    assert result.ret == 1, "two runs of 0.3 s pass a 0.5 s budget by more than 25%"
    assert json.loads(times.read_text())["files"]["test_slow.py"] >= 0.6


def test_a_slow_host_grows_the_budget_by_its_slowness_within_a_limit():
    assert suite_timing.host_scale(0.25, 0.1) == 2.5
    assert suite_timing.host_scale(0.05, 0.1) == 1.0  # a fast host keeps the budget
    assert suite_timing.host_scale(5.0, 0.1) == suite_timing.MAX_HOST_SCALE
    assert suite_timing.host_scale(0.2, None) == 1.0  # a baseline without a host time


def test_the_calibration_is_a_short_positive_time():
    one = suite_timing.host_seconds(repeats=1)
    assert 0.0 < one < 30.0


def test_the_plugin_judges_a_slow_host_against_the_grown_budget(pytester, monkeypatch):
    pytester.makepyfile(test_slow="import time\n\ndef test_x():\n    time.sleep(0.7)\n")
    pytester.makeini("[pytest]\nsuite_budget_s = 0.5\nsuite_budget_slack = 0.25\n")
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(suite_timing, "_baseline", lambda: {"host_seconds": 0.1})
    times = pytester.path / "times.json"
    monkeypatch.setattr(suite_timing, "host_seconds", lambda: 0.1)  # the baseline's speed
    assert pytester.runpytest("-p", "suite_timing", f"--suite-times={times}").ret == 1
    monkeypatch.setattr(suite_timing, "host_seconds", lambda: 0.2)  # twice as slow
    result = pytester.runpytest("-p", "suite_timing", f"--suite-times={times}")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*against a budget of 1 s (0 s on the baseline's host; "
            "this one ran the calibration 2.00x slower)*"
        ]
    )
    assert json.loads(times.read_text())["host_s"] == [0.2, 0.2]
