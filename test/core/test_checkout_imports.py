"""The venv's python imports the checkout's code from any directory: the generated
interfaces installed into the venv as a `simreal_ros` package must not hide it (a user's
own script outside the checkout met `No module named 'simreal_ros.robot'`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import simreal_ros

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
WHERE = (
    "import json, simreal_ros, simreal_ros.robot, simreal_ros.msg\n"
    "print(json.dumps({'robot': simreal_ros.robot.__file__, 'msg': simreal_ros.msg.__file__,"
    " 'path': list(simreal_ros.__path__)}))\n"
)


def imports_from(cwd: Path, pythonpath: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    assert VENV_PYTHON.exists(), f"no venv at {VENV_PYTHON}; run `make setup`"
    result = subprocess.run(
        [str(VENV_PYTHON), "-c", WHERE], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, (
        f"{result.stderr[-2000:]}\n(`make setup` installs the venv's link to the checkout)"
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_venv_python_imports_the_checkout_code_from_any_directory(tmp_path):
    package = ROOT / "simreal_ros"
    # A user's script elsewhere, with a clean environment: no PYTHONPATH.
    found = imports_from(tmp_path)
    assert Path(found["robot"]).is_relative_to(package), found
    assert "site-packages" in found["msg"], found  # the generated interfaces, from the venv
    # In the checkout (how the tests and `simreal` run): the checkout's package comes first.
    found = imports_from(ROOT, pythonpath=str(ROOT))
    assert found["path"][0] == str(package) and Path(found["robot"]).is_relative_to(package)
    assert Path(simreal_ros.__file__).parent == package  # this test run's own import


def test_a_second_copy_of_the_code_is_never_mixed_in(tmp_path):
    own, interfaces, other = (tmp_path / name / "simreal_ros" for name in ("own", "venv", "other"))
    for folder in (own, interfaces, other):
        (folder / "msg").mkdir(parents=True)
    (own / "resources.py").touch()  # the Python code, in two copies
    (other / "resources.py").touch()
    own, interfaces, other = str(own), str(interfaces), str(other)
    assert simreal_ros._one_source([own, interfaces, other]) == [own, interfaces]
    # The venv's copy of __init__ runs first (outside the checkout): the checkout's code is
    # the first copy found, and the only one kept.
    assert simreal_ros._one_source([interfaces, own, other]) == [interfaces, own]
