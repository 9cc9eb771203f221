"""The one way a node calls a service and waits for the answer.

The caller is a thread other than the one spinning the node (the executor delivers the
response); a service that is missing or does not answer in time raises TimeoutError
naming it and what to check, and a timed-out request is withdrawn.
"""

from __future__ import annotations

import threading
import time
from typing import Any


def call_service(
    client, request, timeout_s: float, what: str = "", resend_after_s: float | None = None
) -> Any:
    """``client``'s response to ``request`` within ``timeout_s`` (for the wait for the
    service and for the answer each).

    ``resend_after_s``: for an idempotent request only, send it again when no answer came
    within this long. A server that has not yet matched a just-started client's response
    reader drops the response (rmw_fastrtps waits 100 ms for the match), which happens
    under load right after a process starts or respawns. The earlier sends stay pending:
    under load DDS repairs a lost packet only at the writer's next heartbeat (3 s), so the
    answer to an earlier send may arrive after a later send, and it is as good.
    """
    label = f"{what} service {client.srv_name}" if what else f"service {client.srv_name}"
    if not client.wait_for_service(timeout_sec=timeout_s):
        raise TimeoutError(
            f"{label} is not available after {timeout_s:g} s; is that node running?"
        )
    deadline = time.monotonic() + timeout_s
    answered = threading.Event()
    pending = []
    try:
        while True:
            future = client.call_async(request)
            future.add_done_callback(lambda _: answered.set())
            pending.append(future)
            left = deadline - time.monotonic()
            answered.wait(min(left, resend_after_s) if resend_after_s else left)
            done = next((f for f in pending if f.done()), None)
            if done is not None:
                pending.remove(done)
                return done.result()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{label} did not answer in {timeout_s:g} s.")
    finally:
        for future in pending:  # withdrawn: a late answer to them is dropped by rclpy
            client.remove_pending_request(future)


def missing_services(names: list[str], timeout_s: float) -> list[str]:
    """Which of ``names`` no node offers after ``timeout_s`` of discovery (a probe node in
    its own rclpy context, for a command that has none)."""
    import rclpy

    rclpy.init()
    try:
        node = rclpy.create_node("simreal_services_probe")
        deadline = time.monotonic() + timeout_s
        while True:
            offered = {name for name, _types in node.get_service_names_and_types()}
            missing = [name for name in names if name not in offered]
            if not missing or time.monotonic() > deadline:
                return missing
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        rclpy.try_shutdown()
