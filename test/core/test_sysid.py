"""System identification from bags (no ROS): known parameters recovered from bags recorded
in a profile with known values, unidentifiable parameters flagged, the written profile
usable as a profile, and bad bags refused with nothing written."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
import torch
import yaml

from simreal_ros.cli.main import main as simreal
from simreal_ros.episodes import messages
from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
from simreal_ros.episodes.metadata import EpisodeMetadata
from simreal_ros.learner.sim_episodes import record_rollout
from simreal_ros.policy.checkpoint import shipped_checkpoint
from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sysid import (
    FitParameter,
    FitSettings,
    SysidInputError,
    identify,
    identify_bags,
    read_replay_episodes,
)
from simreal_ros.sysid.simulate import ReplaySimulator, noise_estimate
from simreal_ros.training.torch_checkpoint import load_checkpoint

torch.set_num_threads(1)
ROBOT = load_robot_description()
# Values no shipped profile uses, so nothing here is tuned to the stand-in.
KNOWN_GAIN, KNOWN_LATENCY, KNOWN_NOISE = 0.4, 8, 0.001


@pytest.fixture(scope="module")
def known_bags(tmp_path_factory):
    root = tmp_path_factory.mktemp("sysid")
    profile = root / "known.yaml"
    profile.write_text(
        yaml.safe_dump(
            {
                "profile": "known",
                "scale": {"gain.*": KNOWN_GAIN},
                "set": {"latency_steps": KNOWN_LATENCY, "obs_noise": KNOWN_NOISE},
            }
        )
    )
    base = load_checkpoint(shipped_checkpoint("push"), with_critic=False)
    for i in range(4):
        record_rollout(
            root / "bags" / f"ep{i}", base, seed=300 + i, profile=str(profile),
            episode_seconds=2.5, noise=0.2, state_rate_hz=100, robot=ROBOT,
        )  # fmt: skip
    return root


def _settings(**overrides) -> FitSettings:
    values = dict(restarts=2, evaluations_per_restart=150, evaluations_resample=60, seed=0)
    values.update(overrides)
    return FitSettings(**values)


def test_known_parameters_are_recovered(known_bags, tmp_path):
    params = (
        FitParameter("gain.*", 0.05, 5.0),
        FitParameter("latency_steps", 0, 50),
        FitParameter("friction.base_geom", 0.2, 5.0),  # never in contact: changes nothing
    )
    result, profile = identify_bags(
        known_bags / "bags", tmp_path / "out", "push", params, holdout=1,
        settings=_settings(restarts=1), robot=ROBOT,
    )  # fmt: skip
    by_name = {p.pattern: p for p in result.parameters}
    gain, latency = by_name["gain.*"], by_name["latency_steps"]
    assert gain.identifiable and abs(gain.value / KNOWN_GAIN - 1) < 0.1, gain
    assert latency.identifiable and abs(latency.value - KNOWN_LATENCY) <= 2, latency
    assert (
        not by_name["friction.base_geom"].identifiable
        and by_name["friction.base_geom"].value is None
    )
    assert abs(result.obs_noise / KNOWN_NOISE - 1) < 0.2, result.obs_noise
    for split in ("fit", "holdout"):
        assert result.after[split].loss < 0.2 * result.before[split].loss, (split, result)
    # The profile is a profile: it loads and runs an episode.
    document = yaml.safe_load(profile.read_text())
    assert document["scale"]["gain.*"] == pytest.approx(gain.value, rel=1e-4)
    assert document["set"]["latency_steps"] == round(latency.value)
    assert "friction.base_geom" not in document["scale"]  # unidentifiable: not guessed
    assert by_name["friction.base_geom"].bounded is None  # flat: not even a range
    env = TaskEnvironment(
        EnvironmentConfig(profile=str(profile), episode_seconds=0.2), robot=ROBOT
    )
    env.reset(seed=1)
    assert env.dynamics["latency_steps"] == round(latency.value)
    assert env.dynamics["gain.elbow_joint"] == pytest.approx(2000 * gain.value, rel=1e-4)
    report = json.loads((tmp_path / "out" / "sysid.json").read_text())
    assert report["holdout_sources"] and report["after"]["holdout"]["loss"] > 0
    assert (tmp_path / "out" / "fit.png").stat().st_size > 10_000


def _write_bag(path, joint_names, *, commands=True, states=True, task="push", steps=60,
               metadata_names=None, width=None):  # fmt: skip
    """A bag of an arm holding still at its home pose (or a malformed one)."""
    topics = [
        TopicSpec("/joint_states", "sensor_msgs/msg/JointState"),
        TopicSpec("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray"),
        TopicSpec("/object/pose", "geometry_msgs/msg/PoseStamped"),
    ]
    names = list(metadata_names or joint_names)
    meta = EpisodeMetadata(
        episode_id=path.name, source="real", task=task, joint_names=names,
        joint_units=["rad"] * len(names),
    )  # fmt: skip
    recording = EpisodeRecording(path, topics, meta, flush_period_s=0.05)
    recording.start()
    home = np.array(ROBOT.home_position, dtype=float)
    rng = np.random.default_rng(0)
    t0 = 1_000_000_000
    for k in range(steps):
        t = t0 + k * 10_000_000
        q = home + rng.normal(0, 0.001, home.shape)
        if states:
            recording.offer(0, t, messages.joint_state(t, joint_names, q, np.zeros_like(q)))
            recording.offer(2, t, messages.pose_stamped(t, (0.5, 0.0, 0.025)))
        if commands and k % 5 == 0:
            values = home if width is None else np.zeros(width)
            recording.offer(1, t, messages.float64_multi_array(values))
    recording.stop("failure", False)
    return path


def test_an_arm_at_rest_identifies_nothing(tmp_path):
    for i in range(3):
        _write_bag(tmp_path / "bags" / f"rest{i}", ROBOT.joint_names)
    episodes = read_replay_episodes(tmp_path / "bags", ROBOT, "push")
    params = (FitParameter("gain.*", 0.05, 5.0), FitParameter("latency_steps", 0, 50))
    result = identify(episodes, params, holdout=0, settings=_settings(restarts=2), robot=ROBOT)
    assert [p.identifiable for p in result.parameters] == [False, False], result.parameters
    assert all(p.value is None and p.reason for p in result.parameters)


def test_noise_estimate_separates_white_noise_from_a_smooth_error():
    rng = np.random.default_rng(3)
    t = np.linspace(0, 5, 501)[:, None]
    smooth = 0.02 * np.sin(2 * t) + 0.01 * t  # a model error, far larger than the noise
    for sigma in (0.0005, 0.002):
        series = [smooth + rng.normal(0, sigma, (len(t), 4)) for _ in range(5)]
        assert noise_estimate(series) == pytest.approx(sigma, rel=0.1)
    assert noise_estimate([smooth]) < 1e-4


def test_replay_of_the_true_dynamics_beats_the_nominal(known_bags):
    episodes = read_replay_episodes(known_bags / "bags", ROBOT, "push")
    nominal = ArmPhysics(ROBOT).nominal_dynamics
    true = {k: v * KNOWN_GAIN for k, v in nominal.items() if k.startswith("gain.")}
    true["latency_steps"] = KNOWN_LATENCY
    errors = ReplaySimulator(episodes, ROBOT).errors([{}, true])
    for before, after in zip(*errors, strict=True):
        assert after.joint_rms < 0.3 * before.joint_rms
        assert after.joint_rms < 3 * KNOWN_NOISE  # what remains is about the noise


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("other_robot", "another robot"),
        ("joint_order", "another joint order"),
        ("no_commands", "no /forward_position_controller/commands"),
        ("empty", "empty"),
        ("other_task", "task 'reach'"),
        ("command_width", "commands have [3] values"),
    ],
)
def test_bad_bags_are_refused_and_nothing_is_written(tmp_path, capsys, case, message):
    bags = tmp_path / "bags"
    _write_bag(bags / "good", ROBOT.joint_names)
    names = list(ROBOT.joint_names)
    bad = bags / "bad"
    if case == "other_robot":
        _write_bag(bad, [f"panda_joint{i}" for i in range(len(names))])
    elif case == "joint_order":
        _write_bag(bad, names, metadata_names=[names[1], names[0], *names[2:]])
    elif case == "no_commands":
        _write_bag(bad, names, commands=False)
    elif case == "empty":
        _write_bag(bad, names, commands=False, states=False)
    elif case == "other_task":
        _write_bag(bad, names, task="reach")
    elif case == "command_width":
        _write_bag(bad, names, width=3)
    with pytest.raises(SysidInputError, match="cannot be used") as error:
        read_replay_episodes(bags, ROBOT, "push")
    assert message in str(error.value) and str(bad) in str(error.value)
    out = tmp_path / "out"
    assert simreal(["sysid", str(bags), "--out", str(out), "--task", "push"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_no_bags_is_a_clear_error(tmp_path):
    with pytest.raises(SysidInputError, match="no episode bags"):
        read_replay_episodes(tmp_path, ROBOT)


# Per-joint gaps the grouped model cannot see: two joints slow, the rest nominal.
JOINT_GAPS = {"gain.shoulder_lift_joint": 0.3, "gain.elbow_joint": 0.25}


@pytest.fixture(scope="module")
def per_joint_bags(tmp_path_factory):
    root = tmp_path_factory.mktemp("sysid_joints")
    profile = root / "joints.yaml"
    profile.write_text(
        yaml.safe_dump({"profile": "joints", "scale": JOINT_GAPS, "set": {"latency_steps": 6}})
    )
    base = load_checkpoint(shipped_checkpoint("push"), with_critic=False)
    for i in range(4):  # 3 to fit, 1 held out
        record_rollout(
            root / "bags" / f"ep{i}", base, seed=500 + i, profile=str(profile),
            episode_seconds=2.0, noise=0.3, state_rate_hz=100, robot=ROBOT,
        )  # fmt: skip
    return root / "bags"


def test_a_per_joint_gain_gap_is_found_per_joint(per_joint_bags, tmp_path):
    result, profile = identify_bags(
        per_joint_bags, tmp_path / "out", "push", holdout=1,
        settings=_settings(restarts=1, evaluations_per_restart=150), robot=ROBOT,
    )  # fmt: skip
    # With 150 replays the search stops in the coupled gains-damping valley (damping x7.7,
    # gains 10-31% high); the fit conditional on the damping held at nominal, which the
    # profile assumes, recovers the gains.
    table = {row["model"]: row for row in result.model_selection}
    assert result.model == "per_joint", table
    # Chosen by held-out error: the grouped model's is worse by more than the penalty.
    assert table["per_joint"]["score"] < table["grouped"]["score"]
    by_name = {p.pattern: p for p in result.parameters}
    for name, truth in JOINT_GAPS.items():
        p = by_name[name]
        assert p.identifiable and abs(p.value / truth - 1) < 0.25, p
        assert p.spread is not None and p.interval[0] < p.value < p.interval[1]
    latency = by_name["latency_steps"]
    assert latency.identifiable and abs(latency.value - 6) <= 2, latency
    for name in ("gain.shoulder_pan_joint", "gain.wrist_1_joint"):
        p = by_name[name]
        assert p.value is None or abs(p.value - 1) < 0.25, p  # a nominal joint stays nominal
    assert result.after["holdout"].loss < 0.5 * result.before["holdout"].loss
    for p in result.parameters:  # a reason carried into the conditional fit is said once
        parts = [part for part in p.reason.split("; ") if part]
        assert len(parts) == len(set(parts)), p.reason
    document = yaml.safe_load(profile.read_text())
    assert document["scale"]["gain.elbow_joint"] == pytest.approx(
        by_name["gain.elbow_joint"].value, rel=1e-4
    )
    assert set(document["spread"]) == {p.pattern for p in result.parameters if p.identifiable}
    assert set(document["unidentifiable"]) == set(result.unidentifiable())
    assert document["spread"]["gain.elbow_joint"]["unit"] == "log_factor"


def test_a_value_the_data_bound_but_do_not_fix_is_drawn_from_that_range(tmp_path):
    """A parameter without a value but with the range the data bound goes into the profile
    as that range (drawn per reset), not the prior's; adaptation keeps it, and the loop's
    line names it apart from the unidentifiable ones."""
    from simreal_ros.learner.adaptation import adaptation_profile
    from simreal_ros.loop.state import describe_identification
    from simreal_ros.sim.profiles import load_profile
    from simreal_ros.sysid.output import identification_summary, write_result
    from simreal_ros.sysid.parameters import ErrorReport, ParameterEstimate, SysidResult

    def estimate(pattern, value=None, bounded=None, reason=""):
        return ParameterEstimate(
            pattern, [pattern], value is not None, value, 0.0, [], 0.0 if bounded else 0.05,
            50.0, [0.1, 0.1], reason=reason, spread=0.01 if value else None, bounded=bounded,
        )  # fmt: skip

    error = ErrorReport(1.0, 0.01, 0.01, 3)
    result = SysidResult(
        parameters=[
            estimate("gain.*", 0.2),
            estimate("mass.cube", bounded=[1.1, 2.9], reason="posterior spread 0.25"),
            estimate("latency_steps", bounded=[11.7, 16.3], reason="follows friction.table"),
            estimate("friction.table", reason="flat"),
        ],
        obs_noise=0.001, obs_noise_ci=(0.0009, 0.0011), fit_sources=["a", "b"],
        holdout_sources=[], before={"fit": error, "holdout": error},
        after={"fit": error, "holdout": error}, evaluations=1, seconds=1.0, settings={},
        nominal={"gain.elbow_joint": 2000.0},
    )  # fmt: skip
    path = write_result(result, tmp_path / "out")
    document = yaml.safe_load(path.read_text())
    assert document["scale"]["mass.cube"] == [1.1, 2.9]
    assert document["set"]["latency_steps"] == [12, 16]
    assert document["scale"]["friction.table"] == [0.6, 1.4]  # the prior's range
    assert document["scale"]["gain.*"] == 0.2 and document["randomize_each_reset"] is True
    profile = load_profile(str(path))
    nominal = ArmPhysics(ROBOT).nominal_dynamics
    draws = [profile.sample(nominal, np.random.default_rng(k)) for k in range(20)]
    assert all(1.1 <= d["mass.cube"] / nominal["mass.cube"] <= 2.9 for d in draws)
    assert all(12 <= d["latency_steps"] <= 16 for d in draws)
    assert adaptation_profile(path, tmp_path / "adapt").read_text().count("1.1") >= 1
    adapted = load_profile(str(tmp_path / "adapt" / "adaptation_profile.yaml"))
    assert adapted.scale["mass.cube"] == (1.1, 2.9)
    summary = identification_summary(result.to_dict(), str(path))
    assert summary["bounded"] == {"mass.cube": [1.1, 2.9], "latency_steps": [11.7, 16.3]}
    line = describe_identification(summary)
    assert "bounded, not fixed: mass.cube 1.1..2.9, latency_steps 11.7..16.3" in line
    assert line.endswith("unidentifiable: friction.table")


class _ProductValley:
    """A synthetic fit error in which the data fix the table's friction times the cube's
    mass (1.7, as a heavy cube on a nominal table would look), and the gain on its own."""

    def __init__(self, coupling: float) -> None:
        self.coupling = coupling  # 1: only the product is fixed; 0: the friction alone
        self.parameters = [
            FitParameter("friction.table", 0.2, 5.0),
            FitParameter("mass.cube", 0.2, 5.0),
            FitParameter("gain.*", 0.05, 5.0),
        ]
        self.names = [["friction.table"], ["mass.cube"], ["gain.elbow_joint"]]

    def residuals(self, factor_sets, fit):
        return np.array([
            [math.log(f[0] / 1.7) + self.coupling * math.log(f[1]), math.log(f[2] / 0.2)]
            for f in factor_sets
        ])  # fmt: skip


def test_a_value_that_does_not_hold_across_its_partners_prior_range_gets_that_range():
    """The fresh-clone demo's trade: a table friction fitted at x1.7 beside a cube mass the
    probes found flat at nominal. Refitted with the mass at either end of the prior's range
    (which the profile draws it from), the friction's best value moves past its limit: no
    value, the range it spans. A friction the data fix on its own, and a gain not coupled
    to the mass, keep their values."""
    from simreal_ros.sysid.identifiability import _spans_the_prior, across_the_prior, spread_limits
    from simreal_ros.sysid.parameters import ParameterEstimate

    def estimate(pattern, value):
        return ParameterEstimate(pattern, [pattern], value is not None, value, 0.0, [], 0.05,
                                 5.0, [0.1, 0.1], spread=0.02 if value else None)  # fmt: skip

    estimates = [estimate("friction.table", 1.7), estimate("mass.cube", None),
                 estimate("gain.*", 0.2)]  # fmt: skip
    prior = {"mass.cube": (0.6, 1.6), "friction.table": (0.6, 1.4), "gain.*": (0.75, 1.25)}
    settings = FitSettings()
    limits = spread_limits(_ProductValley(1.0).parameters, settings)
    point = [1.7, 1.0, 0.2]
    found = across_the_prior(_ProductValley(1.0), point, [0], settings, estimates, prior,
                             limits)  # fmt: skip
    assert list(found) == [0]
    ends, partner, drawn = found[0]
    assert partner == 1 and ends == pytest.approx([1.7 / 0.6, 1.7 / 1.6], rel=1e-3)
    assert drawn == pytest.approx(prior["mass.cube"])
    ranged = _spans_the_prior(_ProductValley(1.0).parameters[0], estimates[0], ends,
                              "mass.cube", drawn, 1.0)  # fmt: skip
    assert not ranged.identifiable and ranged.value is None and "mass.cube" in ranged.reason
    low, high = ranged.bounded
    assert low == pytest.approx(1.7 / 1.6 * math.exp(-1.96 * 0.02), rel=1e-3)
    assert high == pytest.approx(1.7 / 0.6 * math.exp(1.96 * 0.02), rel=1e-3)
    # The valley it follows: its best values at the mass's range's ends and at the fit.
    assert ranged.follows["partner"] == "mass.cube"
    assert np.array(ranged.follows["points"]) == pytest.approx(
        np.array([[0.6, 1.7 / 0.6], [1.0, 1.7], [1.6, 1.7 / 1.6]]), rel=1e-3
    )
    # Weakly coupled (the friction's best value moves 0.05 x log(mass)): it holds.
    assert across_the_prior(_ProductValley(0.05), point, [0], settings, estimates, prior,
                            limits) == {}  # fmt: skip
    # A partner drawn from the range its data bound counts as one drawn from the prior's:
    # the demo's cube mass of 0.585..5 (no prior range given here).
    bounded = [estimates[0], dataclasses.replace(estimates[1], bounded=[0.585, 5.0]),
               estimates[2]]  # fmt: skip
    found = across_the_prior(_ProductValley(1.0), point, [0], settings, bounded, {}, limits)
    assert list(found) == [0] and found[0][1] == 1
    assert found[0][0] == pytest.approx([1.7 / 0.585, 1.7 / 5.0], rel=1e-3)
    assert found[0][2] == pytest.approx((0.585, 5.0))
    # Neither drawn (no prior, no range): held at nominal, nothing to hold across.
    assert across_the_prior(_ProductValley(1.0), point, [0], settings, estimates, {},
                            limits) == {}  # fmt: skip


def test_a_value_that_follows_a_drawn_partner_is_drawn_along_their_valley(tmp_path):
    """The profile draws a tied pair on the valley the data leave open: the table friction
    follows each drawn cube mass (their product fixed at 1.7), within its own range; the
    adaptation profile keeps the tie. Independent draws from the two ranges would leave
    the valley (a light cube on a slippery table)."""
    from simreal_ros.learner.adaptation import adaptation_profile
    from simreal_ros.sim.profiles import load_profile
    from simreal_ros.sysid.output import write_result
    from simreal_ros.sysid.parameters import ErrorReport, ParameterEstimate, SysidResult

    follows = {"partner": "mass.cube", "points": [[0.6, 1.7 / 0.6], [1.0, 1.7], [1.6, 1.0625]]}
    error = ErrorReport(1.0, 0.01, 0.01, 3)
    result = SysidResult(
        parameters=[
            ParameterEstimate("friction.table", ["friction.table"], False, None, 0.0, [], 0.2,
                              5.0, [0.1, 0.1], reason="moves with mass.cube",
                              bounded=[1.0, 2.95], follows=follows),
            ParameterEstimate("mass.cube", ["mass.cube"], False, None, 0.0, [], 0.2, 5.0,
                              [0.0, 0.0], reason="flat"),
        ],
        obs_noise=0.001, obs_noise_ci=(0.0009, 0.0011), fit_sources=["a"],
        holdout_sources=[], before={"fit": error, "holdout": error},
        after={"fit": error, "holdout": error}, evaluations=1, seconds=1.0, settings={},
        nominal={"friction.table": 1.0},
    )  # fmt: skip
    path = write_result(result, tmp_path / "out")
    document = yaml.safe_load(path.read_text())
    assert document["tied"]["friction.table"]["with"] == "mass.cube"
    nominal = ArmPhysics(ROBOT).nominal_dynamics
    for profile_path in (path, adaptation_profile(path, tmp_path / "adapt")):
        profile = load_profile(str(profile_path))
        assert set(profile.tied) == {"friction.table"}
        draws = [profile.sample(nominal, np.random.default_rng(k)) for k in range(40)]
        mass = np.array([d["mass.cube"] / nominal["mass.cube"] for d in draws])
        friction = np.array([d["friction.table"] / nominal["friction.table"] for d in draws])
        assert mass.max() / mass.min() > 1.5  # the mass is drawn over the prior's range
        on_valley = mass * friction
        # Within the points' span the product holds (log-linear between 0.6, 1 and 1.6).
        assert on_valley == pytest.approx(np.full(40, 1.7), rel=1e-6)
        assert friction.min() >= 1.0 and friction.max() <= 2.95
    # A partner of several names (a grouped gain) is one factor per draw, as in the fit:
    # the tied value follows that factor, not one joint's.
    path = tmp_path / "grouped.yaml"
    path.write_text(yaml.safe_dump({
        "profile": "grouped", "randomize_each_reset": True,
        "scale": {"gain.*": [0.5, 2.0], "damping.*": [0.3, 3.0]},
        "tied": {"damping.*": {"with": "gain.*", "points": [[0.5, 2.0], [2.0, 0.5]]}},
    }))  # fmt: skip
    profile = load_profile(str(path))
    gains = [n for n in nominal if n.startswith("gain.")]
    assert len(gains) > 1
    for k in range(20):
        draw = profile.sample(nominal, np.random.default_rng(k))
        factors = {n: draw[n] / nominal[n] for n in gains}
        assert max(factors.values()) == pytest.approx(min(factors.values()), rel=1e-9)
        damping = [draw[n] / nominal[n] for n in nominal if n.startswith("damping.")]
        assert damping == pytest.approx([1.0 / factors[gains[0]]] * len(damping), rel=1e-9)


@pytest.mark.parametrize(
    ("tied", "message"),
    [
        ({"friction.table": {"with": "mass.cube"}}, "must be {with: partner"),
        ({"friction.cube": {"with": "mass.cube", "points": [[1, 1], [2, 2]]}}, "not in scale"),
        ({"friction.table": {"with": "gain.*", "points": [[1, 1], [2, 2]]}}, "partner"),
        ({"friction.table": {"with": "mass.cube", "points": [[1, 1]]}}, "two or more"),
        ({"friction.table": {"with": "mass.cube", "points": [[2, 1], [1, 2]]}}, "increasing"),
        ({"friction.table": {"with": "mass.cube", "points": [[0, 1], [1, 2]]}}, "above 0"),
        ({"friction.table": {"with": "mass.cube", "points": [[1, "x"], [2, 2]]}}, "finite"),
        ({"friction.table": {"with": "mass.cube", "points": [[1, 1], [2, 2]]},
          "mass.cube": {"with": "friction.table", "points": [[1, 1], [2, 2]]}}, "tied itself"),
    ],
)  # fmt: skip
def test_a_bad_tie_is_refused_with_what_to_give(tmp_path, tied, message):
    from simreal_ros.sim.profiles import load_profile

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "profile": "p", "scale": {"friction.table": [0.5, 2.0], "mass.cube": [0.6, 1.6]},
        "tied": tied,
    }))  # fmt: skip
    with pytest.raises(ValueError, match=re.escape(message)):
        load_profile(str(path))


def test_a_range_is_set_against_the_prior_the_narrower_statement_leading():
    """The benchmark's cases: a cube mass of 0.26..5 and a tool mass of 0.63..1.42 are wider
    than the prior's ranges, so they are drawn where both allow; a latency of 8.1..19.9,
    whose centre lies past the prior's 0..10, and a friction narrower than the prior's,
    stand."""
    from simreal_ros.sysid.identifiability import _with_the_prior
    from simreal_ros.sysid.parameters import ParameterEstimate

    params = [FitParameter("mass.cube", 0.2, 5.0), FitParameter("mass.tool", 0.2, 5.0),
              FitParameter("latency_steps", 0, 50), FitParameter("friction.table", 0.2, 5.0),
              FitParameter("gain.*", 0.05, 5.0)]  # fmt: skip
    ranges = [[0.257, 5.0], [0.63, 1.42], [8.09, 19.91], [1.4, 1.92], [0.1, 0.6]]
    estimates = [
        ParameterEstimate(p.pattern, [p.pattern], False, None, 0.0, [], p.low, p.high,
                          [0.1, 0.1], reason="follows", bounded=r)
        for p, r in zip(params, ranges, strict=True)
    ]  # fmt: skip
    prior = {"mass.cube": (0.6, 1.6), "mass.tool": (0.8, 1.3), "latency_steps": (0.0, 10.0),
             "friction.table": (0.6, 1.4), "gain.*": (0.75, 1.25)}  # fmt: skip
    mass, tool, latency, friction, gain = _with_the_prior(params, estimates, prior)
    assert mass.bounded == [0.6, 1.6] and "wider than the prior's 0.6..1.6" in mass.reason
    assert tool.bounded == [0.8, 1.3]
    assert latency.bounded == [8.09, 19.91] and friction.bounded == [1.4, 1.92]
    assert gain.bounded == [0.1, 0.6]  # wider, but apart from the prior's: the data win
    assert _with_the_prior(params, estimates, None) == estimates


def test_segments_restart_from_the_recording(known_bags):
    """The true dynamics replay the recording segment by segment about as well as whole, and
    a short-horizon replay starts each segment at the recorded state."""
    episodes = read_replay_episodes(known_bags / "bags", ROBOT, "push")
    nominal = ArmPhysics(ROBOT).nominal_dynamics
    true = {k: v * KNOWN_GAIN for k, v in nominal.items() if k.startswith("gain.")}
    true["latency_steps"] = KNOWN_LATENCY
    simulator = ReplaySimulator(episodes, ROBOT, segment_ticks=5)
    assert simulator.segment_count([0]) >= 5  # 2.5 s at 20 Hz in 5-tick segments
    losses = simulator.segment_losses([{}, true])
    assert losses.shape[1] == simulator.segment_count()
    assert np.median(losses[1]) < 0.2 * np.median(losses[0])


def test_a_value_that_follows_a_dropped_parameter_is_not_given():
    from simreal_ros.sysid.identifiability import partners_of_dropped

    # 0: a wrist gain without a value; 1: the damping coupled with it; 2: the latency;
    # 3: a parameter coupled only with the damping. Probes: ×1.25 (log 0.223), 2 steps.
    h = np.array([0.223, 0.223, 2.0, 0.223])
    limits = np.array([0.11, 0.11, 1.0, 0.11])
    full_h = np.array([
        [1.0, 0.9, 0.0, 0.0],
        [0.9, 1.0, 0.0, 0.6],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.6, 0.0, 1.0],
    ])  # fmt: skip
    # Given 3, the damping's best value moves 0.9·0.223/(1-0.36) ≈ 0.31 > 0.11 per probe of
    # the wrist gain, and 3's moves with it (0.9·0.6·0.223/0.64 ≈ 0.19); the latency stays.
    found = partners_of_dropped(full_h, [1, 2, 3], h, limits)
    assert set(found) == {1, 3}
    assert found[1] == (0, pytest.approx(0.9 * 0.223 / 0.64))
    assert found[3] == (0, pytest.approx(0.9 * 0.6 * 0.223 / 0.64))
    # Weakly coupled (0.3·0.223 = 0.067 per probe): the damping keeps its value.
    weak = full_h.copy()
    weak[0, 1] = weak[1, 0] = 0.3
    weak[1, 3] = weak[3, 1] = 0.0
    assert partners_of_dropped(weak, [1, 2, 3], h, limits) == {}
    # Nothing dropped: nothing to follow.
    assert partners_of_dropped(full_h, [0, 1, 2, 3], h, limits) == {}
    # A partner whose own probes leave the error flat (curvature 0.001) cannot move a value
    # by more than an error with a minimum allows: a cross term of 0.9 from a noisy corner
    # replay is capped at sqrt(1 x 0.001).
    flat_partner = full_h.copy()
    flat_partner[0, 0] = 0.001
    flat_partner[1, 3] = flat_partner[3, 1] = 0.0
    assert partners_of_dropped(flat_partner, [1, 2, 3], h, limits) == {}


def test_along_a_flat_direction_the_least_constrained_parameter_is_dropped():
    from simreal_ros.sysid.polish import _flat_direction, _newton_subset

    # Gain, damping, latency (probes: log 1.25, log 1.25, 2 steps). In probe units the error
    # has no minimum along (0.1, 1, 0.2): the damping moves ten probes per probe of the
    # gain. The gain is fixed tightly and coupled to both others (the hub whose own-curvature
    # scaling made it look the loosest), so it must be the damping that goes.
    h = np.array([math.log(1.25), math.log(1.25), 2.0])
    flat = np.array([0.1, 1.0, 0.2]) / np.linalg.norm([0.1, 1.0, 0.2])
    rest = np.linalg.qr(np.column_stack([flat, [1.0, 0, 0], [0, 0, 1.0]]))[0][:, 1:]
    in_probes = -0.01 * np.outer(flat, flat) + rest @ np.diag([40.0, 5.0]) @ rest.T
    full_h = in_probes / np.outer(h, h)
    direction = _flat_direction(full_h, [0, 1, 2], h)
    assert direction is not None and int(np.argmax(np.abs(direction))) == 1
    assert _newton_subset(full_h, [0, 1, 2], h) == [0, 2]


def test_of_a_trading_pair_only_the_looser_loses_its_value_and_the_other_is_judged_after():
    from simreal_ros.sysid.identifiability import partners_of_dropped
    from simreal_ros.sysid.polish import looser_of_pair

    # The fresh-clone demo's pair: gain and damping at posterior correlation +0.99, both
    # dropped, so the adaptation trained in the prior's gains. Along the pair's flat
    # direction the damping moves ten probes per probe of the gain (in probe units), so
    # only the damping goes; the gain keeps a value because it follows the damping by
    # less than its limit.
    h = np.array([math.log(1.25), math.log(1.25)])
    flat = np.array([0.1, 1.0]) / np.linalg.norm([0.1, 1.0])
    across = np.array([1.0, -0.1]) / np.linalg.norm([1.0, -0.1])
    in_probes = 0.01 * np.outer(flat, flat) + 40.0 * np.outer(across, across)
    full_h = in_probes / np.outer(h, h)
    rho = -full_h[0, 1] / math.sqrt(full_h[0, 0] * full_h[1, 1])
    assert abs(rho) > 0.95  # the pair rule's threshold (MAX_CORRELATION)
    assert looser_of_pair(full_h, 0, 1, h) == looser_of_pair(full_h, 1, 0, h) == 1
    limits = np.array([math.log(1.25), math.log(1.25)])
    assert partners_of_dropped(full_h, [0], h, limits) == {}
    # Swapped roles: the gain is the loose one.
    swapped = full_h[::-1, ::-1]
    assert looser_of_pair(swapped, 0, 1, h) == 0


def test_a_value_the_error_bounds_from_one_side_only_is_not_given():
    from simreal_ros.sysid.identifiability import one_sided_bound

    # Error 1.0 at the estimate; probes ×0.8 and ×1.25 raise it by these amounts.
    assert one_sided_bound([0.05, 0.08], 1.0, 0.01) == ""
    # The cube's friction under the table's: lowering it changes nothing (max rule).
    reason = one_sided_bound([0.0005, 0.3], 1.0, 0.01)
    assert "bound it from above" in reason and "+0.1%" in reason
    assert "from below" in one_sided_bound([0.3, -0.002], 1.0, 0.01)


class _LaggingArm:
    """A gain that trades against the latency (a slow arm lags like a late one): the data
    fix log(gain) - slope (latency - 14) tightly and the latency itself loosely."""

    def __init__(self, slope: float, weak: float) -> None:
        from simreal_ros.sysid.parameters import LATENCY

        self.parameters = [FitParameter("gain.*", 0.05, 5.0), FitParameter(LATENCY, 0, 50)]
        self.names = [["gain.a"], [LATENCY]]
        self.slope, self.weak = slope, weak

    def residuals(self, factor_sets, fit):
        return np.array([
            [10 * (math.log(g / 0.1) - self.slope * (lag - 14)), self.weak * (lag - 14), 1.0]
            for g, lag in factor_sets
        ])  # fmt: skip

    def per_segment(self, factor_sets, fit):
        return (self.residuals(factor_sets, fit) ** 2).sum(axis=1, keepdims=True)


def test_a_value_bound_on_one_side_only_gets_the_range_its_error_profile_allows():
    """The Panda's latency (truth 14): 2 steps down from the fit (15) raise the error by
    less than 1%, so the probes bound it from above only. With the gain refitted along it,
    the error stays within 1% at 11 and 17 steps and rises past it at 7 and 19, the
    range's ends; holding the gain would narrow that to the probes' own resolution, and a
    flat direction runs to the search's box."""
    from simreal_ros.sysid.identifiability import _profiled, profile_range
    from simreal_ros.sysid.parameters import ParameterEstimate

    settings = _settings()
    arm = _LaggingArm(slope=0.05, weak=0.03)
    fitted = [0.1 * math.exp(0.05), 15.0]
    assert profile_range(arm, fitted, [0], settings, 1, [0]) == ([7.0, 19.0], [True, True])
    assert profile_range(arm, fitted, [0], settings, 1, []) == ([13.0, 17.0], [True, True])
    flat = [0.1 * math.exp(0.01), 15.0]
    assert profile_range(_LaggingArm(0.01, 0.0), flat, [0], settings, 1, [0]) == (
        [0.0, 50.0], [False, False]
    )  # fmt: skip

    def estimate(pattern, value, side=None):
        return ParameterEstimate(pattern, [pattern], value is not None, value, 0.0, [], 0.0,
                                 50.0, [0.005, 0.02], reason="" if value else "one side",
                                 bound_side=side)  # fmt: skip

    gain, latency = _profiled(arm, fitted, [0], settings,
                              [estimate("gain.*", fitted[0]), estimate("latency_steps", None,
                                                                        "above")])  # fmt: skip
    assert gain.identifiable and gain.bounded is None
    assert not latency.identifiable and latency.bounded == [7.0, 19.0]
    assert "gain.* refitted" in latency.reason and "between 7 and 19" in latency.reason
    # Without a side the probes bounded (flat, or against other evidence), nothing changes.
    flat = estimate("latency_steps", None)
    assert _profiled(arm, fitted, [0], settings, [gain, flat])[1] == flat


