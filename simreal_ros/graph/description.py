"""The node graph, described once for both profiles.

``launch/sim.launch.py`` and ``launch/real.launch.py`` read this description, and
``simreal up`` starts the same description as processes where ``launch`` is not installed.
The ``real`` profile differs from ``sim`` only in the arm: the robot's ros2_control
drivers (brought up by the user's own launch file) take the place of the sim bridge.
Plain Python: no rclpy, no launch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from simreal_ros import resources
from simreal_ros.perception import SIM_CAMERA, SIM_CAMERA_CALIBRATION, SIM_CAMERA_SIZE
from simreal_ros.robot.description import DEFAULT_ROBOT

PROFILES = ("sim", "real")

# Source labels carried into every recorded episode. The `real_twin` dynamics profile of
# the sim bridge is a simulated stand-in for the physical arm, never the arm itself.
SOURCE_BY_PROFILE = {"sim": "sim", "real": "real"}


ON_DEATH = ("respawn", "stop_graph", "leave_stopped")


@dataclasses.dataclass(frozen=True)
class Supervision:
    """What a node's death means, followed by `simreal up` and the launch files alike.

    ``respawn``: start the node again after ``respawn_delay_s``; each further death within
    ``stable_after_s`` of the last start multiplies the delay by ``backoff`` (ros2 launch
    has no backoff: it waits ``respawn_delay_s`` every time). After ``max_respawns``
    respawns in a row (deaths each within ``stable_after_s`` of the start), the node is
    given up on: a ``required`` node then stops the graph, any other is left stopped.
    ``standby``: `simreal up` keeps a spare process of the node started, its imports done,
    waiting; the respawn hands over to it instead of paying a cold start (seconds of
    imports beside a busy graph). The launch files respawn cold.
    ``on_death`` says in words what its death means for the rest (docs/supervision.md).
    """

    required: bool
    respawn: bool
    respawn_delay_s: float = 0.5
    backoff: float = 2.0
    max_respawns: int = 5
    stable_after_s: float = 10.0
    standby: bool = False
    on_death: str = ""

    def __post_init__(self) -> None:
        if self.respawn_delay_s < 0.0 or self.backoff < 1.0 or self.max_respawns < 0:
            raise ValueError(
                f"Supervision({self}): respawn_delay_s must be >= 0, backoff >= 1 and "
                "max_respawns >= 0."
            )

    def delay(self, respawns_in_a_row: int) -> float:
        """Seconds to wait before the respawn that follows ``respawns_in_a_row`` quick ones."""
        return self.respawn_delay_s * self.backoff**respawns_in_a_row

    def after_death(self, respawns_in_a_row: int) -> str:
        """``respawn``, ``stop_graph`` or ``leave_stopped`` for a node that just died."""
        if self.respawn and respawns_in_a_row < self.max_respawns:
            return "respawn"
        return "stop_graph" if self.required else "leave_stopped"


# The defaults (DESIGN.md "Supervision"): everything respawns; nothing's death takes the
# safety filter or the arm side down. The arm side and the filter are required: if they
# cannot be brought back the graph stops (their drivers' own stop is the last safe state).
SUPERVISION = {
    "sim_bridge": Supervision(
        required=True,
        respawn=True,
        respawn_delay_s=1.0,
        on_death="the arm side: joint states stop, the safety filter's state watchdog holds "
        "and the lifecycle manager keeps the filter's consumers inactive until the new "
        "bridge is active (a new bridge starts a new simulated episode)",
    ),
    "safety": Supervision(
        required=True,
        respawn=True,
        respawn_delay_s=0.5,
        standby=True,
        on_death="no filtered command reaches the arm (its controller holds the last one); "
        "the lifecycle manager logs an error, reports it on /diagnostics, deactivates the "
        "policy and activates it again only after the new filter is active",
    ),
    "policy": Supervision(
        required=False,
        respawn=True,
        respawn_delay_s=0.5,
        standby=True,
        on_death="actions stop: the filter's command watchdog holds the arm (braking within "
        "its limits); the lifecycle manager configures and activates the new policy, and "
        "the filter follows its fresh actions (or waits for ~/engage, see "
        "engage_after_command_loss)",
    ),
    "recorder": Supervision(
        required=False,
        respawn=True,
        respawn_delay_s=0.5,
        on_death="the running episode's bag stays as flushed (recover_bag reads it); the "
        "next episode records in the new recorder",
    ),
    "learner": Supervision(
        required=False,
        respawn=True,
        respawn_delay_s=1.0,
        on_death="a training round in progress is lost; its recorded episodes are not (the "
        "bags are the data plane); the running policy keeps running",
    ),
    "perception": Supervision(
        required=False,
        respawn=True,
        respawn_delay_s=0.5,
        on_death="/object/pose stops: the policy finds it stale and skips its ticks, and the "
        "safety filter holds the arm until the new node sees the marker again",
    ),
    "lifecycle_manager": Supervision(
        required=False,
        respawn=True,
        respawn_delay_s=0.5,
        on_death="nothing changes state; the new manager finds the nodes active and watches "
        "them again",
    ),
}
NO_RESPAWN = Supervision(required=True, respawn=False, on_death="the graph stops")


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """One node of the graph: what runs, under which name, with which parameters."""

    name: str
    executable: str
    module: str
    parameter_files: tuple[str, ...] = ()
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    remappings: tuple[tuple[str, str], ...] = ()
    lifecycle: bool = False
    description: str = ""
    supervision: Supervision = NO_RESPAWN


def _node(name: str, description: str, lifecycle: bool = False, **parameters: Any) -> NodeSpec:
    return NodeSpec(
        name=name,
        executable=name,
        module=f"simreal_ros.nodes.{name}",
        parameter_files=(f"{name}.yaml",),
        parameters=dict(parameters),
        lifecycle=lifecycle,
        description=description,
        supervision=SUPERVISION[name],
    )


# Launch argument -> (node, parameter, description). Each is declared once here; its
# default is the node's own (its typed config), so no default is written twice.
LAUNCH_ARGUMENTS = {
    "sim": [
        (
            "dynamics_profile",
            "sim_bridge",
            "profile",
            "sim dynamics: nominal, randomized, real_twin (the stand-in for the arm) or the "
            "path of a profile YAML",
        ),
    ],
    "common": [
        ("data_dir", "recorder", "data_dir", "where episode bags are written"),
        (
            "autostart",
            "lifecycle_manager",
            "autostart",
            "configure and activate the lifecycle nodes in order at start-up (false: call "
            "/lifecycle_manager/startup when ready)",
        ),
    ],
}


def launch_arguments(profile: str) -> list[tuple[str, str, str, str]]:
    """The (argument, node, parameter, description) rows a launch file of ``profile`` maps
    onto one node parameter each."""
    return LAUNCH_ARGUMENTS["common"] + LAUNCH_ARGUMENTS.get(profile, [])


def declared_launch_arguments(profile: str) -> list[str]:
    """Every argument the launch file of ``profile`` declares (launch_graph declares these)."""
    names = [*GRAPH_SETTINGS, *(row[0] for row in launch_arguments(profile))]
    names += ["use_sim_time", "check_arguments"]
    return names + (["robot_launch"] if profile == "real" else [])


@dataclasses.dataclass(frozen=True)
class GraphSetting:
    """One value for the whole graph, given to every node that takes it (``parameters``:
    node -> its parameter name), so no two nodes can disagree about it."""

    parameters: dict[str, str]
    default: str
    description: str


DEFAULT_TASK = "push"

# Where /object/pose comes from: the sim bridge's truth (privileged), or the perception
# node's marker pose from the camera (marker; on the real graph the robot's camera driver
# publishes the images, and its calibration is given as perception.extrinsic_file).
PERCEPTION = ("privileged", "marker")
# The sim bridge's settings under marker perception: the camera that sees the marker, at
# the policy's 20 Hz, and no privileged pose.
PERCEPTION_CAMERA = {
    "camera": True,
    "camera_name": SIM_CAMERA,
    "camera_width": SIM_CAMERA_SIZE[0],
    "camera_height": SIM_CAMERA_SIZE[1],
    "camera_rate_hz": 20.0,
    "publish_object_pose": False,
}


def policy_camera_settings(camera: Any, control_rate_hz: float) -> dict[str, Any]:
    """The sim bridge's settings for a camera policy (``camera``: its spec's ``CameraSpec``):
    the camera it was trained on, at its resolution, a frame per control tick (at most the
    bridge's highest camera rate). The privileged /object/pose stays on for the recorder."""
    from simreal_ros.config_schema import settings
    from simreal_ros.sim.bridge import SimBridgeConfig

    highest = settings(SimBridgeConfig)["camera_rate_hz"].metadata["high"]
    return {
        "camera": True,
        "camera_name": camera.camera_name,
        "camera_width": camera.width,
        "camera_height": camera.height,
        "camera_rate_hz": min(float(control_rate_hz), float(highest)),
    }


GRAPH_SETTINGS = {
    "robot": GraphSetting(
        {n: "robot" for n in ("sim_bridge", "safety", "policy", "recorder", "learner")},
        DEFAULT_ROBOT,
        "the arm: a shipped one (simreal_arm, panda) or the path of a robot directory or "
        "robot.yaml",
    ),
    "task": GraphSetting(
        {n: "task" for n in ("sim_bridge", "policy", "learner")}, DEFAULT_TASK, "push or reach"
    ),
    "checkpoint": GraphSetting(
        {"policy": "checkpoint", "learner": "checkpoint_dir"},
        "",
        "base policy checkpoint directory, run by the policy and fine-tuned by the learner "
        "(empty: the one shipped for the robot and task)",
    ),
}


def _config_class(node: str):
    from simreal_ros.episodes.config import RecorderConfig
    from simreal_ros.graph.bringup import LifecycleManagerConfig
    from simreal_ros.policy.config import PolicyNodeConfig
    from simreal_ros.sim.bridge import SimBridgeConfig

    return {
        "sim_bridge": SimBridgeConfig,
        "policy": PolicyNodeConfig,
        "recorder": RecorderConfig,
        "lifecycle_manager": LifecycleManagerConfig,
    }[node]


def launch_argument_default(node: NodeSpec, parameter: str) -> str:
    """A launch argument's default: what the graph sets, else the node config's default."""
    if parameter in node.parameters:
        value = node.parameters[parameter]
    else:
        fields = dataclasses.fields(_config_class(node.name))
        value = next(f for f in fields if f.name == parameter).default
    return str(value).lower() if isinstance(value, bool) else str(value)


def graph(
    profile: str,
    overrides: dict[str, dict[str, Any]] | None = None,
    robot: str | None = None,
    task: str | None = None,
    checkpoint: str = "",
    perception: str = "privileged",
    policy_camera: dict[str, Any] | None = None,
) -> list[NodeSpec]:
    """The nodes of ``profile`` in start order; ``overrides`` maps node -> parameters.

    ``robot`` (None: this process's arm), ``task`` (None: push) and ``checkpoint``
    (empty: the shipped one) reach every node that takes them (``GRAPH_SETTINGS``); a
    per-node override of any of them is refused. ``perception`` (``PERCEPTION``): marker
    adds the perception node, and in sim turns the bridge's workspace camera on and its
    privileged /object/pose off. ``policy_camera`` (``policy_camera_settings``): the policy
    runs a camera checkpoint, so in sim the bridge renders the camera it was trained on, and
    the recorder keeps the frames in every graph.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}.")
    if perception not in PERCEPTION:
        raise ValueError(
            f"unknown perception {perception!r}; choose one of: {', '.join(PERCEPTION)}."
        )
    marker = perception == "marker"
    if marker and policy_camera:
        raise ValueError(
            "--perception marker and a camera policy both need the sim bridge's one camera, "
            "at different resolutions; a camera policy reads the camera itself and needs no "
            "/object/pose: drop --perception marker."
        )
    from simreal_ros.robot.description import resolve_robot_path, selected_robot_path

    robot_path = selected_robot_path() if robot is None else resolve_robot_path(robot)
    graph_values = {
        "robot": str(robot_path),
        "task": task or DEFAULT_TASK,
        "checkpoint": str(checkpoint),
    }
    for node_name, parameters in (overrides or {}).items():
        for name, setting in GRAPH_SETTINGS.items():
            if setting.parameters.get(node_name) in parameters:
                raise ValueError(
                    f"{node_name}.{setting.parameters[node_name]} is the graph-level setting "
                    f"{name!r} (every node gets the same one); set it with --{name} "
                    f"(launch: {name}:=) instead."
                )
    source = SOURCE_BY_PROFILE[profile]
    nodes = []
    if profile == "sim":
        camera = PERCEPTION_CAMERA if marker else (policy_camera or {})
        nodes.append(
            _node(
                "sim_bridge",
                "MuJoCo arm and task; speaks the ros2_control topics",
                True,
                **camera,
            )
        )
    # In sim every node but the bridge runs on the bridge's /clock: messages are stamped in
    # sim time, and the sim may run faster or slower than the wall clock.
    clock = {"use_sim_time": True} if profile == "sim" else {}
    if marker:
        calibration = {}
        if profile == "sim":
            calibration = {"extrinsic_file": str(config_directory() / SIM_CAMERA_CALIBRATION)}
        nodes.append(
            _node(
                "perception",
                "the cube's pose on /object/pose from the camera's view of its marker",
                **clock,
                **calibration,
            )
        )
    nodes += [
        _node(
            "safety",
            "filters every command between the policy and the arm",
            True,
            # The simulated arm jumps to each episode's start pose; a physical one does not.
            # On a physical arm nothing moves until someone engages the filter; the sim
            # keeps moving at once (its filter starts engaged).
            **clock,
            **({"allow_resync": True} if profile == "sim" else {"require_engage": True}),
        ),
        _node(
            "policy",
            "runs the policy (numpy) at the control rate; hot-swaps adapters",
            True,
            **clock,
        ),
        _node(
            "recorder",
            "records one rosbag2 per episode",
            source=source,
            **clock,
            # A camera policy's bags keep its frames: what visual alignment learns from.
            **({"record_images": True} if policy_camera else {}),
        ),
        _node(
            "learner", "fine-tunes LoRA adapters from recorded episodes; screens in sim", **clock
        ),
    ]
    # Last: it brings the lifecycle nodes up in order once their services appear.
    nodes.append(
        _node(
            "lifecycle_manager",
            "configures and activates the lifecycle nodes in order (autostart)",
            node_names=[node.name for node in nodes if node.lifecycle],
            autostart=True,
        )
    )
    overrides = overrides or {}
    unknown = sorted(set(overrides) - {node.name for node in nodes})
    if unknown:
        raise ValueError(
            f"parameter overrides for node(s) not in the {profile!r} graph: "
            f"{', '.join(unknown)}; its nodes are: {', '.join(n.name for n in nodes)}."
        )
    return [
        dataclasses.replace(
            node,
            parameters={
                **node.parameters,
                **{
                    setting.parameters[node.name]: graph_values[name]
                    for name, setting in GRAPH_SETTINGS.items()
                    if node.name in setting.parameters
                },
                **overrides.get(node.name, {}),
            },
        )
        for node in nodes
    ]


def check_calibration(nodes: list[NodeSpec]) -> None:
    """Refuse a perception node without the camera's calibration (the sim graph gives the
    sim camera's; on the real graph only the user knows where the camera is)."""
    for node in nodes:
        if node.name == "perception" and not node.parameters.get("extrinsic_file"):
            raise ValueError(
                "the perception node needs the camera's calibration: give --set "
                "perception.extrinsic_file=PATH (a YAML with base_T_camera, "
                "docs/perception.md)."
            )


def select(nodes: list[NodeSpec], names: list[str] | None) -> list[NodeSpec]:
    """Keep only the named nodes (in graph order); refuse names the graph does not have.

    The lifecycle manager, when kept, manages only the kept lifecycle nodes; without it,
    each kept lifecycle node autostarts.
    """
    if not names:
        return nodes
    known = {node.name for node in nodes}
    missing = [name for name in names if name not in known]
    if missing:
        raise ValueError(
            f"no node named {', '.join(missing)} in this graph; its nodes are: "
            f"{', '.join(sorted(known))}."
        )
    kept = [node for node in nodes if node.name in names]
    lifecycle = [node.name for node in kept if node.lifecycle]
    if "lifecycle_manager" not in names:
        # Without the manager, each lifecycle node brings itself up.
        return [
            dataclasses.replace(node, parameters={**node.parameters, "autostart": True})
            if node.lifecycle
            else node
            for node in kept
        ]
    return [
        dataclasses.replace(node, parameters={**node.parameters, "node_names": lifecycle})
        if node.name == "lifecycle_manager"
        else node
        for node in kept
    ]


def without_respawn(nodes: list[NodeSpec]) -> list[NodeSpec]:
    """The nodes with respawning off: any death stops the graph (for debugging a crash)."""
    return [dataclasses.replace(node, supervision=NO_RESPAWN) for node in nodes]


def verbose(nodes: list[NodeSpec]) -> list[NodeSpec]:
    """The nodes with their throttled logs opened up (the safety filter's every change)."""
    return [
        dataclasses.replace(node, parameters={**node.parameters, "verbose_log": True})
        if node.name == "safety"
        else node
        for node in nodes
    ]


def config_directory() -> Path:
    """config/ of a source checkout, else the installed share/simreal_ros/config."""
    return resources.data_path("config")


def parameter_file_paths(node: NodeSpec, profile: str) -> list[Path]:
    """Parameter files that exist for ``node``: its own, then the profile's overrides."""
    directory = config_directory()
    paths = [directory / name for name in node.parameter_files]
    paths.append(directory / f"profile_{profile}.yaml")
    return [path for path in paths if path.is_file()]
