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


def play_episodes(executor, reset, statuses: list, seeds, condition: str = "train") -> list:
    """Reset the sim bridge to each seed (``reset``: a ResetEpisode client) and wait for
    the episode to end on /task/status (``statuses``: the subscription's list); returns
    whether each succeeded."""
    from simreal_ros.srv import ResetEpisode

    outcomes = []
    for seed in seeds:
        future = reset.call_async(ResetEpisode.Request(seed=seed, condition=condition))
        assert spin_until(executor, future.done, 10.0) and future.result().success
        episode_id = future.result().episode_id
        statuses.clear()

        def finished(episode_id=episode_id) -> bool:
            mine = [s for s in statuses if s.episode_id == episode_id]
            return bool(mine) and (mine[-1].done or mine[-1].truncated or mine[-1].success)

        spin_until(executor, finished, 15.0)
        outcomes.append(any(s.success for s in statuses if s.episode_id == episode_id))
    return outcomes
