"""The executor backends: serial, local spawned processes, Ray (see the package docstring)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

EXECUTOR_KINDS = ("local", "ray", "serial")
# A progress bar appears only for work that lasts longer than this.
PROGRESS_DELAY_S = 10.0
# How often a task whose worker died is run again before its item counts as failed.
DEFAULT_MAX_RETRIES = 2

OnResult = Callable[[int, Any], None]


class SimExecutorError(RuntimeError):
    """Items of a map failed because their workers were lost (not because ``fn`` raised).

    ``results``: every item's result in item order, ``None`` for the failed ones;
    ``failed``: the failed items' indices; ``causes``: one error per failed index.
    """

    def __init__(
        self,
        message: str,
        results: Sequence[Any] = (),
        failed: Sequence[int] = (),
        causes: Sequence[BaseException] = (),
    ) -> None:
        super().__init__(message)
        self.results = list(results)
        self.failed = list(failed)
        self.causes = list(causes)

    @property
    def completed(self) -> dict[int, Any]:
        """The results that came back, by item index."""
        failed = set(self.failed)
        return {i: r for i, r in enumerate(self.results) if i not in failed}


@runtime_checkable
class SimExecutor(Protocol):
    """Runs sim work; a context manager that closes itself on exit."""

    workers: int
    kind: str

    def map(
        self,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        *,
        progress: str | None = None,
        on_result: OnResult | None = None,
    ) -> list:
        """``fn(item)`` for every item, results in item order. ``progress``: the label of a
        tqdm bar on stderr (shown once the work lasts over ``PROGRESS_DELAY_S``).
        ``on_result(index, result)``: called in the caller's process as each arrives."""

    def close(self) -> None:
        """Release the workers (and a Ray instance this executor started)."""

    def __enter__(self) -> SimExecutor: ...

    def __exit__(self, *exc: object) -> None: ...


def split_evenly(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """``items`` dealt into at most ``parts`` non-empty lists (item i into list i % parts)."""
    parts = max(1, min(int(parts), len(items)))
    return [list(items[i::parts]) for i in range(parts) if items[i::parts]]


@dataclasses.dataclass(frozen=True)
class WorkerContext:
    """What a worker takes over from the caller before it runs an item: the caller's arm
    (a shipped arm by name, so a cluster node with its own checkout finds it)."""

    robot: str

    @classmethod
    def of_caller(cls) -> WorkerContext:
        from simreal_ros.robot.description import robot_reference, selected_robot_path

        return cls(robot=robot_reference(selected_robot_path()))

    def apply(self) -> None:
        import torch

        from simreal_ros.robot.description import select_robot

        torch.set_num_threads(1)
        select_robot(self.robot, replace=True)  # a reused worker may have run another arm


def run_item(fn: Callable[[Any], Any], item: Any, context: WorkerContext) -> Any:
    """One item in a worker process (local pool or Ray task)."""
    context.apply()
    return fn(item)


@contextmanager
def _progress_bar(label: str | None, total: int):
    if label is None:
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, delay=PROGRESS_DELAY_S, file=sys.stderr, unit="item")
    try:
        yield bar
    finally:
        bar.close()


class _Base:
    kind = ""
    workers = 1

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, workers={self.workers})"


def _serial_map(fn, items, progress, on_result) -> list:
    results = []
    with _progress_bar(progress, len(items)) as bar:
        for index, item in enumerate(items):
            value = fn(item)
            results.append(value)
            if bar is not None:
                bar.update()
            if on_result is not None:
                on_result(index, value)
    return results


class SerialExecutor(_Base):
    """Every item in the caller's process, in order."""

    kind = "serial"

    def __init__(self) -> None:
        self.workers = 1

    def map(self, fn, items, *, progress=None, on_result=None) -> list:
        return _serial_map(fn, list(items), progress, on_result)


