"""Sim-side adaptation (learner/adaptation.py, method adapt) and the parent-anchored trust
region: real MuJoCo episodes, the shipped push checkpoint, peft adapters."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from simreal_ros.config_schema import from_mapping, updated
from simreal_ros.learner import adaptation, lora
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.data import collect_sim_transitions
from simreal_ros.learner.session import LearnerSession
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.spec import default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim import expert as expert_module
from simreal_ros.sim import profiles
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.training.model import ActorCritic, Architecture
from simreal_ros.training.torch_checkpoint import load_checkpoint, save_checkpoint

ARM = load_robot_description()

# A model of the arm as `simreal sysid` writes one: the values it identified from the
# real_twin stand-in's bags (docs/results.md: gain x0.197, latency 10 steps, noise 0.0015),
# the unidentified parameters kept at the prior's ranges. Not the stand-in's file.
IDENTIFIED = """\
profile: identified
stand_in: false
randomize_each_reset: true
scale:
  gain.*: 0.197
  mass.cube: [0.6, 1.6]
  mass.tool: [0.8, 1.3]
  friction.cube_geom: [0.6, 1.4]
  friction.table: [0.6, 1.4]
  damping.*: [0.5, 2.0]
set:
  latency_steps: 10
  obs_noise: 0.0015
