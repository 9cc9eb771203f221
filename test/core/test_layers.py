"""The layers hold: the deployable policy stands apart from training and the simulator."""

import ast
import pkgutil
from pathlib import Path

from fresh_interpreter import run_python
from source_imports import imported_modules

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "simreal_ros" / "policy"
# What only training and evaluation need: torch (and what loads torch), the simulator.
TRAINING_ONLY = ("torch", "peft", "safetensors.torch", "simreal_ros.sim", "simreal_ros.training")


def deployable_modules() -> list[str]:
    names = ["simreal_ros.policy"]
    for info in pkgutil.walk_packages([str(POLICY)], prefix="simreal_ros.policy."):
        names.append(info.name)
    return names


def _is_training_only(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in TRAINING_ONLY)


def test_the_deployable_policy_modules_are_found():
    modules = deployable_modules()
    assert {"simreal_ros.policy.inference", "simreal_ros.policy.checkpoint"} <= set(modules)


def test_importing_a_deployable_policy_module_imports_neither_torch_nor_the_simulator():
    # One fresh interpreter per module: an earlier import can hide nothing from a later one.
    for module in deployable_modules():
        script = (
            "import importlib, sys\n"
            f"importlib.import_module({module!r})\n"
            "bad = sorted(m for m in sys.modules\n"
            "             if m in ('torch', 'simreal_ros.sim')\n"
            "             or m.startswith(('simreal_ros.sim.', 'simreal_ros.training')))\n"
            "print(' '.join(bad))\n"
        )
        loaded = run_python(script).strip()
        assert loaded == "", f"importing {module} imported {loaded}"


def test_no_deployable_policy_source_imports_training_code_even_inside_a_function():
    # The import-time check cannot see an import that runs only when a function is called.
    offenders = []
    for path in sorted(POLICY.rglob("*.py")):
        offenders += [
            f"{path.relative_to(ROOT)}:{line} {name}"
            for line, name in imported_modules(path)
            if _is_training_only(name)
        ]
    assert offenders == [], "the deployable policy imports training code:\n" + "\n".join(offenders)


# The process's arm (``load_robot_description()`` with no argument) is read only where the
# process is composed: the CLI, the nodes, and the description module itself. Everything
# else is given its robot (issue 25).
COMPOSITION_ROOTS = ("cli", "nodes")


def _ambient_arm_reads() -> dict[str, int]:
    reads: dict[str, int] = {}
    package = ROOT / "simreal_ros"
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] in COMPOSITION_ROOTS or relative.as_posix() == "robot/description.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and not node.args
                and not node.keywords
                and getattr(node.func, "id", getattr(node.func, "attr", None))
                == "load_robot_description"
            ):
                name = path.relative_to(ROOT).as_posix()
                reads[name] = reads.get(name, 0) + 1
    return reads


def test_the_arm_is_read_from_the_process_only_at_the_composition_roots():
    reads = _ambient_arm_reads()
    assert reads == {}, (
        "load_robot_description() without an argument outside cli/ and nodes/: pass the "
        f"robot (or what is needed of it) from the caller instead: {reads}"
    )
