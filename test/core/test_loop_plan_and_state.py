import json

import pytest

from simreal_ros.loop.config import LoopConfig
from simreal_ros.loop.plan import CHECK_CAPACITY, MAX_ROUND_INDEX, RoundSeeds, plan_collection
from simreal_ros.loop.state import (
    ConditionScore,
    LearnerDecision,
    LoopSummary,
    RoundRecord,
    RunDirectory,
)


def score(condition, successes, episodes):
    return ConditionScore.of(condition, [True] * successes + [False] * (episodes - successes))


def test_over_specialization_collects_in_shifted_only():
    plan = plan_collection(
        "over_specialization", score("train", 9, 10), score("shifted", 1, 10), 8
    )
    assert plan.episodes == {"train": 0, "shifted": 8}


def test_mode_collapse_asks_for_demonstrations_on_training_conditions():
    plan = plan_collection("mode_collapse", score("train", 0, 10), score("shifted", 0, 10), 6, 4)
    assert plan.episodes == {"train": 6, "shifted": 0}
    assert plan.expert_demos == 4


@pytest.mark.parametrize(
    ("train_ok", "shifted_ok", "expected_shifted"),
    [(10, 0, 8), (0, 10, 0), (5, 5, 4), (9, 8, 5), (10, 9, 8)],
)
def test_collection_follows_the_failures(train_ok, shifted_ok, expected_shifted):
    plan = plan_collection(
        "healthy", score("train", train_ok, 10), score("shifted", shifted_ok, 10), 8
    )
    assert plan.episodes["shifted"] == expected_shifted
    assert sum(plan.episodes.values()) == 8


def test_summary_round_trips_and_refuses_other_versions(tmp_path):
    run = RunDirectory(tmp_path, "r1")
    run.create({"task": "push"})
    record = RoundRecord(
        0,
        evaluation=[vars(score("train", 3, 4))],
        check=[vars(score("shifted", 21, 50))],
        complete=True,
    )
    run.save_summary(LoopSummary("r1", {"task": "push"}, rounds=[record]))
    loaded = run.load_summary()
    assert loaded.completed_rounds()[0].score("train").successes == 3
    assert loaded.completed_rounds()[0].check_score("shifted").successes == 21
    assert loaded.completed_rounds()[0].check_score("train") is None
    data = json.loads(run.summary_file.read_text())
    data["version"] = 99
    run.summary_file.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="start a new run"):
        run.load_summary()
    with pytest.raises(ValueError, match="plain directory name"):
        RunDirectory(tmp_path, "../escape")


def test_report_is_self_contained_html_with_plots_and_tables(tmp_path):
    from simreal_ros.loop.report import write_report

    rounds = []
    for index, (train_ok, shifted_ok) in enumerate([(2, 1), (5, 3)]):
        rounds.append(
            RoundRecord(
                index,
                policy_version=f"v{index}",
                evaluation=[
                    vars(score("train", train_ok, 8)),
                    vars(score("shifted", shifted_ok, 8)),
                ],
                update=None
                if index == 0
                else LearnerDecision(
                    version="v1",
                    promoted=True,
                    reason="clears 0.3",
                    screening=(
                        {
                            "condition": "train",
                            "successes": 15,
                            "episodes": 20,
                            "ci_low": 0.5,
                            "ci_high": 0.9,
                            "baseline_success_rate": 0.5,
                        },
                    ),
                    final_metrics={"loss": 0.2, "bc_loss": 0.1, "anchor_weight": 1.0},
                ),
                check=[
                    vars(score("train", 40 + index, 50)),
                    vars(score("shifted", 23 + 7 * index, 50)),
                ],
                diagnosis={"label": "over_specialization", "summary": "train 5/8, shifted 3/8"},
                real_episodes_total=16 * (index + 1),
                complete=True,
            )
        )
    path = write_report(
        LoopSummary("r1", {"task": "push"}, rounds=rounds), tmp_path / "report.html"
    )
    text = path.read_text()
    assert text.count("data:image/png;base64,") == 4
    assert "stand-in real_twin" in text
    assert "over_specialization" in text and "promoted" in text
    assert "30/50 (" in text and "off-ROS check" in text  # round 1's shifted check
    assert "http" not in text.replace("http-equiv", "")  # nothing fetched when opened offline


