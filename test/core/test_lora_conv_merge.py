"""LoRA on a CNN encoder's nn.Conv2d layers: the learner wraps them, the numpy merge equals
peft's merge_and_unload on them, and convolutions it cannot merge are refused by name.

Tolerance: merged float32 weights agree with peft's to ATOL = 1e-6 times the largest
merged weight (peft contracts over r with conv2d for kernels larger than 1x1, the numpy
merge with a matmul: the same sum of r products, maybe in another order).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.numpy import load_file, save_file
from torch import nn

from simreal_ros.learner import lora
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy import lora_merge
from simreal_ros.training.model import Actor, Architecture

torch.set_num_threads(1)
ATOL = 1e-6
PREFIX = lora_merge.KEY_PREFIX


class TinyCameraPolicy(nn.Module):
    """Two convolutions (a strided non-square kernel, and a bias-free 1x1: peft's two delta
    paths) and a Linear head on a 3x8x8 image."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 6, kernel_size=(3, 5), stride=2, padding=(1, 2)),
            nn.ReLU(),
            nn.Conv2d(6, 5, kernel_size=1, bias=False),
            nn.ReLU(),
        )
        self.head = nn.Linear(5 * 4 * 4, 4)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(image).flatten(1))


TARGETS = ["encoder.0", "encoder.2", "head"]


def numpy_state(module: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def with_random_lora(model, seed: int):
    """Every LoRA factor set to random values (B starts at zero, which would merge nothing)."""
    generator = torch.Generator().manual_seed(seed)
    weights = {
        k: 0.2 * torch.randn(v.shape, generator=generator)
        for k, v in lora.adapter_state(model).items()
    }
    lora.set_adapter_weights(model, weights)
    return model


def peft_rslora(module: nn.Module):
    """peft directly (the learner has no rslora option): r = 3, alpha 5, scaling 5/sqrt(3)."""
    config = LoraConfig(r=3, lora_alpha=5, use_rslora=True, target_modules=TARGETS)
    return get_peft_model(copy.deepcopy(module), config)


@pytest.mark.parametrize(
    ("make", "scaling"),
    [
        (lambda m: lora.wrap(m, rank=4, alpha=8, dropout=0.1), 8 / 4),
        (peft_rslora, 5 / np.sqrt(3)),
    ],
    ids=["learner-wrap", "rslora"],
)
def test_numpy_conv_merge_equals_peft_merge_and_unload(tmp_path, make, scaling):
    torch.manual_seed(0)
    base = TinyCameraPolicy()
    assert lora.lora_target_names(base) == TARGETS  # the default includes the convolutions
    model = with_random_lora(make(base), seed=1)
    lora.save(model, tmp_path / "a1")

    base_state = numpy_state(base)
    adapter = lora_merge.read_adapter(tmp_path / "a1", base_state)
    assert sorted(adapter.layers) == TARGETS
    assert adapter.scaling == pytest.approx(scaling, rel=1e-12)
    assert adapter.layers["encoder.0"].a.shape == (adapter.rank, 3, 3, 5)
    assert adapter.layers["encoder.2"].b.shape == (5, adapter.rank, 1, 1)
    merged = lora_merge.merge(base_state, adapter)

    expected = numpy_state(lora.merged(model))  # peft's merge_and_unload
    assert set(merged) == set(expected)
    scale = max(float(np.max(np.abs(v))) for v in expected.values())
    worst = max(float(np.max(np.abs(merged[k] - expected[k]))) for k in expected)
    print(f"max |numpy merge - peft merge_and_unload| = {worst:.3g} (weights up to {scale:.3g})")
    for k in expected:
        assert merged[k].dtype == np.float32
        np.testing.assert_allclose(merged[k], expected[k], rtol=0, atol=ATOL * scale, err_msg=k)
    # A real change: every target's weight moved, the biases did not.
    for name, value in base_state.items():
        moved = float(np.max(np.abs(merged[name] - value)))
        if name.endswith(".weight"):
            assert moved > 1e-2, name
        else:
            assert moved == 0.0, name

    # The numpy-merged module computes what the unmerged peft model (what trained) computes.
    deployed = TinyCameraPolicy()
    deployed.load_state_dict({k: torch.from_numpy(v) for k, v in merged.items()})
    images = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    model.eval()  # no dropout
    with torch.no_grad():
        want, got, plain = model(images), deployed(images), base(images)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert float((want - plain).abs().max()) > 1e-2  # the adapter changes the outputs


def test_mlp_policies_keep_their_default_targets():
    actor = Actor(Architecture(obs_dim=6, act_dim=3, actor_hidden=(8, 8)))
    assert lora.lora_target_names(actor) == lora.linear_layer_names(actor)
    assert lora.conv2d_layer_names(actor) == []


class GroupedEncoder(nn.Module):
    def __init__(self, **conv):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1, **conv)
        self.head = nn.Linear(8, 2)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(image).mean(dim=(2, 3)))


