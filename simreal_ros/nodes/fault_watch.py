"""fault_watch: records, from outside the graph, what a fault-injection run judges.

``FaultWatch`` keeps policy actions (arrival, stamp), /safety/status, every command to the
arm, the lifecycle manager's /diagnostics and the safety filter's and the policy's
lifecycle transition events (and the filter's logged activations, from /rosout), each with its
arrival time (a log line: its stamp) on this process's monotonic clock, so kills (timed on
it too) line up with what followed.
``FaultRig`` runs `simreal up`, the watcher and a trial runner node (for resets and
recorded episodes) and kills nodes by name. The judging is core code
(``graph/fault_checks.py``). Used by test/graph/test_supervision_faults.py and
bench/supervision_faults.py.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import TransitionEvent
from rcl_interfaces.msg import Log
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool

from simreal_ros.graph.fault_checks import (
    ACTIVATING,
    ACTIVE,
    DRIVING_STATES,
    PolicyKill,
    StatusSample,
    Transition,
)
from simreal_ros.graph.fault_checks import measure_policy_kill as judge_policy_kill
from simreal_ros.graph.processes import NodeProcess, graph_environment
from simreal_ros.msg import PolicyAction, SafetyStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import ERROR

COMMAND_TOPIC = "/forward_position_controller/commands"


def _seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


class FaultWatch(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("fault_watch", **kwargs)
        self.lock = threading.Lock()
        self.actions: list[tuple[float, float]] = []
        self.statuses: list[StatusSample] = []
        self.commands: list[tuple[float, np.ndarray]] = []
        self.manager: list[tuple[float, int, str, dict]] = []
        self.transitions: list[Transition] = []
        # Deep and reliable, as the safety node publishes: no command may go unseen.
        deep = QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=1000, reliability=ReliabilityPolicy.RELIABLE
        )
        self.create_subscription(Float64MultiArray, COMMAND_TOPIC, self._on_command, deep)
        self.create_subscription(PolicyAction, "/policy/action", self._on_action, qos.COMMAND)
        self.create_subscription(SafetyStatus, "/safety/status", self._on_status, deep)
        self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        for name in ("safety", "policy"):
            self.create_subscription(
                TransitionEvent, f"/{name}/transition_event", self._on_transition(name), deep
            )
        # /rosout is transient local: a new process's lines reach this watcher even when its
        # discovery of that process finishes after them, as its transition events may not.
        rosout = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=1000,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.create_subscription(Log, "/rosout", self._on_log, rosout)

    def _on_command(self, msg: Float64MultiArray) -> None:
        with self.lock:
            self.commands.append((time.monotonic(), np.array(msg.data)))

    def _on_action(self, msg: PolicyAction) -> None:
        with self.lock:
            self.actions.append((time.monotonic(), _seconds(msg.header.stamp)))

    def _on_status(self, msg: SafetyStatus) -> None:
        sample = StatusSample(
            time.monotonic(),
            _seconds(msg.header.stamp),
            int(msg.state),
            bool(msg.watchdog_tripped),
            bool(msg.engaged),
        )
        with self.lock:
            self.statuses.append(sample)

    def _on_transition(self, node: str):
        def record(msg: TransitionEvent) -> None:
            event = Transition(time.monotonic(), node, msg.start_state.id, msg.goal_state.id)
            with self.lock:
                self.transitions.append(event)

        return record

    def _on_log(self, msg: Log) -> None:
        # The filter logs "active: ..." in on_activate; both clocks are this host's.
        if msg.name != "safety" or not msg.msg.startswith("active:"):
            return
        at = _seconds(msg.stamp) - (time.time() - time.monotonic())
        with self.lock:
            self.transitions.append(Transition(at, msg.name, ACTIVATING, ACTIVE, logged=True))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        now = time.monotonic()
        for status in msg.status:
            if status.name.startswith("lifecycle_manager"):
                values = {kv.key: kv.value for kv in status.values}
                with self.lock:
                    self.manager.append((now, status.level[0], status.message, values))

    def snapshot(self):
        """Copies of (actions, statuses, commands, manager diagnostics)."""
        with self.lock:
            return (
                list(self.actions),
                list(self.statuses),
                list(self.commands),
                list(self.manager),
            )

    def transition_events(self) -> list[Transition]:
        """A copy of the safety filter's and the policy's lifecycle transitions seen."""
        with self.lock:
            return list(self.transitions)

    def commanded_speed(self, dt: float, last: int = 5, fresh_s: float = 0.1) -> float:
        """Largest joint speed over the newest ``last`` commands (0 with too few, or when
        none arrived in the last ``fresh_s``: the command stream stopped)."""
        with self.lock:
            recent = [c for _r, c in self.commands[-last:]]
            newest = self.commands[-1][0] if self.commands else -float("inf")
        if len(recent) < 2 or time.monotonic() - newest > fresh_s:
            return 0.0
        return float(np.max(np.abs(np.diff(np.array(recent), axis=0)))) / dt

    def acting(self, within_s: float) -> bool:
        """A policy action arrived in the last ``within_s`` seconds."""
        with self.lock:
            return bool(self.actions) and self.actions[-1][0] > time.monotonic() - within_s

    def driving_after_trip(self, since: float) -> bool:
        """A watchdog trip after ``since``, and the filter following fresh actions after it."""
        with self.lock:
            trip = next(
                (s.received for s in self.statuses if s.received > since and s.watchdog_tripped),
                None,
            )
            return trip is not None and any(
                s.received > trip and s.state in DRIVING_STATES and not s.watchdog_tripped
                for s in self.statuses
            )

    def manager_error_since(self, since: float) -> tuple[float, str] | None:
        """The first ERROR the lifecycle manager reported after ``since``: (arrival, message)."""
        with self.lock:
            return next(
                ((m[0], m[2]) for m in self.manager if m[0] > since and m[1] == ERROR[0]), None
            )

    def driving_since(self, since: float) -> bool:
        """The filter followed fresh actions at some point after ``since``."""
        with self.lock:
            return any(
                s.received > since and s.state in DRIVING_STATES and not s.watchdog_tripped
                for s in self.statuses
            )


class FaultRig:
    """`simreal up` with ``up_args``, plus a watcher and a trial runner spun in this process
    (``context``: the rclpy context to use; None: the default one)."""

    def __init__(self, graph: str, up_args: Sequence[str], context=None) -> None:
        from rclpy.parameter import Parameter

        from simreal_ros.nodes.trial_runner import SpinningNode, TrialRunnerNode

        argv = [sys.executable, "-m", "simreal_ros.cli.main", "up", "--graph", graph]
        self.up = NodeProcess("simreal-up", [*argv, *up_args], graph_environment())
        self.trial = TrialRunnerNode(
            context=context,
            parameter_overrides=[
                Parameter("profile", value=graph),
                Parameter("keyboard", value=False),
                Parameter("service_timeout_s", value=60.0),
            ],
        )
        self.spinning = SpinningNode(self.trial)
        self.watch = FaultWatch(context=context)
        self.spinning.executor.add_node(self.watch)

    def close(self) -> None:
        self.up.stop(timeout=30.0)
        self.spinning.close()
        self.watch.destroy_node()

    def pids(self) -> dict[str, int]:
        """The newest pid of each node, from the runner's log."""
        found = re.findall(r"(?:started|respawned) (\w+) \(pid (\d+)", self.up.output())
        return {name: int(pid) for name, pid in found}

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            if self.up.returncode is not None:
                raise AssertionError(f"simreal up exited while waiting for {what}")
            time.sleep(0.02)
        raise AssertionError(
            f"timed out after {timeout:g} s waiting for {what}\n{self.up.output()[-5000:]}"
        )

    def kill(self, name: str) -> tuple[int, float]:
        """SIGKILL the node's process; its pid and the time (monotonic) of the kill."""
        pid = self.pids()[name]
        os.kill(pid, signal.SIGKILL)
        return pid, time.monotonic()

    def respawned(self, name: str, old_pid: int) -> bool:
        return self.pids().get(name, old_pid) != old_pid

    def new_episode(self, seed: int) -> None:
        """A fresh sim episode, running (the trial runner leaves the sim paused after a
        reset until recording starts): the arm moves toward its new goal."""
        self.trial.reset(seed, "train", "")
        client = self.trial.create_client(SetBool, self.trial.config.pause_service)
        try:
            future = client.call_async(SetBool.Request(data=False))
            self.wait(future.done, 30.0, "the sim to run again")
            if not future.result().success:
                raise AssertionError(future.result().message)
        finally:
            self.trial.destroy_client(client)

    def kill_policy_in_motion(self, command_timeout: float, dt: float, acceleration) -> PolicyKill:
        """Wait for motion, SIGKILL the policy, wait for it to drive again; the judgement."""
        self.wait(
            lambda: self.watch.commanded_speed(dt) > 0.05 and self.watch.acting(0.1),
            60.0,
            "the arm to move on fresh actions",
        )
        old, killed_at = self.kill("policy")
        self.wait(lambda: self.respawned("policy", old), 10.0, "the policy's respawn")
        # The respawn is a cold start when the standby has not finished its imports.
        self.wait(
            lambda: self.watch.driving_after_trip(killed_at), 90.0, "the policy to drive again"
        )
        actions, statuses, commands, _ = self.watch.snapshot()
        return judge_policy_kill(
            killed_at, actions, statuses, commands, command_timeout, dt, acceleration
        )