class _QuadraticObjective:
    """An error with a known minimum, in the objective's interface (per-segment losses)."""

    def __init__(self, truth, latency_truth):
        from simreal_ros.sysid.parameters import LATENCY, FitParameter

        self.parameters = [FitParameter("gain.a", 0.05, 5.0), FitParameter("gain.b", 0.05, 5.0),
                           FitParameter(LATENCY, 0.0, 50.0)]  # fmt: skip
        self.truth, self.latency_truth = np.log(truth), latency_truth
        self.calls = 0

    def per_segment(self, points, fit):
        self.calls += len(points)
        x = np.array([[math.log(p[0]), math.log(p[1]), p[2]] for p in points])
        error = ((x[:, :2] - self.truth) ** 2).sum(axis=1) + 0.01 * (
            x[:, 2] - self.latency_truth
        ) ** 2
        return np.column_stack([error + 0.01, error + 0.03])  # two segments


def test_a_fit_left_on_a_slope_settles_and_one_that_is_not_at_a_minimum_gives_no_value():
    from simreal_ros.sysid.identifiability import not_at_minimum
    from simreal_ros.sysid.parameters import FitSettings
    from simreal_ros.sysid.polish import _local_model, _settle

    # What the per-joint search did: it stopped with two gains 25-38% high.
    objective = _QuadraticObjective([0.3, 0.25], 4)
    settings = FitSettings()
    stopped = [0.41, 0.345, 4.0]
    model = _local_model(objective, stopped, [0], settings)
    reason = not_at_minimum(objective, stopped, model, float(model.center.mean()), 0.01)
    assert "did not reach a minimum" in reason and "gain.b ×0.80" in reason  # the farther one
    settled = _settle(objective, stopped, [0], settings)
    # Within one probe (×1.25) of the truth in each gain, the latency kept.
    assert abs(math.log(settled[0] / 0.3)) < math.log(1.25) / 2
    assert abs(math.log(settled[1] / 0.25)) < math.log(1.25) / 2 and settled[2] == 4.0
    model = _local_model(objective, settled, [0], settings)
    assert not_at_minimum(objective, settled, model, float(model.center.mean()), 0.01) == ""
    # A probe past the search's box does not count: the bound rule handles a value there.
    at_box = [4.9, 0.25, 4.0]
    objective.truth[0] = math.log(20.0)  # the error keeps falling past the box (5.0)
    model = _local_model(objective, at_box, [0], settings)
    assert not_at_minimum(objective, at_box, model, float(model.center.mean()), 0.01) == ""


