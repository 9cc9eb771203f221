"""The numpy LoRA merge deployment runs: equal to peft's merge_and_unload, strict otherwise.

Tolerance: the merged float32 weights agree with peft's to ATOL = 1e-6 (both compute
W + scaling * (B @ A) in float32; only the order of a rank-r sum may differ).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fresh_interpreter import run_python
from policy_fixtures import observation, save_adapter, trained_peft_actor
from safetensors.numpy import load_file, save_file

from simreal_ros.learner import lora
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy import lora_merge
from simreal_ros.policy.inference import deploy_adapter, deploy_base
from simreal_ros.robot.description import load_robot_description
from simreal_ros.robot.kinematics import ToolKinematics
from simreal_ros.training.evaluate import PolicySource, build_policy
from simreal_ros.training.model import ACTOR_LORA_TARGETS
from simreal_ros.training.torch_checkpoint import load_checkpoint, make_untrained_checkpoint

ROOT = Path(__file__).resolve().parents[2]
ROBOT = load_robot_description()
FK = ToolKinematics.for_robot(ROBOT)  # the arm's kinematics, for the policies' converters
ATOL = 1e-6
SHIPPED = ckpt.shipped_checkpoint("reach")


def peft_merged_state(model) -> dict[str, np.ndarray]:
    merged = copy.deepcopy(model).merge_and_unload()
    return {k: v.detach().numpy() for k, v in merged.state_dict().items()}


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(SHIPPED, with_critic=False)


@pytest.mark.parametrize(
    "config",
    [
        {"r": 4, "lora_alpha": 8},
        {"r": 8, "lora_alpha": 16, "use_rslora": True},  # scaling 16 / sqrt(8)
        {"r": 3, "lora_alpha": 5, "use_rslora": True},
        {"r": 6, "lora_alpha": 7.5, "target_modules": [*ACTOR_LORA_TARGETS, "log_std_head"]},
    ],
    ids=["plain", "rslora", "rslora-odd", "float-alpha-all-layers"],
)
def test_numpy_merge_equals_peft_merge_and_unload(tmp_path, shipped, config):
    model = trained_peft_actor(shipped, **config)
    adapter = save_adapter(model, shipped, tmp_path / "a1")
    expected = peft_merged_state(model)
    base = ckpt.load_numpy_checkpoint(SHIPPED, description=ROBOT)
    merged = lora_merge.merged_actor_state(base, adapter)
    assert set(merged) == set(expected)
    worst = max(float(np.max(np.abs(merged[k] - expected[k]))) for k in expected)
    print(f"max |numpy merge - peft merge_and_unload| = {worst:.3g} ({config})")
    assert worst <= ATOL
    for k in expected:
        assert merged[k].dtype == np.float32
        np.testing.assert_allclose(merged[k], expected[k], rtol=0, atol=ATOL, err_msg=k)
    # A real change: every target moved, every bias and untargeted layer did not.
    targets = config.get("target_modules", ACTOR_LORA_TARGETS)
    for name, value in base.actor_state.items():
        layer = name.rsplit(".", 1)[0]
        moved = float(np.max(np.abs(merged[name] - value)))
        if name.endswith(".weight") and layer in targets:
            assert moved > 1e-3, name
        else:
            assert moved == 0.0, name
    # Actions agree with peft's unmerged forward (what the learner trained).
    deployed = deploy_adapter(base, adapter, "a1", forward_kinematics=FK)
    x = np.random.default_rng(0).normal(size=(16, shipped.arch.obs_dim))
    with torch.no_grad():
        want = model(torch.as_tensor(x, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(deployed.actor(x), want, atol=1e-5)


def test_the_learners_adapter_merges_like_peft(tmp_path, shipped):
    """simreal_ros.learner.lora's writer (dropout, its config), not only peft's defaults."""
    model = lora.wrap(shipped.model.actor, rank=4, alpha=16, dropout=0.1)
    with torch.no_grad():
        for _, parameter in lora.trainable_parameters(model):
            parameter.add_(0.05 * torch.randn_like(parameter))
    lora.save(model, tmp_path / "a1")
    merged = lora_merge.merged_actor_state(shipped, tmp_path / "a1")
    expected = {
        k: v.numpy() for k, v in lora.merged(model).state_dict().items()
    }  # fmt: skip
    for k in expected:
        np.testing.assert_allclose(merged[k], expected[k], rtol=0, atol=ATOL, err_msg=k)


def test_node_and_off_ros_evaluation_run_bit_identical_policies(tmp_path, shipped):
    adapter = save_adapter(trained_peft_actor(shipped, seed=3), shipped, tmp_path / "a1")
    node_policy = deploy_adapter(
        ckpt.load_numpy_checkpoint(SHIPPED), adapter, "a1", forward_kinematics=FK
    )
    eval_policy = build_policy(PolicySource(str(SHIPPED), adapter_dir=str(adapter)), robot=ROBOT)
    rng = np.random.default_rng(2)
    for _ in range(5):
        obs = observation(rng)
        np.testing.assert_array_equal(node_policy.act(obs), eval_policy.act(obs))
    assert not np.allclose(node_policy.act(obs), deploy_base(shipped, FK).act(obs))
    # The base in memory is untouched by merging.
    base_again = ckpt.load_numpy_checkpoint(SHIPPED)
    np.testing.assert_array_equal(
        deploy_base(base_again, FK).act(obs), deploy_base(shipped, FK).act(obs)
    )


# --- refusals ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    directory = tmp_path_factory.mktemp("small") / "base"
    make_untrained_checkpoint(directory, ROBOT, hidden=(32, 32))
    return load_checkpoint(directory, with_critic=False)


def merge(base, adapter: Path, **kwargs):
    return deploy_adapter(base, adapter, adapter.name, forward_kinematics=FK, **kwargs)


def edit_config(adapter: Path, **fields) -> None:
    path = adapter / ckpt.ADAPTER_CONFIG
    config = json.loads(path.read_text())
    config.update(fields)
    path.write_text(json.dumps(config))


def edit_tensors(adapter: Path, base, change) -> None:
    """Rewrite adapter_model.safetensors and its recorded checksum (a consistent file)."""
    path = adapter / ckpt.ADAPTER_WEIGHTS
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path))
    ckpt.write_adapter_metadata(adapter, base, adapter.name, base.version)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"use_dora": True}, r"use_dora = True: DoRA"),
        ({"lora_bias": True}, r"lora_bias = True: a LoRA bias"),
        ({"bias": "all"}, r"bias = 'all' trains the base layers' biases"),
        ({"bias": "lora_only"}, r"bias = 'lora_only'"),
        ({"rank_pattern": {"trunk.0": 2}}, r"rank_pattern = \{'trunk.0': 2\}"),
        ({"alpha_pattern": {"trunk.2": 32}}, r"alpha_pattern"),
        ({"modules_to_save": ["log_std_head"]}, r"modules_to_save"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else None,
)
@pytest.mark.filterwarnings("ignore:Adapter 'default'.*invalid shape")  # peft on lora_bias
def test_peft_features_beyond_plain_lora_are_refused(tmp_path, small, config, message):
    """Adapters peft really writes with these options: each refused, naming the field."""
    model = trained_peft_actor(small, **config)
    adapter = save_adapter(model, small, tmp_path / "a1")
    with pytest.raises(ckpt.CheckpointError, match=message) as refused:
        merge(small, adapter)
    assert "retrain" in str(refused.value).lower()


@pytest.fixture
def adapter(tmp_path, small):
    return save_adapter(trained_peft_actor(small, seed=1), small, tmp_path / "a1")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"target_modules": ["trunk.1"]}, r"\['trunk.1'\] that are not Linear or Conv2d layers"),
        ({"target_modules": ["trunk"]}, r"\['trunk'\] that are not Linear or Conv2d layers"),
        (
            {"target_modules": ["trunk.0", "encoder.0"]},
            r"\['encoder.0'\] that are not Linear or Conv2d layers",
        ),
        ({"target_modules": "all-linear"}, r"regular expression"),
        ({"target_modules": r"trunk\.\d"}, r"regular expression"),
        ({"target_modules": []}, r"non-empty list"),
        ({"peft_type": "IA3"}, r"peft_type 'IA3'"),
        ({"fan_in_fan_out": True}, r"fan_in_fan_out = True is for transposed \(Conv1D\)"),
        ({"init_lora_weights": "pissa"}, r"init_lora_weights = 'pissa'"),
        ({"r": 0}, r"r = 0; the rank must be a positive integer"),
        ({"r": "4"}, r"r = '4'"),
        ({"lora_alpha": None}, r"lora_alpha = None"),
        ({"use_rslora": "yes"}, r"use_rslora = 'yes'"),
        ({"use_magic": True}, r"sets use_magic = True, which this merge does not implement"),
        ({"layers_to_transform": [0]}, r"layers_to_transform"),
        ({"r": 8}, r"mean_head.lora_A has shape \(4, 32\).*at r = 8 needs \(8, 32\)"),
    ],
    ids=lambda v: "-".join(f"{k}={v[k]}" for k in v) if isinstance(v, dict) else None,
)
def test_config_fields_that_are_not_merged_are_refused(small, adapter, fields, message):
    edit_config(adapter, **fields)
    with pytest.raises(ckpt.CheckpointError, match=message):
        merge(small, adapter)


def test_unknown_missing_and_misshaped_tensors_are_refused(small, adapter):
    key = "base_model.model.trunk.0.lora_A.weight"
    edit_tensors(adapter, small, lambda t: t.update(extra=np.zeros(3, np.float32)))
    with pytest.raises(ckpt.CheckpointError, match=r"unexpected \['extra'\]"):
        merge(small, adapter)
    magnitude = "base_model.model.trunk.0.lora_magnitude_vector"  # what DoRA adds
    edit_tensors(adapter, small, lambda t: (t.pop("extra"), t.update({magnitude: t[key][0]})))
    with pytest.raises(ckpt.CheckpointError, match=r"unexpected \[.*lora_magnitude_vector"):
        merge(small, adapter)
    edit_tensors(adapter, small, lambda t: (t.pop(magnitude), t.pop(key)))
    with pytest.raises(ckpt.CheckpointError, match=r"missing \[.*trunk.0.lora_A"):
        merge(small, adapter)
    edit_tensors(adapter, small, lambda t: t.update({key: np.zeros((4, 30), np.float32)}))
    with pytest.raises(ckpt.CheckpointError, match=r"shape \(4, 30\).*needs \(4, 36\)"):
        merge(small, adapter)
    edit_tensors(adapter, small, lambda t: t.update({key: np.zeros((4, 36), np.float16)}))
    with pytest.raises(ckpt.CheckpointError, match=r"trunk.0.lora_A is float16; only float32"):
        merge(small, adapter)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_factors_are_refused(small, adapter, bad):
    def poison(tensors):
        tensors["base_model.model.mean_head.lora_B.weight"][2, 1] = bad

    edit_tensors(adapter, small, poison)
    with pytest.raises(ckpt.CheckpointError, match=r"mean_head.lora_B holds non-finite"):
        merge(small, adapter)


def test_a_merge_that_overflows_is_refused(small, adapter):
    def huge(tensors):
        tensors["base_model.model.trunk.2.lora_A.weight"][:] = 1e20
        tensors["base_model.model.trunk.2.lora_B.weight"][:] = 1e20

    edit_tensors(adapter, small, huge)
    with pytest.raises(ckpt.CheckpointError, match=r"trunk.2 gives non-finite weights"):
        merge(small, adapter)


def test_the_checksum_is_checked_before_anything_is_parsed(small, adapter):
    with pytest.raises(ckpt.CheckpointError, match="checksum"):
        merge(small, adapter, expected_sha256="0" * 64)
    weights = adapter / ckpt.ADAPTER_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])  # simreal_adapter.json's sha256 now wrong
    with pytest.raises(ckpt.CheckpointError, match="checksum"):
        merge(small, adapter)


def test_the_swap_path_never_imports_torch_or_peft(tmp_path, small):
    """What the node's loader thread runs for a hot swap, in a fresh interpreter."""
    adapter = save_adapter(trained_peft_actor(small, seed=4), small, tmp_path / "a1")
    checksum = ckpt.sha256_file(adapter / ckpt.ADAPTER_WEIGHTS)
    obs = observation(np.random.default_rng(5))
    script = (
        "import json, sys\n"
        "import numpy as np\n"
        "from simreal_ros.policy import checkpoint as ckpt\n"
        "from simreal_ros.policy.inference import deploy_adapter, deploy_base\n"
        "from simreal_ros.robot.description import load_robot_description\n"
        f"base = ckpt.load_numpy_checkpoint({str(small.path)!r},\n"
        "                                  description=load_robot_description())\n"
        "from simreal_ros.policy.spec import SpecConverter\n"
        "fk = SpecConverter.for_robot(base.spec, load_robot_description()).forward_kinematics\n"
        "deploy_base(base, fk)\n"
        f"policy = deploy_adapter(base, {str(adapter)!r}, 'a1', expected_sha256={checksum!r},\n"
        "                        forward_kinematics=fk)\n"
        f"obs = {{k: np.array(v) for k, v in json.loads({json.dumps(_listed(obs))!r}).items()}}\n"
        "print(json.dumps({'modules': sorted(m for m in sys.modules\n"
        "                                    if m.split('.')[0] in ('torch', 'peft')),\n"
        "                  'action': policy.act(obs).tolist()}))\n"
    )
    stdout = run_python(script)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["modules"] == []
    in_process = deploy_adapter(small, adapter, "a1", forward_kinematics=FK).act(obs)
    np.testing.assert_array_equal(np.array(out["action"]), in_process)


def _listed(obs: dict) -> dict:
    return {k: np.asarray(v).tolist() for k, v in obs.items()}
