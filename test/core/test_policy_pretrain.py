"""A tiny pretraining run through the CLI: loadable checkpoint, resumable, evaluable."""

from __future__ import annotations

import json

import pytest

from simreal_ros.cli.main import main
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.evaluate import PolicySource, evaluate_policy
from simreal_ros.training.torch_checkpoint import load_checkpoint

ARM = load_robot_description()
TINY = [
    "--demo-episodes", "3", "--dagger-iterations", "1", "--dagger-episodes", "2",
    "--bc-steps", "20", "--hidden", "16", "--batch-size", "32", "--save-every", "40",
    "--no-progress", "--seed", "5",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pretrain") / "reach"
    assert main(["pretrain", "--task", "reach", "--out", str(out), "--steps", "60", *TINY]) == 0
    return out


def test_pretrain_writes_a_checkpoint_that_loads_against_the_robot(tiny_run):
    loaded = load_checkpoint(tiny_run, description=load_robot_description())
    training = loaded.metadata["training"]
    assert training["seed"] == 5 and training["phase"] == "done"
    assert training["sac_steps"] == 60
    assert "pretrain" in training["command"] and training["wall_time_s"] > 0
    assert training["data"]["profile"] == "randomized"
    assert loaded.spec.task == "reach" and loaded.spec.action_mode == "delta"
    assert loaded.gamma == 0.99
    assert set(loaded.metadata["value_statistics"]) == {"mean", "std", "min", "max"}
    # Normalisation was fitted on data, not left at identity.
    assert any(m != 0.0 for m in loaded.spec.obs_mean)


def test_resume_continues_where_the_run_stopped(tiny_run, capsys):
    before = json.loads((tiny_run / "train_state" / "progress.json").read_text())
    # Without --resume an existing run is not overwritten.
    assert main(["pretrain", "--task", "reach", "--out", str(tiny_run), *TINY]) == 2
    assert "--resume" in capsys.readouterr().err
    args = ["pretrain", "--task", "reach", "--out", str(tiny_run), "--steps", "100", *TINY]
    assert main([*args, "--resume"]) == 0
    after = json.loads((tiny_run / "train_state" / "progress.json").read_text())
    assert after["sac_step"] == 100 and before["sac_step"] == 60
    assert after["episodes"] > before["episodes"]
    assert after["next_seed"] > before["next_seed"]  # no episode seed reused
    assert after["wall_time_s"] > before["wall_time_s"]
    loaded = load_checkpoint(tiny_run)
    assert loaded.metadata["training"]["sac_steps"] == 100
    # Settings that shape the network must match to resume.
    bad = [a if a != "16" else "32" for a in args]
    assert main([*bad, "--resume"]) == 2


def test_evaluation_is_deterministic_per_seed_and_parallel_matches_serial(tiny_run):
    serial = evaluate_policy(tiny_run, "nominal", "train", seeds=[3, 4, 5], workers=1, robot=ARM)
    parallel = evaluate_policy(
        PolicySource(str(tiny_run)), "nominal", "train", [3, 4, 5], 2, robot=ARM
    )
    assert [r.seed for r in parallel.records] == [3, 4, 5]
    assert serial.records == parallel.records
    assert serial.episodes == 3 and 0 <= serial.successes <= 3
    low, high = serial.ci
    assert 0.0 <= low <= serial.success_rate <= high <= 1.0
    assert serial.mean_length == sum(r.length for r in serial.records) / 3
    with pytest.raises(ValueError, match="profile"):
        evaluate_policy(tiny_run, "real", "train", seeds=1, robot=ARM)


def test_eval_command_prints_the_interval_and_records_it(tiny_run, capsys):
    args = ["eval", "--checkpoint", str(tiny_run), "--episodes", "2", "--workers", "1"]
    args += ["--dynamics-profile", "real_twin", "--condition", "shifted", "--record"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "Wilson 95% CI" in printed and "stand-in" in printed
    evaluation = ckpt.read_metadata(tiny_run)["evaluation"]["real_twin/shifted"]
    assert evaluation["episodes"] == 2 and evaluation["seeds"] == [0, 1]
    load_checkpoint(tiny_run)  # recording touched no weights or checksums
    assert main(["eval", "--checkpoint", str(tiny_run / "nope"), "--episodes", "1"]) == 2
