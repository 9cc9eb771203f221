"""The graph on a physical arm: the robot's ros2_control drivers replace the sim bridge.

    ros2 launch simreal_ros real.launch.py robot_launch:=/path/to/robot_bringup.launch.py

Every other node, topic and parameter is the same as in sim.launch.py
(simreal_ros.graph.description.graph("real")).
"""

from simreal_ros.nodes.launch_graph import launch_description


def generate_launch_description():
    return launch_description("real")
