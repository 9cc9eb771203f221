"""`simreal up`: start a graph profile as separate processes (no `ros2 launch` needed)."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from simreal_ros.cli.profile_options import add_dynamics_profile_option
from simreal_ros.graph import description
from simreal_ros.graph.runner import NODE_EXIT_BASE, STARTUP_FAILED, GraphRunner


def describe_dynamics(profile: str) -> str:
    """A profile as the start-up line names it: its name, the engine, whether a stand-in."""
    from simreal_ros.sim.profiles import load_profile

    loaded = load_profile(profile)
    label = f"{profile} ({loaded.engine}"
    if loaded.name != profile:
        label = f"{loaded.name} from {profile} ({loaded.engine}"
    return label + (", a stand-in for the arm, never the arm)" if loaded.is_stand_in else ")")


def parse_override(text: str) -> tuple[str, str, Any]:
    """Parse ``node.param=value``; the value is read as YAML data (numbers, bools, lists)."""
    target, separator, value = text.partition("=")
    node, dot, parameter = target.partition(".")
    if not separator or not dot or not node or not parameter:
        raise ValueError(
            f"--set {text!r} is not of the form NODE.PARAMETER=VALUE, e.g. safety.rate_hz=100."
        )
    return node, parameter, yaml.safe_load(value)


def supervision_help() -> str:
    """What `simreal up` does when a node dies, and how it stops, from the graph
    description's per-node supervision (docs/supervision.md)."""
    required = [n for n, s in description.SUPERVISION.items() if s.required and s.respawn]
    most = max(s.max_respawns for s in description.SUPERVISION.values())
    return (
        "Supervision follows each node's policy in the graph description "
        "(docs/supervision.md): a node that dies is respawned after a short delay (longer "
        "after each quick repeat) and the other nodes keep running. The safety filter and "
        "the arm side stay up: a dead policy is respawned while the filter holds the arm. "
        f"Only a required node ({', '.join(required)}) given up on after its respawns in a "
        f"row (at most {most}) stops the graph, with exit code {NODE_EXIT_BASE} plus its "
        "position in the graph (0-based, in start order); a node given up on that is not "
        f"required stays stopped. Exit code {STARTUP_FAILED}: a managed node never became "
        "active. Ctrl-C or SIGTERM stops every node; the last line (graph stopped) names "
        "each node's exit status, and the exit code is 0."
    )


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "up",
        help="start the graph (sim or real) as processes",
        description=(
            "Start the nodes of a graph (the same description the launch files read) as "
            "separate processes and stream their logs. Settings (--set, the config/ YAML "
            f"files) are checked before anything starts. {supervision_help()}"
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--graph",
        choices=description.PROFILES,
        default="sim",
        help="sim: with the MuJoCo sim bridge; real: the robot's own drivers drive the arm",
    )
    add_dynamics_profile_option(
        parser,
        default="",
        help="sim graph only: the sim bridge's dynamics, a shipped profile (nominal, "
        "randomized; the stand-ins for the arm real_twin, drake_clean, drake_worn, ...) or a "
        "profile YAML (default: the bridge's own, nominal)",
        dest="dynamics_profile",
    )
    parser.add_argument(
        "--task",
        default=description.DEFAULT_TASK,
        choices=("push", "reach"),
        help="the task, for every node that takes it (sim bridge, policy, learner)",
    )
    parser.add_argument(
        "--checkpoint",
        default="",
        help="base checkpoint directory for the policy and the learner (default: the one "
        "shipped for the robot and task). A camera policy (simreal pretrain-camera; its "
        "spec has a camera) switches the sim bridge's camera on at the spec's camera name "
        "and resolution and the policy's control rate: the policy reads /camera/image_raw "
        "instead of /object/pose and holds the arm when frames stop",
    )
    parser.add_argument(
        "--perception",
        choices=description.PERCEPTION,
        default="privileged",
        help="where /object/pose comes from: the sim bridge's truth (privileged), or the "
        "perception node's pose of the cube's ArUco marker seen by a camera (marker: in sim "
        "the bridge renders its workspace camera and stops publishing the truth; on the real "
        "graph give the camera's calibration with --set perception.extrinsic_file=PATH; "
        "docs/perception.md)",
    )
    parser.add_argument(
        "--only", default="", help="comma-separated node names to start (default: all)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE.PARAM=VALUE",
        help="override a node parameter (repeatable); unknown names and bad values are "
        "refused before anything starts",
    )
    parser.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID to use")
    parser.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds"
    )
    parser.add_argument("--list", action="store_true", help="print the graph and exit")
    parser.add_argument(
        "--no-respawn",
        action="store_true",
        help="respawn nothing: the first node that dies stops the graph (to debug a crash)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="log every safety state change (otherwise at most one line a second)",
    )
    parser.set_defaults(func=run)


