"""An untrained camera checkpoint (tests and benchmarks), and what `simreal up` makes of one:
the sim bridge's camera on at the checkpoint's camera, resolution and control rate."""

from __future__ import annotations

import numpy as np
import pytest

from simreal_ros.cli import up
from simreal_ros.graph import description
from simreal_ros.policy.checkpoint import load_numpy_checkpoint, shipped_checkpoint
from simreal_ros.policy.inference import NumpyCameraActor, deploy_base
from simreal_ros.policy.spec import SpecConverter
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.torch_checkpoint import make_untrained_checkpoint

ROBOT = load_robot_description()


@pytest.fixture(scope="module")
def camera_checkpoint(tmp_path_factory):
    return make_untrained_checkpoint(
        tmp_path_factory.mktemp("cam") / "c", ROBOT, hidden=(16, 16), camera=True
    )


def test_an_untrained_camera_checkpoint_loads_and_acts_on_a_frame(camera_checkpoint):
    checkpoint = load_numpy_checkpoint(camera_checkpoint, description=ROBOT)
    spec = checkpoint.spec
    assert spec.camera is not None and (spec.camera.width, spec.camera.height) == (96, 72)
    assert not {"object_position", "object_orientation"} & set(spec.observation_fields)
    assert checkpoint.metadata["architecture"]["encoder"]["height"] == 72
    assert not (camera_checkpoint / "critic.safetensors").exists()  # a camera actor only
    policy = deploy_base(checkpoint, SpecConverter.for_robot(spec, ROBOT).forward_kinematics)
    assert isinstance(policy.actor, NumpyCameraActor)
    observation = {
        "joint_position": np.asarray(ROBOT.home_position, dtype=float),
        "joint_velocity": np.zeros(ROBOT.num_joints),
        "goal_position": np.array([0.6, 0.0, 0.025]),
        "image": np.zeros((72, 96, 3), dtype=np.uint8),
    }
    dark = policy.action(observation)
    observation["image"] = np.full((72, 96, 3), 200, dtype=np.uint8)
    assert dark.shape == (ROBOT.num_joints,) and not np.allclose(dark, policy.action(observation))


def parsed(*argv: str):
    from simreal_ros.cli.main import build_parser

    return build_parser().parse_args(["up", *argv])


def started_nodes(monkeypatch, *argv: str) -> dict:
    """The nodes `simreal up` would start, by name (no process is started)."""
    started = {}

    class Runner:
        def __init__(self, nodes, profile, domain_id=None) -> None:
            started.update({node.name: node for node in nodes})

        def run(self, duration) -> int:
            return 0

    monkeypatch.setattr(up, "GraphRunner", Runner)
    assert up.run(parsed(*argv)) == 0
    return started


def test_up_turns_the_bridge_camera_on_for_a_camera_policy(monkeypatch, capsys, camera_checkpoint):
    started = started_nodes(monkeypatch, "--checkpoint", str(camera_checkpoint))
    bridge = started["sim_bridge"]
    assert "the sim bridge renders workspace at 96x72, 20 Hz" in capsys.readouterr().out
    parameters = bridge.parameters
    assert parameters["camera"] is True and parameters["camera_name"] == "workspace"
    assert (parameters["camera_width"], parameters["camera_height"]) == (96, 72)
    assert parameters["camera_rate_hz"] == 20.0  # the checkpoint's control rate
    assert parameters.get("publish_object_pose", True)  # the recorder still gets the truth
    assert started["recorder"].parameters["record_images"] is True  # alignment's frames
    # A state policy (the shipped one) leaves the bridge's camera and the recorder alone.
    state = started_nodes(monkeypatch, "--checkpoint", str(shipped_checkpoint("push")))
    assert "camera" not in state["sim_bridge"].parameters
    assert "record_images" not in state["recorder"].parameters
    # The real graph's camera is the robot's own driver: no bridge, but the frames are kept.
    real = parsed("--graph", "real", "--checkpoint", str(camera_checkpoint))
    real_nodes = description.graph("real", policy_camera=up.policy_camera(real, {}))
    assert "sim_bridge" not in [n.name for n in real_nodes]
    recorder = next(n for n in real_nodes if n.name == "recorder")
    assert recorder.parameters["record_images"] is True


def test_up_refuses_a_bridge_camera_the_camera_policy_would_refuse(camera_checkpoint):
    args = parsed("--checkpoint", str(camera_checkpoint))
    with pytest.raises(ValueError, match=r"sim_bridge\.camera_width=320.*camera_width=96"):
        up.policy_camera(args, {"sim_bridge": {"camera_width": 320}})
    # A faster camera is fine: every tick still gets a fresh frame.
    assert up.policy_camera(args, {"sim_bridge": {"camera_rate_hz": 30.0}})["camera"] is True
    with pytest.raises(ValueError, match="drop --perception marker"):
        description.graph("sim", perception="marker", policy_camera=up.policy_camera(args, {}))
