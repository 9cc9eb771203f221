"""Bags as training data: aligned transitions, joint checks, damaged bags, selection."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

from simreal_ros.episodes.dataset import (
    BagWarning,
    EpisodeFilter,
    JointSpecMismatch,
    load_transitions,
    read_episode,
    read_episode_metadata,
)
from simreal_ros.episodes.synthetic import JOINTS, write_episode


def test_transitions_are_aligned_at_the_policy_rate(tmp_path):
    write_episode(tmp_path / "ep", steps=10, done_at=7, interventions_at=(2,), takeover_at=(4,))
    data = read_episode(tmp_path / "ep", JOINTS)
    assert len(data) == 8  # ends at the first done (step 7)
    assert data.dones.tolist() == [False] * 7 + [True]
    assert not data.truncateds.any()
    # Each action's observation is the newest joint state before it (position = step).
    np.testing.assert_allclose(data.obs["joint_position"][:, 0], np.arange(8))
    np.testing.assert_allclose(data.obs["joint_velocity"][:, 0], np.arange(8) * 0.1)
    np.testing.assert_allclose(data.next_obs["joint_position"][:-1, 0], np.arange(1, 8))
    np.testing.assert_allclose(data.rewards, -np.arange(8.0))
    expected = np.arange(8) + 0.5
    expected[4] = -1.0  # the operator's takeover replaced the policy's action at step 4
    np.testing.assert_allclose(data.actions[:, 0], expected)
    assert data.human_interventions.tolist() == [i == 4 for i in range(8)]
    assert data.safety_interventions.tolist() == [2 if i == 2 else 0 for i in range(8)]
    np.testing.assert_allclose(data.safety_penalties[2], 1.0)
    assert data.policy_versions.tolist() == ["v1"] * 5 + ["v2"] * 3
    np.testing.assert_allclose(data.obs["goal_position"][0], [0.5, 0.1, 0.0])
    np.testing.assert_allclose(data.obs["object_position"][3], [0.43, 0.0, 0.02])
    np.testing.assert_allclose(data.obs["object_orientation"][0], [1, 0, 0, 0])
    assert set(data.episode_ids) == {"ep"} and set(data.sources) == {"sim"}


def test_a_late_status_of_the_previous_episode_does_not_end_this_one(tmp_path):
    write_episode(tmp_path / "ep", steps=6, done_at=5, stale_done=True)
    data = read_episode(tmp_path / "ep", JOINTS)
    assert len(data) == 6 and data.dones.tolist() == [False] * 5 + [True]
    np.testing.assert_allclose(data.rewards, -np.arange(6.0))


def test_episode_without_done_ends_truncated(tmp_path):
    write_episode(tmp_path / "ep", steps=5)
    data = read_episode(tmp_path / "ep", JOINTS)
    assert len(data) == 5 and not data.dones.any()
    assert data.truncateds.tolist() == [False] * 4 + [True]


def test_joint_order_mismatch_is_refused_with_a_clear_message(tmp_path):
    write_episode(tmp_path / "ep", steps=3)
    swapped = [JOINTS[1], JOINTS[0], *JOINTS[2:]]
    with pytest.raises(JointSpecMismatch, match="names and order must match"):
        read_episode(tmp_path / "ep", swapped)
    with pytest.raises(JointSpecMismatch, match="units"):
        read_episode(tmp_path / "ep", JOINTS, joint_units=["deg"] * 7)


def test_selection_by_source_condition_outcome_and_version(tmp_path):
    write_episode(tmp_path / "a", 4, episode_id="a", source="sim", outcome="success")
    write_episode(tmp_path / "b", 4, episode_id="b", source="real", outcome="failure")
    write_episode(tmp_path / "c", 8, episode_id="c", source="real", condition="shifted")
    assert len(load_transitions(tmp_path, JOINTS)) == 16
    real = load_transitions(tmp_path, JOINTS, EpisodeFilter(sources=("real",)))
    assert set(real.episode_ids) == {"b", "c"}
    shifted = load_transitions(tmp_path, JOINTS, EpisodeFilter(conditions=("shifted",)))
    assert set(shifted.episode_ids) == {"c"}
    failures = load_transitions(tmp_path, JOINTS, EpisodeFilter(outcomes=("failure",)))
    assert set(failures.episode_ids) == {"b"}
    v2 = load_transitions(tmp_path, JOINTS, EpisodeFilter(policy_versions=("v2",)))
    assert set(v2.episode_ids) == {"c"}  # only c ran long enough to see v2
    arrays = v2.to_arrays()
    assert arrays["obs.joint_position"].shape == (8, 7)


def test_corrupted_bag_is_skipped_with_a_warning_naming_the_file(tmp_path):
    write_episode(tmp_path / "good", 4, episode_id="good")
    write_episode(tmp_path / "bad", 4, episode_id="bad")
    with open(tmp_path / "bad" / "bad.mcap", "r+b") as f:
        f.write(b"garbage!")  # destroys the magic bytes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_transitions(tmp_path, JOINTS)
    assert set(data.episode_ids) == {"good"}
    messages = [str(w.message) for w in caught if issubclass(w.category, BagWarning)]
    assert any("bad" in m and "skipped" in m for m in messages), messages


def test_unclosed_bag_is_used_up_to_its_last_valid_message(tmp_path):
    rec, _ = write_episode(tmp_path / "live", steps=6, episode_id="live", close=False)
    (tmp_path / "data" / "cut").mkdir(parents=True)
    shutil.copy(tmp_path / "live" / "live.mcap", tmp_path / "data" / "cut" / "cut.mcap")
    rec.stop("aborted", False)
    path = tmp_path / "data" / "cut" / "cut.mcap"
    path.write_bytes(path.read_bytes() + b"\x06\xff\xff")  # half a record at the end
    assert read_episode_metadata(tmp_path / "data" / "cut").episode_id == "live"
    with pytest.warns(BagWarning, match=r"cut\.mcap.*not closed"):
        data = load_transitions(tmp_path / "data", JOINTS)
    assert len(data) == 6 and data.truncateds[-1]
