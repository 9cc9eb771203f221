"""The supervision policy: declared once in the graph description, followed by `simreal up`
(GraphRunner), the launch files and the lifecycle manager's recovery plan."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from simreal_ros.graph import bringup, description
from simreal_ros.graph.description import NodeSpec, Supervision
from simreal_ros.graph.runner import GraphRunner


def test_every_node_has_a_policy_and_the_safety_layer_and_arm_side_are_required():
    for profile in description.PROFILES:
        nodes = {node.name: node for node in description.graph(profile)}
        for node in nodes.values():
            assert node.supervision is description.SUPERVISION[node.name]
            assert node.supervision.on_death, node.name
            assert node.supervision.respawn, node.name  # everything respawns by default
        assert nodes["safety"].supervision.required
        assert not nodes["policy"].supervision.required
        if profile == "sim":
            assert nodes["sim_bridge"].supervision.required
    real = {node.name: node for node in description.graph("real")}
    sim = {node.name: node for node in description.graph("sim")}
    assert real["safety"].parameters["require_engage"] is True  # nothing moves unasked
    assert "require_engage" not in sim["safety"].parameters  # sim: engaged from the start
    stopped = description.without_respawn(list(real.values()))
    assert all(not n.supervision.respawn and n.supervision.required for n in stopped)
    loud = {n.name: n for n in description.verbose(list(real.values()))}
    assert loud["safety"].parameters["verbose_log"] is True


def test_backoff_and_the_maximum_count_decide_what_a_death_means():
    policy = Supervision(required=True, respawn=True, respawn_delay_s=0.5, max_respawns=3)
    assert [policy.delay(k) for k in range(3)] == [0.5, 1.0, 2.0]
    assert [policy.after_death(k) for k in range(4)] == ["respawn"] * 3 + ["stop_graph"]
    optional = dataclasses.replace(policy, required=False)
    assert optional.after_death(3) == "leave_stopped"
    assert Supervision(required=False, respawn=False).after_death(0) == "leave_stopped"
    with pytest.raises(ValueError, match="backoff >= 1"):
        Supervision(required=True, respawn=True, backoff=0.5)


def test_recovery_holds_everything_after_a_missing_node_and_brings_it_back_in_order():
    order = ["sim_bridge", "safety", "policy"]
    active = dict.fromkeys(order, "active")
    assert bringup.recovery_plan(order, active) == []
    # The filter died: the policy stops at once; nothing is brought up past the gap.
    gone = {**active, "safety": bringup.GONE}
    assert bringup.recovery_plan(order, gone) == [
        ("policy", "deactivate"),
        ("policy", "cleanup"),
    ]
    # The filter is back (unconfigured): up first, then the policy afresh.
    back = {**active, "safety": "unconfigured", "policy": "unconfigured"}
    assert bringup.recovery_plan(order, back) == [
        ("safety", "configure"),
        ("safety", "activate"),
        ("policy", "configure"),
        ("policy", "activate"),
    ]
    # It came back before the policy was stopped: the policy still stops first.
    quick = {**active, "safety": "unconfigured"}
    assert bringup.recovery_plan(order, quick) == [
        ("policy", "deactivate"),
        ("policy", "cleanup"),
        ("safety", "configure"),
        ("safety", "activate"),
        ("policy", "configure"),
        ("policy", "activate"),
    ]
    # A respawned policy is configured and activated; nothing else changes.
    policy = {**active, "policy": "unconfigured"}
    assert bringup.recovery_plan(order, policy) == [
        ("policy", "configure"),
        ("policy", "activate"),
    ]
    # A finalized or unknown node is as good as gone.
    assert bringup.recovery_plan(order, {**active, "sim_bridge": "finalized"}) == [
        ("policy", "deactivate"),
        ("policy", "cleanup"),
        ("safety", "deactivate"),
        ("safety", "cleanup"),
    ]


def _exiting_node(name: str, supervision: Supervision) -> NodeSpec:
    """A process that exits at once with code 2 (json.tool refuses --ros-args)."""
    return NodeSpec(name=name, executable=name, module="json.tool", supervision=supervision)


def _supervise_until(runner: GraphRunner, done, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fatal = runner.supervise()
        if fatal is not None or done():
            return fatal
        time.sleep(0.02)
    raise AssertionError(f"supervision did not settle: {runner.status()}")


def test_the_runner_respawns_with_backoff_gives_up_and_writes_the_record():
    flaky = Supervision(
        required=False, respawn=True, respawn_delay_s=0.05, backoff=2.0, max_respawns=2
    )
    required = Supervision(required=True, respawn=True, respawn_delay_s=0.05, max_respawns=1)
    nodes = [_exiting_node("flaky", flaky), _exiting_node("needed", required)]
    runner = GraphRunner(nodes, "sim", log=None)
    try:
        runner.start()
        started = time.monotonic()
        fatal = _supervise_until(runner, lambda: False)
        elapsed = time.monotonic() - started
        status = json.loads(runner.status_file.read_text())["nodes"]
    finally:
        runner.stop()
    assert fatal == 1  # the required node's one respawn is spent: the graph stops
    assert status["needed"]["restarts"] == 1
    assert status["needed"]["last_exit_code"] == 2
    assert status["needed"]["last_exit_time"] > 0.0
    # The optional one was respawned twice (0.05 s, then 0.1 s) and is left stopped, or is
    # still on its way there when the required one stops the graph.
    assert status["flaky"]["restarts"] <= 2
    assert elapsed >= 0.05
    runner = GraphRunner([_exiting_node("flaky", flaky)], "sim", log=None)
    try:
        runner.start()
        assert _supervise_until(runner, lambda: runner.records[0].given_up) is None
        status = runner.status()["nodes"]["flaky"]
    finally:
        runner.stop()
    assert status["restarts"] == 2 and status["state"] == "stopped"
    assert status["last_exit_code"] == 2


def test_a_respawn_hands_over_to_the_waiting_standby_and_a_new_one_follows(tmp_path, monkeypatch):
    from simreal_ros.graph import runner as runner_module

    monkeypatch.setattr(runner_module, "STANDBY_AFTER_S", 0.2)
    policy = Supervision(required=False, respawn=True, respawn_delay_s=0.05, standby=True)
    node = NodeSpec(
        name="worker", executable="worker", module="core.standby_node", supervision=policy
    )
    runner = GraphRunner([node], "sim", log=None)
    test_dir = str(Path(__file__).resolve().parents[1])
    runner.env["PYTHONPATH"] = f"{test_dir}:{runner.env['PYTHONPATH']}"
    runner.env["STANDBY_TEST_DIR"] = str(tmp_path)
    running = lambda: {int(p.name) for p in tmp_path.iterdir()}  # noqa: E731
    try:
        runner.start()
        first = runner.processes[0].process.pid
        _supervise_until(runner, lambda: 0 in runner.standby and running() == {first})
        spare = runner.standby[0].process.pid
        assert spare != first and runner.standby[0].returncode is None
        time.sleep(0.3)
        assert running() == {first}, "a standby joins only when handed the node"
        os.kill(first, signal.SIGKILL)
        _supervise_until(runner, lambda: runner.records[0].restarts == 1)
        # The standby became the node (no cold start), and a new standby follows.
        assert runner.processes[0].process.pid == spare == runner.records[0].pid
        _supervise_until(runner, lambda: spare in running() and 0 in runner.standby)
        assert runner.standby[0].process.pid not in (first, spare)
        # A standby that dies is replaced; the node itself is untouched.
        os.kill(runner.standby[0].process.pid, signal.SIGKILL)
        dead = runner.standby[0].process.pid
        _supervise_until(
            runner, lambda: 0 in runner.standby and runner.standby[0].process.pid != dead
        )
        assert runner.records[0].restarts == 1 and runner.processes[0].returncode is None
        processes = [runner.processes[0], runner.standby[0]]
    finally:
        runner.stop()
    assert all(p.returncode is not None for p in processes), "stop ends the standby too"
    assert running() == {first, spare}


def test_the_graph_is_ready_once_every_node_and_standby_reported_and_again_after_a_kill(
    tmp_path, monkeypatch
):
    import io

    from simreal_ros.graph import runner as runner_module

    monkeypatch.setattr(runner_module, "STANDBY_AFTER_S", 0.2)
    with_standby = Supervision(required=False, respawn=True, respawn_delay_s=0.05, standby=True)
    plain = Supervision(required=False, respawn=True, respawn_delay_s=0.05)
    nodes = [
        NodeSpec(
            name="worker", executable="w", module="core.standby_node", supervision=with_standby
        ),
        NodeSpec(name="other", executable="o", module="core.standby_node", supervision=plain),
    ]
    log = io.StringIO()
    runner = GraphRunner(nodes, "sim", log=log)
    test_dir = str(Path(__file__).resolve().parents[1])
    runner.env["PYTHONPATH"] = f"{test_dir}:{runner.env['PYTHONPATH']}"
    runner.env["STANDBY_TEST_DIR"] = str(tmp_path)
    ready_lines = lambda: log.getvalue().count(runner_module.GRAPH_READY)  # noqa: E731
    try:
        runner.start()
        waiting = runner.waiting_for()
        # Just started: a node may already be up (a fast host), but the worker's standby
        # starts only 0.2 s after the worker is up, so one of the two is still to come.
        assert not runner.ready and {"worker", "worker standby"} & set(waiting), waiting
        assert set(waiting) <= {"worker", "worker standby", "other"}, waiting
        _supervise_until(runner, lambda: runner.ready)
        # Ready means the standby has its imports done too, not only the nodes up.
        spare = runner.standby[0]
        assert (runner.ready_dir / str(spare.process.pid)).read_text() == "standby"
        assert ready_lines() == 1 and json.loads(runner.status_file.read_text())["ready"]
        os.kill(runner.processes[0].process.pid, signal.SIGKILL)
        _supervise_until(runner, lambda: not runner.ready)
        assert not json.loads(runner.status_file.read_text())["ready"]
        _supervise_until(runner, lambda: runner.ready)  # the standby took over; a new one
        assert runner.processes[0].process.pid == spare.process.pid
        assert ready_lines() == 2 and "(after 1 restart)" in log.getvalue()
    finally:
        runner.stop()
    # A node that never reports itself up keeps the graph from being ready.
    monkeypatch.setenv("STANDBY_TEST_NOT_READY", "1")
    runner = GraphRunner(nodes[1:], "sim", log=None)
    runner.env["PYTHONPATH"] = f"{test_dir}:{runner.env['PYTHONPATH']}"
    runner.env["STANDBY_TEST_DIR"] = str(tmp_path / "never")
    (tmp_path / "never").mkdir()
    try:
        runner.start()
        _supervise_until(runner, lambda: any((tmp_path / "never").iterdir()))
        for _ in range(10):
            runner.supervise()
            time.sleep(0.02)
        assert not runner.ready and runner.waiting_for() == ["other"]
    finally:
        runner.stop()


def test_the_lifecycle_manager_is_told_where_the_record_is():
    nodes = description.graph("real")
    runner = GraphRunner(nodes, "real", log=None)
    try:
        manager = next(n for n in runner.nodes if n.name == "lifecycle_manager")
        assert manager.parameters["supervision_status_file"] == str(runner.status_file)
        fields = {f.name for f in dataclasses.fields(bringup.LifecycleManagerConfig)}
        assert "supervision_status_file" in fields
    finally:
        runner.stop()


class _Recorded:
    """Stands in for one launch/launch_ros class: keeps what it was given."""

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs


def _fake_launch(monkeypatch) -> None:
    """Just enough of `launch` and `launch_ros` (not on PyPI) to build the description."""
    modules = {
        "launch": ["LaunchDescription"],
        "launch.actions": [
            "DeclareLaunchArgument",
            "IncludeLaunchDescription",
            "LogInfo",
            "OpaqueFunction",
        ],
        "launch.conditions": ["IfCondition"],
        "launch.launch_description_sources": ["AnyLaunchDescriptionSource"],
        "launch.substitutions": ["LaunchConfiguration", "PythonExpression"],
        "launch_ros": [],
        "launch_ros.actions": ["LifecycleNode", "Node"],
        "launch_ros.parameter_descriptions": ["ParameterValue"],
    }
    for module, names in modules.items():
        fake = types.ModuleType(module)
        for name in names:
            setattr(fake, name, type(name, (_Recorded,), {}))
        monkeypatch.setitem(sys.modules, module, fake)
    sys.modules["launch.actions"].Shutdown = type("Shutdown", (_Recorded,), {})
    monkeypatch.delitem(sys.modules, "simreal_ros.nodes.launch_graph", raising=False)


def test_the_launch_files_express_the_same_policy(monkeypatch):
    _fake_launch(monkeypatch)
    from simreal_ros.nodes import launch_graph

    for profile in description.PROFILES:
        built = launch_graph.launch_description(profile)
        (actions,) = built.args
        launched = {
            a.kwargs["name"]: a for a in actions if type(a).__name__ in ("Node", "LifecycleNode")
        }
        specs = {spec.name: spec for spec in description.graph(profile)}
        assert set(launched) == set(specs)
        for name, action in launched.items():
            policy = specs[name].supervision
            assert action.kwargs["respawn"] is policy.respawn
            assert action.kwargs["respawn_delay"] == policy.respawn_delay_s
            assert action.kwargs["respawn_max_retries"] == policy.max_respawns
            on_exit = action.kwargs["on_exit"]
            event = types.SimpleNamespace(returncode=-9)
            said = [on_exit(event, None) for _ in range(policy.max_respawns + 1)]
            assert all(type(a[0]).__name__ == "LogInfo" for a in said[:-1])
            last = type(said[-1][0]).__name__
            # The respawns spent: a required node shuts the launch down, others stay down.
            assert last == ("Shutdown" if policy.required else "LogInfo"), (name, last)


def test_the_launch_files_check_their_command_line_before_any_node(monkeypatch):
    _fake_launch(monkeypatch)
    from simreal_ros.nodes import launch_graph
    from simreal_ros.settings_check import SettingsError

    for profile in description.PROFILES:
        (actions,) = launch_graph.launch_description(profile).args
        first = actions[0]
        assert type(first).__name__ == "OpaqueFunction"
        declared = {a.args[0] for a in actions if type(a).__name__ == "DeclareLaunchArgument"}
        assert declared == set(description.declared_launch_arguments(profile))

        def run(argv, configurations=None, first=first):
            context = types.SimpleNamespace(argv=argv, launch_configurations=configurations or {})
            return first.kwargs["function"](context, *first.kwargs["args"])

        assert run(["robot:=panda", "task:=push"]) == []
        with pytest.raises(SettingsError, match="did you mean 'task'"):
            run(["tsk:=push"])
        # Included by a parent launch file with arguments of its own: told not to check.
        assert run(["tsk:=push"], {"check_arguments": "false"}) == []


def test_the_fault_checks_judge_a_policy_kill_from_recordings():
    from simreal_ros.graph.fault_checks import StatusSample, commands_outside, measure_policy_kill

    dt, timeout, accel = 0.01, 0.3, np.array([10.0])
    # Actions every 50 ms up to the kill at t=1.0 (stamps = arrival here); the command moves
    # at 0.5 rad/s, is held from the trip at 1.3 s (braking at A), and driven again at 3 s.
    actions = [(t, t) for t in np.arange(0.0, 1.0, 0.05)]
    commands, q, v, t = [], 0.0, 0.5, 0.0
    while t < 3.5:
        if 1.3 <= t < 3.0:
            v = max(0.0, v - accel[0] * dt)
        elif t >= 3.0:
            v = 0.2
        q += v * dt
        commands.append((t, np.array([q])))
        t = round(t + dt, 6)
    statuses = [
        StatusSample(0.5, 0.5, 0, False, True),
        StatusSample(1.305, 1.3, 2, True, True),
        StatusSample(3.005, 3.0, 0, False, True),
    ]
    kill = measure_policy_kill(1.0, actions, statuses, commands, timeout, dt, accel)
    assert kill.trip_latency_s == pytest.approx(1.3 - 0.95)
    assert kill.trip_latency_s > kill.trip_bound_s  # 0.35 s > 0.32 s: judged as missed
    assert kill.came_to_rest and kill.back_after_s == pytest.approx(2.005)
    assert kill.braking_distance[0] <= kill.braking_bound[0]
    assert not kill.within_bounds
    # A command that kept going after the trip is judged as not braking.
    runaway = [(r, c if r < 1.3 else c + 0.5 * (r - 1.3)) for r, c in commands]
    assert not measure_policy_kill(
        1.0, actions, statuses, runaway, timeout, dt, accel
    ).came_to_rest
    assert commands_outside([np.array([0.0]), np.array([1.0 + 1e-12])], [0.0], [1.0]) == 1


def test_a_filter_death_is_judged_from_the_lifecycle_transition_events():
    from simreal_ros.graph.fault_checks import Transition, filter_death_seen, judge_filter_death

    # Filter killed at 1.0; the policy deactivated at 1.3 (deactivating -> inactive), cleaned
    # up, configured, and activated at 1.6 (inactive -> activating) after the new filter's
    # activation at 1.5. Actions every 50 ms, none while held. A fast respawn: a 0.3 s hold.
    def events(policy_up: float, filter_up: float | None, logged_up: float | None = None):
        ts = [
            Transition(1.3, "policy", 14, 2),
            Transition(1.35, "policy", 11, 1),
            Transition(1.55, "policy", 10, 2),
            Transition(policy_up, "policy", 2, 13),
            Transition(policy_up + 0.01, "policy", 13, 3),
            Transition(0.5, "safety", 13, 3),  # the old filter's, before the kill
        ]
        if filter_up is not None:
            ts.append(Transition(filter_up, "safety", 13, 3))
        if logged_up is not None:  # the watcher sees a log line after its later events
            ts.append(Transition(logged_up, "safety", 13, 3, logged=True))
        return ts

    actions = [(t, t) for t in np.arange(0.0, 1.3, 0.05)]
    actions += [(t, t) for t in np.arange(1.62, 3.0, 0.05)]
    report = judge_filter_death(1.0, actions, events(1.6, 1.5))
    assert report["policy_held_for_s"] == pytest.approx(0.3)
    assert report["filter_seen_by"] == "its transition event"
    # The filter's event missed by a watcher still discovering the new process: the filter's
    # own logged activation, timed by its stamp, stands in; a late one is still caught.
    report = judge_filter_death(1.0, actions, events(1.6, None, logged_up=1.49))
    assert report["filter_seen_by"] == "its log line"
    with pytest.raises(AssertionError, match="before the new safety filter"):
        judge_filter_death(1.0, actions, events(1.6, None, logged_up=1.8))
    with pytest.raises(AssertionError, match="before the new safety filter"):
        judge_filter_death(1.0, actions, events(1.6, 2.5))
    with pytest.raises(AssertionError, match="no activation of the new safety filter"):
        judge_filter_death(1.0, actions, events(1.6, None))
    with pytest.raises(AssertionError, match="never deactivated"):
        judge_filter_death(1.0, actions, [])
    with pytest.raises(AssertionError, match="arrived while it was held"):
        judge_filter_death(1.0, [*actions, (1.45, 1.45)], events(1.6, 1.5))
    # The graph test waits until every event the judge reads is in: the policy's activation
    # can arrive after the filter's statuses say it drives.
    assert filter_death_seen(1.0, events(1.6, 1.5))
    assert filter_death_seen(1.0, events(1.6, None, logged_up=1.49))
    assert not filter_death_seen(1.0, events(1.6, None))
    held_only = [*events(1.6, 1.5)[:3], Transition(1.5, "safety", 13, 3)]
    assert not filter_death_seen(1.0, held_only)
    assert not filter_death_seen(1.0, [])


def test_up_help_states_the_supervision_rule_not_that_one_death_stops_every_node(capsys):
    from simreal_ros.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the others are stopped" not in text and "dies the others" not in text
    assert "Supervision follows each node's policy" in text and "docs/supervision.md" in text
    assert "respawned" in text and "the other nodes keep running" in text
    assert "The safety filter and the arm side stay up" in text
    assert "a dead policy is respawned while the filter holds the arm" in text
    required = [name for name, s in description.SUPERVISION.items() if s.required]
    assert f"Only a required node ({', '.join(required)})" in text
    assert "(graph stopped)" in text and "the exit code is 0" in text


def test_a_user_stop_ends_with_a_line_naming_each_node_and_its_exit_status(tmp_path):
    import io
    import threading

    from simreal_ros.graph import runner as runner_module

    plain = Supervision(required=False, respawn=True, respawn_delay_s=0.05)
    nodes = [
        NodeSpec(name=name, executable=name, module="core.standby_node", supervision=plain)
        for name in ("first", "second")
    ]
    log = io.StringIO()
    runner = GraphRunner(nodes, "sim", log=log)
    test_dir = str(Path(__file__).resolve().parents[1])
    runner.env["PYTHONPATH"] = f"{test_dir}:{runner.env['PYTHONPATH']}"
    runner.env["STANDBY_TEST_DIR"] = str(tmp_path)

    def ctrl_c_once_ready() -> None:
        deadline = time.monotonic() + 60.0
        while runner_module.GRAPH_READY not in log.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends `simreal up`

    threading.Thread(target=ctrl_c_once_ready, daemon=True).start()
    assert runner.run() == 0, log.getvalue()
    last = log.getvalue().splitlines()[-1]
    # The stand-in nodes die of the SIGINT they are stopped with (a KeyboardInterrupt).
    expected = "first killed by SIGINT, second killed by SIGINT; exit code 0"
    assert last == f"[simreal up] graph stopped (SIGINT from the user): {expected}", last
    assert runner_module.exit_status(0) == "0" and runner_module.exit_status(3) == "3"
    assert runner_module.exit_status(-9) == "killed by SIGKILL"
