"""`simreal learn` and `simreal models` off ROS, on real episode bags and a real store."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from simreal_ros.adapters.store import AdapterStore
from simreal_ros.cli.main import main
from simreal_ros.learner.sim_episodes import record_rollout
from simreal_ros.policy.spec import default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import ActorCritic, Architecture
from simreal_ros.training.torch_checkpoint import load_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    robot = load_robot_description()
    spec = default_spec(robot, "push")
    torch.manual_seed(0)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (32, 32), (32, 32)))
    root = tmp_path_factory.mktemp("cli")
    save_checkpoint(root / "push", model, spec, version="base", gamma=0.95, training={})
    base = load_checkpoint(root / "push")
    record_rollout(root / "eps" / "real0", base, seed=1, episode_seconds=1.0, robot=robot)
    record_rollout(root / "eps" / "sim0", base, seed=2, source="sim", profile="nominal",
                   episode_seconds=1.0, robot=robot)  # fmt: skip
    return root


def learn(setup, store, options=(), *settings):
    return main([
        "learn", *options, "--episodes", str(setup / "eps"), "--checkpoint", str(setup / "push"),
        "--store", str(store), "--updates", "10", "--screen-seeds", "2", "--workers", "1",
        "--set", "batch_size=16", "screen.conditions=[train]", "screen.profile=nominal",
        "critic_warmup_updates=2", "sim_episodes=0", "promotion.tolerance=1.0",
        *settings,
    ])  # fmt: skip


def test_learn_models_list_show_rollback(setup, tmp_path, capsys):
    store = tmp_path / "models"
    assert learn(setup, store, ["--method", "sgft", "--horizon", "3"], "promotion.ci_low=0") == 0
    assert learn(setup, store, ["--method", "rl"], "promotion.ci_low=0") == 0
    # A gate it cannot pass: rejected, exit code 1, still stored with the numbers.
    rejected = learn(
        setup, store, ["--method", "bc"], "promotion.ci_low=1", "bc_use_failures=true"
    )
    assert rejected == 1
    capsys.readouterr()
    assert main(["models", "list", "--store", str(store)]) == 0
    table = capsys.readouterr().out
    assert "* v0002" in table and "rejected" in table and "v0001" in table
    assert main(["models", "show", "v0001", "--store", str(store)]) == 0
    shown = json.loads(capsys.readouterr().out)
    meta = shown["metadata"]
    assert meta["method"] == "sgft" and meta["horizon"] == 3
    assert {e["episode_id"] for e in meta["data_manifest"]["episodes"]} == {"real0", "sim0"}
    assert meta["data_manifest"]["transitions_by_source"] == {"real_twin": 20, "sim": 20}
    assert shown["screening"]["promoted"] is True
    assert main(["models", "rollback", "--store", str(store)]) == 0
    assert AdapterStore(store).current() == "v0001"
    assert main(["models", "rollback", "v0002", "--store", str(store)]) == 0  # any kept one
    capsys.readouterr()
    # ...that screening did not reject: the rejected candidate never runs.
    assert main(["models", "rollback", "v0003", "--store", str(store)]) == 2
    assert "rejected by screening" in capsys.readouterr().err
    assert AdapterStore(store).current() == "v0002"
    assert main(["models", "show", "v0042", "--store", str(store)]) == 2  # clear error


def test_models_rollback_with_a_service_leaves_the_store_to_the_node(tmp_path, monkeypatch):
    """One path: with --service the node rolls back its own store; the CLI writes none."""
    calls = []
    client = types.ModuleType("simreal_ros.nodes.rollback_client")
    client.call_rollback_service = lambda name, version: calls.append((name, version)) or 0
    monkeypatch.setitem(sys.modules, client.__name__, client)
    store = tmp_path / "models"
    argv = ["models", "rollback", "--store", str(store), "--service", "/policy/rollback"]
    assert main(argv) == 0
    assert main([*argv, "v0001"]) == 0
    assert calls == [("/policy/rollback", ""), ("/policy/rollback", "v0001")]
    assert not store.exists()


def test_learn_refuses_unknown_settings(setup, tmp_path, capsys):
    assert learn(setup, tmp_path / "m", [], "no_such_setting=1") == 2
    assert "learner has no setting 'no_such_setting'" in capsys.readouterr().err
