"""Ask a running policy node to switch versions (`simreal models rollback --service`)."""

from __future__ import annotations

import rclpy

from simreal_ros.srv import Rollback


def call_rollback_service(name: str, version: str) -> int:
    """Call the policy node's Rollback service; prints its answer, returns an exit code."""
    rclpy.init()
    node = rclpy.create_node("simreal_models_rollback")
    try:
        client = node.create_client(Rollback, name)
        if not client.wait_for_service(timeout_sec=10.0):
            print(f"no {name} service: is the policy node running?")
            return 1
        future = client.call_async(Rollback.Request(version=version))
        rclpy.spin_until_future_complete(node, future, timeout_sec=60.0)
        response = future.result()
        if response is None:
            print(f"{name} did not answer within 60 s.")
            return 1
        print(response.message)
        return 0 if response.success else 1
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
