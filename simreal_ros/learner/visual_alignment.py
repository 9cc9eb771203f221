"""Closing a visual gap from the arm's unlabeled frames: CORAL on the camera encoder.

Why CORAL (Sun and Saenko, "Deep CORAL", 2016) rather than MMD or a domain classifier with
gradient reversal: it needs no extra network and no kernel bandwidth, its loss is a closed
form of two batches' means and covariances, and it stays well behaved with the few hundred
arm frames a few episodes give. A domain classifier would have to be trained on those same
few frames, and gradient reversal is known to oscillate at this scale.

What is aligned: the statistics of every encoder layer's activations (per-pixel channel
vectors: a colour or lighting change shows there first) and of the keypoints the spatial
softmax gives (where things are: a camera offset shows there). The distance of one pair of
feature sets is ``||mu_s - mu_t||^2 / d + ||C_s - C_t||_F^2 / (4 d^2)``: Deep CORAL's
covariance term plus the means, which a shifted camera moves first.

Only the encoder's LoRA trains (``ENCODER_LORA_TARGETS``); the sim frames keep their expert
labels as an anchor, so the encoder cannot satisfy the alignment by forgetting the task.
The arm contributes frames only: no labels, no rewards.

The sim side is the reference (``frozen_reference``): the arm's features are aligned to
the frozen base's features on sim frames, and the adapted encoder's own sim features and
keypoints are held at the base's. In Deep CORAL's two-sided form both domains move, and
the cheapest way to match them is to shrink the activations: on the visual stand-in the
distance fell 250x while the sim features' spread fell to 0.36 of the base's in the last
layer, and nominal success fell from 36 to 25 of 50 (docs/camera.md).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from simreal_ros.config_schema import setting, validate


@dataclasses.dataclass
class AlignmentConfig:
    steps: int = setting(600, "gradient steps", low=1)
    batch_size: int = setting(32, "frames per domain per step", low=4)
    rank: int = setting(4, "LoRA rank on the encoder's convolutions", low=1)
    alpha: int = setting(8, "LoRA alpha", low=1)
    learning_rate: float = setting(1e-3, "Adam learning rate", low=1e-6, high=1e-1)
    alignment_weight: float = setting(1.0, "weight of the CORAL terms", low=0.0)
    anchor_weight: float = setting(1.0, "weight of BC on labelled sim frames", low=0.0)
    pixels_per_frame: int = setting(64, "activation vectors drawn per frame and layer", low=1)
    frozen_reference: bool = setting(
        True,
        "align the arm's features to the frozen base's features on sim frames, and keep the "
        "adapted encoder's sim features at the base's (feature_anchor_weight); False: Deep "
        "CORAL's two-sided form, where both domains move and can shrink together",
    )
    feature_anchor_weight: float = setting(
        1.0, "weight of keeping the sim frames' features and keypoints at the base's", low=0.0
    )
    camera_adaptation: str = setting(
        "warp",
        "with the frames' joint positions, the arm's camera is identified first: 'warp' (its "
        "pose, sysid.camera_pose; the version warps every frame into the trained view), "
        "'render' (its pose and the scene's light and table, sysid.camera_look; sim frames "
        "are rendered so and the encoder learns to see them as their pairs in the trained "
        "look), or 'none'",
        choices=("warp", "render", "none"),
    )
    align_features: bool = setting(
        True, "train the encoder's LoRA by CORAL; False: the camera's warp alone"
    )
    seed: int = setting(0, "seed of batches and pixel draws", low=0)

    def __post_init__(self) -> None:
        validate(self)


def coral_distance(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``||mu_s - mu_t||^2 / d + ||C_s - C_t||_F^2 / (4 d^2)`` of two (n, d) feature sets."""
    if source.ndim != 2 or target.ndim != 2 or source.shape[1] != target.shape[1]:
        raise ValueError(f"coral_distance: shapes {tuple(source.shape)}, {tuple(target.shape)}.")
    if min(len(source), len(target)) < 2:
        raise ValueError("coral_distance needs at least two samples per domain.")
    d = source.shape[1]
    mu_s, mu_t = source.mean(0), target.mean(0)
    cs = torch.cov(source.T).reshape(d, d)
    ct = torch.cov(target.T).reshape(d, d)
    return (mu_s - mu_t).pow(2).sum() / d + (cs - ct).pow(2).sum() / (4 * d * d)