def test_a_rollback_on_the_arm_is_first_class_in_summary_and_report(tmp_path):
    from simreal_ros.loop.arm_decision import decide_on_arm
    from simreal_ros.loop.report import render_report
    from simreal_ros.loop.state import running_update

    rows = [{"condition": "train", "seed": k, "episode_return": 0.0} for k in range(8)]
    lost = decide_on_arm(
        [r | {"success": False} for r in rows], [r | {"success": True} for r in rows],
        "v0002", "v0001",
    )  # fmt: skip
    kept = decide_on_arm(
        [r | {"success": True} for r in rows], [r | {"success": False} for r in rows],
        "v0001", "base",
    ).to_dict()  # fmt: skip
    rounds = [
        RoundRecord(0, policy_version="base", complete=True),
        RoundRecord(1, "v0001", "sgft", update=LearnerDecision("v0001", promoted=True),
                    arm_decision=kept, complete=True),
        RoundRecord(2, "v0001", "sysid", update=LearnerDecision("v0002", promoted=True),
                    arm_decision=lost.to_dict(),
                    arm_diagnosis={"label": "mode_collapse", "summary": "froze"}, complete=True),
        RoundRecord(3, "v0001", "sgft", update=LearnerDecision("v0003", promoted=False),
                    complete=True),
    ]  # fmt: skip
    # The policy runs v0001: v0002 was rolled back, v0003 rejected by the screen.
    assert running_update(rounds).version == "v0001"
    run = RunDirectory(tmp_path, "r2")
    run.create({})
    run.save_summary(LoopSummary("r2", {}, rounds=rounds))
    again = run.load_summary().rounds[2]
    assert again.update == rounds[2].update and run.load_summary().rounds[0].update is None
    assert again.arm_decision["kind"] == "passed_sim_lost_on_arm" and again.method == "sysid"
    assert again.arm_decision["success_ci"][1] < 0
    text = render_report(LoopSummary("r2", {}, rounds=rounds))
    box = text.index('<div class="lost">')
    assert box < text.index("<h2>Plots</h2>")  # above everything else
    assert "v0002 passed the sim screen and lost on the arm; rolled back to v0001" in text
    assert "mode_collapse" in text and "sysid" in text


def test_loop_methods_alternate_and_bad_settings_are_refused():
    from simreal_ros.loop.config import LoopConfig

    config = LoopConfig(methods="sgft, bc")
    assert [config.method_of_round(i) for i in range(5)] == ["sgft", "sgft", "bc", "sgft", "bc"]
    assert LoopConfig(method="rl").method_of_round(3) == "rl"  # --method alone still works
    with pytest.raises(ValueError, match=r"methods \['magic'\] unknown"):
        LoopConfig(methods="sgft,magic")
    overrides = LoopConfig(
        learner_set="promotion.rule=relative; promotion.ci_low=0.3"
    ).learner_overrides()
    assert overrides == {"promotion.rule": "relative", "promotion.ci_low": 0.3}
    with pytest.raises(ValueError, match=r"unknown LearnerConfig learner_set setting.*no_such"):
        LoopConfig(learner_set="no_such_setting=1")
    with pytest.raises(ValueError, match=r"promote_ci_low is now promotion\.ci_low"):
        LoopConfig(learner_set="promote_ci_low=0.3")  # an old name gets its new one


def all_round_seeds(seeds: RoundSeeds, count: int) -> dict[str, list[int]]:
    return {
        "collection train": seeds.collection("train", count),
        "collection shifted": seeds.collection("shifted", count),
        "evaluation train": seeds.evaluation("train", count),
        "evaluation shifted": seeds.evaluation("shifted", count),
        "demonstrations": seeds.demonstrations(count),
        "diagnosis": seeds.diagnosis(count),
        "diagnosis of the candidate": seeds.diagnosis(count, candidate=True),
    }


@pytest.mark.parametrize("run_seed", [0, 1, 2**31])
def test_seed_ranges_of_rounds_and_purposes_never_overlap(run_seed):
    owner: dict[int, tuple[int, str]] = {}
    for index in range(MAX_ROUND_INDEX + 1):
        for purpose, seeds in all_round_seeds(RoundSeeds(run_seed, index), 1000).items():
            for seed in seeds:
                assert seed not in owner, f"round {index} {purpose} reuses {owner[seed]}"
                owner[seed] = (index, purpose)
    check = RoundSeeds(run_seed, 0).check(CHECK_CAPACITY)
    assert not set(check) & set(owner), "a round collects or evaluates on check seeds"
    assert RoundSeeds(run_seed, 7).check(5) == check[:5], "the check's seeds vary by round"
    # A run's seeds end before the next run seed's begin.
    assert max(check) < RoundSeeds(run_seed + 1, 0).collection("train", 1)[0]


def test_round_seeds_refuse_what_does_not_fit_the_layout():
    with pytest.raises(ValueError, match="outside"):
        RoundSeeds(0, MAX_ROUND_INDEX + 1)
    with pytest.raises(ValueError, match="do not fit"):
        RoundSeeds(0, 1).evaluation("train", 1001)
    assert LoopConfig(rounds=MAX_ROUND_INDEX).rounds == MAX_ROUND_INDEX
    with pytest.raises(ValueError):
        LoopConfig(rounds=MAX_ROUND_INDEX + 1)


def test_seeds_keep_their_values_for_runs_already_made():
    seeds = RoundSeeds(2, 3)
    assert seeds.collection("shifted", 2) == [2 * 1_000_003 + 31_000, 2 * 1_000_003 + 31_001]
    assert seeds.evaluation("train", 1) == [2 * 1_000_003 + 32_000]
    assert seeds.demonstrations(1) == [2 * 1_000_003 + 35_000]
    assert seeds.check(2) == [2 * 1_000_003 + 900_000, 2 * 1_000_003 + 900_001]
    assert seeds.arm_decision == 5


def test_a_dynamics_gap_collects_training_episodes_for_identification():
    plan = plan_collection("dynamics_gap", score("train", 1, 10), score("shifted", 0, 10), 6)
    assert plan.episodes == {"train": 6, "shifted": 0} and "identification" in plan.reason
