"""One executor for sim work (evaluation, diagnosis, adaptation rollouts, teacher labels),
on local processes or on a Ray cluster.

``make_executor(kind, workers, ray_address)`` returns a ``SimExecutor``: ``map(fn, items)``
runs the picklable top-level function ``fn`` on every item and returns the results in
item order. Every item carries its own seed, so results do not depend on the backend or
the worker count. Learner updates stay in the caller's process; only ``fn`` travels.

- ``serial``: in the caller's process, one item after the other.
- ``local``: spawned worker processes, one per core by default (``workers=1``: in-process).
- ``ray``: Ray tasks on the cluster at ``ray_address`` (``ray start --head`` prints it), or
  on a local Ray instance this executor starts and stops. A worker lost mid-map is retried
  by Ray (``max_retries``); items that still fail end the map in ``SimExecutorError``,
  which keeps every result that did come back.

An exception raised by ``fn`` itself (bad input, a bug) ends the map with that exception,
as a plain loop would. Workers drive the caller's arm (``robot.description``) and run
torch on one thread each.
"""

from __future__ import annotations

from simreal_ros.executor.backends import (
    EXECUTOR_KINDS,
    LocalExecutor,
    RayExecutor,
    SerialExecutor,
    SimExecutor,
    SimExecutorError,
    make_executor,
    split_evenly,
)

__all__ = [
    "EXECUTOR_KINDS",
    "LocalExecutor",
    "RayExecutor",
    "SerialExecutor",
    "SimExecutor",
    "SimExecutorError",
    "make_executor",
    "split_evenly",
]
