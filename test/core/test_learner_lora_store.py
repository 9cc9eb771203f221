"""LoRA adapters round-trip exactly; the store survives a kill at any point of a save."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from simreal_ros.adapters.store import AdapterStore, StoreError
from simreal_ros.learner import lora
from simreal_ros.policy.lora_merge import merged_actor_state
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import ACTOR_LORA_TARGETS, Actor, Architecture

ROOT = Path(__file__).resolve().parents[2]


def trained_adapter(seed: int = 0, targets=ACTOR_LORA_TARGETS):
    torch.manual_seed(seed)
    actor = Actor(Architecture(obs_dim=6, act_dim=3, actor_hidden=(16, 16)))
    model = lora.wrap(actor, rank=4, alpha=8, targets=targets)
    # Move the adapter away from its identity initialisation (B = 0).
    with torch.no_grad():
        for _, p in lora.trainable_parameters(model):
            p.add_(0.1 * torch.randn_like(p))
    return actor, model


def test_adapter_round_trip_gives_identical_outputs(tmp_path):
    actor, model = trained_adapter()
    obs = torch.randn(20, 6)
    with torch.no_grad():
        expected = lora.inner(model)(obs)
        assert not torch.allclose(expected, actor(obs)), "the adapter must change the actor"
    lora.save(model, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    loaded = lora.load(actor, tmp_path / "a")
    merged = lora.merged(loaded)
    with torch.no_grad():
        torch.testing.assert_close(lora.inner(loaded)(obs), expected, rtol=0, atol=0)
        torch.testing.assert_close(merged(obs), expected, rtol=1e-5, atol=1e-6)
    # The base module was never modified by wrapping, loading or merging.
    with torch.no_grad():
        assert not torch.allclose(actor(obs), expected)


def test_policy_package_merges_our_adapter_to_the_same_actor(tmp_path):
    """The numpy merge every deployment runs, loaded into a torch copy of the base's actor,
    gives the actor the learner trained."""

    actor, model = trained_adapter(1)
    lora.save(model, tmp_path / "a")

    class Base:  # the parts of a PolicyCheckpoint merged_actor_state reads
        version = "base"
        spec = type("Spec", (), {"fingerprint": staticmethod(lambda: "x")})()
        model = type("Model", (), {"actor": actor})()

    merged = copy.deepcopy(actor)
    state = merged_actor_state(Base, tmp_path / "a")
    merged.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    obs = torch.randn(7, 6)
    with torch.no_grad():
        torch.testing.assert_close(merged(obs), lora.inner(model)(obs), rtol=1e-5, atol=1e-6)


def test_continuing_from_an_adapter_starts_from_its_weights(tmp_path):
    actor, model = trained_adapter(2)
    lora.save(model, tmp_path / "a")
    resumed = lora.wrap(actor, init_adapter=tmp_path / "a")
    assert lora.trainable_parameters(resumed), "a resumed adapter must be trainable"
    obs = torch.randn(5, 6)
    with torch.no_grad():
        torch.testing.assert_close(lora.inner(resumed)(obs), lora.inner(model)(obs))


def test_unknown_lora_target_is_refused_by_name():
    actor = Actor(Architecture(obs_dim=6, act_dim=3, actor_hidden=(8,)))
    with pytest.raises(ValueError, match=r"not nn\.Linear layers"):
        lora.wrap(actor, targets=["no_such_layer"])


def commit_version(store: AdapterStore, version: str, seed: int = 0, hook=None, screening=None):
    _, model = trained_adapter(seed)
    staging = store.new_staging(version)
    lora.save(model, staging)
    return store.commit(
        staging, version, {"parent_version": None, "method": "bc"},
        {"promoted": True} if screening is None else screening, after_each_file=hook,
        robot=load_robot_description(),
    )  # fmt: skip


def test_store_commit_list_show_activate_and_rollback(tmp_path):
    store = AdapterStore(tmp_path / "models")
    assert store.versions() == [] and store.current() is None
    v1 = commit_version(store, store.next_version())
    assert v1.version == "v0001" and v1.checksum
    store.activate("v0001", "promoted")
    commit_version(store, store.next_version(), seed=1)
    store.activate("v0002", "promoted")
    commit_version(store, store.next_version(), seed=2)
    store.activate("v0003", "promoted")
    assert store.versions() == ["v0001", "v0002", "v0003"]
    assert store.rollback() == "v0002"
    assert store.rollback() == "v0001"  # walks back, does not toggle
    assert store.rollback() is None  # the base checkpoint
    with pytest.raises(StoreError, match="no earlier version"):
        store.rollback()
    assert store.rollback("v0003") == "v0003"
    with pytest.raises(StoreError, match="not in"):
        store.rollback("v0042")
    with pytest.raises(StoreError, match="immutable"):
        commit_version(store, "v0001")


def test_rollback_target_is_checked_but_not_activated(tmp_path):
    store = AdapterStore(tmp_path / "models")
    for version in ("v0001", "v0002"):
        commit_version(store, version)
        store.activate(version, "promoted")
    assert store.rollback_target() == "v0001"
    assert store.rollback_target("v0002") == "v0002"
    assert store.current() == "v0002"  # nothing activated yet
    with pytest.raises(StoreError, match="not in"):
        store.rollback_target("v0042")
    assert store.rollback() == "v0001" and store.current() == "v0001"


def test_a_rejected_version_is_kept_but_never_activated(tmp_path):
    store = AdapterStore(tmp_path / "models")
    commit_version(store, "v0001")
    store.activate("v0001", "promoted")
    rejected = commit_version(store, "v0002", screening={"promoted": False, "reason": "slow"})
    unscreened = commit_version(store, "v0003", screening={})
    assert rejected.rejected and not unscreened.rejected and not unscreened.promoted
    assert store.versions() == ["v0001", "v0002", "v0003"]  # kept, with its numbers
    for refuse in (
        lambda: store.activate("v0002", "promoted"),
        lambda: store.rollback("v0002"),
        lambda: store.rollback_target("v0002"),
    ):
        with pytest.raises(StoreError, match=r"rejected by screening \(slow\)"):
            refuse()
    assert store.current() == "v0001"
    assert store.rollback("v0003") == "v0003"  # no decision is not a rejection


def test_a_directory_without_a_manifest_is_not_a_version(tmp_path):
    store = AdapterStore(tmp_path / "models")
    commit_version(store, "v0001")
    by_hand = tmp_path / "models" / "v0002"
    by_hand.mkdir()
    (by_hand / "adapter_config.json").write_text("{}")
    assert store.versions() == ["v0001"]
    for refuse in (lambda: store.load("v0002"), lambda: store.rollback("v0002")):
        with pytest.raises(StoreError, match=r"no MANIFEST\.json: it is not a version"):
            refuse()
    assert store.current() is None


def test_store_refuses_a_modified_version(tmp_path):
    store = AdapterStore(tmp_path / "models")
    commit_version(store, "v0001")
    weights = tmp_path / "models" / "v0001" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(StoreError, match="checksum"):
        store.load("v0001")
    with pytest.raises(StoreError):
        store.activate("v0001", "promoted")


SAVER = textwrap.dedent(
    """
    import sys, time
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, {test_dir!r})
    from test_learner_lora_store import commit_version
    from simreal_ros.adapters.store import AdapterStore

    stage = sys.argv[1]
    def hook(name):
        if name == stage:
            print("AT", name, flush=True)
            time.sleep(60)
    print("READY", flush=True)
    commit_version(AdapterStore(sys.argv[2]), "v0002", seed=5, hook=hook)
    print("DONE", flush=True)
    """
)


@pytest.mark.parametrize("stage", ["MANIFEST.json", "rename"])
def test_kill_during_save_leaves_the_previous_version_loadable(tmp_path, stage):
    root = tmp_path / "models"
    store = AdapterStore(root)
    commit_version(store, "v0001")
    store.activate("v0001", "promoted")
    script = SAVER.format(test_dir=str(Path(__file__).parent))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{Path(__file__).parent}"}
    child = subprocess.Popen(
        [sys.executable, "-c", script, stage, str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            seen.append(line)
            if line.startswith("AT"):
                break
            if not line and child.poll() is not None:
                break
        assert any(s.startswith("AT") for s in seen), "".join(seen)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # The previous version still loads, verified, and is still the running one.
    assert store.load("v0001").version == "v0001"
    assert store.current() == "v0001"
    # The new one is either absent or complete, never broken.
    if stage == "rename":
        assert store.versions() == ["v0001", "v0002"]
        assert store.load("v0002").metadata["method"] == "bc"
    else:
        assert store.versions() == ["v0001"]
        assert store.clean_staging(), "the killed save leaves staging debris only"
    for version in store.versions():
        lora.load(Actor(Architecture(obs_dim=6, act_dim=3, actor_hidden=(16, 16))),
                  store.load(version).path)  # fmt: skip
