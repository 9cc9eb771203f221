"""EpisodeEvent from an episode bag's metadata: what /episodes/recorded announces.

The recorder announces each episode it closes; `simreal loop` re-announces a run's closed
bags on resume. Both fill the message from the metadata the same way, here.
"""

from __future__ import annotations

from builtin_interfaces.msg import Time

from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.msg import EpisodeEvent


def episode_event(meta: EpisodeMetadata, bag_path, stamp: Time) -> EpisodeEvent:
    """The fields the metadata gives; callers add what only they know (counts, note)."""
    event = EpisodeEvent()
    event.header.stamp = stamp
    event.episode_id = meta.episode_id
    event.bag_path = str(bag_path)
    event.outcome = meta.outcome
    event.success = bool(meta.success)
    event.failure_mode = meta.failure_mode
    event.condition = meta.condition
    event.source = meta.source
    event.profile = meta.profile
    event.policy_versions = list(meta.policy_versions)
    event.steps = int(meta.steps)
    return event
