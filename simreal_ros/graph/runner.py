"""Run a graph description as separate processes: the project's stand-in for `ros2 launch`.

Each node runs as ``python -m <module> --ros-args ...`` with the same parameter files and
overrides that the launch files pass. Logs stream with node-name prefixes. Ctrl-C stops
every node cleanly. When a node dies, its ``Supervision`` (graph description) decides:
respawn it after a delay, leave it stopped, or stop the graph, with an exit code that says
which node (see ``exit_code_for``). Every death and respawn is written to a status file
the lifecycle manager reads for /diagnostics (restart counts, last exit code, time).
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import yaml

from simreal_ros.atomic_files import write_json_atomic
from simreal_ros.graph.bringup import STARTUP_FAILED_EXIT_CODE
from simreal_ros.graph.description import NodeSpec, parameter_file_paths
from simreal_ros.graph.processes import (
    NODE_READY,
    READY_DIR_ENV,
    STANDBY_ENV,
    STANDBY_READY,
    NodeProcess,
    graph_environment,
    python_module_argv,
    reported_state,
)

# Exit codes of `simreal up`: 0 after Ctrl-C or a clean stop, NODE_EXIT_BASE + i when the
# i-th node of the graph (0-based, in start order) exited on its own, STARTUP_FAILED when a
# managed node never became active (the lifecycle manager exits with that code).
NODE_EXIT_BASE = 10
STARTUP_FAILED = STARTUP_FAILED_EXIT_CODE


# A node's new standby process starts this long after the last one took over (or after the
# graph started), so its imports do not compete with the nodes coming up.
STANDBY_AFTER_S = 5.0


# The line `simreal up` prints each time the whole graph becomes ready: every node reported
# itself up (a lifecycle manager once its nodes are active) and every standby its imports
# done. Wait for it, not for a node's own log, before judging the graph.
GRAPH_READY = "graph ready"


# The start of the last line `simreal up` prints, whatever stopped it (``stopped_line``).
GRAPH_STOPPED = "graph stopped"


def exit_code_for(index: int) -> int:
    return NODE_EXIT_BASE + index


def exit_status(code: int | None) -> str:
    """A node process's exit status in words: ``0``, ``1``, ``killed by SIGKILL``."""
    if code is None:
        return "not started"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return str(code)


# How long a node may take to stop after Ctrl-C before SIGTERM: a learner stopped while its
# session starts abandons that work, but its interpreter's teardown (torch) took 5-9 s on
# a loaded 2-core host.
STOP_GRACE_S = 10.0


def stopped_line(
    reason: str, names: Sequence[str], codes: dict[str, int], exit_code: int | None
) -> str:
    """The last line of `simreal up`: why the graph stopped, every node's exit status (in
    start order) and the exit code of `simreal up` itself (None: an error follows)."""
    statuses = ", ".join(f"{name} {exit_status(codes.get(name))}" for name in names)
    line = f"{GRAPH_STOPPED} ({reason}): {statuses or 'no nodes'}"
    return line if exit_code is None else f"{line}; exit code {exit_code}"


def ros_arguments(node: NodeSpec, profile: str, overrides_file: Path | None) -> list[str]:
    args = ["-r", f"__node:={node.name}"]
    for path in parameter_file_paths(node, profile):
        args += ["--params-file", str(path)]
    if overrides_file is not None:
        args += ["--params-file", str(overrides_file)]
    for source, target in node.remappings:
        args += ["-r", f"{source}:={target}"]
    return args


# The parameter of the lifecycle manager that names the runner's supervision status file.
STATUS_FILE_PARAMETER = "supervision_status_file"


@dataclasses.dataclass
class NodeRecord:
    """What the runner knows of one node's deaths and respawns."""

    restarts: int = 0
    in_a_row: int = 0  # respawns since the node last stayed up stable_after_s
    last_exit_code: int | None = None
    last_exit_time: float = 0.0  # wall clock (time.time()) of the last death
    started_at: float = 0.0  # monotonic
    respawn_at: float | None = None  # monotonic time of the scheduled respawn
    given_up: bool = False
    pid: int = 0


