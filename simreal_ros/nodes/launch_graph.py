"""Turn the graph description into a `ros2 launch` description (needs launch_ros).

Both launch files are thin calls of ``launch_description(profile)``; what they start is
``simreal_ros.graph.description.graph(profile)``, the same list `simreal up` starts.
Each node's ``Supervision`` becomes ``respawn``, ``respawn_delay`` and
``respawn_max_retries`` (ros2 launch waits the same delay every time: it has no backoff)
and an ``on_exit`` that logs the death and, for a required node whose respawns are spent
(or that does not respawn), shuts the launch down.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    IncludeLaunchDescription,
    LogInfo,
    OpaqueFunction,
    Shutdown,
)
from launch.conditions import IfCondition
from launch.launch_description_sources import AnyLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue

from simreal_ros.graph.description import (
    GRAPH_SETTINGS,
    graph,
    launch_argument_default,
    launch_arguments,
    parameter_file_paths,
)
from simreal_ros.settings_check import check_launch_argv


class OnNodeExit:
    """``on_exit`` of one node: says what its death means; once a required node will not be
    respawned again (``respawn_max_retries`` spent, or no respawn), shuts the launch down."""

    def __init__(self, spec) -> None:
        self.spec = spec
        self.exits = 0

    def __call__(self, event, context):
        self.exits += 1
        policy = self.spec.supervision
        respawns_left = policy.respawn and self.exits <= policy.max_respawns
        what = f"node '{self.spec.name}' exited with code {event.returncode}"
        if respawns_left:
            return [LogInfo(msg=f"{what}; respawning it ({policy.on_death})")]
        if policy.required:
            return [Shutdown(reason=f"{what}; it is required and not respawned again")]
        return [LogInfo(msg=f"{what}; not respawned again: it stays stopped")]


def supervision_arguments(spec) -> dict:
    """The launch_ros ``Node`` arguments that express ``spec.supervision``."""
    policy = spec.supervision
    return {
        "respawn": policy.respawn,
        "respawn_delay": policy.respawn_delay_s,
        "respawn_max_retries": policy.max_respawns,
        "on_exit": OnNodeExit(spec),
    }


def check_given_arguments(context, profile: str) -> list:
    """First action: the command line's ``name:=value`` words (``context.argv``) are checked
    before any node starts; ros2 launch itself ignores an undeclared name. A parent launch
    file that includes this one, with arguments of its own, passes check_arguments:=false."""
    if context.launch_configurations.get("check_arguments", "true").lower() != "false":
        check_launch_argv(context.argv, profile)
    return []


def launch_description(profile: str) -> LaunchDescription:
    actions = [
        OpaqueFunction(function=check_given_arguments, args=[profile]),
        DeclareLaunchArgument(
            "use_sim_time",
            default_value="true" if profile == "sim" else "false",
            description="run node clocks on /clock (the sim bridge publishes it)",
        ),
        DeclareLaunchArgument(
            "check_arguments",
            default_value="true",
            description="refuse an undeclared name:= on the command line (false: when "
            "included by a launch file with arguments of its own)",
        ),
    ]
    arguments = launch_arguments(profile)
    specs = {spec.name: spec for spec in graph(profile)}
    for name, setting in GRAPH_SETTINGS.items():
        actions.append(
            DeclareLaunchArgument(
                name, default_value=setting.default, description=setting.description
            )
        )
    for name, node, parameter, description in arguments:
        default = launch_argument_default(specs[node], parameter)
        actions.append(DeclareLaunchArgument(name, default_value=default, description=description))
    if profile == "real":
        actions.append(
            DeclareLaunchArgument(
                "robot_launch",
                default_value="",
                description="the robot's ros2_control bringup launch file (drivers, "
                "joint_state_broadcaster, forward_position_controller)",
            )
        )
        actions.append(
            IncludeLaunchDescription(
                AnyLaunchDescriptionSource(LaunchConfiguration("robot_launch")),
                condition=IfCondition(
                    PythonExpression(["'", LaunchConfiguration("robot_launch"), "' != ''"])
                ),
            )
        )

    for spec in graph(profile):
        parameters: list = [str(path) for path in parameter_file_paths(spec, profile)]
        inline = dict(spec.parameters)
        if "use_sim_time" in inline:
            inline["use_sim_time"] = ParameterValue(
                LaunchConfiguration("use_sim_time"), value_type=bool
            )
        for name, setting in GRAPH_SETTINGS.items():
            if spec.name in setting.parameters:  # one argument for every node taking it
                inline[setting.parameters[spec.name]] = LaunchConfiguration(name)
        for name, node, parameter, _description in arguments:
            if node == spec.name:
                value = LaunchConfiguration(name)
                is_bool = isinstance(spec.parameters.get(parameter), bool)
                inline[parameter] = ParameterValue(value, value_type=bool) if is_bool else value
        parameters.append(inline)
        node_class = LifecycleNode if spec.lifecycle else Node
        actions.append(
            node_class(
                package="simreal_ros",
                namespace="",
                executable=spec.executable,
                name=spec.name,
                parameters=parameters,
                remappings=list(spec.remappings),
                output="screen",
                emulate_tty=True,
                **supervision_arguments(spec),
            )
        )
    return LaunchDescription(actions)
