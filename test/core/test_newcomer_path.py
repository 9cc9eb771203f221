"""A newcomer's path without traps (issue 28), off ROS: settings checked before anything
starts, one adapter store per arm and base, errors that name the cause."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors.numpy import save_file
from user_arm import write_user_arm

from simreal_ros.adapters.store import (
    AdapterStore,
    StoredVersion,
    base_key,
    foreign_version_reason,
    scoped_store_root,
)
from simreal_ros.cli.main import main
from simreal_ros.cli.up import running_policy
from simreal_ros.episodes.synthetic import write_episode
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.robot.description import load_robot_description
from simreal_ros.robot.description_record import RobotDescriptionError
from simreal_ros.settings_check import (
    SettingsError,
    check_graph,
    check_launch_arguments,
    check_launch_argv,
    check_node_settings,
    parameter_file_values,
)
from simreal_ros.training.torch_checkpoint import make_untrained_checkpoint

ROBOT = load_robot_description()
PANDA = load_robot_description("panda")


# --- settings checked before anything starts -------------------------------------------


def test_up_refuses_a_mistyped_setting_with_a_close_match(capsys):
    assert main(["up", "--set", "sim_bridge.profil=real_twin", "--list"]) == 2
    err = capsys.readouterr().err
    assert "sim_bridge has no setting 'profil'" in err and "did you mean 'profile'" in err
    assert "real_time_factor" in err  # the known names are listed


def test_up_refuses_a_bad_value_with_a_close_match_before_starting(capsys):
    assert main(["up", "--set", "sim_bridge.profile=real_twn", "--list"]) == 2
    err = capsys.readouterr().err
    assert "real_twn" in err and "did you mean 'real_twin'" in err
    assert main(["up", "--set", "safety.command_timeout=-1", "--list"]) == 2
    err = capsys.readouterr().err
    assert "command_timeout" in err and "(range 0.001 .. 10.0)" in err
    assert main(["up", "--set", "safety.command_timeout=soon", "--list"]) == 2
    assert "is not a number" in capsys.readouterr().err


def test_up_refuses_an_unknown_node_with_a_close_match(capsys):
    assert main(["up", "--set", "sim_brige.profile=real_twin", "--list"]) == 2
    err = capsys.readouterr().err
    assert "no node 'sim_brige'" in err and "did you mean 'sim_bridge'" in err


def test_a_parameter_file_with_an_unknown_setting_is_refused(tmp_path):
    path = tmp_path / "safety.yaml"
    path.write_text(yaml.safe_dump({"safety": {"ros__parameters": {"comand_timeout": 0.3}}}))
    values = parameter_file_values(path)
    with pytest.raises(SettingsError, match="did you mean 'command_timeout'") as error:
        check_node_settings("safety", values["safety"], str(path))
    assert str(path) in str(error.value)
    path.write_text(yaml.safe_dump({"safety": {"parameters": {"command_timeout": 0.3}}}))
    with pytest.raises(SettingsError, match="ros__parameters"):
        parameter_file_values(path)


def test_a_learner_file_takes_nested_groups_and_names_the_new_name_of_an_old_setting(
    tmp_path,
):
    path = tmp_path / "learner.yaml"
    nested = {"screen": {"seeds": 4, "profile": "nominal"}, "promotion": {"ci_low": 0.3}}
    path.write_text(yaml.safe_dump({"learner": {"ros__parameters": nested}}))
    values = parameter_file_values(path)["learner"]
    assert values == {"screen.seeds": 4, "screen.profile": "nominal", "promotion.ci_low": 0.3}
    check_node_settings("learner", values, str(path))
    with pytest.raises(SettingsError, match=r"screen\.seeds = 0 is below.*\(range 1 \.\. 10000\)"):
        check_node_settings("learner", {"screen.seeds": 0}, str(path))
    path.write_text(yaml.safe_dump({"learner": {"ros__parameters": {"screen_seeds": 4}}}))
    with pytest.raises(SettingsError, match=r"'screen_seeds' is now 'screen\.seeds'"):
        check_node_settings("learner", parameter_file_values(path)["learner"], str(path))


def test_the_shipped_graph_and_its_files_pass_the_check():
    from simreal_ros.graph import description

    for profile in description.PROFILES:
        nodes = description.graph(profile)
        given = check_graph(nodes, profile, {})
        assert set(given) >= {"safety", "policy", "learner"}
        assert given["policy"]["adapter_store"].endswith("{robot}/{base}")


def test_an_undeclared_launch_argument_is_refused_with_a_hint():
    declared = ["robot", "task", "checkpoint", "dynamics_profile", "data_dir", "autostart"]
    check_launch_arguments({"dynamics_profile": "real_twin"}, declared)
    with pytest.raises(SettingsError, match="did you mean 'dynamics_profile'"):
        check_launch_arguments({"dynamics_profil": "real_twin"}, declared)
    with pytest.raises(SettingsError, match="dynamics_profile:="):
        check_launch_arguments({"profile": "real_twin"}, declared)


def test_the_launch_files_first_action_refuses_bad_command_line_words():
    # What `ros2 launch simreal_ros sim.launch.py ...` hands the launch context as argv.
    given = check_launch_argv(["dynamics_profile:=real_twin", "autostart:=false"], "sim")
    assert given == {"dynamics_profile": "real_twin", "autostart": "false"}
    with pytest.raises(SettingsError, match="did you mean 'dynamics_profile'"):
        check_launch_argv(["dynamics_profil:=real_twin"], "sim")
    with pytest.raises(SettingsError, match="did you mean 'real_twin'"):
        check_launch_argv(["dynamics_profile:=real_twn"], "sim")
    # The real graph has no sim bridge, so no dynamics profile, but its own robot_launch.
    with pytest.raises(SettingsError, match="launch argument dynamics_profile:="):
        check_launch_argv(["dynamics_profile:=real_twin"], "real")
    assert check_launch_argv(["robot_launch:=/x/arm.launch.py", "task:=reach"], "real")


# --- one word, one meaning -------------------------------------------------------------


def test_profile_means_neither_graph_nor_dynamics_in_any_command(capsys):
    assert main(["up", "--profile", "sim", "--list"]) == 2
    err = capsys.readouterr().err
    assert "--graph sim|real" in err and "--dynamics-profile" in err
    assert main(["trials", "--profile", "sim"]) == 2
    assert "--graph sim|real" in capsys.readouterr().err
    assert main(["up", "--graph", "real", "--dynamics-profile", "real_twin", "--list"]) == 2
    assert "no sim bridge" in capsys.readouterr().err
    assert main(["up", "--dynamics-profile", "real_twn", "--list"]) == 2
    assert "did you mean 'real_twin'" in capsys.readouterr().err
    # Every command that takes a sim's dynamics spells it --dynamics-profile.
    for command in (
        ["eval", "--checkpoint", "checkpoints/push"],
        ["expert"],
        ["premise"],
        ["pretrain", "--task", "push"],
        ["diagnose", "--checkpoint", "checkpoints/push"],
    ):
        assert main([*command, "--profile", "real_twin"]) == 2, command
        assert "--dynamics-profile NAME|PATH" in capsys.readouterr().err, command


# --- one adapter store per arm and base --------------------------------------------------


def _fake_version(root: Path, version: str, metadata: dict, in_features: int) -> StoredVersion:
    path = root / version
    path.mkdir(parents=True)
    save_file(
        {"base_model.model.trunk.0.lora_A.weight": np.zeros((4, in_features), np.float32)},
        str(path / "adapter_model.safetensors"),
    )
    return StoredVersion(version, path, metadata, {}, {"files": {}})


def test_store_roots_differ_by_robot_and_base(tmp_path):
    push = make_untrained_checkpoint(tmp_path / "a", ROBOT, version="push-base")
    other = make_untrained_checkpoint(
        tmp_path / "b", ROBOT, version="push-base", control_rate_hz=10.0
    )
    template = str(tmp_path / "adapters" / "{robot}" / "{base}")
    push, other = ckpt.read_metadata(push), ckpt.read_metadata(other)
    a = scoped_store_root(template, ROBOT.name, push)
    assert a == tmp_path / "adapters" / ROBOT.name / base_key(push)
    assert a != scoped_store_root(template, "desk_arm", push)
    assert a != scoped_store_root(template, ROBOT.name, other)  # same name, other conventions
    assert scoped_store_root(tmp_path / "flat", ROBOT.name, push) == tmp_path / "flat"


def test_a_foreign_adapter_is_refused_naming_both_sides(tmp_path):
    base = make_untrained_checkpoint(tmp_path / "base", ROBOT, version="push-base")
    panda_base = make_untrained_checkpoint(tmp_path / "pb", PANDA, version="push-base")
    theirs = ckpt.read_metadata(panda_base)
    stored = _fake_version(
        tmp_path / "store",
        "v0001",
        {
            "robot": "panda",
            "joint_names": list(PANDA.joint_names),
            "base_version": "push-base",
            "spec_fingerprint": theirs["spec_fingerprint"],
        },
        in_features=theirs["architecture"]["obs_dim"],
    )
    ours = ckpt.read_metadata(base)
    reason = foreign_version_reason(stored, ours, ROBOT)
    assert "robot 'panda', 8 joints" in reason and "panda_joint1" in reason
    assert f"robot '{ROBOT.name}', 7 joints" in reason and "shoulder_pan_joint" in reason
    assert f"takes {theirs['architecture']['obs_dim']} inputs" in reason
    assert f"actor input {ours['architecture']['obs_dim']}" in reason
    same = dict(stored.metadata, spec_fingerprint=ours["spec_fingerprint"])
    assert foreign_version_reason(dataclass_replace(stored, same), ours, ROBOT) == ""


def dataclass_replace(stored: StoredVersion, metadata: dict) -> StoredVersion:
    return StoredVersion(stored.version, stored.path, metadata, {}, stored.manifest)


def _commit(store: AdapterStore, version: str, metadata: dict, reason: str) -> None:
    with store.staging(version) as staging:
        save_file({"x": np.zeros(2, np.float32)}, str(staging / "adapter_model.safetensors"))
        store.commit(staging, version, metadata, {"promoted": True, "reason": reason}, robot=ROBOT)
    store.activate(version, "promoted")


def test_up_names_the_running_version_and_where_it_came_from(tmp_path):
    base = make_untrained_checkpoint(tmp_path / "base", ROBOT, task="push")
    template = str(tmp_path / "adapters" / "{robot}" / "{base}")
    given = {"adapter_store": template}
    assert running_policy(given, "push", str(base)).startswith(f"base untrained from {base}")
    store = AdapterStore(scoped_store_root(template, ROBOT.name, ckpt.read_metadata(base)))
    meta = ckpt.read_metadata(base)
    _commit(store, "v0001", {"spec_fingerprint": meta["spec_fingerprint"]}, "ok")
    text = running_policy(given, "push", str(base))
    assert text.startswith(f"adapter v0001 from {store.root / 'v0001'} on base untrained")
    flat = tmp_path / "flat"
    _commit(AdapterStore(flat), "v0001", {"spec_fingerprint": "0" * 64}, "ok")
    text = running_policy({"adapter_store": str(flat)}, "push", str(base))
    assert text.startswith("base untrained") and "v0001 is refused" in text


def test_models_list_keeps_whole_reasons_and_rollback_base_works(tmp_path, capsys):
    store = AdapterStore(tmp_path / "store")
    reason = "kept (success 4 vs 3 [95% CI -0.12, +0.25]; return difference +1.80 " + "x" * 60
    _commit(store, "v0001", {"method": "sgft"}, reason)
    assert main(["models", "list", "--store", str(store.root)]) == 0
    assert reason in capsys.readouterr().out
    assert main(["models", "rollback", "base", "--store", str(store.root)]) == 0
    assert "the base checkpoint" in capsys.readouterr().out
    assert store.current() is None


# --- commands that fail loudly -----------------------------------------------------------


def test_episodes_info_takes_an_id_or_a_path_and_refuses_a_missing_one(tmp_path, capsys):
    write_episode(tmp_path / "ep-0001", 4, episode_id="ep-0001", done_at=3)
    assert main(["episodes", "info", "ep-0001", "--data-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["episode_id"] == "ep-0001"
    assert main(["episodes", "info", str(tmp_path / "ep-0001")]) == 0
    capsys.readouterr()
    assert main(["episodes", "info", str(tmp_path / "nope"), "--data-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "no episode bag at" in captured.err and "corrupt" not in captured.out


def test_an_export_that_matches_nothing_fails_and_writes_nothing(tmp_path, capsys):
    from simreal_ros.episodes.synthetic import JOINTS

    write_episode(tmp_path / "bags" / "a", 4, episode_id="a", done_at=3)
    out = tmp_path / "out.npz"
    argv = ["episodes", "export", str(out), "--data-dir", str(tmp_path / "bags")]
    assert main([*argv, "--joint-names", *JOINTS, "--source", "real"]) == 2
    err = capsys.readouterr().err
    assert "no transitions match (source in ['real'])" in err
    assert not out.exists()


def test_trials_without_a_graph_fails_fast_and_says_to_start_one(monkeypatch, capsys):
    from simreal_ros.nodes import services

    calls = []
    monkeypatch.setattr(services, "missing_services", lambda names, t: calls.append(t) or names)
    started = time.monotonic()
    assert main(["trials", "--episodes", "1", "--wait-for-graph", "1"]) == 2
    assert time.monotonic() - started < 5.0 and calls == [1.0]
    err = capsys.readouterr().err
    assert "no running sim graph" in err and "simreal up --graph sim" in err


def test_an_aborted_trial_is_not_counted_as_an_outcome(monkeypatch, capsys):
    from simreal_ros.nodes import services, trial_runner
    from simreal_ros.trials.runner import EpisodeResult

    common = dict(
        seed=0, condition="train", failure_mode="", note="", steps=5, total_reward=1.0,
        duration_s=1.0, timed_out=False, bag_path="",
    )  # fmt: skip
    done = EpisodeResult(index=0, episode_id="e1", outcome="success", success=True, **common)
    aborted = EpisodeResult(
        index=1, episode_id="e2", outcome="failure", success=False, **common,
        error="reset service not available",
    )  # fmt: skip
    monkeypatch.setattr(services, "missing_services", lambda names, t: [])
    monkeypatch.setattr(trial_runner, "run_with_overrides", lambda o: [done, aborted])
    assert main(["trials", "--episodes", "2"]) == 1
    out = capsys.readouterr().out
    assert "1/1 successes" in out and "aborted" in out


# --- bring your own arm ------------------------------------------------------------------


def test_an_mjcf_left_at_degrees_gets_a_hint(tmp_path):
    arm = write_user_arm(tmp_path)
    model = arm / "desk_arm.xml"
    model.write_text(model.read_text().replace('angle="radian" ', ""))
    with pytest.raises(RobotDescriptionError) as error:
        load_robot_description(arm)
    message = str(error.value)
    assert "go beyond the model's range" in message
    assert "reads angles in degrees" in message and '<compiler angle="radian"/>' in message
    model.write_text(model.read_text().replace("<compiler ", '<compiler angle="radian" '))
    from simreal_ros.robot.model import degrees_hint

    assert degrees_hint(load_robot_description(arm)) == ""


def test_eval_refuses_a_checkpoint_for_another_arm_naming_both_sides(tmp_path, capsys):
    panda_base = make_untrained_checkpoint(tmp_path / "pb", PANDA, task="push")
    assert main(["eval", "--checkpoint", str(panda_base), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "drives 8 joints" in err and "panda_joint1" in err
    assert f"the robot '{ROBOT.name}' has 7" in err and "shoulder_pan_joint" in err


def test_setup_py_python_requires_matches_the_readme():
    root = Path(__file__).resolve().parents[2]
    setup = (root / "setup.py").read_text()
    assert 'python_requires=">=3.11"' in setup
    readme = (root / "README.md").read_text()
    assert "Humble" in readme and "not supported" in readme


@pytest.fixture(autouse=True)
def _no_user_store(tmp_path, monkeypatch):
    """Nothing here may touch the user's ~/.simreal."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield
    shutil.rmtree(tmp_path / "home", ignore_errors=True)


def test_up_on_an_arm_without_a_checkpoint_says_why_before_starting(tmp_path):
    import subprocess
    import sys

    arm = write_user_arm(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "simreal_ros.cli.main", "--robot", str(arm), "up"],
        capture_output=True, text=True, timeout=120, check=False,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no push checkpoint is shipped for the robot 'desk_arm'" in result.stderr
    assert "started" not in result.stdout  # nothing was started