"""


@pytest.fixture
def identified(tmp_path):
    path = tmp_path / "identified" / "profile.yaml"
    path.parent.mkdir()
    path.write_text(IDENTIFIED)
    return path


@pytest.fixture
def no_stand_in_reads(monkeypatch):
    """Reading any profile file marked stand_in: true raises; so does retuning the expert
    on a profile (a feasibility check's tool: it runs the stand-in itself)."""
    real_load = profiles.load_profile_file

    def guarded(path):
        profile = real_load(path)
        if profile.is_stand_in:
            raise AssertionError(f"adaptation read the stand-in profile {path}")
        return profile

    def forbidden(*args, **kwargs):
        raise AssertionError("adaptation called retuned_on")

    monkeypatch.setattr(profiles, "load_profile_file", guarded)
    monkeypatch.setattr(expert_module, "retuned_on", forbidden)


def test_the_adaptation_profile_narrows_around_identified_values_and_keeps_the_prior(
    identified,
):
    sysid = identified.with_name("sysid.json")
    sysid.write_text(
        '{"parameters": [{"pattern": "gain.*", "value": 0.197, "std": 0.3, '
        '"identifiable": true}, {"pattern": "latency_steps", "value": 10, "std": 0.5, '
        '"identifiable": true}]}'
    )
    path = adaptation.adaptation_profile(identified, identified.parent / "out")
    made = profiles.load_profile(path)
    assert not made.is_stand_in and made.randomize_each_reset
    low, high = made.scale["gain.*"]
    # The spread (0.3 in log) widens the range beyond the floor: x exp(+-0.6).
    assert low == pytest.approx(0.197 * np.exp(-0.6), rel=1e-4)
    assert high == pytest.approx(0.197 * np.exp(0.6), rel=1e-4)
    assert made.set["latency_steps"] == (8.0, 12.0)  # the 2-step floor
    assert made.scale["mass.cube"] == (0.6, 1.6)  # unidentified: the prior's range
    assert made.set["obs_noise"] == 0.0015


def test_joint_values_identified_apart_survive_the_prior_group_in_the_adaptation_sim(
    tmp_path,
):
    # A per-joint-group fit names each joint; the prior's gain.* must not draw over them
    # (it did: adaptation then trained in the prior's gains and retuned a nominal teacher).
    identified = tmp_path / "groups" / "profile.yaml"
    identified.parent.mkdir()
    arm = [f"gain.{j}" for j in ARM.arm_joint_names]
    gains = "".join(f"  {key}: 0.2\n" for key in arm)
    identified.write_text(
        "profile: groups\nstand_in: false\nscale:\n" + gains + "set:\n  latency_steps: 14\n"
    )
    group = "|".join(arm)
    fitted = {"pattern": group, "value": 0.2, "std": 0.2, "identifiable": True}
    identified.with_name("sysid.json").write_text(json.dumps({"parameters": [fitted]}))
    made = profiles.load_profile(adaptation.adaptation_profile(identified, tmp_path / "out"))
    assert made.scale[arm[0]] == pytest.approx((0.2 * np.exp(-0.4), 0.2 * np.exp(0.4)), rel=1e-4)
    nominal = ArmPhysics(ARM).nominal_dynamics
    for seed in range(5):
        values = made.sample(nominal, np.random.default_rng(seed))
        for key in arm:
            factor = values[key] / nominal[key]
            assert 0.2 * np.exp(-0.4) - 1e-9 <= factor <= 0.2 * np.exp(0.4) + 1e-9, key


def test_the_race_gives_finalists_and_the_student_more_evidence_and_picks_among_finalists():
    # Point i succeeds with probability rates[i]; deterministic draws per (point, seed).
    rates = [0.2, 0.6, 0.65, 0.5, 0.9]  # the last is the student: always runs, never picked
    calls = []

    def run(indices, count, seed):
        calls.append((list(indices), count, seed))
        out = []
        for g in indices:
            draws = np.random.default_rng([g, seed]).random(count)
            out.append(int((draws < rates[g]).sum()))
        return out

    best, table = expert_module.race(run, 5, 20, 1000, finalists=2, always=[4])
    assert calls[0] == ([0, 1, 2, 3, 4], 20, 1000)
    assert sorted(calls[1][0]) == sorted({*calls[1][0]}) and 4 in calls[1][0]
    assert len(calls[1][0]) == 3 and calls[1][1:] == (40, 1020)  # fresh seeds, twice as many
    assert best in (1, 2) and best != 4
    assert table[best]["episodes"] == 60 and table[4]["episodes"] == 60
    assert table[0]["episodes"] == 20  # out in the first pass
    rate = {g: table[g]["successes"] / table[g]["episodes"] for g in calls[1][0] if g != 4}
    assert rate[best] == max(rate.values())


def test_a_running_policy_that_matches_the_best_teacher_is_kept_as_it_is(
    tmp_path, identified, monkeypatch
):
    checkpoint_dir = str(ckpt.shipped_checkpoint("push"))
    checkpoint = load_checkpoint(checkpoint_dir)
    actor_peft = lora.wrap(checkpoint.model.actor, 8, 16)
    before = lora.adapter_state(actor_peft)
    grid = adaptation.teacher_grid((0.1,) * 6)

    def search(*args, **kwargs):
        return {"tuning": grid[4], "table": [], "success": 0.7, "episodes": 48,
                "student_success": 0.75, "action_scale": (0.2,) * 7}  # fmt: skip

    def dagger(*args, **kwargs):
        raise AssertionError("DAgger ran toward a teacher the student already beats")

    monkeypatch.setattr(adaptation, "search_teacher", search)
    monkeypatch.setattr(adaptation, "dagger", dagger)
    result = adaptation.adapt(
        actor_peft, checkpoint_dir, checkpoint, identified, tmp_path / "adapt",
        adaptation.AdaptationSettings(workers=1), load_robot_description(),
    )  # fmt: skip
    metrics = result["metrics"]
    assert metrics["adapt_imitated"] == 0.0 and metrics["distance_from_parent"] == 0.0
    assert metrics["adapt_parent_success"] == 0.75
    # Kept as it is, at its own step, not the teacher's.
    assert result["action_scale"] == list(checkpoint.spec.action_scale)
    assert metrics["adapt_step_factor"] == 1.0
    after = lora.adapter_state(actor_peft)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_adaptation_refuses_a_stand_in_profile(tmp_path):
    with pytest.raises(adaptation.StandInProfileError, match="stand-in"):
        adaptation.adaptation_profile("real_twin", tmp_path)
    with pytest.raises(adaptation.StandInProfileError, match="stand-in"):
        adaptation.model_profile("real_twin_mild")


def test_adaptation_raises_stand_in_success_above_zero_shot_without_reading_the_stand_in(
    tmp_path, identified, no_stand_in_reads, monkeypatch
):
    """Tiny budget, fixed seeds: the teacher's search and DAgger in the identified sim, then
    the base and the adapted policy on the stand-in (run by the test, after adaptation)."""
    from simreal_ros.training.evaluate import PolicySource, evaluate_policy

    checkpoint_dir = str(ckpt.shipped_checkpoint("push"))
    checkpoint = load_checkpoint(checkpoint_dir)
    torch.manual_seed(0)
    actor_peft = lora.wrap(checkpoint.model.actor, 8, 16)
    settings = adaptation.AdaptationSettings(
        teacher_episodes=4, iterations=3, episodes=16, bc_steps=300, shifted_share=0.0,
        seed=3, workers=1,
    )  # fmt: skip
    result = adaptation.adapt(
        actor_peft,
        checkpoint_dir,
        checkpoint,
        identified,
        tmp_path / "adapt",
        settings,
        load_robot_description(),
    )
    metrics = result["metrics"]
    # The teacher was re-tuned in the identified sim (the nominal tuning fails there).
    table = {
        (row["lead"], row["speed"], row["step_factor"]): row["successes"]
        for row in result["teacher"]["table"]
    }
    assert (metrics["adapt_teacher_lead"], metrics["adapt_teacher_speed"]) != (1.0, 1.0)
    assert max(table.values()) > table[(1.0, 1.0, 1.0)]
    # The grid has the base's step and the arm joints' velocity limit (twice it here).
    assert {factor for *_, factor in table} == {1.0, 2.0}
    # Further from its parent than the old base-anchored trust region's ~1/(2w) allowed.
    assert metrics["distance_from_parent"] > 1 / (2 * LearnerConfig.anchor_weight)

    monkeypatch.undo()  # the stand-in plays the arm for the evaluation only
    seeds = list(range(910000, 910020))
    state = adaptation.actor_numpy_state(lora.merged(actor_peft))
    adapted = evaluate_policy(
        PolicySource(checkpoint_dir, actor_state=state, version="adapted",
                     action_scale=tuple(result["action_scale"])),
        "real_twin", "train", seeds, workers=1, safety_filter=True, robot=load_robot_description(),
    )  # fmt: skip
    base = evaluate_policy(
        checkpoint_dir, "real_twin", "train", seeds, workers=1, safety_filter=True,
        robot=load_robot_description(),
    )  # fmt: skip
    print(f"stand-in train, 20 seeds: adapted {adapted.successes}, base {base.successes}")
    assert adapted.successes > base.successes, (
        f"adaptation did not beat zero-shot on the stand-in: {adapted.successes}/20 vs "
        f"{base.successes}/20 (metrics {metrics})"
    )


# ---------------------------------------------------------------- the trust region
@pytest.fixture(scope="module")
def small_base(tmp_path_factory):
    robot = load_robot_description()
    spec = default_spec(robot, "push")
    torch.manual_seed(0)
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (32, 32), (32, 32)))
    directory = tmp_path_factory.mktemp("ckpt") / "push"
    save_checkpoint(directory, model, spec, version="base-test", gamma=0.95,
                         training={"test": True})  # fmt: skip
    base = load_checkpoint(directory)
    sim = collect_sim_transitions(base, "push", 2, seed=0, episode_seconds=1.0, robot=robot)
    real = collect_sim_transitions(base, "push", 2, seed=50, episode_seconds=1.0, robot=robot)
    real.sources = np.asarray(["real_twin"] * len(real))
    return directory, sim, real


