"""colcon (from PyPI) builds the package against the venv the way a ROS 2 machine would."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simreal_ros.graph import description

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# A whole colcon build (cmake and rosidl's C type support): 100 s alone on a 2-core host,
# and over 300 s on a slow CI host beside the other worker.
pytestmark = pytest.mark.timeout(900)


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


# Run inside the install: what an installed node reads must come from share/simreal_ros.
_INSTALLED_NODE_SCRIPT = """
import json, sys
import rclpy
from rclpy.context import Context
from rclpy.lifecycle import TransitionCallbackReturn
import simreal_ros, simreal_ros.msg
from simreal_ros import resources
from simreal_ros.episodes.typestore import _msg_dirs, project_typestore
from simreal_ros.graph import processes
from simreal_ros.graph.description import config_directory
from simreal_ros.nodes.policy import PolicyNode
from simreal_ros.policy.checkpoint import shipped_checkpoint
from simreal_ros.sim.profiles import load_profile, profiles_dir

context = Context()
rclpy.init(context=context)
node = PolicyNode(context=context)  # default parameters: the shipped checkpoint of its task
configured = node.trigger_configure() == TransitionCallbackReturn.SUCCESS
project_typestore()
print(json.dumps({
    "configured": configured,
    "error": node.versions.last_error,
    "checkpoint": str(node.versions.checkpoint.path) if node.versions.checkpoint else None,
    "shipped": str(shipped_checkpoint(node.config.task)),
    "data_root": str(resources.data_root()),
    "installed": resources.is_installed(),
    "checkout": str(processes.PACKAGE_ROOT),
    "config": str(config_directory()),
    "profile": str(profiles_dir()),
    "real_twin": load_profile("real_twin").is_stand_in,
    "msg": [str(d) for d in _msg_dirs()],
    "modules": sorted({
        str(getattr(m, "__file__", None)) for name, m in sys.modules.items()
        if name.split(".")[0] == "simreal_ros" and getattr(m, "__file__", None)
    }),
    "torch": "torch" in sys.modules,
}))
node.destroy_node()
rclpy.shutdown(context=context)
"""


def test_installed_policy_node_configures_from_the_install_tree_alone(colcon_install, tmp_path):
    site = next(colcon_install.glob("lib/python*/site-packages"))
    share = colcon_install / "share" / "simreal_ros"
    fastdds_profile = site / "simreal_ros" / "graph" / "fastdds_profile.xml"
    assert fastdds_profile.is_file(), "the Fast DDS profile is not installed with the package"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # What `source install/setup.bash` sets; the venv stays under it for rclpy itself. The
    # ROS wheels already put the venv's lib/ on LD_LIBRARY_PATH (this interpreter's env).
    env["PYTHONPATH"] = str(site)
    env["AMENT_PREFIX_PATH"] = f"{colcon_install}:{sys.prefix}"
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in [str(colcon_install / "lib"), os.environ.get("LD_LIBRARY_PATH", "")] if p
    )
    env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(fastdds_profile)
    result = subprocess.run(
        [sys.executable, "-c", _INSTALLED_NODE_SCRIPT], capture_output=True, text=True,
        env=env, cwd=tmp_path, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["installed"] and report["data_root"] == str(share)
    assert report["checkout"] == "None", "an install must not put a checkout on PYTHONPATH"
    outside = [path for path in report["modules"] if not path.startswith(str(site))]
    assert not outside, f"modules imported from outside the install: {outside}"
    assert report["configured"], report["error"]
    assert report["checkpoint"] == report["shipped"]
    assert Path(report["checkpoint"]).parent == share / "checkpoints"
    assert not report["torch"], "configuring the numpy inference path imported torch"
    assert report["config"] == str(share / "config")
    assert report["profile"] == str(share / "config" / "profiles") and report["real_twin"]
    assert report["msg"] == [str(share / "msg")]
