"""lifecycle_manager node: brings the graph's lifecycle nodes up and down in order.

Services (std_srvs/Trigger): ``~/startup`` and ``~/resume`` (every managed node to active,
in bring-up order), ``~/pause`` (to inactive, in reverse: the policy stops before the
safety filter brakes the arm) and ``~/cleanup`` (to unconfigured, in reverse). With
``autostart`` it runs startup once the managed nodes' lifecycle services appear. The plans
come from ``simreal_ros.graph.bringup``; this node calls each node's ``change_state`` and
``get_state``. Its callbacks are coroutines, so one executor thread waits on the managed
nodes' answers without blocking anything else.
"""

from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.task import Future
from std_srvs.srv import Trigger

from simreal_ros.graph import bringup
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import ERROR, OK, diagnostic_array
from simreal_ros.nodes.params import declare_config
from simreal_ros.nodes.runtime import run_node


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
        self.states: dict[str, str] = {}
        self.last_result = "nothing run yet"
        self.last_ok = True
        self._busy = False
        self._autostart_timer = None
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
            ok, message = await self._run(operation)
        finally:
            self._busy = False
        self.last_ok, self.last_result = ok, f"{operation}: {message}"
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
                return False, (
                    f"{transition} of '{name}' failed ({why}); it is {self.states[name]}. "
                    "See that node's log; the nodes after it were left as they were."
                )
            self.states[name] = bringup.TRANSITION_RESULTS[transition]
            self.get_logger().info(f"{name}: {transition} done")
        summary = ", ".join(f"{name} {self.states[name]}" for name in names)
        return True, f"done in {len(steps)} transitions: {summary}"

    async def _query_state(self, name: str) -> str | None:
        client = self._get_state[name]
        deadline = time.monotonic() + self.config.service_timeout_s
        while not client.service_is_ready():
            if time.monotonic() > deadline:
                return None
            await self._sleep(0.05)
        answer = await self._call(client, GetState.Request())
        if answer is None:
            return None
        return bringup.STATE_NAMES.get(answer.current_state.id, answer.current_state.label)

    async def _call(self, client, request):
        future = client.call_async(request)
        deadline = time.monotonic() + self.config.transition_timeout_s
        while not future.done():
            if time.monotonic() > deadline:
                client.remove_pending_request(future)
                return None
            await self._sleep(0.01)
        return future.result()

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

    def _publish_diagnostics(self) -> None:
        values = {name: self.states.get(name, "unknown") for name in self.config.node_names}
        level = OK if self.last_ok else ERROR
        self._diag_pub.publish(
            diagnostic_array(self, "lifecycle_manager: graph", "", level, self.last_result, values)
        )


def main(args=None) -> None:
    run_node(LifecycleManagerNode, args)


if __name__ == "__main__":
    main()