def test_the_trust_region_anchors_to_the_parent_not_the_base(tmp_path, small_base):
    from simreal_ros.learner.gate import EvaluationSummary

    directory, sim, real = small_base
    cfg = from_mapping(LearnerConfig, {
        "method": "rl", "checkpoint_dir": str(directory),
        "store_root": str(tmp_path / "models"), "updates_per_round": 20, "batch_size": 16,
        "screen.seeds": 1, "screen.conditions": ["train"], "screen.workers": 1,
        "screen.profile": "nominal", "anchor_weight": 1.0, "learning_rate": 1e-3,
    })  # fmt: skip

    def passes(checkpoint_dir, adapter_dir, condition, seeds):
        return EvaluationSummary(len(seeds), len(seeds), 0.0, [True] * len(seeds))

    session = LearnerSession(
        cfg, sim_data=sim.subset(np.arange(len(sim))), robot=load_robot_description()
    )
    first = session.run_round(real.subset(np.arange(len(real))), passes)
    assert first.decision.promoted
    assert first.metrics["distance_from_parent"] > 0
    obs = torch.as_tensor(real.obs[:64])
    with torch.no_grad():
        promoted = lora.inner(session.actor_peft)(obs).clone()
        base = session.checkpoint.model.actor(obs)
    assert not torch.allclose(promoted, base, atol=1e-4)
    second = session.finetune(real.subset(np.arange(len(real))))
    with torch.no_grad():
        centre = session.trainer.tuner.base_actor(obs)
        after = lora.inner(session.actor_peft)(obs)
    torch.testing.assert_close(centre, promoted, atol=1e-5, rtol=1e-5)
    moved = float((after - promoted).abs().mean())
    assert second.metrics["distance_from_parent"] == pytest.approx(moved, rel=0.05, abs=1e-6)