class _ValleyObjective:
    """Linear residuals in log space: the data fix log(gain) - 0.5 log(damping) tightly and
    log(damping) loosely (the coupled valley of a position servo), and the latency."""

    def __init__(self):
        from simreal_ros.sysid.parameters import LATENCY

        self.parameters = [
            FitParameter("gain.a", 0.05, 5.0),
            FitParameter("damping.*", 0.1, 10.0),
            FitParameter(LATENCY, 0, 50),
        ]
        self.gain, self.latency = 0.3, 4

    def residuals(self, factor_sets, fit):
        out = []
        for gain, damping, latency in factor_sets:
            along = math.log(gain / self.gain) - 0.5 * math.log(damping)
            out.append([10 * along, 0.05 * math.log(damping), 0.1 * (latency - self.latency)])
        return np.array(out)


def test_least_squares_refine_follows_the_valley_and_holds_what_it_is_told():
    from simreal_ros.sysid.polish import _refine

    objective = _ValleyObjective()
    settings = _settings()
    # Where a search left it: damping at its bound, the gain following it along the valley,
    # the latency 2 steps off.
    wandered = [0.3 * math.sqrt(9.9), 9.9, 6.0]
    free = _refine(objective, wandered, [0], settings)
    assert free[0] == pytest.approx(0.3, rel=0.02) and free[1] == pytest.approx(1.0, rel=0.05)
    assert free[2] == 4.0  # one step at a time while the error falls, and no further
    # Damping held at nominal (a conditional fit): the gain is the best one given that.
    held = _refine(objective, [0.3 * math.sqrt(9.9), 1.0, 4.0], [0], settings, held=[1])
    assert held[1] == 1.0 and held[0] == pytest.approx(0.3, rel=1e-3)
    # Nothing to refine when every parameter is held or the iterations are 0.
    assert _refine(objective, wandered, [0], settings, held=[0, 1, 2]) == wandered
    off = dataclasses.replace(settings, refine_iterations=0)
    assert _refine(objective, wandered, [0], off) == wandered


