"""Every shell command in README.md and the docs it links runs as written (issue 28).

The README is read at test time (others edit it), its ```sh / ```bash blocks are split
into commands, and each command is classified, so a new command cannot go untested:

- RUN: run as written in a scratch directory (HOME there too), some with a tiny budget
  appended (``BUDGET``: argparse keeps the last value, so the command is otherwise as
  written);
- GRAPH: needs a running graph: parsed here, run by test/graph/test_readme_graph_commands.py;
- PARSE: expensive (pretraining, the demo, sysid over real bags, learning), needs data
  a fresh machine has not got, or a Ray cluster: checked by `simreal`'s own argument
  parser (and `make -n`);
- ROS: needs a ROS 2 install (ros2, colcon): a `ros2 launch` line's arguments are checked
  against the launch file's declared arguments and the node settings; the rest is listed.
"""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
from readme_commands import (
    EXPECTED_EXIT,
    MADE_BY_EXPENSIVE,
    NEEDS_A_CLUSTER,
    ROOT,
    RUN,
    SHELL_RUN,
    SIMREAL,
    YAML_BLOCK,
    all_commands,
    documents,
    key_of,
    simreal_argv,
)

from simreal_ros.cli.main import build_parser


def test_the_readme_has_commands_and_every_one_is_classified():
    found = all_commands()
    assert len(found) > 20
    unclassified = []
    for doc, command in found:
        if SIMREAL.match(command) or command.startswith(("make ", "ros2 ", *SHELL_RUN)):
            continue
        if command.startswith(("cd ", "grep ", "| pip", "mkdir -p ~/ws", "PYTHONPATH=")):
            continue  # a ROS machine's or a cluster's set-up: not runnable here
        if command.startswith(".venv/bin/ray"):
            continue
        unclassified.append(f"{doc}: {command}")
    assert not unclassified, "classify these README commands in this test:\n" + "\n".join(
        unclassified
    )


def test_every_simreal_command_parses_as_written():
    parser = build_parser()
    for doc, command in all_commands():
        if not SIMREAL.match(command):
            continue
        argv = simreal_argv(command)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:
            if argv[-1:] == ["--help"] and exit_.code == 0:
                continue
            pytest.fail(f"{doc}: `{command}` does not parse (exit {exit_.code})")
        assert getattr(args, "func", None), f"{doc}: `{command}` names no subcommand"


def test_make_targets_resolve():
    for doc, command in all_commands():
        if command.startswith("make "):
            target = command.split()[1]
            result = subprocess.run(
                ["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=False
            )
            assert result.returncode == 0, f"{doc}: `{command}`: {result.stderr}"


def test_ros2_launch_lines_pass_only_declared_arguments_with_valid_values():
    from simreal_ros.settings_check import check_launch_argv

    checked = 0
    for doc, command in all_commands():
        if not command.startswith("ros2 launch"):
            continue
        words = shlex.split(command)
        profile = {"sim.launch.py": "sim", "real.launch.py": "real"}[words[3]]
        try:  # what the launch file's first action runs
            check_launch_argv(words[4:], profile)
        except ValueError as error:
            pytest.fail(f"{doc}: `{command}`: {error}")
        checked += 1
    assert checked >= 3


@pytest.fixture
def scratch(tmp_path):
    """A fresh user's directory: the checkout's code and shipped files, and a HOME holding
    two recorded episodes (a reach on the stand-in labelled real, which succeeds, and a
    sim one), written by the learner's sim bag writer in the graph's bag format."""
    from simreal_ros.learner.sim_episodes import record_rollout
    from simreal_ros.policy.checkpoint import shipped_checkpoint
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    for name in (
        ".venv",
        "simreal_ros",
        "checkpoints",
        "config",
        "package.xml",
        "CMakeLists.txt",
        "msg",
        "srv",
        "launch",
    ):  # a checkout to the package (resources.py)
        (tmp_path / name).symlink_to(ROOT / name)
    episodes = tmp_path / "home" / ".simreal" / "episodes"
    from simreal_ros.robot.description import load_robot_description

    reach = load_checkpoint(shipped_checkpoint("reach"))
    for i, source in enumerate(("real", "sim")):
        meta = record_rollout(
            episodes / f"ep-{i}", reach, task="reach", seed=i, source=source,
            profile="nominal", episode_seconds=1.5, noise=0.0, episode_id=f"ep-{i}",
            robot=load_robot_description(),
        )  # fmt: skip
        assert meta.success, "the shipped reach policy should reach within 1.5 s"
    (tmp_path / "bags").symlink_to(episodes)
    return tmp_path


def test_runnable_commands_run_as_written(scratch):
    env = {**os.environ, "HOME": str(scratch / "home")}
    env["PATH"] = f"{scratch / '.venv' / 'bin'}:{env['PATH']}"  # `simreal` as installed
    env.pop("SIMREAL_ROBOT", None)
    ran = []
    text = "\n".join(doc.read_text() for doc in documents())  # the template: a linked doc
    for doc, command in all_commands():
        expected = 0
        if command.startswith(SHELL_RUN):
            argv = command
        elif SIMREAL.match(command):
            key = key_of(simreal_argv(command))
            skip = (*MADE_BY_EXPENSIVE, *NEEDS_A_CLUSTER)
            if key not in RUN or any(word in command for word in skip):
                continue
            argv = f"{command} {RUN[key]}".strip()
            expected = EXPECTED_EXIT.get(key, 0)
        else:
            continue
        if "robot check my_arm" in argv:  # the robot.yaml template, as written
            (scratch / "my_arm" / "robot.yaml").write_text(YAML_BLOCK.search(text).group(1))
        result = subprocess.run(
            ["bash", "-c", argv], cwd=scratch, env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == expected, (
            f"{doc}: `{argv}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
        ran.append(argv)
    assert any("robot check my_arm" in c for c in ran)
    assert any(" eval " in c for c in ran) and any("episodes export" in c for c in ran)