def encoder_maps(actor, images: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each encoder layer's activation maps (after its ReLU, and the last layer's), and the
    keypoints (frames, 2C). ``actor`` is a ``CameraActor`` (or one wrapped with LoRA)."""
    from simreal_ros.training.model import spatial_softmax

    maps: list[torch.Tensor] = []
    x = images
    layers = list(actor.encoder)
    for index, layer in enumerate(layers):
        x = layer(x)
        if isinstance(layer, nn.ReLU) or index == len(layers) - 1:
            maps.append(x)
    return maps, spatial_softmax(x)


def drawn_features(
    maps: Sequence[torch.Tensor], keypoints: torch.Tensor, draws: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Each map's activations at the pixels ``draws`` names, as (frames x pixels, channels),
    then the keypoints."""
    out = []
    for x, draw in zip(maps, draws, strict=True):
        batch, channels, height, width = x.shape
        flat = x.permute(0, 2, 3, 1).reshape(batch, height * width, channels)
        picked = torch.gather(flat, 1, draw[..., None].expand(-1, -1, channels))
        out.append(picked.reshape(-1, channels))
    return [*out, keypoints]


def pixel_draws(
    maps: Sequence[torch.Tensor], pixels_per_frame: int, generator: torch.Generator
) -> list[torch.Tensor]:
    """Random pixel indices, (frames, pixels_per_frame), for each map."""
    return [
        torch.randint(0, x.shape[2] * x.shape[3], (x.shape[0], pixels_per_frame),
                      generator=generator)
        for x in maps
    ]  # fmt: skip


def encoder_features(
    actor, images: torch.Tensor, pixels_per_frame: int, generator: torch.Generator
) -> list[torch.Tensor]:
    """Each encoder layer's activations as (frames x pixels drawn, channels), then the
    keypoints (frames, 2C)."""
    maps, keypoints = encoder_maps(actor, images)
    return drawn_features(maps, keypoints, pixel_draws(maps, pixels_per_frame, generator))