class GraphRunner:
    """Starts the nodes of a graph, watches them, respawns or stops them as each node's
    ``Supervision`` says, and stops them all together."""

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
        self.records = [NodeRecord() for _ in self.nodes]
        # Standby processes (Supervision.standby) by node index, and when to start the next.
        self.standby: dict[int, NodeProcess] = {}
        self._standby_due: dict[int, float] = {}
        self._workdir = tempfile.TemporaryDirectory(prefix="simreal-up-")
        self.status_file = Path(self._workdir.name) / "supervision.json"
        self.ready_dir = Path(self._workdir.name) / "ready"
        self.ready_dir.mkdir()
        self.env[READY_DIR_ENV] = str(self.ready_dir)
        self.ready = False
        self._reported_pids: set[tuple[int, str]] = set()  # (pid, state) once seen
        self.nodes = [
            dataclasses.replace(
                node,
                parameters={**node.parameters, STATUS_FILE_PARAMETER: str(self.status_file)},
            )
            if node.name == "lifecycle_manager"
            else node
            for node in self.nodes
        ]

    def _overrides_file(self, node: NodeSpec) -> Path | None:
        if not node.parameters:
            return None
        path = Path(self._workdir.name) / f"{node.name}.yaml"
        # Written with safe_dump and read by rcl's YAML parser: data only, never code.
        path.write_text(yaml.safe_dump({node.name: {"ros__parameters": node.parameters}}))
        return path

    def _spawn(self, index: int, standby: bool = False) -> NodeProcess:
        node = self.nodes[index]
        argv = python_module_argv(
            node.module, ros_arguments(node, self.profile, self._overrides_file(node))
        )
        env = {**self.env, STANDBY_ENV: "1"} if standby else self.env
        process = NodeProcess(node.name, argv, env, log=self.log, standby=standby)
        if not standby:
            self._started(index, process)
        return process

    def _started(self, index: int, process: NodeProcess) -> None:
        record = self.records[index]
        record.started_at, record.pid, record.respawn_at = (
            time.monotonic(),
            process.process.pid,
            None,
        )

    def start(self) -> None:
        self._write_status()
        for index, node in enumerate(self.nodes):
            process = self._spawn(index)
            self.processes.append(process)
            self._say(f"started {node.name} (pid {process.process.pid})")
            if node.supervision.standby and node.supervision.respawn:
                self._standby_due[index] = time.monotonic() + STANDBY_AFTER_S

    def _keep_standby(self, now: float) -> None:
        """Start each standby that is due; a standby that died is replaced later."""
        for index, due in list(self._standby_due.items()):
            if now >= due:
                del self._standby_due[index]
                self.standby[index] = spare = self._spawn(index, standby=True)
                self._say(f"standby for {self.nodes[index].name} (pid {spare.process.pid})")
        for index, spare in list(self.standby.items()):
            if spare.returncode is not None:
                del self.standby[index]
                spare.stop(timeout=1.0)
                self._standby_due[index] = now + STANDBY_AFTER_S

    def _respawn(self, index: int, now: float) -> tuple[NodeProcess, str]:
        """The node's next process: its standby, woken, else a cold start."""
        spare = self.standby.pop(index, None)
        if self.nodes[index].supervision.standby:
            self._standby_due[index] = now + STANDBY_AFTER_S
        if spare is not None and spare.hand_over():
            self._started(index, spare)
            return spare, "; from standby"
        if spare is not None:
            spare.stop(timeout=1.0)
        return self._spawn(index), ""

    def _reported(self, process: NodeProcess, state: str) -> bool:
        seen = (process.process.pid, state)
        if seen in self._reported_pids:
            return True
        if process.returncode is None and reported_state(self.ready_dir, seen[0]) == state:
            self._reported_pids.add(seen)
            return True
        return False

    def waiting_for(self) -> list[str]:
        """What the graph waits for before it is ready: nodes not up, standbys not
        started or still importing (empty when ready)."""
        waiting = []
        for index, node in enumerate(self.nodes):
            record = self.records[index]
            down = index >= len(self.processes) or record.respawn_at is not None
            if down or record.given_up or not self._reported(self.processes[index], NODE_READY):
                waiting.append(node.name)
            elif node.supervision.standby and node.supervision.respawn:
                spare = self.standby.get(index)
                if spare is None or not self._reported(spare, STANDBY_READY):
                    waiting.append(f"{node.name} standby")
        return waiting

    def _check_ready(self) -> bool:
        """Note a change of readiness (printing GRAPH_READY when it comes); True if it
        changed."""
        ready = not self.waiting_for()
        if ready == self.ready:
            return False
        self.ready = ready
        if ready:
            restarts = sum(record.restarts for record in self.records)
            again = f" (after {restarts} restart{'s' * (restarts != 1)})" if restarts else ""
            standbys = len(self.standby)
            self._say(
                f"{GRAPH_READY}: {len(self.nodes)} nodes up, {standbys} "
                f"standby{'s' * (standbys != 1)} waiting{again}"
            )
        return True

    def first_exited(self, ignore: int | None = None) -> int | None:
        """Index of a node process that has exited, if any (other than ``ignore``'s)."""
        for index, process in enumerate(self.processes):
            if process.returncode is not None and index != ignore:
                return index
        return None

    def supervise(self) -> int | None:
        """One pass: note new deaths, respawn what is due. Returns the index of a node
        whose death stops the graph, else None."""
        now = time.monotonic()
        changed = False
        self._keep_standby(now)
        for index, process in enumerate(self.processes):
            record, node = self.records[index], self.nodes[index]
            if process.returncode is None or record.given_up:
                continue
            policy = node.supervision
            if record.respawn_at is None:  # a death not handled yet
                changed = True
                process.stop(timeout=1.0)  # reap it and its process group
                record.last_exit_code = process.returncode
                record.last_exit_time = time.time()
                if now - record.started_at >= policy.stable_after_s:
                    record.in_a_row = 0
                decision = policy.after_death(record.in_a_row)
                what = f"node '{node.name}' exited with code {process.returncode}"
                if process.returncode == STARTUP_FAILED:
                    self._say(f"{what}: a managed node never became active; stopping the graph")
                    self._write_status()
                    return index
                if decision == "respawn":
                    delay = policy.delay(record.in_a_row)
                    record.respawn_at = now + delay
                    self._say(
                        f"{what}; respawning it in {delay:g} s (respawn "
                        f"{record.in_a_row + 1} of at most {policy.max_respawns} in a row)"
                    )
                elif decision == "stop_graph":
                    self._say(f"{what}; it is required and not respawned: stopping the graph")
                    self._write_status()
                    return index
                else:
                    record.given_up = True
                    self._say(f"{what}; not respawned: it stays stopped, the graph runs on")
            elif now >= record.respawn_at:
                changed = True
                record.restarts += 1
                record.in_a_row += 1
                self.processes[index], how = self._respawn(index, now)
                self._say(
                    f"respawned {node.name} (pid {record.pid}; restart {record.restarts}{how})"
                )
        if self._check_ready() or changed:
            self._write_status()
        return None

    def status(self) -> dict:
        """Per node: pid, restarts, last exit code and time, and whether it runs."""
        nodes = {}
        for index, node in enumerate(self.nodes):
            record = self.records[index]
            process = self.processes[index] if index < len(self.processes) else None
            if record.given_up:
                state = "stopped"
            elif record.respawn_at is not None:
                state = "respawning"
            else:
                state = "running" if process is not None else "starting"
            nodes[node.name] = {
                "pid": record.pid,
                "state": state,
                "restarts": record.restarts,
                "last_exit_code": record.last_exit_code,
                "last_exit_time": record.last_exit_time,
            }
        return {"written_at": time.time(), "ready": self.ready, "nodes": nodes}

    def _write_status(self) -> None:
        try:
            write_json_atomic(self.status_file, self.status())
        except OSError as error:  # diagnostics only: never stop supervising for it
            self._say(f"could not write {self.status_file}: {error}")

    def stop(self) -> dict[str, int]:
        codes = {}
        for spare in self.standby.values():
            spare.stop(timeout=1.0)
        self.standby.clear()
        # Stop in reverse start order: consumers first, the arm's side last.
        for process in reversed(self.processes):
            codes[process.name] = process.stop(timeout=STOP_GRACE_S)
        self._workdir.cleanup()
        return codes

    def run(self, duration: float | None = None) -> int:
        """Run until Ctrl-C/SIGTERM, ``duration`` seconds, or a death that stops the graph.

        The last line says why the graph stopped, each node's exit status and the exit
        code (``stopped_line``): 0 after a stop the user asked for, whatever the nodes
        returned while they stopped."""
        stop_requested = []

        def request_stop(signum, frame):
            stop_requested.append(signum)

        previous = {
            sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        exit_code: int | None = None  # None while an error is on its way out
        reason = "an error in simreal up, below"
        try:
            self.start()
            deadline = None if duration is None else time.monotonic() + duration
            exit_code = 0
            while not stop_requested:
                fatal = self.supervise()
                if fatal is not None:
                    failed_startup = self.records[fatal].last_exit_code == STARTUP_FAILED
                    exit_code = STARTUP_FAILED if failed_startup else exit_code_for(fatal)
                    reason = f"node '{self.nodes[fatal].name}' died"
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    reason = f"--duration {duration:g} s reached"
                    break
                time.sleep(0.05)
            else:
                reason = f"{signal.Signals(stop_requested[0]).name} from the user"
        finally:
            codes = self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._say(stopped_line(reason, [n.name for n in self.nodes], codes, exit_code))
        return exit_code

    def _say(self, text: str) -> None:
        if self.log is not None:
            self.log.write(f"[simreal up] {text}\n")
            self.log.flush()
