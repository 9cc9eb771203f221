"""The torch-free load path the policy node starts with: same checks, same numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fresh_interpreter import run_python
from policy_fixtures import observation, save_adapter, trained_peft_actor

from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.inference import deploy_adapter, deploy_base
from simreal_ros.robot.description import load_robot_description
from simreal_ros.robot.kinematics import ToolKinematics
from simreal_ros.training.model import Actor, Architecture
from simreal_ros.training.torch_checkpoint import (
    as_torch_checkpoint,
    load_checkpoint,
    make_untrained_checkpoint,
)

ROOT = Path(__file__).resolve().parents[2]
ROBOT = load_robot_description()
FK = ToolKinematics.for_robot(ROBOT)  # the arm's kinematics, for the policies' converters


@pytest.fixture
def saved(tmp_path):
    return make_untrained_checkpoint(tmp_path / "base", ROBOT, control_rate_hz=20.0)


@pytest.mark.parametrize("hidden", [(64, 64), (32,), (16, 24, 8)])
def test_actor_shapes_are_the_torch_actors_state_dict(hidden):
    arch = Architecture(36, 7, hidden, (8, 8))
    expected = {k: tuple(v.shape) for k, v in Actor(arch).state_dict().items()}
    assert ckpt.actor_shapes(arch.to_dict()) == expected


@pytest.mark.parametrize("task", ["reach", "push"])
def test_numpy_load_acts_exactly_like_the_torch_load(task):
    directory = ckpt.shipped_checkpoint(task)
    numpy_base = ckpt.load_numpy_checkpoint(directory, description=ROBOT)
    torch_base = load_checkpoint(directory, description=ROBOT, with_critic=False)
    assert (numpy_base.version, numpy_base.spec) == (torch_base.version, torch_base.spec)
    a, b = deploy_base(numpy_base, FK), deploy_base(torch_base, FK)
    rng = np.random.default_rng(0)
    for _ in range(5):
        obs = observation(rng)
        np.testing.assert_array_equal(a.act(obs), b.act(obs))
    # The torch model built later for a merge holds the same weights.
    rebuilt = as_torch_checkpoint(numpy_base)
    assert rebuilt is as_torch_checkpoint(numpy_base)
    for name, tensor in torch_base.model.actor.state_dict().items():
        assert torch.equal(rebuilt.model.actor.state_dict()[name], tensor), name


def test_numpy_load_refuses_what_the_torch_load_refuses(saved):
    with pytest.raises(ckpt.CheckpointError, match="control_rate_hz"):
        ckpt.load_numpy_checkpoint(saved, description=ROBOT, control_rate_hz=100.0)
    meta = json.loads((saved / ckpt.METADATA_FILE).read_text())
    meta["architecture"]["actor_hidden"] = [32, 64]
    (saved / ckpt.METADATA_FILE).write_text(json.dumps(meta))
    for load in (load_checkpoint, ckpt.load_numpy_checkpoint):
        with pytest.raises(ckpt.CheckpointError, match=r"architecture: actor\.safetensors tensor"):
            load(saved)
    meta["architecture"]["activation"] = "tanh"
    (saved / ckpt.METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError, match="only relu"):
        ckpt.load_numpy_checkpoint(saved)
    del meta["architecture"]["critic_hidden"]
    meta["architecture"]["activation"] = "relu"
    (saved / ckpt.METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError, match="lacks field 'critic_hidden'"):
        ckpt.load_numpy_checkpoint(saved)


def test_numpy_load_checks_the_checksum_before_parsing(saved):
    with (saved / ckpt.ACTOR_FILE).open("r+b") as f:
        f.seek(-4, 2)
        f.write(b"\0\0\0\0")
    with pytest.raises(ckpt.CheckpointError, match="checksum"):
        ckpt.load_numpy_checkpoint(saved)


def test_an_adapter_merges_into_a_numpy_base_as_into_a_torch_base(saved, tmp_path):
    base = load_checkpoint(saved, with_critic=False)
    save_adapter(trained_peft_actor(base, seed=5, r=2, lora_alpha=4), base, tmp_path / "a1")
    from_numpy = deploy_adapter(
        ckpt.load_numpy_checkpoint(saved), tmp_path / "a1", "a1", forward_kinematics=FK
    )
    from_torch = deploy_adapter(base, tmp_path / "a1", "a1", forward_kinematics=FK)
    obs = observation(np.random.default_rng(1))
    np.testing.assert_array_equal(from_numpy.act(obs), from_torch.act(obs))
    assert not np.allclose(from_numpy.act(obs), deploy_base(base, FK).act(obs))


def test_loading_and_running_the_numpy_base_never_imports_torch():
    script = (
        "import sys\n"
        "from simreal_ros.policy import checkpoint as ckpt\n"
        "from simreal_ros.policy.inference import deploy_base\n"
        "from simreal_ros.robot.description import load_robot_description\n"
        "robot = load_robot_description()\n"
        "base = ckpt.load_numpy_checkpoint(ckpt.shipped_checkpoint('push'), description=robot)\n"
        "from simreal_ros.policy.spec import SpecConverter\n"
        "fk = SpecConverter.for_robot(base.spec, robot).forward_kinematics\n"
        "policy = deploy_base(base, fk)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'peft')))\n"
    )
    stdout = run_python(script)
    assert stdout.strip() == "[]"
