"""The last mile from the arm's own episodes: the model_misspecified diagnosis, the loop's
routing to method cotrain, and cotrain's pieces (the arm's states labelled by the teacher,
co-training batches) on fixed data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simreal_ros.diagnosis.classify import classify
from simreal_ros.loop.config import LoopConfig
from simreal_ros.loop.plan import plan_collection
from simreal_ros.loop.state import ConditionScore
from simreal_ros.sysid.output import JOINT_NOISE_FLOOR, residual_over_noise


def test_identification_residual_is_in_units_of_what_noise_alone_leaves():
    # 1 mrad of noise leaves 2 * (0.001 / 0.01)^2 = 0.02 of the replay loss.
    assert residual_over_noise(0.02, 0.001) == pytest.approx(1.0)
    assert residual_over_noise(2.2, 0.001) == pytest.approx(110.0)
    assert residual_over_noise(0.5, None) is None
    assert residual_over_noise(0.5, -1.0) is None
    assert residual_over_noise(0.5, float("nan")) is None


def test_noise_free_measurements_read_against_an_encoders_quantisation():
    # A simulator's noise-free joints: a close fit (0.107) once read 1,083x the noise its
    # own estimate (7e-5 rad) gave; an exact fit over no noise read nothing at all.
    floor = 2 * (JOINT_NOISE_FLOOR / 0.01) ** 2
    assert 1e-4 < JOINT_NOISE_FLOOR < 2e-4  # rad, 2 pi / 2^14 / sqrt(12)
    assert residual_over_noise(0.107, 7e-5) == pytest.approx(0.107 / floor)
    assert residual_over_noise(0.107, 0.0) == pytest.approx(0.107 / floor)
    assert residual_over_noise(0.1 * floor, 0.0) == pytest.approx(0.1)  # in family, no noise
    # Above the floor the estimate itself is used.
    assert residual_over_noise(0.02, 0.001) == pytest.approx(1.0)


def test_a_policy_passing_its_identified_sim_that_identification_cannot_fit_is_misspecified():
    # The adapted version on the worn stand-in: train passes, shifted fails on the arm, its
    # identified sim passes, and identification explained nothing (about 100x the noise).
    d = classify((7, 8), (2, 8), None, [], sim=(20, 20), identification_residual=98.0)
    assert d.label == "model_misspecified", d.summary
    assert d.evidence["model_misspecified"] and "98x" in d.evidence["reason"]
    # Failing training conditions too (the Panda's): the same label, not dynamics_gap.
    d = classify((3, 8), (0, 8), None, [], sim=(19, 20), identification_residual=22.0)
    assert d.label == "model_misspecified", d.summary
    # An in-family arm (identification leaves about twice the noise): never so labelled.
    d = classify((7, 8), (2, 8), None, [], sim=(20, 20), identification_residual=1.8)
    assert d.label == "over_specialization", d.summary
    d = classify((3, 8), (0, 8), None, [], sim=(19, 20), identification_residual=1.8)
    assert d.label == "dynamics_gap", d.summary
    # Failing its own sim, or passing everything on the arm, or no identification.
    assert classify((3, 8), (0, 8), None, [], sim=(5, 20), identification_residual=98.0).label != (
        "model_misspecified"
    )
    d = classify((8, 8), (8, 8), None, [], sim=(20, 20), identification_residual=98.0)
    assert d.label == "healthy", d.summary
    assert classify((7, 8), (2, 8), None, [], sim=(20, 20)).label == "over_specialization"


def test_the_loop_spends_a_misspecified_rounds_episodes_on_the_last_mile():
    config = LoopConfig(stand_in_profile="real_twin")
    misspecified = {"label": "model_misspecified", "evidence": {"identification_residual": 98}}
    assert config.method_after(2, misspecified) == "cotrain"
    assert config.method_after(2, {"label": "dynamics_gap"}) == "adapt"
    # Passing the arm's trials on a model identification could not fit: the last mile too;
    # on one it fits (the in-family demo), adaptation again.
    unfit = {"label": "healthy", "evidence": {"identification_residual": 80.0}}
    assert config.method_after(2, unfit) == "cotrain"
    fit = {"label": "healthy", "evidence": {"identification_residual": 1.8}}
    assert config.method_after(2, fit) == "adapt"
    assert config.method_after(2, {"label": "healthy", "evidence": {}}) == "adapt"
    quiet = LoopConfig(stand_in_profile="real_twin", last_mile_method="")
    assert quiet.method_after(2, misspecified) == "adapt"
    with pytest.raises(ValueError, match="last_mile_method"):
        LoopConfig(stand_in_profile="real_twin", last_mile_method="magic")
    plan = plan_collection(
        "model_misspecified",
        ConditionScore("train", 7, 8, 0.5, 1.0),
        ConditionScore("shifted", 2, 8, 0.1, 0.6),
        8,
    )
    assert plan.episodes == {"train": 1, "shifted": 7} and plan.expert_demos == 0
    assert "last mile" in plan.reason


def test_co_training_batches_keep_the_arms_share_whatever_its_size():
    from simreal_ros.learner.adaptation import behaviour_cloning

    torch.manual_seed(0)
    actor = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    rng = np.random.default_rng(0)
    # Many sim states labelled 0 around (-1, 0); few arm states labelled 0.5 around (1, 0).
    sim_obs = torch.as_tensor(rng.normal([-1.0, 0.0], 0.1, (2000, 2)), dtype=torch.float32)
    arm_obs = torch.as_tensor(rng.normal([1.0, 0.0], 0.1, (20, 2)), dtype=torch.float32)
    sim = (sim_obs, torch.zeros(2000, 1))
    arm = (arm_obs, torch.full((20, 1), 0.5))
    optimizer = torch.optim.Adam(actor.parameters(), lr=1e-2)
    behaviour_cloning(actor, optimizer, sim, 150, 64, rng, arm, 32)
    with torch.no_grad():
        assert float(actor(arm_obs).mean()) == pytest.approx(0.5, abs=0.05)
        assert float(actor(sim_obs).abs().mean()) < 0.05
    # Without the arm's rows the same few states are never drawn: its label is not learnt.
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.Adam(plain.parameters(), lr=1e-2)
    behaviour_cloning(plain, optimizer, sim, 150, 64, np.random.default_rng(0))
    with torch.no_grad():
        assert float(plain(arm_obs).mean()) < 0.3


def test_the_arms_recorded_states_get_the_teachers_labels(tmp_path):
    """A teacher episode recorded to a bag: the offline labels on its recorded states are
    what the teacher commanded there, in the student's units."""
    from simreal_ros.episodes import messages
    from simreal_ros.episodes.bag_writer import EpisodeRecording, TopicSpec
    from simreal_ros.episodes.metadata import EpisodeMetadata
    from simreal_ros.learner.adaptation import arm_teacher_labels
    from simreal_ros.policy.spec import SpecConverter, default_spec, version_spec
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.expert import ExpertTuning, make_expert
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.sim.rollout import rollout

    robot = load_robot_description()
    spec = default_spec(robot, "push")
    scale = [2 * s for s in spec.action_scale]
    tuning = (1.0, 2.0, tuple(scale[i] for i in robot.arm_indices))
    teacher = make_expert("push", robot, tuning=ExpertTuning(1.0, 2.0, tuning[2]),
                          control_rate_hz=spec.control_rate_hz)  # fmt: skip
    converter = SpecConverter(
        version_spec(spec, {"action_scale": scale}, robot),
        SpecConverter.for_robot(spec, robot).forward_kinematics,
    )
    topics = [
        TopicSpec("/joint_states", "sensor_msgs/msg/JointState", reliable=False),
        TopicSpec("/task/status", "simreal_ros/msg/TaskStatus"),
        TopicSpec("/object/pose", "geometry_msgs/msg/PoseStamped"),
        TopicSpec("/policy/action", "simreal_ros/msg/PolicyAction"),
    ]
    meta = EpisodeMetadata(episode_id="arm", source="real_twin", condition="train",
                           joint_names=list(robot.joint_names),
                           joint_units=["rad"] * len(robot.joint_names))  # fmt: skip
    recording = EpisodeRecording(tmp_path / "arm", topics, meta, flush_period_s=0.05)
    recording.start()
    expected = []
    t0, period = 1_700_000_000_000_000_000, 50_000_000

    class Recorded:
        def act(self, observation):
            t = t0 + len(expected) * period - 1_000_000  # the state, just before its tick
            q = np.asarray(observation["joint_position"], float)
            recording.offer(
                0,
                t,
                messages.joint_state(
                    t, robot.joint_names, q, np.asarray(observation["joint_velocity"], float)
                ),
            )
            recording.offer(
                1,
                t,
                messages.task_status(
                    t,
                    episode_id="arm",
                    task="push",
                    condition="train",
                    seed=3,
                    step=len(expected),
                    goal=tuple(observation["goal_position"]),
                    reward=0.0,
                    success=False,
                    done=False,
                ),
            )
            recording.offer(
                2,
                t,
                messages.pose_stamped(
                    t, observation["object_position"], observation["object_orientation"]
                ),
            )
            command = teacher.act(observation)
            recording.offer(
                3,
                t + 1_000_000,
                messages.policy_action(
                    t + 1_000_000,
                    command,
                    version="v1",
                    sequence=len(expected),
                    joint_names=robot.joint_names,
                ),
            )
            expected.append(converter.action_from_command(command, q))
            return command  # fmt: skip

    env = ArmTaskEnv(task="push", profile="nominal", control_rate_hz=spec.control_rate_hz,
                     robot=robot, episode_seconds=1.0)  # fmt: skip
    try:
        rollout(env, Recorded(), 3, "train")
    finally:
        env.close()
    recording.stop("failure", False)

    class Checkpoint:  # what arm_teacher_labels reads of a checkpoint
        pass

    checkpoint = Checkpoint()
    checkpoint.spec = spec
    obs, labels, episodes = arm_teacher_labels([tmp_path / "arm"], checkpoint, tuning, robot,
                                               scale)  # fmt: skip
    assert episodes == 1 and len(labels) >= len(expected) - 1 > 5
    np.testing.assert_allclose(labels, np.asarray(expected)[-len(labels) :], atol=1e-5)
    assert obs.shape == (len(labels), spec.obs_dim) and np.isfinite(obs).all()