@pytest.mark.parametrize(
    ("conv", "message"),
    [
        ({"groups": 2}, r"'conv' is an nn.Conv2d with groups = 2"),
        ({"dilation": 2}, r"'conv' is an nn.Conv2d with dilation = \(2, 2\)"),
        ({"padding_mode": "reflect"}, r"'conv' is an nn.Conv2d with padding_mode = 'reflect'"),
    ],
    ids=["groups", "dilation", "padding_mode"],
)
def test_the_learner_refuses_convolutions_whose_lora_would_not_merge(conv, message):
    module = GroupedEncoder(**conv)
    assert lora.lora_target_names(module) == ["head"]  # left out of the default
    with pytest.raises(ValueError, match=message + r".*leave it out of the targets"):
        lora.wrap(module, rank=4, targets=["conv", "head"])


@pytest.mark.filterwarnings("ignore:LoRA adapter added to ConvNd layer with groups > 1")
def test_a_grouped_conv_adapter_is_refused_by_the_merge(tmp_path):
    """An adapter peft really writes for a grouped conv (it warns, and cannot merge it)."""
    base = GroupedEncoder(groups=2)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["conv", "head"])
    lora.save(with_random_lora(get_peft_model(copy.deepcopy(base), config), 3), tmp_path / "g")
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"conv.lora_A has shape \(4, 4, 3, 3\), 2 times the input channels of the "
        r"actor's conv \(weight \(8, 2, 3, 3\)\): conv is a grouped convolution \(groups = 2\)"
        r".*Retrain the adapter without conv in target_modules",
    ):
        lora_merge.read_adapter(tmp_path / "g", numpy_state(base))


def test_a_conv1d_target_and_a_misshaped_conv_factor_are_refused(tmp_path):
    sequence = nn.Sequential(nn.Conv1d(3, 4, 3), nn.Flatten(), nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r"\['0'\] are not nn.Linear layers or nn.Conv2d"):
        lora.wrap(sequence, targets=["0", "2"])
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["0", "2"])
    lora.save(get_peft_model(copy.deepcopy(sequence), config), tmp_path / "c1")
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"the actor's 0 has a 3-D weight \(4, 3, 3\), a Conv1d kernel; this merge handles "
        r"nn.Linear \(2-D\) and nn.Conv2d \(4-D\) weights only. Retrain the adapter without 0",
    ):
        lora_merge.read_adapter(tmp_path / "c1", numpy_state(sequence))

    base = TinyCameraPolicy()
    lora.save(lora.wrap(base, rank=4), tmp_path / "a1")
    weights = tmp_path / "a1" / ckpt.ADAPTER_WEIGHTS
    tensors = load_file(str(weights))
    tensors[f"{PREFIX}encoder.0.lora_A.weight"] = np.zeros((4, 3, 3, 3), np.float32)
    save_file(tensors, str(weights))
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"encoder.0.lora_A has shape \(4, 3, 3, 3\), but the actor's encoder.0 \(Conv2d "
        r"weight \(6, 3, 3, 5\)\) at r = 4 needs \(4, 3, 3, 5\)",
    ):
        lora_merge.read_adapter(tmp_path / "a1", numpy_state(base))