class LocalExecutor(_Base):
    """A spawn-context process pool, kept for the executor's life (``workers=1``: no pool,
    the caller's process). A pool broken by a dead worker is replaced and the unfinished
    items run again, up to ``max_retries`` times."""

    kind = "local"

    def __init__(self, workers: int | None = None, max_retries: int = DEFAULT_MAX_RETRIES):
        self.workers = _check_workers(workers, os.cpu_count() or 1)
        self.max_retries = _check_retries(max_retries)
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn, items, *, progress=None, on_result=None) -> list:
        items = list(items)
        if self.workers == 1:
            return _serial_map(fn, items, progress, on_result)
        context = WorkerContext.of_caller()
        results: list[Any] = [None] * len(items)
        pending = set(range(len(items)))
        broken: list[BaseException] = []
        with _progress_bar(progress, len(items)) as bar:
            for _attempt in range(self.max_retries + 1):
                if not pending:
                    break
                if self._pool is None:
                    self._pool = ProcessPoolExecutor(
                        self.workers, mp_context=multiprocessing.get_context("spawn")
                    )
                futures = {
                    self._pool.submit(run_item, fn, items[i], context): i for i in sorted(pending)
                }
                broken.clear()
                try:
                    waiting = set(futures)
                    while waiting:
                        done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
                        for future in sorted(done, key=futures.get):
                            index = futures[future]
                            try:
                                value = future.result()
                            except BrokenProcessPool as error:
                                broken.append(error)
                                continue
                            results[index] = value
                            pending.discard(index)
                            if bar is not None:
                                bar.update()
                            if on_result is not None:
                                on_result(index, value)
                except BaseException as error:
                    for future in futures:
                        future.cancel()
                    if not isinstance(error, Exception):  # Ctrl-C: stop the workers too
                        self.close()
                    raise
                if broken:  # a worker died: this pool is unusable, start another
                    self._discard_pool()
        if pending:
            raise _lost_items_error(
                "local", results, sorted(pending), broken, self.max_retries,
                "a worker process died (killed, or out of memory); free memory or lower "
                "--workers and rerun",
            )  # fmt: skip
        return results

    def _discard_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        self._discard_pool()


class RayExecutor(_Base):
    """Ray tasks, one item each (``num_cpus=1``). Joins the cluster at ``address``, or
    starts a local instance with ``workers`` CPUs (stopped again by ``close``).
    ``init_options``: more ``ray.init`` keywords (e.g. a ``_temp_dir``)."""

    kind = "ray"

    def __init__(
        self,
        workers: int | None = None,
        address: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        if workers is not None:
            _check_workers(workers, 1)
        self.max_retries = _check_retries(max_retries)
        self.address = address
        try:
            import ray
        except ImportError as error:
            raise SimExecutorError(
                "the ray executor needs Ray: pip install -r requirements.txt (it pins ray), "
                "or use --executor local."
            ) from error
        self._ray = ray
        self._owns_ray = False
        if address:
            _check_reachable(address)
        if not ray.is_initialized():  # else: this process's Ray connection serves
            options = {"log_to_driver": False, **dict(init_options or {})}
            if address:
                options["address"] = address
            else:
                options["address"] = "local"  # a new instance, never a `ray start` one
                options.setdefault("num_cpus", workers or os.cpu_count() or 1)
                options.setdefault("include_dashboard", False)
                # Workers import what the caller imports, as spawned processes do.
                options.setdefault("runtime_env", {"env_vars": {"PYTHONPATH": _import_path()}})
            try:
                ray.init(**options)
            except Exception as error:  # Ray raises several kinds; one clear message
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise SimExecutorError(
                    f"could not start or join {where}: {error}. Check `ray status` on the "
                    "head node and the address (`ray start --head` prints it), or use "
                    "--executor local."
                ) from error
            self._owns_ray = True
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, min(int(workers), cluster_cpus) if workers else cluster_cpus)
        self._task = ray.remote(num_cpus=1)(run_item)

    def map(self, fn, items, *, progress=None, on_result=None) -> list:
        ray = self._ray
        items = list(items)
        if not items:
            return []
        context = WorkerContext.of_caller()
        fn_ref = ray.put(fn)  # shipped once, not once per item
        task = self._task.options(max_retries=self.max_retries)
        refs = {task.remote(fn_ref, item, context): i for i, item in enumerate(items)}
        results: list[Any] = [None] * len(items)
        failed: dict[int, BaseException] = {}
        waiting = list(refs)
        with _progress_bar(progress, len(items)) as bar:
            try:
                while waiting:
                    done, waiting = ray.wait(waiting, num_returns=1)
                    for ref in done:
                        index = refs[ref]
                        try:
                            value = ray.get(ref)
                        except ray.exceptions.RayTaskError as error:  # fn itself raised
                            cause = getattr(error, "cause", None)
                            if isinstance(cause, Exception):
                                raise cause from error  # fn's own exception and message
                            raise
                        except ray.exceptions.RayError as error:  # worker or node lost
                            failed[index] = error
                            continue
                        results[index] = value
                        if bar is not None:
                            bar.update()
                        if on_result is not None:
                            on_result(index, value)
            except BaseException:
                for ref in waiting:
                    ray.cancel(ref, force=True)
                raise
        if failed:
            raise _lost_items_error(
                "ray", results, sorted(failed), [failed[i] for i in sorted(failed)],
                self.max_retries,
                "Ray workers or nodes were lost; check the cluster (`ray status`) and rerun",
            )  # fmt: skip
        return results

    def close(self) -> None:
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns_ray = False


