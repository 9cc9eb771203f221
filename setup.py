"""Python metadata for simreal_ros.

The package is built as ament_cmake (see CMakeLists.txt): colcon generates the interfaces
and installs this Python package beside them. This file lists the same Python package
and console entry points for tools that read setuptools metadata. Do not
`pip install -e .` it into the development venv: pip would delete the cmake-installed
generated interfaces of the same name.
"""

from setuptools import find_packages, setup

NODES = (
    "sim_bridge",
    "safety",
    "policy",
    "recorder",
    "learner",
    "trial_runner",
    "stand_in_arm",
    "perception",
)

setup(
    name="simreal_ros",
    version="0.1.0",
    packages=find_packages(include=["simreal_ros", "simreal_ros.*"]),
    package_data={
        "simreal_ros": ["**/*.xml", "**/*.yaml", "**/*.json", "**/*.safetensors", "**/*.png"]
    },
    python_requires=">=3.11",
    entry_points={
        "console_scripts": [
            "simreal = simreal_ros.cli.main:main",
            *(f"{node} = simreal_ros.nodes.{node}:main" for node in NODES),
        ]
    },
)
