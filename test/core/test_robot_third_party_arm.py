"""A user's arm from a third-party URDF with meshes (test/fixtures/third_party_arm), taken
through the documented path: `robot check`, `robot home`, a tiny pretrain and an eval.

The fixture's meshes come in as MuJoCo's contype 1 / conaffinity 1, and its base's mesh
meets link 1's at rest: the checks here fail if adjacent links are let collide again.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from simreal_ros.cli.main import main
from simreal_ros.robot import description as robot_description
from simreal_ros.robot import model as robot_model
from simreal_ros.robot.contacts import contacts_at
from simreal_ros.robot.description import load_robot_description
from simreal_ros.robot.home_pose import solve_home
from simreal_ros.robot.model import compile_robot, compile_scene
from simreal_ros.sim.physics import mujoco
from simreal_ros.sim.task_fit import task_fit

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "third_party_arm"


def _load(path):
    robot_description._load.cache_clear()
    return load_robot_description(path)


@pytest.fixture
def arm():
    return _load(FIXTURE)


@pytest.fixture
def own_arm_copy(tmp_path):
    """A copy of the fixture a test may edit."""
    shutil.copytree(FIXTURE, tmp_path / "arm")
    return tmp_path / "arm"


@pytest.fixture
def no_arm_selected():
    """`simreal --robot` selects the process's arm once; let each test choose its own."""
    saved = robot_description._selected
    robot_description._selected = None
    yield
    robot_description._selected = saved


