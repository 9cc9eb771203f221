"""colcon (from PyPI) builds the package against the venv the way a ROS 2 machine would."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simreal_ros.graph import description

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def colcon_install(tmp_path_factory):
    colcon = VENV_BIN / "colcon"
    if not colcon.exists():
        pytest.fail(f"colcon is missing from {VENV_BIN}; run `make setup` to install it.")
    work = tmp_path_factory.mktemp("colcon")
    env = dict(os.environ)
    env["AMENT_PREFIX_PATH"] = str(VENV_BIN.parent)
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    # colcon adds `-l<cores>` otherwise, which serialises the build on a busy machine.
    env.setdefault("MAKEFLAGS", f"-j{os.cpu_count() or 2}")
    command = [
        str(colcon),
        "--log-base", str(work / "log"),
        "build",
        "--paths", str(ROOT),
        "--build-base", str(work / "build"),
        "--install-base", str(work / "install"),
        "--cmake-args", f"-DPython3_EXECUTABLE={sys.executable}", "-DBUILD_TESTING=OFF",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    yield work / "install" / "simreal_ros"
    shutil.rmtree(work, ignore_errors=True)


def test_installed_tree_holds_interfaces_python_launch_config_and_node_executables(
    colcon_install,
):
    site = colcon_install / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    package = site / "site-packages" / "simreal_ros"
    assert (package / "msg" / "_policy_action.py").is_file()
    assert (package / "srv" / "_reset_episode.py").is_file()
    assert (package / "graph" / "description.py").is_file()
    share = colcon_install / "share" / "simreal_ros"
    assert (share / "launch" / "sim.launch.py").is_file()
    assert (share / "launch" / "real.launch.py").is_file()
    assert (share / "package.xml").is_file()
    assert sorted(p.name for p in (share / "config").glob("*.yaml"))
    nodes = {node.executable for node in description.graph("sim")} | {"trial_runner"}
    for executable in sorted(nodes):
        path = colcon_install / "lib" / "simreal_ros" / executable
        assert path.is_file() and os.access(path, os.X_OK), f"no executable for {executable}"


def test_installed_package_imports_its_messages_without_the_checkout(colcon_install, tmp_path):
    site = next(colcon_install.glob("lib/python*/site-packages"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    env["AMENT_PREFIX_PATH"] = f"{colcon_install}:{sys.prefix}"
    script = (
        "import simreal_ros, simreal_ros.msg as m\n"
        "from simreal_ros.graph.description import config_directory\n"
        "assert 'site-packages' in simreal_ros.__file__, simreal_ros.__file__\n"
        "print(m.PolicyAction().policy_version == '', config_directory())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env,
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("True ")
    assert str(colcon_install / "share" / "simreal_ros" / "config") in result.stdout
