"""Core never imports rclpy: every module outside nodes/ imports in a ROS-free interpreter."""

import pkgutil
from pathlib import Path

from fresh_interpreter import run_python
from source_imports import imported_modules

import simreal_ros

ROOT = Path(__file__).resolve().parents[2]


def core_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages([str(ROOT / "simreal_ros")], prefix="simreal_ros."):
        if info.name.startswith(("simreal_ros.nodes", "simreal_ros.msg", "simreal_ros.srv")):
            continue
        names.append(info.name)
    return names


def test_there_are_core_modules_to_check():
    assert "simreal_ros.config_schema" in core_modules()
    assert simreal_ros.__version__


def test_importing_core_does_not_import_rclpy():
    modules = core_modules()
    # A fresh interpreter, so nothing imported by pytest or other tests can hide an import.
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "import re\n"
        "ros = re.compile(r'^(rclpy|rosidl_\\w+|\\w+_(msgs|srvs|interfaces)'\n"
        "                 r'|simreal_ros\\.(msg|srv))(\\.|$)')\n"
        "bad = sorted(m for m in sys.modules if ros.match(m))\n"
        "print('\\n'.join(bad))\n"
    )
    stdout = run_python(script)
    assert stdout.strip() == "", f"core imported ROS modules:\n{stdout}"


def test_no_core_source_imports_rclpy_even_inside_a_function():
    # The import-time check above cannot see an import that runs only when called.
    offenders = []
    for path in sorted((ROOT / "simreal_ros").rglob("*.py")):
        if path.relative_to(ROOT / "simreal_ros").parts[0] in ("nodes", "msg", "srv"):
            continue
        offenders += [
            f"{path.relative_to(ROOT)}:{line} {name}"
            for line, name in imported_modules(path)
            if name.split(".")[0] == "rclpy"
        ]
    assert offenders == [], "core sources import rclpy:\n" + "\n".join(offenders)
