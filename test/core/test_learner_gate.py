"""The screening gate: both rules on numbers, and sabotaged candidates rejected.

The end-to-end part screens real adapter directories through ``gate.screen`` with an
evaluator on the toy system (test/core/learner_toy.py); the same gate runs with the
policy package's MuJoCo evaluation in test_learner_gate_mujoco.py and
test_learner_session.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from core.learner_toy import (
    REAL_BIAS,
    invert_layer,
    optimal_action,
    pretrained_actor,
    rollouts,
    success_rate,
)

from simreal_ros.learner import lora
from simreal_ros.learner.bc import BehaviourCloning
from simreal_ros.learner.gate import (
    EvaluationSummary,
    GateDecision,
    GateSettings,
    decide,
    screen,
)

torch.set_num_threads(1)
RELATIVE = GateSettings(rule="relative")


def summary(successes, episodes=20, mean_return=0.0, **evidence):
    return EvaluationSummary(episodes, successes, mean_return, **evidence)


def test_promotes_when_ci_clears_threshold_and_not_worse_than_running():
    decision = decide(
        {"train": summary(18), "shifted": summary(16)},
        {"train": summary(17), "shifted": summary(15)},
        ci_low_threshold=0.5,
        tolerance=0.1,
        settings=RELATIVE,
    )
    assert decision.promoted, decision.reason
    assert decision.reason.startswith("promoted")
    train = decision.results[0]
    assert train.ci_low == pytest.approx(0.6990, abs=1e-3)  # Wilson 95% for 18/20
    assert train.baseline_success_rate == pytest.approx(0.85)


def test_rejects_a_low_ci_lower_bound_with_the_numbers():
    decision = decide({"train": summary(11)}, {"train": summary(5)}, 0.5, 0.1)
    assert not decision.promoted
    assert "11/20" in decision.reason and "below 0.50" in decision.reason


def test_rejects_a_candidate_worse_than_the_running_policy_beyond_tolerance():
    decision = decide(
        {"train": summary(17), "shifted": summary(12)},
        {"train": summary(17), "shifted": summary(18)},
        ci_low_threshold=0.2,
        tolerance=0.1,
        settings=RELATIVE,
    )
    assert not decision.promoted
    assert "shifted" in decision.reason and "worse than the reference policy" in decision.reason
    assert decision.results[0].passed and not decision.results[1].passed_tolerance
    # Within tolerance passes.
    assert decide(
        {"train": summary(16)}, {"train": summary(17)}, 0.2, 0.1, settings=RELATIVE
    ).promoted
    assert decide({"train": summary(16)}, {"train": summary(17)}, 0.2, 0.1).promoted
    # The default rule does not ask "no worse than the running policy".
    assert decide({"train": summary(12)}, {"train": summary(18)}, 0.0, 0.1).promoted


def test_broken_only_floor_is_on_the_wilson_upper_bound():
    # 1/20: upper bound 0.236 < 0.25, sim is confident it is broken; 2/20: 0.301, passes.
    low = decide({"train": summary(1)}, {"train": summary(20)}, 0.0, 0.1)
    assert not low.promoted and "upper bound is below the floor 0.25" in low.reason
    assert "1/20" in low.reason and not low.results[0].passed_floor
    assert decide({"train": summary(2)}, {"train": summary(20)}, 0.0, 0.1).promoted
    # With few episodes nothing is clearly broken: 0/4 has upper bound 0.49.
    assert decide({"train": summary(0, 4)}, {"train": summary(4, 4)}, 0.0, 0.1).promoted
    # The optional certifying floor (the lower bound) still works when asked for.
    assert not decide({"train": summary(8)}, {"train": summary(8)}, 0.5, 0.1).promoted


@pytest.mark.parametrize(
    ("evidence", "words"),
    [
        ({"steps": 400, "nonfinite_steps": 1}, "1 step(s) with non-finite actions"),
        ({"action_components": 1000, "saturated_actions": 600}, "0.60 of the action components"),
        ({"steps": 400, "intervened_steps": 360}, "intervened in 360/400 steps = 0.90"),
        ({"divergence": 0.9}, "mean |action - base action| 0.900"),
    ],
)
def test_broken_only_rejects_broken_actions_with_the_numbers(evidence, words):
    # Every success number is fine (18/20, as the running policy): only the evidence fails.
    decision = decide({"train": summary(18, **evidence)}, {"train": summary(18)}, 0.0, 0.1)
    assert not decision.promoted and words in decision.reason, decision.reason
    # ... and each limit is a setting: at the edge the same numbers pass.
    edge = GateSettings(max_intervention_rate=0.9, max_saturated_share=0.6, max_divergence=0.9)
    if "nonfinite_steps" not in evidence:
        assert decide({"train": summary(18, **evidence)}, {"train": summary(18)}, 0.0, 0.1,
                      settings=edge).promoted  # fmt: skip
    # The relative rule applies the same checks.
    assert not decide({"train": summary(18, **evidence)}, {"train": summary(18)}, 0.0, 0.1,
                      settings=RELATIVE).promoted  # fmt: skip


def test_the_measured_misspecified_case_both_rules_on_the_same_numbers():
    # A candidate adapted to a stand-in the sim does not model screens worse than the
    # running policy in randomized sim (16/20 against 20/20): the relative rule (``old``)
    # rejects it for that alone, broken_only (``new``) promotes it.
    candidate, running = {"train": summary(16)}, {"train": summary(20)}
    old = decide(candidate, running, 0.3, 0.1, "randomized", settings=RELATIVE)
    new = decide(candidate, running, 0.0, 0.1, "randomized")
    assert not old.promoted and "worse than the reference policy's 1.00" in old.reason
    assert new.promoted and "broken_only" in new.reason, new.reason


def test_settings_are_validated_with_a_clear_error():
    with pytest.raises(ValueError, match="gate rule 'strict' unknown"):
        GateSettings(rule="strict")
    with pytest.raises(ValueError, match="success_floor"):
        GateSettings(success_floor=1.5)


def test_decision_round_trips_through_json_form():
    decision = decide({"train": summary(18)}, {"train": summary(17)}, 0.5, 0.1, "randomized")
    again = GateDecision.from_dict(decision.to_dict())
    assert again == decision
    # A decision stored before the rule existed reads back as the relative rule.
    old = decision.to_dict()
    old.pop("settings")
    assert GateDecision.from_dict(old).settings.rule == "relative"


def test_missing_baseline_or_empty_screen_is_an_error():
    with pytest.raises(ValueError, match="running-policy"):
        decide({"train": summary(1)}, {}, 0.5, 0.1)
    with pytest.raises(ValueError, match="no screening results"):
        decide({}, {}, 0.5, 0.1)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """Base actor plus three candidate adapters on disk: good, inverted, mislabelled."""
    torch.manual_seed(0)
    actor = pretrained_actor(hidden=(32, 32))
    root = tmp_path_factory.mktemp("adapters")
    demos = rollouts(lambda o: optimal_action(o, REAL_BIAS), 20, REAL_BIAS, 0.0, 2, "real")
    good = lora.wrap(actor, rank=4, alpha=8)
    BehaviourCloning(good, demos, learning_rate=3e-3, batch_size=64, sim_replay=False).train(300)
    lora.save(good, root / "good")
    inverted = lora.wrap(actor, rank=4, alpha=8)
    invert_layer(inverted)
    lora.save(inverted, root / "inverted")
    mislabelled = demos.subset(np.arange(len(demos)))
    mislabelled.actions = -mislabelled.actions  # e.g. a sign convention flipped in logging
    bad = lora.wrap(actor, rank=4, alpha=8)
    BehaviourCloning(bad, mislabelled, learning_rate=3e-3, batch_size=64, sim_replay=False).train(
        300
    )
    lora.save(bad, root / "mislabelled")
    return actor, root


def toy_evaluator(actor, fixed_bias=None):
    """Evaluation on the toy: the 'real' drift (train; shifted adds 0.1) or ``fixed_bias``."""
    calls = []

    def evaluate(checkpoint_dir, adapter_dir, condition, seeds):
        calls.append((adapter_dir, condition))
        policy = actor if adapter_dir is None else lora.merged(lora.load(actor, adapter_dir))
        bias = REAL_BIAS if condition == "train" else REAL_BIAS + 0.1
        bias = bias if fixed_bias is None else fixed_bias
        rows = success_rate(policy, seeds, bias=bias)
        return EvaluationSummary(
            len(rows), sum(s for s, _ in rows), float(np.mean([r for _, r in rows])),
            [bool(s) for s, _ in rows],
        )  # fmt: skip

    evaluate.calls = calls
    return evaluate


def screen_toy(actor, adapter, running=None, cache=None, settings=RELATIVE):
    return screen(
        toy_evaluator(actor), None, adapter, running, ["train", "shifted"],
        list(range(100, 140)), ci_low_threshold=0.4, tolerance=0.1, baseline_cache=cache,
        settings=settings,
    )  # fmt: skip


def test_a_good_candidate_is_promoted(toy):
    actor, root = toy
    decision = screen_toy(actor, root / "good")
    assert decision.promoted, decision.reason


@pytest.mark.parametrize("settings", [RELATIVE, GateSettings()], ids=lambda s: s.rule)
def test_an_adapter_inverting_the_action_head_is_rejected(toy, settings):
    actor, root = toy
    merged = lora.merged(lora.load(actor, root / "inverted"))
    obs = torch.randn(8, 2)
    with torch.no_grad():  # the sabotage really flips the head: W' = -W
        features = actor.trunk(obs)
        bias = actor.mean_head.bias
        torch.testing.assert_close(
            merged.mean_head(features) - bias, -(actor.mean_head(features) - bias)
        )
    decision = screen_toy(actor, root / "inverted", settings=settings)
    assert not decision.promoted
    assert "rejected" in decision.reason and "0/40" in decision.reason


@pytest.mark.parametrize("settings", [RELATIVE, GateSettings()], ids=lambda s: s.rule)
def test_a_candidate_trained_on_mislabelled_actions_is_rejected(toy, settings):
    actor, root = toy
    decision = screen_toy(actor, root / "mislabelled", settings=settings)
    assert not decision.promoted, decision.reason
    assert all(not r.passed for r in decision.results)


def test_running_policy_is_screened_once_per_seed_set(toy):
    actor, root = toy
    cache = {}
    evaluator = toy_evaluator(actor)
    for name in ("good", "inverted"):
        screen(evaluator, None, root / name, None, ["train"], [1, 2, 3], 0.0, 1.0,
               baseline_cache=cache, settings=RELATIVE)  # fmt: skip
    assert [c for c in evaluator.calls if c[0] is None] == [(None, "train")]


def test_the_tolerance_is_against_the_base_too_so_promotions_cannot_ratchet_down(tmp_path):
    # Sim success per policy on the screened seeds: each adapter a little worse than its
    # parent, each within the tolerance of its parent, the second beyond it of the base.
    rates = {None: 20, "v1": 18, "v2": 16}
    calls = []

    def evaluator(checkpoint_dir, adapter, condition, seeds):
        name = None if adapter is None else Path(adapter).name
        calls.append(name)
        return summary(rates[name], len(seeds))

    cache = {}
    seeds = list(range(20))
    first = screen(evaluator, None, tmp_path / "v1", None, ["train"], seeds, 0.3, 0.1,
                   baseline_cache=cache, settings=RELATIVE)  # fmt: skip
    assert first.promoted, first.reason
    second = screen(evaluator, None, tmp_path / "v2", tmp_path / "v1", ["train"], seeds, 0.3,
                    0.1, baseline_cache=cache, settings=RELATIVE)  # fmt: skip
    assert not second.promoted
    assert second.results[0].baseline_successes == 20  # the base, which screens better
    assert "the better of the running version and the base" in second.reason
    assert calls.count(None) == 1  # the base was screened once and cached
    # Where the running version screens better than the base it is the reference.
    rates["v1"] = 20
    rates[None] = 15
    third = screen(evaluator, None, tmp_path / "v2", tmp_path / "v1", ["train"], seeds, 0.3,
                   0.1, baseline_cache={}, settings=RELATIVE)  # fmt: skip
    assert not third.promoted and third.results[0].baseline_successes == 20


def test_the_floor_is_waived_where_the_reference_is_below_it_too():
    """A condition every policy fails in the model of the arm says nothing about the
    candidate: it is not rejected there (the arm decides), but still is where the
    reference clears the floor."""
    hard = {
        "train": EvaluationSummary(20, 9, 0.0),
        "shifted": EvaluationSummary(20, 0, 0.0),
    }
    reference = {
        "train": EvaluationSummary(20, 8, 0.0),
        "shifted": EvaluationSummary(20, 0, 0.0),
    }
    decision = decide(hard, reference, 0.0, 0.1, settings=GateSettings())
    assert decision.promoted, decision.reason
    shifted = next(r for r in decision.results if r.condition == "shifted")
    assert shifted.floor_waived and shifted.passed_floor
    assert "floor waived" in decision.reason
    broken = {"train": EvaluationSummary(20, 0, 0.0), "shifted": EvaluationSummary(20, 0, 0.0)}
    rejected = decide(broken, reference, 0.0, 0.1, settings=GateSettings())
    assert not rejected.promoted and "train: success 0/20" in rejected.reason
