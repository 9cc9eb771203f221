"""The graph description both launch files and `simreal up` read."""

from pathlib import Path

import pytest
import yaml

from simreal_ros.cli.up import parse_override
from simreal_ros.graph import description
from simreal_ros.graph.runner import ros_arguments

ROOT = Path(__file__).resolve().parents[2]


def test_real_profile_differs_from_sim_only_by_the_sim_bridge():
    sim = {node.name: node for node in description.graph("sim")}
    real = {node.name: node for node in description.graph("real")}
    assert set(sim) - set(real) == {"sim_bridge"}
    assert set(real) <= set(sim)
    for name, node in real.items():
        other = sim[name]
        assert (node.executable, node.module, node.remappings) == (
            other.executable,
            other.module,
            other.remappings,
        )
        # Only the data-source label, the clock, the resync after a sim reset (the
        # simulated arm jumps to each start pose) and engaging (a physical arm is held
        # until someone engages the filter) may differ between the profiles.
        differing = {
            key
            for key in {**node.parameters, **other.parameters}
            if node.parameters.get(key) != other.parameters.get(key)
        }
        # The lifecycle manager's list differs by the sim bridge alone.
        allowed = {"source", "use_sim_time", "allow_resync", "require_engage", "node_names"}
        assert differing <= allowed, (
            name,
            differing,
        )
        if "node_names" in differing:
            assert other.parameters["node_names"] == ["sim_bridge", *node.parameters["node_names"]]
        if name != "lifecycle_manager":
            assert other.parameters.get("use_sim_time") is True
            assert "use_sim_time" not in node.parameters


def test_the_lifecycle_manager_brings_up_the_lifecycle_nodes_and_every_node_has_a_module():
    for profile in description.PROFILES:
        nodes = description.graph(profile)
        manager = nodes[-1]
        assert manager.name == "lifecycle_manager" and manager.parameters["autostart"] is True
        lifecycle = [node.name for node in nodes if node.lifecycle]
        assert manager.parameters["node_names"] == lifecycle
        assert lifecycle == (["sim_bridge"] if profile == "sim" else []) + ["safety", "policy"]
        for node in nodes:
            script = ROOT / "scripts" / node.executable
            assert script.is_file(), f"no scripts/{node.executable} for node {node.name}"
            assert f"from {node.module} import main" in script.read_text()
            assert node.module == f"simreal_ros.nodes.{node.name}"
            # Nodes do not bring themselves up in the graph: the manager does, in order.
            assert "autostart" not in node.parameters or node is manager
    selected = description.select(description.graph("sim"), ["safety", "lifecycle_manager"])
    assert selected[-1].parameters["node_names"] == ["safety"]
    assert "autostart" not in selected[0].parameters
    (alone,) = description.select(description.graph("sim"), ["sim_bridge"])
    assert alone.parameters["autostart"] is True  # no manager: it brings itself up


def test_unknown_profile_and_unknown_override_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="unknown profile 'lab'; choose one of: sim, real"):
        description.graph("lab")
    with pytest.raises(ValueError, match="not in the 'real' graph: sim_bridge"):
        description.graph("real", {"sim_bridge": {"profile": "nominal"}})
    with pytest.raises(ValueError, match="no node named polcy"):
        description.select(description.graph("sim"), ["polcy"])


def test_overrides_reach_the_node_parameters_and_ros_arguments(tmp_path):
    nodes = description.graph("sim", {"safety": {"rate_hz": 50.0}})
    safety = next(node for node in nodes if node.name == "safety")
    assert safety.parameters["rate_hz"] == 50.0
    overrides = tmp_path / "o.yaml"
    overrides.write_text(yaml.safe_dump({"safety": {"ros__parameters": safety.parameters}}))
    args = ros_arguments(safety, "sim", overrides)
    assert args[:2] == ["-r", "__node:=safety"]
    assert args[-2:] == ["--params-file", str(overrides)]


def test_parse_override_reads_yaml_values_and_refuses_bad_form():
    assert parse_override("safety.rate_hz=100") == ("safety", "rate_hz", 100)
    assert parse_override("sim_bridge.camera=true") == ("sim_bridge", "camera", True)
    assert parse_override("policy.checkpoint=a/b") == ("policy", "checkpoint", "a/b")
    with pytest.raises(ValueError, match=r"NODE\.PARAMETER=VALUE"):
        parse_override("rate_hz=100")