def test_the_search_budget_grows_with_the_parameter_count():
    from simreal_ros.sysid.parameters import DEFAULT_PARAMETERS, per_joint_parameters
    from simreal_ros.sysid.search import search_budget

    joints = ROBOT.joint_names
    assert search_budget(300, DEFAULT_PARAMETERS) == 300
    per_joint = per_joint_parameters(joints)
    assert search_budget(300, per_joint) == round(300 * len(per_joint) / len(DEFAULT_PARAMETERS))
    assert search_budget(300, DEFAULT_PARAMETERS[:2]) == 300  # never below the given budget


def test_a_value_that_follows_a_hold_the_data_exclude_gets_none_and_a_slide_widens_spread():
    """The fresh-clone demos' cases: the cube's mass bounded from below (x1.82 in the fit)
    and held at nominal moved the table's friction x1.38 -> x1.62 (no value); a gain that
    slid beside a latency held where its data allow keeps its value with a wider spread;
    a corrected valley (holding lowers the error) keeps its values."""
    from simreal_ros.sysid.identifiability import (
        _widened,
        against_the_data,
        follows_the_hold,
        spread_limits,
    )
    from simreal_ros.sysid.parameters import ParameterEstimate

    params = (
        FitParameter("gain.*", 0.05, 5.0),
        FitParameter("mass.cube", 0.2, 5.0),
        FitParameter("friction.table", 0.2, 5.0),
        FitParameter("latency_steps", 0, 50),
    )
    contact = {1, 2}

    def coupled(i, j):
        return i in contact and j in contact

    limits = spread_limits(params, FitSettings())
    # The probes' sizes: x1.25 (log) for the factors, 2 steps for the latency.
    probes_log = np.array([math.log(1.25)] * 3 + [2.0])
    fit = [0.2, 1.82, 1.38, 14.0]
    held = [0.2, 1.0, 1.62, 14.0]  # the mass at nominal, the friction refitted
    args = (params, coupled, fit, held)
    # The mass's down probe raised the error: nominal lies where its data exclude.
    probes = [ParameterEstimate("mass.cube", ["m"], False, None, 0.0, [], 0.2, 5.0, [0.05, 0.0])]
    nominal = [1.0, 1.0, 1.0, 0.0]
    excluded = against_the_data(params, {1: probes[0]}, [1], nominal, fit, probes_log, 0.01)
    assert excluded == {1}
    # The fresh-clone demo after that: a damping fitted at x0.97, whose up probe (x1.25)
    # raised the error, held at 1: within a probe, so not against the data.
    near_nominal = [0.2, 0.97, 1.38, 14.0]
    up_bound = {1: dataclasses.replace(probes[0], probe_increase=[0.0, 0.05])}
    near = against_the_data(params, up_bound, [1], nominal, near_nominal, probes_log, 0.01)
    assert near == set()
    assert against_the_data(params, up_bound, [1], nominal, [0.2, 0.5, 1.38, 14.0],
                            probes_log, 0.01) == {1}  # fmt: skip
    dropped, widened = follows_the_hold(*args, (0.0310, 0.0312), [1], excluded, [0, 2, 3],
                                        limits, 0.01)  # fmt: skip
    assert list(dropped) == [2] and "mass.cube" in dropped[2] and "0.16" in dropped[2]
    assert widened == {}
    # A mass the profile draws (from its data's range, or the prior's) is never held at
    # nominal: the friction keeps its fit, for across_the_prior to judge over that range.
    assert follows_the_hold(*args, (0.0310, 0.0312), [1], excluded, [0, 2, 3], limits, 0.01,
                            drawn=[1]) == ({}, {})  # fmt: skip
    # Holding lowered the error by more than 1%: the fit sat in a valley, the values stand.
    assert follows_the_hold(*args, (0.0310, 0.0250), [1], excluded, [0, 2, 3], limits,
                            0.01) == ({}, {})  # fmt: skip
    # A move within the spread limit, or a partner not coupled to the held one, stands.
    near = [0.2, 1.0, 1.45, 14.0]
    assert follows_the_hold(params, coupled, fit, near, (0.031, 0.031), [1], excluded, [2],
                            limits, 0.01) == ({}, {})  # fmt: skip
    moved_gain = [0.26, 1.0, 1.38, 14.0]
    assert follows_the_hold(params, coupled, fit, moved_gain, (0.031, 0.031), [1], excluded,
                            [0], limits, 0.01) == ({}, {})  # fmt: skip

    # The demo's gain against a latency the data bound only from above (its down probe
    # flat), held at nominal 0: the hold is one the data allow, so the gain keeps its value
    # and half its slide (0.17) counts in its spread; a slide past twice the limit does not.
    def gain_latency(i, j):
        return {i, j} == {0, 3}

    latency = {3: ParameterEstimate("latency_steps", ["l"], False, None, 0.0, [], 0, 50,
                                    [0.0, 0.05])}  # fmt: skip
    assert against_the_data(params, latency, [3], nominal, fit, probes_log, 0.01) == set()
    slid = [0.2 * math.exp(0.17), 1.82, 1.38, 0.0]
    dropped, widened = follows_the_hold(params, gain_latency, fit, slid, (0.031, 0.031), [3],
                                        set(), [0, 1, 2], limits, 0.01)  # fmt: skip
    assert dropped == {} and list(widened) == [0]
    assert widened[0][0] == pytest.approx(0.085) and "latency_steps" in widened[0][1]
    gain = ParameterEstimate("gain.*", ["g"], True, slid[0], 0.0, [], 0.05, 5.0, [0.5, 0.5],
                             spread=0.01)  # fmt: skip
    kept = _widened(params[0], gain, *widened[0], limits[0], fit[0])
    assert kept.identifiable and kept.spread == pytest.approx(0.085) and kept.bounded is None
    # A slide past twice the limit: no value, but the range the data bound, from where it
    # slid from to where it slid to.
    far = [0.2 * math.exp(0.3), 1.82, 1.38, 0.0]
    dropped, widened = follows_the_hold(params, gain_latency, fit, far, (0.031, 0.031), [3],
                                        set(), [0], limits, 0.01)  # fmt: skip
    assert dropped == {} and widened[0][0] == pytest.approx(0.15)
    ranged = _widened(params[0], dataclasses.replace(gain, value=far[0]), *widened[0],
                      limits[0], fit[0])  # fmt: skip
    assert not ranged.identifiable and ranged.value is None and "latency_steps" in ranged.reason
    low, high = ranged.bounded  # both ends, each with the value's own 95% interval
    assert low == pytest.approx(fit[0] * math.exp(-1.96 * 0.01))
    assert high == pytest.approx(far[0] * math.exp(1.96 * 0.01))


