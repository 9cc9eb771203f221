"""Ask a running policy node to roll back (`simreal models rollback --service`): the node
rolls back its own adapter store and runs the result, so nothing else writes the store."""

from __future__ import annotations

import threading

import rclpy
from rclpy.executors import SingleThreadedExecutor

from simreal_ros.nodes.services import call_service
from simreal_ros.srv import Rollback


def call_rollback_service(name: str, version: str) -> int:
    """Call the policy node's Rollback service (``version`` empty: the one before); prints
    its answer, returns an exit code."""
    rclpy.init()
    node = rclpy.create_node("simreal_models_rollback")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        client = node.create_client(Rollback, name)
        try:
            response = call_service(client, Rollback.Request(version=version), 30.0, "rollback")
        except TimeoutError as error:
            print(error)
            return 1
        print(response.message)
        return 0 if response.success else 1
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