def test_launch_files_are_thin_readings_of_the_description():
    for profile in description.PROFILES:
        text = (ROOT / "launch" / f"{profile}.launch.py").read_text()
        compile(text, f"{profile}.launch.py", "exec")
        assert f'launch_description("{profile}")' in text


def test_only_the_simulated_arm_lets_the_safety_filter_resync():
    sim = {node.name: node for node in description.graph("sim")}
    real = {node.name: node for node in description.graph("real")}
    assert sim["safety"].parameters.get("allow_resync") is True
    assert "allow_resync" not in real["safety"].parameters


def test_robot_task_and_checkpoint_reach_every_node_that_takes_them_from_one_place(tmp_path):
    from simreal_ros.robot.description import resolve_robot_path

    for profile in description.PROFILES:
        nodes = {n.name: n for n in description.graph(profile, robot="panda", task="reach")}
        for name, setting in description.GRAPH_SETTINGS.items():
            takers = [n for n in setting.parameters if n in nodes]
            assert takers, name
            values = {nodes[n].parameters[setting.parameters[n]] for n in takers}
            assert len(values) == 1, (profile, name, values)  # one value, no disagreement
        assert nodes["policy"].parameters["robot"] == str(resolve_robot_path("panda"))
        assert nodes["learner"].parameters["task"] == "reach"
        assert "robot" not in nodes["lifecycle_manager"].parameters
    nodes = {n.name: n for n in description.graph("sim", checkpoint=str(tmp_path))}
    assert nodes["policy"].parameters["checkpoint"] == str(tmp_path)
    assert nodes["learner"].parameters["checkpoint_dir"] == str(tmp_path)
    for node, parameter in (
        ("policy", "robot"),
        ("sim_bridge", "task"),
        ("learner", "checkpoint_dir"),
    ):
        with pytest.raises(ValueError, match="graph-level setting"):
            description.graph("sim", {node: {parameter: "x"}})
    with pytest.raises(ValueError, match="no such robot"):
        description.graph("sim", robot=str(tmp_path / "nothing"))


def test_every_robot_node_declares_the_graph_robot():
    # A node that touches the arm must take it from the graph, never assume its own.
    takers = description.GRAPH_SETTINGS["robot"].parameters
    for node in takers:
        source = (ROOT / "simreal_ros" / "nodes" / f"{node}.py").read_text()
        assert "declare_robot(self)" in source, node


def test_marker_perception_adds_the_node_turns_the_camera_on_and_the_truth_off(capsys):
    from simreal_ros.cli.main import main
    from simreal_ros.perception import SIM_CAMERA
    from simreal_ros.settings_check import check_graph

    assert "perception" not in {node.name for node in description.graph("sim")}
    nodes = description.graph("sim", perception="marker")
    by_name = {node.name: node for node in nodes}
    bridge, perception = by_name["sim_bridge"].parameters, by_name["perception"].parameters
    assert bridge["camera"] is True and bridge["camera_name"] == SIM_CAMERA
    assert bridge["publish_object_pose"] is False
    assert perception["use_sim_time"] is True and Path(perception["extrinsic_file"]).is_file()
    script = ROOT / "scripts" / "perception"
    assert "from simreal_ros.nodes.perception import main" in script.read_text()
    check_graph(nodes, "sim", {})  # every value is one the nodes accept
    description.check_calibration(nodes)
    # On the robot only the user knows where the camera is.
    real = description.graph("real", perception="marker")
    with pytest.raises(ValueError, match=r"give --set perception\.extrinsic_file=PATH"):
        description.check_calibration(real)
    given = {"perception": {"extrinsic_file": "camera.yaml"}}
    description.check_calibration(description.graph("real", given, perception="marker"))
    with pytest.raises(ValueError, match="unknown perception 'aruco'; choose one of"):
        description.graph("sim", perception="aruco")
    assert main(["up", "--perception", "marker", "--list"]) == 0
    assert "perception" in capsys.readouterr().out
    assert main(["up", "--set", "perception.marker_size=0.04", "--list"]) == 2
    assert "no node 'perception'" in capsys.readouterr().err  # not in the privileged graph