def test_a_friction_below_the_one_that_decides_its_contacts_is_stated_as_one_model():
    """The combination case's cube at x0.4 (0.24 on a table of 0.5) moves as one at x0.833:
    MuJoCo gives a contact the larger friction. A range reaching below that says so, and is
    judged against a truth as the simulation sees it; a value above it is left alone."""
    from types import SimpleNamespace

    from simreal_ros.sysid.identifiability import friction_floors
    from simreal_ros.sysid.output import estimate_error, range_holds
    from simreal_ros.sysid.parameters import LATENCY, ParameterEstimate

    physics = ArmPhysics(ROBOT)
    names = ["friction.cube_geom", "gain.*"]
    nominal = physics.get_dynamics(["friction.cube_geom"]) | {"gain.*": 1.0}
    objective = SimpleNamespace(
        simulator=SimpleNamespace(reference=physics),
        parameters=[FitParameter("friction.cube_geom", 0.2, 5.0),
                    FitParameter("gain.*", 0.05, 5.0)],
        names=[["friction.cube_geom"], ["gain.*"]],
        candidate=lambda f: {n: nominal[n] * v for n, v in zip(names, f, strict=True)},
    )  # fmt: skip
    table, cube = (physics.model.geom(g).id for g in ("table", "cube_geom"))
    floor = physics.model.geom_friction[table, 0] / physics.model.geom_friction[cube, 0]

    def estimate(pattern, value, bounded=None):
        return ParameterEstimate(pattern, [pattern], value is not None, value, 0.0, [], 0.2,
                                 5.0, [0.0, 0.1], reason="" if value else "flat below",
                                 bounded=bounded)  # fmt: skip

    ranged = friction_floors(objective, [0.6, 0.2],
                             [estimate("friction.cube_geom", None, [0.48, 0.84]),
                              estimate("gain.*", 0.2)])  # fmt: skip
    assert ranged[0].decides_above == pytest.approx(floor)
    assert "table's friction decides every contact" in ranged[0].reason
    assert ranged[1].decides_above is None and ranged[1].reason == ""
    assert range_holds(ranged[0], 0.4)  # the truth, below 0.48, simulates as 0.833
    assert not range_holds(ranged[0], 1.0)
    assert not range_holds(dataclasses.replace(ranged[0], decides_above=None), 0.4)
    # Identified above the floor: no statement, the value stands.
    kept = friction_floors(objective, [1.6, 0.2], [estimate("friction.cube_geom", 1.6),
                                                   estimate("gain.*", 0.2)])  # fmt: skip
    assert kept[0].value == 1.6 and kept[0].reason == ""
    assert kept[0].decides_above == pytest.approx(floor)
    # A value below the floor is judged as the contact it makes, above it as itself.
    low = dataclasses.replace(kept[0], value=0.5)
    assert estimate_error(low, 0.4) == pytest.approx(0.0)
    assert estimate_error(kept[0], 1.25) == pytest.approx(0.28)
    assert estimate_error(estimate(LATENCY, 5), 4) == 1
    # A range wholly above the floor gets none either.
    above = friction_floors(objective, [1.6, 0.2],
                            [estimate("friction.cube_geom", None, [1.2, 2.0]),
                             estimate("gain.*", 0.2)])  # fmt: skip
    assert above[0].reason == "flat below"


