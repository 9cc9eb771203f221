"""The simulated graph: sim bridge (MuJoCo arm) + safety + policy + recorder + learner.

    ros2 launch simreal_ros sim.launch.py dynamics_profile:=real_twin

The nodes come from simreal_ros.graph.description.graph("sim"); `simreal up --graph sim`
starts the same list without ros2 launch.
"""

from simreal_ros.nodes.launch_graph import launch_description


def generate_launch_description():
    return launch_description("sim")
