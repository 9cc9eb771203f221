"""Run a graph description as separate processes: the project's stand-in for `ros2 launch`.

Each node runs as ``python -m <module> --ros-args ...`` with the same parameter files and
overrides that the launch files pass. Logs stream with node-name prefixes. Ctrl-C stops
every node cleanly; when one node dies, the others are stopped and the exit code says
which one (see ``exit_code_for``).
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import yaml

from simreal_ros.graph.description import NodeSpec, parameter_file_paths
from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv

# Exit codes of `simreal up`: 0 after Ctrl-C or a clean stop, NODE_EXIT_BASE + i when the
# i-th node of the graph (0-based, in start order) exited on its own.
NODE_EXIT_BASE = 10


def exit_code_for(index: int) -> int:
    return NODE_EXIT_BASE + index


def ros_arguments(node: NodeSpec, profile: str, overrides_file: Path | None) -> list[str]:
    args = ["-r", f"__node:={node.name}"]
    for path in parameter_file_paths(node, profile):
        args += ["--params-file", str(path)]
    if overrides_file is not None:
        args += ["--params-file", str(overrides_file)]
    for source, target in node.remappings:
        args += ["-r", f"{source}:={target}"]
    return args


class GraphRunner:
    """Starts the nodes of a graph, watches them, and stops them all together."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        profile: str,
        domain_id: int | None = None,
        log: TextIO | None = sys.stdout,
    ) -> None:
        self.nodes = list(nodes)
        self.profile = profile
        self.env = graph_environment(domain_id)
        self.log = log
        self.processes: list[NodeProcess] = []
        self._workdir = tempfile.TemporaryDirectory(prefix="simreal-up-")

    def _overrides_file(self, node: NodeSpec) -> Path | None:
        if not node.parameters:
            return None
        path = Path(self._workdir.name) / f"{node.name}.yaml"
        # Written with safe_dump and read by rcl's YAML parser: data only, never code.
        path.write_text(yaml.safe_dump({node.name: {"ros__parameters": node.parameters}}))
        return path

    def start(self) -> None:
        for node in self.nodes:
            argv = python_module_argv(
                node.module, ros_arguments(node, self.profile, self._overrides_file(node))
            )
            process = NodeProcess(node.name, argv, self.env, log=self.log)
            self.processes.append(process)
            self._say(f"started {node.name} (pid {process.process.pid})")

    def first_exited(self) -> int | None:
        """Index of a node process that has exited, if any."""
        for index, process in enumerate(self.processes):
            if process.returncode is not None:
                return index
        return None

    def stop(self) -> dict[str, int]:
        codes = {}
        # Stop in reverse start order: consumers first, the arm's side last.
        for process in reversed(self.processes):
            codes[process.name] = process.stop()
        self._workdir.cleanup()
        return codes

    def run(self, duration: float | None = None) -> int:
        """Run until Ctrl-C/SIGTERM, ``duration`` seconds, or a node exits."""
        stop_requested = []

        def request_stop(signum, frame):
            stop_requested.append(signum)

        previous = {
            sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        exit_code = 0
        try:
            self.start()
            deadline = None if duration is None else time.monotonic() + duration
            while not stop_requested:
                died = self.first_exited()
                if died is not None:
                    process = self.processes[died]
                    self._say(
                        f"node '{process.name}' exited with code {process.returncode}; "
                        "stopping the graph"
                    )
                    exit_code = exit_code_for(died)
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return exit_code

    def _say(self, text: str) -> None:
        if self.log is not None:
            self.log.write(f"[simreal up] {text}\n")
            self.log.flush()