def _generator():
    """The fixture's generate.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("generate", FIXTURE / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    return generate


def test_the_fixture_files_are_what_its_generator_writes():
    files = _generator().files()
    assert len([f for f in files if f.endswith(".stl")]) == 9
    for relative, content in files.items():
        assert (FIXTURE / relative).read_bytes() == content, f"rerun generate.py: {relative}"


def test_its_meshes_come_in_with_default_collision_bits(arm):
    # The trap is real: a URDF's meshes cannot say contype 2 / conaffinity 1.
    model = compile_robot(arm)
    meshes = model.geom_type == mujoco.mjtGeom.mjGEOM_MESH
    assert meshes.sum() == 9
    assert set(model.geom_contype[meshes]) == {1} and set(model.geom_conaffinity[meshes]) == {1}
    assert model.body("iiwa_link_0").weldid == 0  # the base is welded to the world


def test_adjacent_links_and_the_fixed_base_never_collide(arm, monkeypatch):
    assert contacts_at(arm) == []
    model = compile_scene(arm)
    excluded = {
        frozenset(model.body(int(pair)).name for pair in pair_ids)
        for pair_ids in zip(
            model.exclude_signature >> 16, model.exclude_signature & 0xFFFF, strict=True
        )
    }
    assert frozenset(("iiwa_link_0", "iiwa_link_1")) in excluded
    assert frozenset(("iiwa_link_6", "pusher")) in excluded  # a fixed link with its carrier
    # Without the exclusions MuJoCo lets the base touch link 1: the check must see it.
    monkeypatch.setattr(robot_model, "exclude_adjacent_links", lambda spec: 0)
    found = contacts_at(_load(FIXTURE))
    assert found and all(c.arm_arm for c in found)
    assert {(c.body1, c.body2) for c in found} == {("iiwa_link_0", "iiwa_link_1")}
    assert min(c.normal_force for c in found) > 1000.0  # far beyond the arm's weight


def test_robot_check_reports_the_base_contact_and_passes_once_it_is_excluded(capsys, monkeypatch):
    args = ["robot", "check", str(FIXTURE), "--fit-episodes", "0", "--expert-episodes", "0"]
    robot_description._load.cache_clear()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"contacts at home .*: none", out) and out.rstrip().endswith("ok")
    monkeypatch.setattr(robot_model, "exclude_adjacent_links", lambda spec: 0)
    robot_description._load.cache_clear()
    assert main(args) == 2
    out = capsys.readouterr().out
    assert "iiwa_link_0 <-> iiwa_link_1 (arm-arm)" in out
    assert "links that are not neighbours touch at home" in out
    robot_description._load.cache_clear()


def test_robot_check_refuses_links_that_overlap_at_home(own_arm_copy, capsys):
    # Link 3's mesh widened into link 1's: not neighbours, so never excluded.
    urdf = own_arm_copy / "iiwa14.urdf"
    text = urdf.read_text().replace("meshes/iiwa_link_3.stl", "meshes/fat.stl")
    urdf.write_text(text)
    generate = _generator()
    fat = generate.binary_stl(generate.cylinder_triangles(0.09, -0.45, 0.21))
    (own_arm_copy / "meshes" / "fat.stl").write_bytes(fat)
    robot_description._load.cache_clear()
    assert main(["robot", "check", str(own_arm_copy), "--expert-episodes", "0"]) == 2
    out = capsys.readouterr().out
    assert "iiwa_link_1 <-> iiwa_link_3 (arm-arm)" in out or "iiwa_link_3 <-> iiwa_link_1" in out


def test_the_tool_offset_site_sits_at_the_offset_on_its_link(arm):
    model = compile_robot(arm)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(3)
    for _ in range(5):
        data.qpos[:] = rng.uniform(arm.position_lower, arm.position_upper)
        mujoco.mj_kinematics(model, data)
        link = data.body("iiwa_link_7")
        expected = link.xpos + link.xmat.reshape(3, 3) @ np.array([0.0, 0.0, 0.226])
        assert data.site("tool_frame").xpos == pytest.approx(expected, abs=1e-9)
    data.qpos[:] = 0.0  # straight up: 0.36 + 0.42 + 0.40 + the flange and the pusher
    mujoco.mj_kinematics(model, data)
    assert data.site("tool_frame").xpos == pytest.approx([0, 0, 1.18 + 0.226], abs=1e-9)


def test_robot_home_lands_the_tool_over_the_table_within_limits(arm, capsys):
    model = compile_robot(arm)
    for target in ([0.45, 0.0, 0.20], [0.55, 0.15, 0.12]):
        solution = solve_home(arm, model, np.array(target))
        assert solution.reached
        assert np.all(solution.arm_q >= arm.position_lower)
        assert np.all(solution.arm_q <= arm.position_upper)
        data = mujoco.MjData(model)
        data.qpos[:] = solution.arm_q
        mujoco.mj_kinematics(model, data)
        tool = data.site("tool_frame")
        assert np.linalg.norm(tool.xpos - target) < 0.005
        assert tool.xmat.reshape(3, 3)[:, 2] == pytest.approx([0, 0, -1], abs=1e-2)
    # Out of reach: said, and no home line to paste.
    assert main(["robot", "home", str(FIXTURE), "--x", "1.6"]) == 2
    assert "no posture within the joint limits" in capsys.readouterr().out


def test_the_printed_home_pasted_into_robot_yaml_passes_the_check(own_arm_copy, capsys):
    description = own_arm_copy / "robot.yaml"
    text = re.sub(
        r"^home: .*$", "home: [0, 0, 0, 0, 0, 0, 0]", description.read_text(), flags=re.M
    )
    description.write_text(text)
    robot_description._load.cache_clear()
    assert main(["robot", "home", str(own_arm_copy), "--tool-height", "0.15"]) == 0
    home_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert home_line.startswith("home: [")
    description.write_text(re.sub(r"^home: .*$", home_line, text, flags=re.M))
    robot_description._load.cache_clear()
    assert main(["robot", "check", str(own_arm_copy), "--expert-episodes", "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"position\s+\[0\.45\s+0\.\s+0\.15\]", out), out


def test_the_task_region_against_the_arms_reach_and_moving_the_base(arm, own_arm_copy):
    near = task_fit(arm, "push", "train", episodes=30)
    assert 0.5 < near.fraction < 1.0  # A4's limit: the nearest points are out of reach
    assert "too near the base" in near.advice() and "move the arm's base back" in near.advice()
    missed = near.distance[~near.reached]
    assert missed.max() < np.median(near.distance[near.reached])
    # The documented fix: the base moved back 0.10 m with a world link in the URDF.
    urdf = own_arm_copy / "iiwa14.urdf"
    mount = (
        '<robot name="iiwa14">\n  <link name="world"/>\n  <joint name="table_mount" '
        'type="fixed"><parent link="world"/><child link="iiwa_link_0"/>'
        '<origin xyz="-0.10 0 0"/></joint>'
    )
    urdf.write_text(urdf.read_text().replace('<robot name="iiwa14">', mount))
    moved = _load(own_arm_copy)
    model = compile_robot(moved)
    solution = solve_home(moved, model, np.array([0.45, 0.0, 0.2]))
    moved = dataclasses.replace(moved, home_position=solution.arm_q)
    fit = task_fit(moved, "push", "train", episodes=30)
    assert fit.fraction == 1.0 and fit.advice() == ""
    assert contacts_at(moved) == []


def test_robot_check_refuses_the_flange_as_the_tool(own_arm_copy, capsys):
    # The pusher hangs 0.10 m below the flange: with the flange as the tool frame the
    # pusher would be in the table wherever the expert pushes.
    description = own_arm_copy / "robot.yaml"
    text = description.read_text().replace("offset: [0, 0, 0.226]", "offset: [0, 0, 0.126]")
    text = re.sub(r"^home: .*$", "home: [0, 0.6948, 0, -1.9769, 0, 0.4699, 0]", text, flags=re.M)
    description.write_text(text)
    robot_description._load.cache_clear()
    assert main(["robot", "check", str(own_arm_copy), "--expert-episodes", "0"]) == 2
    out = capsys.readouterr().out
    assert "pusher would be in the table" in out and "not at the flange" in out


@pytest.mark.slow
def test_the_arm_pretrains_evaluates_and_its_expert_passes_the_check(
    tmp_path, capsys, no_arm_selected
):
    robot_description._load.cache_clear()
    assert main(["robot", "check", str(FIXTURE), "--expert-episodes", "6"]) == 0
    out = capsys.readouterr().out
    rates = re.findall(r"(train|shifted)\s+(\d+)/6 = ", out)
    assert len(rates) == 2 and all(int(n) >= 3 for _, n in rates), out
    robot_description._selected = None
    out_dir = tmp_path / "iiwa_push"
    tiny = [
        "--demo-episodes", "3", "--dagger-iterations", "1", "--dagger-episodes", "2",
        "--bc-steps", "20", "--hidden", "16", "--batch-size", "32", "--steps", "40",
        "--save-every", "40", "--no-progress", "--seed", "5",
    ]  # fmt: skip
    robot = ["--robot", str(FIXTURE)]
    assert main([*robot, "pretrain", "--task", "push", "--out", str(out_dir), *tiny]) == 0
    capsys.readouterr()
    from simreal_ros.policy import checkpoint as ckpt

    spec = ckpt.read_metadata(out_dir)["spec"]
    assert spec["joint_names"] == [f"iiwa_joint_{i}" for i in range(1, 8)]
    result = tmp_path / "eval.json"
    args = ["eval", "--checkpoint", str(out_dir), "--episodes", "2", "--workers", "1"]
    assert main([*robot, *args, "--json", str(result)]) == 0
    assert "Wilson 95% CI" in capsys.readouterr().out
    assert len(json.loads(result.read_text())["records"]) == 2