def make_executor(
    kind: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    *,
    max_retries: int = DEFAULT_MAX_RETRIES,
    ray_init_options: Mapping[str, Any] | None = None,
) -> SerialExecutor | LocalExecutor | RayExecutor:
    """The executor of ``kind``: ``local`` (default; ``workers=None``: every core),
    ``ray`` (``ray_address``: a running cluster; None: a local instance) or ``serial``."""
    if kind not in EXECUTOR_KINDS:
        raise ValueError(f"executor {kind!r}: use one of {', '.join(EXECUTOR_KINDS)}.")
    if ray_address and kind != "ray":
        raise ValueError(f"--ray-address is for --executor ray, not {kind!r}.")
    if kind == "serial":
        if workers is not None:
            _check_workers(workers, 1)
        return SerialExecutor()
    if kind == "local":
        return LocalExecutor(workers, max_retries)
    return RayExecutor(workers, ray_address, max_retries, ray_init_options)


def _check_workers(workers: int | None, default: int) -> int:
    if workers is None:
        return max(1, int(default))
    if isinstance(workers, bool) or int(workers) != workers or workers < 1:
        raise ValueError(f"workers {workers!r}: give a whole number of processes, at least 1.")
    return int(workers)


def _check_retries(max_retries: int) -> int:
    if int(max_retries) != max_retries or max_retries < 0:
        raise ValueError(f"max_retries {max_retries!r}: give a whole number, 0 or more.")
    return int(max_retries)


def _check_reachable(address: str) -> None:
    """Fail fast, with a clear message, when nothing listens at ``address``
    (``host:port``, or ``ray://host:port`` for Ray Client); ``auto`` is left to Ray."""
    target = address.removeprefix("ray://")
    if address == "auto" or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5.0):
            pass
    except (OSError, ValueError) as error:
        raise SimExecutorError(
            f"no Ray cluster answers at {address} ({error}). Start one with `ray start "
            "--head` and give the address it prints (host:port) as --ray-address, or use "
            "--executor local."
        ) from error


def _import_path() -> str:
    """The caller's import path outside the interpreter's own directories."""
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    keep = []
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(real) and not any(real.startswith(p + os.sep) for p in own):
            keep.append(real)
    return os.pathsep.join(dict.fromkeys(keep))


def _lost_items_error(
    kind: str,
    results: list[Any],
    failed: list[int],
    causes: Sequence[BaseException],
    retries: int,
    advice: str,
) -> SimExecutorError:
    first = f" (first: {type(causes[0]).__name__}: {causes[0]})" if causes else ""
    return SimExecutorError(
        f"{len(failed)} of {len(results)} items failed on the {kind} executor after "
        f"{retries} retries{first}; {advice}. The {len(results) - len(failed)} results "
        "that came back are kept in this error's .results (failed indices in .failed).",
        results,
        failed,
        causes,
    )
