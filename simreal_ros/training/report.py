"""README.md for a checkpoint directory, rendered from its policy.json (one source of truth)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simreal_ros.policy.checkpoint import METADATA_FILE, read_metadata
from simreal_ros.robot.description import DEFAULT_ROBOT

ORDER = (
    "nominal/train",
    "nominal/shifted",
    "randomized/train",
    "randomized/shifted",
    "real_twin/train",
    "real_twin/shifted",
    "real_twin_mild/train",
    "real_twin_mild/shifted",
)


def render_readme(metadata: dict[str, Any], notes: str = "") -> str:
    if metadata["spec"].get("camera") is not None:
        return render_camera_readme(metadata, notes)
    training = metadata.get("training", {})
    spec = metadata["spec"]
    arch = metadata["architecture"]
    data = training.get("data", {})
    # Checkpoints from before the robot was recorded are the first arm's.
    robot = training.get("robot", DEFAULT_ROBOT)
    robot_flag = "" if robot == DEFAULT_ROBOT else f"--robot {robot} "
    lines = [
        f"# Base checkpoint `{metadata['version']}` ({spec['task']})",
        "",
        "Produced by `simreal pretrain`; everything below is rendered from "
        f"`{METADATA_FILE}` by `simreal_ros.training.report`.",
        "",
        "## Provenance",
        "",
        f"- robot: `{robot}`",
        f"- command: `{training.get('command', '?')}`",
        f"- seed: {training.get('seed', '?')}",
        f"- wall time: {training.get('wall_time_s', 0):.0f} s (on 2 shared CPU cores)",
        f"- method: {training.get('method', '?')}",
        f"- data: {data.get('episodes', '?')} episodes, {data.get('env_steps', '?')} env "
        f"steps in the `{data.get('profile', '?')}` profile, `{data.get('condition', '?')}` "
        f"condition; {training.get('sac_steps', 0)} SAC gradient steps",
        f"- gamma: {metadata.get('gamma')}; reward: {training.get('reward', {})}",
        "",
        "## Conventions",
        "",
        f"- joints (controller order): {', '.join(spec['joint_names'])}",
        f"- units: {', '.join(spec['joint_units'])}",
        f"- actions: `{spec['action_mode']}` (normalised [-1, 1] x per-tick max step, added "
        "to the measured position, clipped to the joint limits); the node publishes "
        "absolute targets",
        f"- control rate: {spec['control_rate_hz']:g} Hz",
        f"- observation: {', '.join(spec['observation_fields'])} ({len(spec['obs_mean'])} "
        "values, standardised with the stored mean/std)",
        f"- network: actor {arch['actor_hidden']} ReLU MLP, twin critics "
        f"{arch['critic_hidden']}; V_sim(s) = min(Q1, Q2)(s, actor mean)",
        "",
        "## Measured success (one episode per seed, Wilson 95% CI)",
        "",
        "| profile/condition | seeds | success | 95% CI | mean return | mean length |",
        "|---|---|---|---|---|---|",
    ]
    lines += _success_rows(metadata)
    lines += [
        "",
        "`real_twin` is a simulated stand-in for the physical arm (a hidden, fixed dynamics "
        "gap outside the training randomization), never the arm itself; `real_twin_mild` is "
        "the first stand-in, inside it. Reproduce a row with "
        f"`simreal {robot_flag}eval --checkpoint <this dir> --dynamics-profile P --condition C "
        "--episodes N`.",
    ]
    if notes:
        lines += ["", "## Notes", "", notes.strip()]
    return "\n".join(lines) + "\n"


def _success_rows(metadata: dict[str, Any]) -> list[str]:
    lines = []
    evaluation = metadata.get("evaluation", {})
    keys = [k for k in ORDER if k in evaluation] + sorted(set(evaluation) - set(ORDER))
    for key in keys:
        e = evaluation[key]
        low, high = e["ci95"]
        seeds = e.get("seeds", [0, e["episodes"] - 1])
        stand_in = key.startswith(("real_twin", "visual_shift"))
        label = f"{key} (stand-in)" if stand_in else key
        lines.append(
            f"| {label} | {seeds[0]}..{seeds[1]} | {e['successes']}/{e['episodes']} = "
            f"{e['success_rate']:.1%} | {low:.1%}..{high:.1%} | {e['mean_return']:.2f} | "
            f"{e['mean_length']:.1f} |"
        )
    return lines


def render_camera_readme(metadata: dict[str, Any], notes: str = "") -> str:
    """A camera policy's README: its camera conventions and how it was distilled."""
    training = metadata.get("training", {})
    spec, arch = metadata["spec"], metadata["architecture"]
    camera, encoder = spec["camera"], arch["encoder"]
    log = training.get("log", [])
    lines = [
        f"# Camera checkpoint `{metadata['version']}` ({spec['task']})",
        "",
        "Produced by `simreal pretrain-camera`; everything below is rendered from "
        f"`{METADATA_FILE}` by `simreal_ros.training.report`.",
        "",
        "## Provenance",
        "",
        f"- command: `{training.get('command', '?')}`",
        f"- wall time: {training.get('minutes', 0):.1f} min (on 2 shared CPU cores)",
        f"- method: {training.get('method', '?')}",
        f"- data: {training.get('frames', '?')} episode frames over "
        f"{sum(e['episodes'] for e in log if e['phase'] != 'scenes')} episodes and "
        f"{training.get('config', {}).get('scenes', '?')} still scenes, in the "
        f"`{training.get('config', {}).get('profile', '?')}` profile under the visual "
        "randomisation recorded in policy.json",
        "",
        "## Conventions",
        "",
        f"- camera: `{camera['image_topic']}` ({camera['encoding']}, "
        f"{camera['width']}x{camera['height']}), the sim's `{camera['camera_name']}` camera; "
        f"frames older than {camera['max_frame_age_s']:g} s hold the arm",
        f"- pixels: (value / 255 - {camera['pixel_mean']:g}) / {camera['pixel_std']:g}",
        f"- joints (controller order): {', '.join(spec['joint_names'])}",
        f"- actions: `{spec['action_mode']}`; control rate {spec['control_rate_hz']:g} Hz",
        f"- proprioception: {', '.join(spec['observation_fields'])} (no cube pose)",
        f"- network: CNN {encoder['channels']} (kernels {encoder['kernels']}, strides "
        f"{encoder['strides']}), spatial softmax, then an actor {arch['actor_hidden']} ReLU "
        "MLP; no critic",
        "",
        "## Measured success (one episode per seed, Wilson 95% CI)",
        "",
        "| profile/condition | seeds | success | 95% CI | mean return | mean length |",
        "|---|---|---|---|---|---|",
        *_success_rows(metadata),
        "",
        "`visual_shift` is a simulated stand-in for a camera that sees the scene differently "
        "(light, colours, the camera's pose outside the pretraining's ranges), never the "
        "arm itself. Reproduce a row with `simreal eval --checkpoint <this dir> "
        "--dynamics-profile P --condition C --episodes N`.",
    ]
    if notes:
        lines += ["", "## Notes", "", notes.strip()]
    return "\n".join(lines) + "\n"


def write_readme(directory: str | Path, notes: str = "") -> Path:
    directory = Path(directory)
    path = directory / "README.md"
    path.write_text(render_readme(read_metadata(directory), notes))
    return path


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Render README.md of a checkpoint directory.")
    parser.add_argument("directory")
    parser.add_argument("--notes", default="")
    args = parser.parse_args()
    print(write_readme(args.directory, args.notes))