@pytest.mark.parametrize("polish_rounds", [0, 1])
def test_method_adapt_stages_a_candidate_trained_in_the_identified_sim(
    tmp_path, small_base, identified, no_stand_in_reads, polish_rounds
):
    from simreal_ros.learner.gate import EvaluationSummary

    directory, sim, real = small_base
    cfg = from_mapping(LearnerConfig, {
        "method": "adapt", "checkpoint_dir": str(directory),
        "store_root": str(tmp_path / "models"), "sysid.profile": str(identified),
        "screen.seeds": 1, "screen.conditions": ["train"], "screen.workers": 1,
        "adapt.teacher_episodes": 1, "adapt.iterations": 1, "adapt.episodes": 2,
        "adapt.bc_steps": 5, "adapt.polish_rounds": polish_rounds, "adapt.polish_episodes": 2,
    })  # fmt: skip
    assert cfg.identifies_from_bags is False  # given a profile, it does not identify

    seen = []

    def evaluator(checkpoint_dir, adapter_dir, condition, seeds):
        seen.append(session.screening_profile)
        return EvaluationSummary(len(seeds), len(seeds), 0.0, [True] * len(seeds))

    session = LearnerSession(
        cfg, sim_data=sim.subset(np.arange(len(sim))), robot=load_robot_description()
    )
    result = session.run_round(real.subset(np.arange(len(real))), evaluator)
    metrics = result.stored.metadata["metrics"]
    assert result.decision.promoted and metrics["distance_from_parent"] > 0
    assert metrics["adapt_rows"] > 0 and "adapt_teacher_lead" in metrics
    # The RL polish ran in the identified sim (the stand-in guard is on) and its gate's
    # evidence is in the candidate's metrics; without it, none is.
    assert ("adapt_polish_kept" in metrics) == bool(polish_rounds)
    if polish_rounds:
        assert 0.0 <= metrics["adapt_polish_before"] <= 1.0
    assert seen and all(profile == str(identified) for profile in seen)
    unidentified = updated(cfg, {"sysid.profile": "", "store_root": str(tmp_path / "m2")})
    lost = LearnerSession(
        unidentified, sim_data=sim.subset(np.arange(len(sim))), robot=load_robot_description()
    )
    with pytest.raises(ValueError, match="identified profile"):
        lost.finetune(real.subset(np.arange(len(real))))


def test_a_widened_step_is_the_candidates_and_its_descendants_units(
    tmp_path, small_base, identified, no_stand_in_reads, monkeypatch
):
    """When the teacher's search picks the wider step, DAgger trains the student at it, the
    candidate's metadata names it, the session's episodes and sim replay are read in it
    once it runs, and the next round (method rl) keeps it."""
    from simreal_ros.learner.gate import EvaluationSummary
    from simreal_ros.policy.spec import widest_action_scale
    from simreal_ros.training.evaluate import PolicySource, build_policy

    directory, sim, real = small_base
    robot = load_robot_description()
    base_spec = load_checkpoint(directory).spec
    widest = widest_action_scale(base_spec, robot, robot.arm_indices)
    trained_at = []
    real_dagger = adaptation.dagger

    def search(*args, **kwargs):
        step = tuple(widest[i] for i in robot.arm_indices)
        return {"tuning": (2.0, 1.5, step), "action_scale": widest, "table": [],
                "success": 0.9, "episodes": 48, "student_success": 0.2}  # fmt: skip

    def dagger(*args, **kwargs):
        trained_at.append(args[-1])
        return real_dagger(*args, **kwargs)

    monkeypatch.setattr(adaptation, "search_teacher", search)
    monkeypatch.setattr(adaptation, "dagger", dagger)
    cfg = from_mapping(LearnerConfig, {
        "method": "adapt", "checkpoint_dir": str(directory),
        "store_root": str(tmp_path / "models"), "sysid.profile": str(identified),
        "screen.seeds": 1, "screen.conditions": ["train"], "screen.workers": 1,
        "adapt.iterations": 1, "adapt.episodes": 2, "adapt.bc_steps": 5,
        "updates_per_round": 5, "batch_size": 16,
    })  # fmt: skip

    def passes(checkpoint_dir, adapter_dir, condition, seeds):
        return EvaluationSummary(len(seeds), len(seeds), 0.0, [True] * len(seeds))

    session = LearnerSession(cfg, sim_data=sim.subset(np.arange(len(sim))), robot=robot)
    assert session.converter.spec.action_scale == base_spec.action_scale
    first = session.run_round(real.subset(np.arange(len(real))), passes)
    assert first.decision.promoted and trained_at == [widest]
    assert first.stored.metadata["action_scale"] == list(widest)
    assert first.metrics["adapt_step_factor"] == pytest.approx(2.0)
    deployed = build_policy(PolicySource(str(directory), str(first.stored.path)), robot=robot)
    assert deployed.converter.spec.action_scale == widest
    assert session.converter.spec.action_scale == widest
    # The base's sim replay, in the running version's units: the same joint motion.
    replay = session._sim_in_running_units()
    arm = list(robot.arm_indices)
    np.testing.assert_allclose(replay.actions[:, arm], sim.actions[:, arm] / 2, atol=1e-6)
    # Arm-data fine-tuning next (method rl, a new session on the same store).
    after = LearnerSession(
        updated(cfg, {"method": "rl"}), sim_data=sim.subset(np.arange(len(sim))), robot=robot
    )
    assert after.converter.spec.action_scale == widest
    second = after.run_round(real.subset(np.arange(len(real))), passes)
    assert second.stored.metadata["action_scale"] == list(widest)