def graph_overrides(args) -> dict[str, dict[str, Any]]:
    """``--set`` and ``--dynamics-profile`` as node -> parameter overrides."""
    overrides: dict[str, dict[str, Any]] = {}
    for text in args.set:
        node, parameter, value = parse_override(text)
        overrides.setdefault(node, {})[parameter] = value
    if args.dynamics_profile:
        if args.graph != "sim":
            raise ValueError(
                "--dynamics-profile sets the sim bridge's dynamics; the real graph has no "
                "sim bridge. Drop it, or use --graph sim."
            )
        given = overrides.setdefault("sim_bridge", {}).get("profile")
        if given not in (None, args.dynamics_profile):
            raise ValueError(
                f"--dynamics-profile {args.dynamics_profile} and --set "
                f"sim_bridge.profile={given} disagree; give one."
            )
        overrides["sim_bridge"]["profile"] = args.dynamics_profile
    return overrides


def running_policy(given: dict[str, Any], task: str, checkpoint: str) -> str:
    """What the policy node will run, and from where: the store's current version (an
    adapter) or the base checkpoint. Refuses a base that does not exist for this robot."""
    from simreal_ros.adapters.store import (
        AdapterStore,
        StoreError,
        foreign_version_reason,
        scoped_store_root,
    )
    from simreal_ros.policy.checkpoint import read_metadata, shipped_checkpoint
    from simreal_ros.robot.description import load_robot_description

    robot = load_robot_description()
    directory = checkpoint or shipped_checkpoint(task)  # FileNotFoundError says what to do
    metadata = read_metadata(directory)
    base = f"base {metadata.get('version')} from {directory}"
    store_setting = given.get("adapter_store", "")
    if not store_setting:
        return f"{base} (no adapter store)"
    store = AdapterStore(scoped_store_root(store_setting, robot.name, metadata))
    current = store.current()
    if current is None:
        return f"{base}; adapters from {store.root}"
    try:
        stored = store.load(current, verify=False)
    except StoreError as error:
        return f"{base} (the store's {current} is unusable: {error})"
    reason = foreign_version_reason(stored, metadata, robot)
    if reason:
        return f"{base} (the store's {current} is refused: {reason})"
    return f"adapter {current} from {stored.path} on {base}"


def policy_camera(args, overrides: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The sim bridge's camera settings when the policy node will run a camera policy (its
    base checkpoint's spec has a camera; adapters keep the base's), else None. A ``--set
    sim_bridge.`` camera setting that contradicts the checkpoint is refused: the policy
    would refuse every frame. On the real graph the robot's camera driver publishes the
    frames; the settings then only turn the recorder's frames on."""
    from simreal_ros.policy.checkpoint import CheckpointError, read_metadata, shipped_checkpoint
    from simreal_ros.policy.spec import PolicySpec

    try:
        directory = args.checkpoint or shipped_checkpoint(args.task)
        spec_data = read_metadata(directory).get("spec") or {}
    except (FileNotFoundError, CheckpointError):
        # No checkpoint to read: a graph with the policy node refuses to start and says
        # why (running_policy); one without it (--only) needs no policy camera.
        return None
    if spec_data.get("camera") is None:
        return None
    spec = PolicySpec.from_dict(spec_data)  # a broken spec says what is wrong
    settings = description.policy_camera_settings(spec.camera, spec.control_rate_hz)
    given = overrides.get("sim_bridge", {})
    for name in ("camera", "camera_name", "camera_width", "camera_height"):
        if name in given and given[name] != settings[name]:
            raise ValueError(
                f"--set sim_bridge.{name}={given[name]}: the camera policy in {directory} "
                f"was trained on {name}={settings[name]} and would refuse those frames; "
                "drop the --set (the sim bridge's camera follows the checkpoint)."
            )
    return settings


def run(args) -> int:
    from simreal_ros.settings_check import check_graph, check_overrides

    overrides = graph_overrides(args)
    perception = args.perception
    names = [node.name for node in description.graph(args.graph, perception=perception)]
    check_overrides(overrides, names)
    camera = policy_camera(args, overrides)
    nodes = description.graph(
        args.graph,
        overrides,
        task=args.task,
        checkpoint=args.checkpoint,
        perception=perception,
        policy_camera=camera,
    )
    description.check_calibration(nodes)
    nodes = description.select(nodes, [n for n in args.only.split(",") if n])
    if args.no_respawn:
        nodes = description.without_respawn(nodes)
    if args.verbose:
        nodes = description.verbose(nodes)
    given = check_graph(nodes, args.graph, overrides)  # before any process starts
    if args.list:
        for index, node in enumerate(nodes):
            print(f"{index}: {node.name:<12} {node.module:<32} {node.description}")
        return 0
    robot = next((n.parameters["robot"] for n in nodes if "robot" in n.parameters), "")
    dynamics = given.get("sim_bridge", {}).get("profile", "nominal")
    runs = ""
    if "policy" in given:
        runs = f"; policy runs {running_policy(given['policy'], args.task, args.checkpoint)}"
    if camera and "sim_bridge" in given:
        bridge = given["sim_bridge"]
        runs += (
            f"; a camera policy: the sim bridge renders {bridge['camera_name']} at "
            f"{bridge['camera_width']}x{bridge['camera_height']}, {bridge['camera_rate_hz']:g} Hz"
        )
    print(
        f"[simreal up] graph {args.graph}, robot {robot}, task {args.task}"
        + (f", dynamics {describe_dynamics(dynamics)}" if "sim_bridge" in given else "")
        + f"{runs}: {', '.join(n.name for n in nodes)}",
        flush=True,
    )
    return GraphRunner(nodes, args.graph, domain_id=args.domain_id).run(args.duration)
