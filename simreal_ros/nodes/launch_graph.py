"""Turn the graph description into a `ros2 launch` description (needs launch_ros).

Both launch files are thin calls of ``launch_description(profile)``; what they start is
``simreal_ros.graph.description.graph(profile)``, the same list `simreal up` starts.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.conditions import IfCondition
from launch.launch_description_sources import AnyLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue

from simreal_ros.graph.description import (
    GRAPH_SETTINGS,
    LAUNCH_ARGUMENTS,
    graph,
    launch_argument_default,
    parameter_file_paths,
)


def launch_description(profile: str) -> LaunchDescription:
    actions = [
        DeclareLaunchArgument(
            "use_sim_time",
            default_value="true" if profile == "sim" else "false",
            description="run node clocks on /clock (the sim bridge publishes it)",
        ),
    ]
    arguments = LAUNCH_ARGUMENTS["common"] + LAUNCH_ARGUMENTS.get(profile, [])
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
            )
        )
    return LaunchDescription(actions)
