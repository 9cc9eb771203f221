"""`simreal episodes list|info|recover|export` on synthetic bags."""

from __future__ import annotations

import json
import shutil

import numpy as np

from simreal_ros.cli.main import main
from simreal_ros.episodes.bag_reader import bag_state
from simreal_ros.episodes.synthetic import JOINTS, write_episode


def test_list_recover_info_export(tmp_path, capsys):
    write_episode(tmp_path / "a", 6, episode_id="a", done_at=5)
    rec, _ = write_episode(tmp_path / "live", 4, episode_id="b", close=False)
    (tmp_path / "b").mkdir()
    shutil.copy(tmp_path / "live" / "live.mcap", tmp_path / "b" / "b.mcap")
    rec.stop("aborted", False)
    shutil.rmtree(tmp_path / "live")

    assert main(["episodes", "list", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "unclosed" in out and "2 episodes, 1 successes" in out

    assert main(["episodes", "recover", "--data-dir", str(tmp_path)]) == 0
    assert "recovered" in capsys.readouterr().out
    assert bag_state(tmp_path / "b") == "closed"

    assert main(["episodes", "info", str(tmp_path / "b")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["metadata"]["outcome"] == "incomplete" and info["metadata"]["steps"] == 4
    assert info["topics"]["/policy/action"]["messages"] == 4

    out_file = tmp_path / "out.npz"
    argv = ["episodes", "export", str(out_file), "--data-dir", str(tmp_path)]
    assert main([*argv, "--joint-names", *JOINTS, "--outcome", "success"]) == 0
    data = np.load(out_file)
    assert data["actions"].shape == (6, 7) and set(data["episode_ids"]) == {"a"}
    assert data["obs.joint_position"].shape == (6, 7)
    # A joint convention that does not match is refused with the reason, not exported.
    assert main([*argv, "--joint-names", *reversed(JOINTS)]) == 2
    assert "names and order must match" in capsys.readouterr().err
