"""System identification on bags recorded THROUGH THE GRAPH on a known profile.

sim_bridge (on a profile given by path), safety, the shipped policy and the recorder run
as separate processes over DDS; `simreal trials` records short episodes once per session.
The arm's gain and latency are recovered from them (the latency may come out bounded
around its value instead, when a starved host blurs the commands' timing); the episodes
are too short for the slowed arm to reach the cube, so the cube's mass and friction are
reported unidentifiable, never given a value. The full recovery matrix is bench/sysid.py.
"""

from __future__ import annotations

import pytest
import yaml

from simreal_ros.robot.description import load_robot_description
from simreal_ros.sysid import FitParameter, FitSettings, identify_bags, read_replay_episodes
from simreal_ros.sysid.graph_recording import record_through_graph
from simreal_ros.sysid.simulate import object_travel

# Serial: the latency it identifies includes the graph's transport delay, which other
# tests' load stretches; `make test` runs it alone after the rest.
pytestmark = [pytest.mark.graph, pytest.mark.serial]

KNOWN = {"scale": {"gain.*": 0.35}, "set": {"latency_steps": 10}}


@pytest.fixture(scope="session")
def graph_bags(tmp_path_factory):
    root = tmp_path_factory.mktemp("sysid_graph")
    profile = root / "known.yaml"
    profile.write_text(yaml.safe_dump({"profile": "known", **KNOWN}))
    # 3 to fit, 1 held out. At 50 Hz states the policy keeps its period on a slow 2-core
    # host: at 100 Hz it fell behind (commands every 12 ms, not 10), the recorder and the
    # bridge then received commands up to 14 steps apart, and the latency's posterior
    # spread exceeded the 1-step bound for a value in 3 of 5 recordings (1.22-1.42 steps;
    # 0.77 and 1.00 in the others).
    bags = record_through_graph(
        profile, root / "episodes", 4, seed=11, episode_seconds=1.5, state_rate_hz=50.0
    )
    assert len(bags) == 4, bags
    return bags


def test_gain_and_latency_recovered_from_graph_bags_and_the_cube_is_not(graph_bags, tmp_path):
    robot = load_robot_description()
    episodes = read_replay_episodes(graph_bags, robot, "push")
    params = (
        FitParameter("gain.*", 0.05, 5.0),
        FitParameter("latency_steps", 0, 50),
        FitParameter("mass.cube", 0.2, 5.0),
        FitParameter("friction.cube_geom", 0.2, 5.0),
    )
    settings = FitSettings(restarts=1, evaluations_per_restart=120, segment_ticks=10)
    result, profile = identify_bags(
        graph_bags, tmp_path / "out", "push", params, holdout=1, settings=settings, robot=robot
    )
    by_name = {p.pattern: p for p in result.parameters}
    gain, latency = by_name["gain.*"], by_name["latency_steps"]
    assert gain.identifiable and abs(gain.value / KNOWN["scale"]["gain.*"] - 1) < 0.25, gain
    truth = KNOWN["set"]["latency_steps"]
    if latency.identifiable:
        assert abs(latency.value - truth) <= 2, latency
    else:
        # A starved host delays some commands by steps that their receive times do not
        # show; the fit then gives a bound, which adaptation draws from. It must still
        # hold the truth, tightly (docs/results.md has the measurements).
        assert "posterior spread" in latency.reason and latency.bounded is not None, latency
        low, high = latency.bounded
        assert low <= truth <= high and high - low <= 6, latency
    assert result.after["holdout"].loss < result.before["holdout"].loss
    assert object_travel(episodes) < 0.002  # the premise: the cube was never touched
    for name in ("mass.cube", "friction.cube_geom"):
        assert not by_name[name].identifiable and by_name[name].value is None
        assert "never moved" in by_name[name].reason
    document = yaml.safe_load(profile.read_text())
    assert "mass.cube" in document["unidentifiable"] and "gain.*" in document["spread"]
