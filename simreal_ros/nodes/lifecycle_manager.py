"""lifecycle_manager node: brings the graph's lifecycle nodes up and down in order.

Services (std_srvs/Trigger): ``~/startup`` and ``~/resume`` (every managed node to active,
in bring-up order), ``~/pause`` (to inactive, in reverse: the policy stops before the
safety filter brakes the arm) and ``~/cleanup`` (to unconfigured, in reverse). With
``autostart`` it runs startup once the managed nodes' lifecycle services appear. The plans
come from ``simreal_ros.graph.bringup``; this node calls each node's ``change_state`` and
``get_state``. Its callbacks are coroutines, so one executor thread waits on the managed
nodes' answers without blocking anything else.

Supervision: once startup (or resume) has run, it checks every managed node's state each
``watch_period_s``. A node that stops answering is dead; one that answers ``unconfigured``
after being active was restarted. Whatever follows a node that is not active is
deactivated at once (the policy never runs while the safety filter is missing), and the
nodes are brought up again in order when the dead one is back (``bringup.recovery_plan``).
A dead safety filter is logged as an error and reported on /diagnostics. Restart counts,
last exit codes and times come from `simreal up`'s status file where there is one.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.task import Future
from std_srvs.srv import Trigger

from simreal_ros.graph import bringup
from simreal_ros.graph.processes import notify_ready
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import ERROR, OK, WARN, diagnostic_array
from simreal_ros.nodes.params import declare_config
from simreal_ros.nodes.runtime import run_node

# A get_state probe is sent again this often until it is answered or times out.
PROBE_RESEND_S = 0.2


class LifecycleManagerNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("lifecycle_manager", **kwargs)
        self.config: bringup.LifecycleManagerConfig = declare_config(
            self,
            bringup.LifecycleManagerConfig,
            apply=lambda config: setattr(self, "config", config),  # timeouts, read at use
        )
        # Reentrant: a coroutine holds its callback group while it awaits, so the clients'
        # answers and the sleep timers it waits on must not share a mutually exclusive one.
        self._group = ReentrantCallbackGroup()
        group = self._group
        self._get_state = {}
        self._change_state = {}
        for name in self.config.node_names:
            self._get_state[name] = self.create_client(
                GetState, f"/{name}/get_state", callback_group=group
            )
            self._change_state[name] = self.create_client(
                ChangeState, f"/{name}/change_state", callback_group=group
            )
        for operation in bringup.OPERATIONS:
            self.create_service(
                Trigger, f"~/{operation}", self._service(operation), callback_group=group
            )
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        self.create_timer(1.0, self._publish_diagnostics)
        # Each managed node's last error from /diagnostics, so a failed transition's
        # message can say why (a ChangeState answer carries no reason).
        self.node_errors: dict[str, str] = {}
        self.create_subscription(
            DiagnosticArray, "/diagnostics", self._on_diagnostics, qos.STATUS,
            callback_group=group,
        )  # fmt: skip
        self.states: dict[str, str] = {}
        self.last_result = "nothing run yet"
        self.last_ok = True
        self._busy = False
        self._autostart_timer = None
        self.exit_code: int | None = None
        # Supervision: whether the nodes should be active (after startup/resume), what was
        # seen of each node on the last check, and how often each was seen to restart.
        self._keep_active = False
        self._seen: dict[str, str] = {}
        # From `simreal up`'s status file: the pid that last answered, and since when a node
        # whose process still runs has not answered.
        self._answered_pid: dict[str, int] = {}
        self._unanswered_since: dict[str, float] = {}
        self.restarts_seen = dict.fromkeys(self.config.node_names, 0)
        self._down_since: dict[str, float] = {}
        self.create_timer(self.config.watch_period_s, self._watch, group)
        # With autostart the graph is ready once every managed node is active.
        self.defers_ready = self.config.autostart
        if self.config.autostart:
            self._autostart_timer = self.create_timer(0.01, self._autostart, group)
        self.get_logger().info(
            f"lifecycle manager for {', '.join(self.config.node_names)}"
            f"{' (autostart)' if self.config.autostart else ''}"
        )

    async def _autostart(self) -> None:
        self.destroy_timer(self._autostart_timer)
        ok, message = await self.run("startup")
        log = self.get_logger().info if ok else self.get_logger().error
        log(f"autostart: {message}")
        if ok:
            notify_ready()
        if not ok and self.config.exit_on_failed_autostart:
            # run_node ends the process with it; `simreal up` then stops the graph.
            self.exit_code = bringup.STARTUP_FAILED_EXIT_CODE

    def _service(self, operation: str):
        async def callback(request, response):
            response.success, response.message = await self.run(operation)
            return response

        return callback

    async def run(self, operation: str) -> tuple[bool, str]:
        """Run ``operation`` on every managed node; stops at the first failure and says why."""
        if self._busy:
            return False, "another operation is running; try again when it has finished."
        self._busy = True
        try:
            # Supervision keeps the nodes active only after the operator asked for it.
            self._keep_active = bringup.OPERATIONS[operation][0] == "active"
            ok, message = await self._run(operation)
        finally:
            self._busy = False
        self.last_ok, self.last_result = ok, f"{operation}: {message}"
        if ok:
            self._seen = dict(self.states)
        return ok, message

    async def _run(self, operation: str) -> tuple[bool, str]:
        names = list(self.config.node_names)
        for name in names:
            state = await self._query_state(name)
            if state is None:
                return False, (
                    f"node '{name}' has no lifecycle services after "
                    f"{self.config.service_timeout_s:g} s; is it running?"
                )
            self.states[name] = state
        try:
            steps = bringup.plan(operation, names, self.states)
        except ValueError as error:
            return False, str(error)
        for name, transition in steps:
            request = ChangeState.Request()
            request.transition.id = bringup.TRANSITION_IDS[transition]
            answer = await self._call(self._change_state[name], request)
            if answer is None or not answer.success:
                state = await self._query_state(name)
                self.states[name] = state or "unknown"
                why = "no answer" if answer is None else "the node refused it"
                reason = await self._node_error(name)
                return False, (
                    f"{transition} of '{name}' failed ({why}"
                    + (f": {reason}" if reason else "")
                    + f"); it is {self.states[name]}. See that node's log; the nodes after it "
                    "were left as they were."
                )
            self.states[name] = bringup.TRANSITION_RESULTS[transition]
            self.get_logger().info(f"{name}: {transition} done")
        summary = ", ".join(f"{name} {self.states[name]}" for name in names)
        return True, f"done in {len(steps)} transitions: {summary}"

    async def _watch(self) -> None:
        """Notice managed nodes that died or came back, and bring the graph back in order."""
        if not self._keep_active or self._busy:
            return
        self._busy = True
        try:
            await self._recover()
        except Exception as error:  # never let supervision stop: log and retry next period
            self.get_logger().error(f"supervision check failed: {error!r}")
        finally:
            self._busy = False

    async def _probe(self, name: str) -> str:
        """The node's state now, or ``bringup.GONE`` if it does not answer in time."""
        client = self._get_state[name]
        if not client.service_is_ready():
            return bringup.GONE
        answer = await self._call(
            client, GetState.Request(), self.config.probe_timeout_s, PROBE_RESEND_S
        )
        if answer is None:
            return bringup.GONE
        return bringup.STATE_NAMES.get(answer.current_state.id, answer.current_state.label)

    async def _recover(self) -> None:
        names = list(self.config.node_names)
        states = {}
        for name in names:
            state = await self._probe(name)
            # The runner's record read after the probe: a death during it is already there.
            states[name] = self._busy_or_gone(name, state, self._runner_status())
        for name, state in states.items():
            before = self._seen.get(name, "active")
            if state == bringup.GONE and before != bringup.GONE:
                self._down_since[name] = time.monotonic()
                self.restarts_seen[name] += 1
                self._say_down(name)
            elif state == "unconfigured" and before not in (bringup.GONE, "unconfigured"):
                self.restarts_seen[name] += 1  # restarted between two checks
                self._down_since[name] = time.monotonic()
                self._say_down(name)
        self._seen = dict(states)
        self.states = dict(states)
        steps = bringup.recovery_plan(names, states)
        for name, transition in steps:
            request = ChangeState.Request()
            request.transition.id = bringup.TRANSITION_IDS[transition]
            answer = await self._call(self._change_state[name], request)
            if answer is None or not answer.success:
                self.last_ok = False
                self.last_result = (
                    f"recovery: {transition} of '{name}' failed; retrying every "
                    f"{self.config.watch_period_s:g} s"
                )
                self.get_logger().error(self.last_result, throttle_duration_sec=5.0)
                self._seen[name] = self.states[name] = await self._probe(name)
                return
            self._seen[name] = self.states[name] = bringup.TRANSITION_RESULTS[transition]
            self.get_logger().info(f"recovery: {name}: {transition} done")
        if steps and all(self.states[name] == "active" for name in names):
            back = ", ".join(
                f"{name} after {time.monotonic() - since:.1f} s"
                for name, since in self._down_since.items()
            )
            self._down_since.clear()
            self.last_ok, self.last_result = True, f"recovered: every node active again ({back})"
            self.get_logger().info(self.last_result)

    def _busy_or_gone(self, name: str, state: str, runner: dict) -> str:
        """A probe's state, except that an unanswered probe of a node whose process is the
        one that answered before and still runs (`simreal up`'s status file) keeps its last
        state for ``busy_grace_s``: it is busy, not dead. Without a status file (ros2
        launch) an unanswered probe is a death."""
        record = runner.get(name, {})
        if state != bringup.GONE:
            self._unanswered_since.pop(name, None)
            if record.get("pid"):
                self._answered_pid[name] = record["pid"]
            return state
        alive = record.get("state") == "running" and record.get("pid") == self._answered_pid.get(
            name
        )
        last = self._seen.get(name, bringup.GONE)
        if not alive or last == bringup.GONE:
            return state
        since = self._unanswered_since.setdefault(name, time.monotonic())
        return last if time.monotonic() - since < self.config.busy_grace_s else state

    def _say_down(self, name: str) -> None:
        after = self.config.node_names[self.config.node_names.index(name) + 1 :]
        held = f"; holding {', '.join(after)} inactive until it is back" if after else ""
        if name == "safety":
            self.last_ok = False
            self.last_result = (
                "SAFETY FILTER DOWN: no filtered command reaches the arm (its controller "
                f"holds the last one){held}"
            )
            self.get_logger().error(self.last_result)
        else:
            self.last_ok = False
            self.last_result = f"{name} died or restarted{held}"
            self.get_logger().warning(self.last_result)
        # On /diagnostics at once: a standby can bring the node back before the next
        # periodic message, and the death must still be reported.
        self._publish_diagnostics()

    async def _query_state(self, name: str) -> str | None:
        """The node's state, asking again until ``service_timeout_s``: a service that looks
        ready may be a dead process's, still in the graph, that never answers."""
        client = self._get_state[name]
        deadline = time.monotonic() + self.config.service_timeout_s
        while time.monotonic() <= deadline:
            if client.service_is_ready():
                answer = await self._call(client, GetState.Request(), self.config.probe_timeout_s)
                if answer is not None:
                    state = answer.current_state
                    return bringup.STATE_NAMES.get(state.id, state.label)
            await self._sleep(0.05)
        return None

    async def _call(
        self, client, request, timeout: float | None = None, resend_every: float | None = None
    ):
        """The first answer to ``request`` within ``timeout``, or None. ``resend_every``
        (idempotent requests only): send it again that often, keeping the earlier ones
        pending. A node that just came up drops the answers to a client it has not matched
        yet (rmw_fastrtps waits 100 ms for that), so one request could wait out the whole
        timeout while the node is there."""
        now = time.monotonic()
        deadline = now + (timeout or self.config.transition_timeout_s)
        futures = [client.call_async(request)]
        resend_at = now + resend_every if resend_every else float("inf")
        try:
            while True:
                answered = next((f for f in futures if f.done()), None)
                if answered is not None:
                    return answered.result()
                now = time.monotonic()
                if now > deadline:
                    return None
                if now >= resend_at:
                    futures.append(client.call_async(request))
                    resend_at = now + resend_every
                await self._sleep(0.01)
        finally:
            for future in futures:
                if not future.done():
                    client.remove_pending_request(future)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            node = status.name.split(":", 1)[0]
            for value in status.values:
                if value.key == "last_error" and node in self._change_state:
                    self.node_errors[node] = value.value

    async def _node_error(self, name: str, wait_s: float = 1.0) -> str:
        """The node's reported error, waiting briefly for the diagnostics it publishes on a
        failed transition to arrive."""
        deadline = time.monotonic() + wait_s
        while not self.node_errors.get(name) and time.monotonic() < deadline:
            await self._sleep(0.05)
        return self.node_errors.get(name, "")

    async def _sleep(self, seconds: float) -> None:
        """Yield to the executor for ``seconds`` (wall time) without blocking it."""
        done = Future()
        timer = None

        def fire():
            timer.cancel()
            done.set_result(True)

        timer = self.create_timer(seconds, fire, self._group)
        try:
            await done
        finally:
            self.destroy_timer(timer)

    def _runner_status(self) -> dict:
        """`simreal up`'s per-node restart record (JSON data, never code), or {}."""
        path = self.config.supervision_status_file
        if not path:
            return {}
        try:
            return json.loads(Path(path).read_text()).get("nodes", {})
        except (OSError, ValueError, AttributeError):
            return {}

    def _publish_diagnostics(self) -> None:
        values = {name: self.states.get(name, "unknown") for name in self.config.node_names}
        level = OK if self.last_ok else ERROR
        if "safety" in self._down_since:
            level = ERROR
        elif self._down_since and level == OK:
            level = WARN
        runner = self._runner_status()
        for name in self.config.node_names:
            values[f"{name}.restarts_seen"] = self.restarts_seen[name]
        # Every node `simreal up` runs, managed or not: restarts, last exit code and time.
        for name, record in runner.items():
            values[f"{name}.restarts"] = record.get("restarts", 0)
            code = record.get("last_exit_code")
            values[f"{name}.last_exit_code"] = "none" if code is None else code
            stamp = record.get("last_exit_time") or 0.0
            values[f"{name}.last_exit_time"] = (
                datetime.fromtimestamp(stamp, UTC).isoformat(timespec="milliseconds")
                if stamp
                else "never"
            )
            values[f"{name}.process"] = record.get("state", "unknown")
        self._diag_pub.publish(
            diagnostic_array(self, "lifecycle_manager: graph", "", level, self.last_result, values)
        )


def main(args=None) -> None:
    sys.exit(run_node(LifecycleManagerNode, args))


if __name__ == "__main__":
    main()
