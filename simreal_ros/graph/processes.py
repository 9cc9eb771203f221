"""Start and stop the graph's node processes: environment, logs, clean shutdown.

Used by ``simreal up`` and by the graph tests, so what a test starts is what a user
starts. Plain Python: no rclpy.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from simreal_ros import resources
from simreal_ros.atomic_files import write_text_atomic

FASTDDS_PROFILE = Path(__file__).with_name("fastdds_profile.xml")
# The source checkout these modules run from; None when they run from an install.
PACKAGE_ROOT = resources.checkout_root()


def graph_environment(
    domain_id: int | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment for node processes: localhost discovery, fast announcements, UDP only.

    UDPv4 alone leaves nothing behind in /dev/shm when a process is killed.
    """
    env = dict(os.environ if base is None else base)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("FASTDDS_BUILTIN_TRANSPORTS", "UDPv4")
    env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(FASTDDS_PROFILE))
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    env["PYTHONUNBUFFERED"] = "1"
    if domain_id is not None:
        env["ROS_DOMAIN_ID"] = str(domain_id)
    # A source checkout runs its Python code from the checkout.
    if PACKAGE_ROOT is not None:
        paths = [str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(":") if p]
        env["PYTHONPATH"] = ":".join(dict.fromkeys(paths))
    return env


try:
    # Loaded here, in the parent: the child between fork and exec only calls prctl.
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _PRCTL = _LIBC.prctl if hasattr(_LIBC, "prctl") else None
except OSError:
    _PRCTL = None
_PR_SET_PDEATHSIG = 1


# Set in a standby process's environment: it waits in ``wait_for_handover`` until the
# runner writes HANDOVER to its stdin.
STANDBY_ENV = "SIMREAL_STANDBY"
HANDOVER = "go"

# Set by the runner in every node's environment: the folder where a node process reports
# its readiness, one file named by its pid (systemd's sd_notify idea, with files).
READY_DIR_ENV = "SIMREAL_READY_DIR"
STANDBY_READY = "standby"  # imports done, waiting for a handover
NODE_READY = "ready"  # the node is up (a lifecycle manager: every managed node active)


def notify_ready(state: str = NODE_READY) -> None:
    """In a node process: tell the runner that started it (if any) this process's state."""
    directory = os.environ.get(READY_DIR_ENV)
    if not directory:
        return
    # Readiness is for the runner's log and status only: never fail the node for it.
    with contextlib.suppress(OSError):
        write_text_atomic(Path(directory) / str(os.getpid()), state)


def reported_state(directory: Path, pid: int) -> str:
    """What process ``pid`` reported with ``notify_ready`` ("" when nothing yet)."""
    try:
        return (directory / str(pid)).read_text().strip()
    except OSError:
        return ""


def wait_for_handover() -> bool:
    """In a node process: if it was started as a standby, report that its imports are
    done and wait until the runner hands the node over to it. False when the runner went
    away instead (the process should exit)."""
    if os.environ.pop(STANDBY_ENV, None) != "1":  # not inherited by what the node starts
        return True
    notify_ready(STANDBY_READY)
    try:
        return sys.stdin.readline().strip() == HANDOVER
    except KeyboardInterrupt:  # the graph is stopping (Ctrl-C reaches every process group)
        return False


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, so no node outlives its runner."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


class NodeProcess:
    """One node as a child process in its own process group, its output prefixed."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log: TextIO | None = None,
        standby: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.lines: list[str] = []
        self._log = log
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            self.argv,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if standby else subprocess.DEVNULL,
            text=True,
            bufsize=1,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._reader = threading.Thread(target=self._pump, name=f"log-{name}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.rstrip("\n")
            with self._lock:
                self.lines.append(line)
            if self._log is not None:
                self._log.write(f"[{self.name}] {line}\n")
                self._log.flush()

    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_for_output(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return True
            if self.process.poll() is not None:
                self._reader.join(timeout=1.0)
                return text in self.output()
            time.sleep(0.02)
        return False

    def hand_over(self) -> bool:
        """Wake a standby process (``wait_for_handover``); False if it is gone."""
        if self.process.stdin is None or self.process.poll() is not None:
            return False
        try:
            self.process.stdin.write(HANDOVER + "\n")
            self.process.stdin.close()
        except OSError:
            return False
        return True

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = 5.0) -> int:
        """SIGINT (what Ctrl-C sends), then SIGTERM, then SIGKILL; returns the exit code."""
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            if self.process.poll() is not None:
                break
            self.kill(sig)
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        self._reader.join(timeout=1.0)
        return self.process.wait()


def python_module_argv(module: str, ros_args: Sequence[str] = ()) -> list[str]:
    argv = [sys.executable, "-m", module]
    if ros_args:
        argv += ["--ros-args", *ros_args]
    return argv