def test_a_few_pushed_segments_that_agree_make_a_curvature_reliable_by_their_signs():
    """The contact case's table friction: 15 of 48 segments respond, one of them 100-fold
    the others, all curving up. The t statistic of sizes stays under 2 (about sqrt of the
    responding count, over-dispersed); the signed-rank test of their signs passes. Noise of
    either sign does not, nor do 5 segments (exact p 1/32)."""
    from simreal_ros.sysid.identifiability import curvature_by_sign

    rng = np.random.default_rng(3)
    agreeing = np.zeros(48)
    agreeing[:15] = rng.uniform(0.01, 0.2, 15)
    agreeing[0] = 20.0
    t = agreeing.mean() / (agreeing.std() / math.sqrt(agreeing.size))
    assert t < 2.0
    assert curvature_by_sign(agreeing) > 3.0
    noise = rng.normal(0.0, 1.0, 48)
    noise[0] = 50.0
    assert curvature_by_sign(noise) < 2.0
    five = np.r_[np.zeros(43), [9.0, 3.0, 2.0, 1.0, 0.5]]
    assert curvature_by_sign(five) < 2.0 < curvature_by_sign(np.r_[five, 0.2])
    assert curvature_by_sign(np.zeros(48)) == 0.0


def test_the_cube_and_table_frictions_are_fitted_as_their_contact(tmp_path):
    """One factor on both: the truth it is judged against is the contact's friction (the
    larger of the two), and the prior draws it as it draws each of them."""
    from simreal_ros.sysid.output import hidden_factors, prior_ranges
    from simreal_ros.sysid.parameters import CONTACT_FRICTION, DEFAULT_PARAMETERS

    assert CONTACT_FRICTION in [p.pattern for p in DEFAULT_PARAMETERS]
    nominal = ArmPhysics(ROBOT).nominal_dynamics
    for cube, expected in ((1.6, 1.6), (0.4, 0.5 / 0.6), (1.0, 1.0)):
        path = tmp_path / f"p{cube}.yaml"
        path.write_text(yaml.safe_dump({"profile": "p", "scale": {"friction.cube_geom": cube}}))
        found = hidden_factors(str(path), nominal, [CONTACT_FRICTION])[CONTACT_FRICTION]
        assert found == pytest.approx(expected)
    assert prior_ranges([p for p in DEFAULT_PARAMETERS if p.pattern == CONTACT_FRICTION]) == {
        CONTACT_FRICTION: (0.6, 1.4)
    }
