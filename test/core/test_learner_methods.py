"""A method's meaning lives in one table (learner/methods.py): nothing else tests its name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from simreal_ros.learner.config import CRITIC_INITS, LearnerConfig
from simreal_ros.learner.methods import METHOD_TABLE, METHODS, method_traits

ROOT = Path(__file__).resolve().parents[2]


def method_name_comparisons(path: Path) -> list[str]:
    """`x == "sgft"`, `x in ("sysid", "adapt")` and the like: a method name compared."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            items = (
                operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
            )
            names = [i.value for i in items if isinstance(i, ast.Constant)]
            if any(name in METHODS for name in names):
                found.append(f"{path}:{node.lineno}")
    return found


def test_no_code_outside_the_table_compares_a_method_name():
    files = sorted((ROOT / "simreal_ros").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py"))
    table = ROOT / "simreal_ros" / "learner" / "methods.py"
    found = [hit for path in files if path != table for hit in method_name_comparisons(path)]
    assert not found, f"ask learner.methods.method_traits instead: {found}"


def test_the_scan_finds_a_comparison(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('def f(cfg):\n    return cfg.method in ("sysid", "adapt") or 1 == 2\n')
    assert method_name_comparisons(probe) == [f"{probe}:2"]


def test_every_row_is_one_the_learner_can_run():
    assert tuple(METHOD_TABLE) == METHODS and set(METHODS) == {
        "bc",
        "rl",
        "sgft",
        "sysid",
        "adapt",
        "cotrain",
    }
    for name, traits in METHOD_TABLE.items():
        assert traits.name == name
        assert traits.update in ("behaviour_cloning", "actor_critic", "adaptation")
        assert traits.auto_critic_init in CRITIC_INITS and traits.auto_critic_init != "auto"
        assert traits.trains_in in ("real", "identified_sim")
        config = LearnerConfig(method=name)
        assert config.resolved_critic_init == traits.auto_critic_init
        assert config.identifies_from_bags == traits.identifies
    with pytest.raises(ValueError, match="unknown; the learner has bc, rl"):
        method_traits("ppo")
