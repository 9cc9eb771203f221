"""Helpers for node and graph tests: wait on conditions while spinning, never sleep blindly."""

from __future__ import annotations

import time
from collections.abc import Callable


def spin_until(
    executor, condition: Callable[[], bool], timeout: float, period: float = 0.005
) -> bool:
    """Spin ``executor`` until ``condition()`` is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=period)
    return condition()


def wait_for_subscribers(executor, publisher, count: int = 1, timeout: float = 10.0) -> bool:
    """Wait for DDS matching of ``publisher`` with ``count`` subscriptions."""
    return spin_until(executor, lambda: publisher.get_subscription_count() >= count, timeout)


def wait_for_publishers(executor, subscription, count: int = 1, timeout: float = 10.0) -> bool:
    return spin_until(executor, lambda: subscription.get_publisher_count() >= count, timeout)
