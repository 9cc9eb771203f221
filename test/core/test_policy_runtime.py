"""The policy node's logic without ROS (policy/runtime.py): versions, ticks, health."""

from __future__ import annotations

import pytest

from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.runtime import ControlTicks, PolicyVersions, diagnostic_report
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.torch_checkpoint import make_untrained_checkpoint

ROBOT = load_robot_description()


def test_ticks_count_the_grid_slots_they_miss():
    ticks = ControlTicks()
    ticks.period_ns = 50_000_000  # 20 Hz
    ticks.start(1_000_000_000)
    assert [ticks.next_sequence(1_000_000_000 + t * 50_000_000) for t in (0, 1, 4)] == [0, 1, 4]
    assert ticks.missed == 2 and ticks.ticks == 3
    # A late timer callback never repeats a sequence number.
    assert ticks.next_sequence(1_000_000_000 + 4 * 50_000_000) == 5
    assert ticks.statistics()["missed_ticks"] == 2
    # A tick acts only on a full, fresh observation; the others are counted by cause.
    assert not ticks.observations_ready(False, 0.0, 0.5)
    assert not ticks.observations_ready(True, 0.6, 0.5)
    assert ticks.observations_ready(True, 0.1, 0.5)
    assert (ticks.skipped_waiting, ticks.skipped_stale) == (1, 1)


def test_versions_refuse_a_rollback_until_configured_with_a_store(tmp_path):
    warnings: list[str] = []
    versions = PolicyVersions(ROBOT, warn=warnings.append)
    try:
        with pytest.raises(ckpt.CheckpointError, match="configure the node"):
            versions.rollback("")
        base_dir = make_untrained_checkpoint(tmp_path / "base", ROBOT, version="base-v1")
        # A rate the checkpoint was not made for is refused and changes nothing.
        with pytest.raises(ValueError, match="control_rate_hz"):
            versions.configure(base_dir, 100.0, "")
        assert versions.checkpoint is None and versions.active_version == ""
        assert versions.source == "nothing (not configured)"
        running = versions.configure(base_dir, None, "")
        assert running.version == versions.active_version == "base-v1"
        assert versions.source == f"base base-v1 from {base_dir}"
        with pytest.raises(ckpt.CheckpointError, match="adapter_store"):
            versions.rollback("")
        # As ~/rollback answers: refused, the reason kept, the running version unchanged.
        done, message = versions.rollback_request("")
        assert not done and "still running base-v1" in message
        assert versions.last_error == message
        # A swap whose load failed keeps the running version and says why.
        done, message = versions.finish_swap(versions.announce("a1", str(tmp_path), "0" * 64))
        assert not done and message.startswith("update refused, still running base-v1")
        with pytest.raises(ckpt.CheckpointError, match="never announced"):
            versions.load("v0001")
        assert versions.active_version == "base-v1" and not warnings
    finally:
        versions.shutdown()


def test_health_is_a_warning_after_a_refusal_or_a_missed_tick(tmp_path):
    versions = PolicyVersions(ROBOT, warn=print)
    try:
        versions.configure(
            make_untrained_checkpoint(tmp_path / "base", ROBOT, version="b"), None, ""
        )
        numbers = {"missed_ticks": 0, "skipped_stale_observation": 0, "inference_p50_us": 1.25}
        healthy, message, values = diagnostic_report("active", versions, numbers)
        assert healthy and message.startswith("running base b") and values["version"] == "b"
        assert values["inference_p50_us"] == "1.2" and values["last_error"] == ""
        healthy, message, _ = diagnostic_report("active", versions, {**numbers, "missed_ticks": 3})
        assert not healthy and "missed 3 tick(s)" in message
        versions.last_error = "update refused, still running b: checksum"
        healthy, message, values = diagnostic_report("configured", versions, numbers)
        assert not healthy and message == values["last_error"] == versions.last_error
    finally:
        versions.shutdown()