def feature_distance(
    actor, sim_images, arm_images, pixels_per_frame: int, seed: int, arm_actor=None
) -> float:
    """The summed CORAL distance of the encoder's features on two sets of frames (those on
    the arm's frames from ``arm_actor`` where given)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        sim = encoder_features(actor, sim_images, pixels_per_frame, generator)
        arm = encoder_features(arm_actor or actor, arm_images, pixels_per_frame, generator)
        return float(sum(coral_distance(s, a) for s, a in zip(sim, arm, strict=True)))


# The arm's frames are "outside the sim's distribution" past this many times the distance
# between two halves of the sim's own frames (the sampling floor at these sizes).
PERCEPTION_SHIFT_RATIO = 3.0


def feature_shift(actor, sim_images, arm_images, pixels_per_frame: int = 64, seed: int = 0):
    """How far the encoder's features on the arm's frames lie from those on sim frames, over
    the distance between two random halves of the sim frames (equal sizes on both sides):
    about 1 when the arm's frames look like the sim's, large when the pixels differ. The
    perception diagnosis: ``ratio`` > ``PERCEPTION_SHIFT_RATIO`` points at the camera."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(sim_images))
    half = min(len(order) // 2, len(arm_images))
    if half < 4:
        raise ValueError("feature_shift needs at least 8 sim frames and 4 arm frames.")
    first, second = order[:half], order[half : 2 * half]
    arm = rng.permutation(len(arm_images))[:half]
    floor = feature_distance(actor, sim_images[first], sim_images[second], pixels_per_frame, seed)
    shift = feature_distance(actor, sim_images[first], arm_images[arm], pixels_per_frame, seed)
    return {"distance": shift, "floor": floor, "ratio": shift / max(floor, 1e-12),
            "outside_sim": shift > PERCEPTION_SHIFT_RATIO * floor}  # fmt: skip


@dataclasses.dataclass
class AlignmentResult:
    peft_model: object
    distance_before: float  # on the held-out frames
    distance_after: float
    anchor_loss: float  # the sim frames' anchor, last 50 steps' mean
    # Each layer's activation std on held-out sim frames, adapted over base: well under 1
    # when the alignment shrank the features instead of matching them.
    sim_feature_scale: list[float] = dataclasses.field(default_factory=list)


def align_encoder(
    actor,
    sim_images: torch.Tensor,
    sim_obs: torch.Tensor,
    sim_labels: torch.Tensor,
    arm_images: torch.Tensor,
    config: AlignmentConfig,
    held_out: float = 0.25,
    targets: Sequence[str] | None = None,
    sim_objects: torch.Tensor | None = None,
    sim_reference: torch.Tensor | None = None,
) -> AlignmentResult:
    """Train LoRA on ``actor``'s encoder so its features on ``arm_images`` match those on
    ``sim_images``, while its actions on the sim frames keep to ``sim_labels``.

    Images are normalised tensors (N, 3, H, W); ``sim_obs`` the normalised
    proprioception of the sim frames; ``sim_objects`` their cube positions, normalised as
    the actor's ``object_head`` predicts them (the sim knows them: part of the anchor, so
    the encoder keeps finding the cube). The distance is reported on held-out frames of
    both domains; training never sees them. Raises when the alignment did not lower it.

    ``sim_reference``: the same sim instants as ``sim_images`` seen as the base was trained
    to see them (paired renders). The adapted encoder's keypoints on ``sim_images`` are then
    held at the frozen base's keypoints on their pairs, and the arm's features are aligned
    to the frozen base's on the pairs: the distance reported is that one, the arm's frames
    through the adapted encoder against the trained view through the base.
    """
    from simreal_ros.learner import lora
    from simreal_ros.training.model import ENCODER_LORA_TARGETS

    rng = np.random.default_rng(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    sim_train, sim_test = _split(len(sim_images), held_out, rng)
    arm_train, arm_test = _split(len(arm_images), held_out, rng)
    trained_view = sim_images if sim_reference is None else sim_reference
    before = feature_distance(
        actor, trained_view[sim_test], arm_images[arm_test], config.pixels_per_frame, config.seed
    )
    reference = copy.deepcopy(actor).eval().requires_grad_(False)
    model = lora.wrap(
        actor, rank=config.rank, alpha=config.alpha, targets=targets or ENCODER_LORA_TARGETS
    )
    inner = lora.inner(model)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(parameters, lr=config.learning_rate)
    anchors: list[float] = []
    for _ in range(config.steps):
        s = torch.as_tensor(rng.choice(sim_train, config.batch_size))
        a = torch.as_tensor(rng.choice(arm_train, config.batch_size))
        sim_maps, keypoints = encoder_maps(inner, sim_images[s])
        draws = pixel_draws(sim_maps, config.pixels_per_frame, generator)
        sim_features = drawn_features(sim_maps, keypoints, draws)
        arm_features = encoder_features(inner, arm_images[a], config.pixels_per_frame, generator)
        anchor = torch.zeros(())
        if sim_reference is not None:
            with torch.no_grad():
                paired_maps, paired_keypoints = encoder_maps(reference, sim_reference[s])
            anchor = (
                config.feature_anchor_weight
                * nn.functional.mse_loss(keypoints, paired_keypoints)
                / paired_keypoints.var().clamp_min(1e-8)
            )
            paired_features = drawn_features(paired_maps, paired_keypoints, draws)
            alignment = sum(
                coral_distance(x, y) for x, y in zip(paired_features, arm_features, strict=True)
            )
        elif config.frozen_reference:
            with torch.no_grad():
                base_maps, base_keypoints = encoder_maps(reference, sim_images[s])
            base_features = drawn_features(base_maps, base_keypoints, draws)
            alignment = sum(
                coral_distance(x, y) for x, y in zip(base_features, arm_features, strict=True)
            )
            anchor = config.feature_anchor_weight * sum(
                nn.functional.mse_loss(x, y) / y.var().clamp_min(1e-8)
                for x, y in zip(sim_features, base_features, strict=True)
            )
        else:
            alignment = sum(
                coral_distance(x, y) for x, y in zip(sim_features, arm_features, strict=True)
            )
        action = inner.act_from_features(sim_obs[s], keypoints)
        anchor = anchor + nn.functional.mse_loss(action, sim_labels[s])
        if sim_objects is not None:
            anchor = anchor + nn.functional.mse_loss(inner.object_head(keypoints), sim_objects[s])
        loss = config.alignment_weight * alignment + config.anchor_weight * anchor
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        anchors.append(float(anchor.detach()))
    model.eval()
    if sim_reference is None:
        after = feature_distance(
            inner, sim_images[sim_test], arm_images[arm_test], config.pixels_per_frame,
            config.seed,
        )  # fmt: skip
    else:
        after = feature_distance(
            reference, sim_reference[sim_test], arm_images[arm_test], config.pixels_per_frame,
            config.seed, arm_actor=inner,
        )  # fmt: skip
    if not after < before:
        raise RuntimeError(
            f"visual alignment did not lower the feature distance on held-out frames "
            f"({before:.4g} -> {after:.4g}); the adapter is not used. More arm frames or "
            "steps may help; check that the arm's frames show the task."
        )
    with torch.no_grad():
        adapted_maps, _ = encoder_maps(inner, sim_images[sim_test])
        base_maps, _ = encoder_maps(reference, sim_images[sim_test])
    scale = [
        float(x.std() / y.std().clamp_min(1e-12))
        for x, y in zip(adapted_maps, base_maps, strict=True)
    ]
    return AlignmentResult(model, before, after, float(np.mean(anchors[-50:])), scale)


def _split(n: int, held_out: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if n < 8:
        raise ValueError(f"visual alignment needs at least 8 frames per domain; got {n}.")
    order = rng.permutation(n)
    cut = max(2, round(n * held_out))
    return order[cut:], order[:cut]


def identified_scene(arm_frames, arm_joints, robot, camera, camera_fit):
    """The arm's scene as ``VisualSettings`` (the camera's pose where accepted, then the
    light and table fitted from that pose; None when neither explains held-out frames),
    and the look's fit."""
    from simreal_ros.sim.visuals import VisualSettings
    from simreal_ros.sysid.camera_look import identify_look

    pose = ((0.0,) * 3, (0.0,) * 3)
    if camera_fit.accepted:
        pose = (camera_fit.offset_m, camera_fit.rotation_deg)
    look_fit = identify_look(arm_frames, arm_joints, robot, camera, *pose)
    if not (camera_fit.accepted or look_fit.accepted):
        return None, look_fit
    look = look_fit.look if look_fit.accepted else {}
    return VisualSettings(**look, camera_offset_m=pose[0], camera_rotation_deg=pose[1]), look_fit


def align_to_arm_frames(
    base_dir: str | Path,
    arm_frames: np.ndarray,
    out_dir: str | Path,
    robot,
    *,
    version: str,
    parent_version: str | None = None,
    sim_profile: str = "randomized",
    sim_episodes: int = 20,
    config: AlignmentConfig | None = None,
    arm_joints: np.ndarray | None = None,
    camera_pose_config=None,
) -> dict:
    """The learner method: a peft adapter on a camera base's encoder, aligned to the arm's
    frames (``arm_frames``: uint8 (N, H, W, 3) RGB as recorded, no labels).

    With ``arm_joints`` (each frame's joint positions, (N, J)) the camera is identified
    first (``AlignmentConfig.camera_adaptation``). In the default, an accepted pose's warp
    goes into the adapter's metadata (``camera_rectification``), which the deployed version
    applies to every frame, and the arm's frames are aligned after it.

    Sim frames of the same task come from ``sim_episodes`` episodes in ``sim_profile``
    under the pretraining's visual randomisation, driven half by the base and half by the
    expert (which labels every frame: the anchor). Writes ``out_dir`` (peft files plus
    ``simreal_adapter.json``) and returns what it measured.
    """
    from simreal_ros.learner import lora
    from simreal_ros.policy.camera import rectified_frames
    from simreal_ros.policy.checkpoint import write_adapter_metadata
    from simreal_ros.sim.visuals import NOMINAL, VisualJitter, VisualRandomization
    from simreal_ros.training.camera_pretrain import FrameCollector
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    config = config or AlignmentConfig()
    base = load_checkpoint(base_dir, robot, with_critic=False)
    camera = base.spec.camera
    if camera is None:
        raise ValueError(f"{base_dir} is a state policy; visual alignment needs a camera policy.")
    arm_frames = np.asarray(arm_frames)
    if arm_frames.ndim != 4 or arm_frames.dtype != np.uint8:
        raise ValueError(f"arm frames: need uint8 (N, H, W, 3); got {arm_frames.dtype} "
                         f"{arm_frames.shape}.")  # fmt: skip
    camera.check_frame(arm_frames.shape[2], arm_frames.shape[1], "rgb8")
    # The arm's camera identified from its frames and joints (see camera_adaptation).
    camera_fit, look_fit, identified, warp = None, None, None, None
    if arm_joints is not None and config.camera_adaptation != "none":
        from simreal_ros.sysid.camera_pose import identify_camera_pose, rectification

        camera_fit = identify_camera_pose(arm_frames, arm_joints, robot, camera,
                                          camera_pose_config)  # fmt: skip
        if config.camera_adaptation == "warp" and camera_fit.accepted:
            warp = rectification(robot, camera, camera_fit)
        if config.camera_adaptation == "render":
            identified, look_fit = identified_scene(arm_frames, arm_joints, robot, camera,
                                                    camera_fit)  # fmt: skip
    if identified is None:
        collector = FrameCollector(base.spec, robot, sim_profile, VisualRandomization(),
                                   config.seed)  # fmt: skip
    else:
        collector = FrameCollector(base.spec, robot, sim_profile, VisualJitter(identified),
                                   config.seed, reference=NOMINAL)  # fmt: skip
    actor = base.model.actor
    for k in range(sim_episodes):
        collector.rollout(7_000_000 + config.seed * 1000 + k, 0.5, actor)
    n = collector.data.size
    converter = collector.converter
    sim_images = collector.image_tensor(collector.data.images[:n])
    sim_reference = None if identified is None else collector.image_tensor(
        collector.data.paired[:n]
    )  # fmt: skip
    sim_obs = torch.as_tensor(
        converter.normalize(collector.data.obs[:n].astype(np.float64)), dtype=torch.float32
    )
    sim_labels = torch.from_numpy(collector.data.labels[:n].copy())
    corrected = camera.corrected(rectification=warp)
    arm_images = collector.image_tensor(rectified_frames(arm_frames, corrected))
    # The perception signal, on the base and the frames as recorded against the sim's
    # randomised look: whether the arm's frames lie outside the sim's.
    shift_images = sim_reference if sim_reference is not None else sim_images
    shift = feature_shift(actor, shift_images, arm_images, config.pixels_per_frame, config.seed)
    sim_objects = None
    normalization = base.metadata.get("training", {}).get("object_normalization")
    if normalization is not None:
        mean, std = (np.asarray(normalization[k], dtype=np.float32) for k in ("mean", "std"))
        sim_objects = torch.from_numpy((collector.data.objects[:n] - mean) / std)
    summary: dict = {
        "method": "visual_alignment",
        "arm_frames": len(arm_frames),
        "sim_frames": n,
        "feature_shift": {k: v if k == "outside_sim" else float(v) for k, v in shift.items()},
        "camera_pose": None if camera_fit is None else camera_fit.to_dict(),
        "scene_look": None if look_fit is None else look_fit.to_dict(),
        "config": dataclasses.asdict(config),
    }
    if config.align_features:
        result = align_encoder(
            actor, sim_images, sim_obs, sim_labels, arm_images, config,
            sim_objects=sim_objects, sim_reference=sim_reference,
        )  # fmt: skip
        peft_model = result.peft_model
        summary.update(
            feature_distance_before=result.distance_before,
            feature_distance_after=result.distance_after,
            anchor_loss=result.anchor_loss,
            sim_feature_scale=result.sim_feature_scale,
        )
    else:  # the warp alone: an adapter that changes nothing (LoRA's B starts at zero)
        from simreal_ros.training.model import ENCODER_LORA_TARGETS

        peft_model = lora.wrap(actor, config.rank, config.alpha, targets=ENCODER_LORA_TARGETS)
    out_dir = Path(out_dir)
    lora.save(peft_model, out_dir)
    write_adapter_metadata(out_dir, base, version, parent_version, training=summary,
                           **corrected.version_metadata())  # fmt: skip
    return summary
