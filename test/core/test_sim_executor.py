"""The sim executor (simreal_ros.executor): the same seeds give the same results on every
backend, a worker killed mid-map ends in a completed map or a clear error that keeps the
results already returned, and bad input is refused with a clear message."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from core.executor_tasks import reject_three, slow_square, square_with_pid

from simreal_ros.executor import (
    EXECUTOR_KINDS,
    LocalExecutor,
    RayExecutor,
    SimExecutorError,
    make_executor,
    split_evenly,
)

REPO = Path(__file__).resolve().parents[2]
REACH = REPO / "checkpoints" / "reach"
SEEDS = [3, 8, 13, 21, 34]
ITEM_SECONDS = 2.0  # long enough to kill a worker mid-item


def _records(executor):
    """A few stand-in episodes of the shipped reach policy, through the evaluation code."""
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.evaluate import evaluate_policy

    result = evaluate_policy(
        str(REACH), profile="real_twin", condition="train", seeds=SEEDS, executor=executor,
        robot=load_robot_description(),
    )  # fmt: skip
    return result.records


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- bad input ----------------------------------------------------------------------


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="use one of local, ray, serial"):
        make_executor("threads")
    assert EXECUTOR_KINDS == ("local", "ray", "serial")


@pytest.mark.parametrize("workers", [0, -2, 1.5, True])
def test_workers_below_one_or_fractional_are_refused(workers):
    for kind in ("local", "serial"):
        with pytest.raises(ValueError, match="at least 1"):
            make_executor(kind, workers)


def test_ray_address_only_with_the_ray_executor():
    with pytest.raises(ValueError, match="--ray-address is for --executor ray"):
        make_executor("local", 2, "127.0.0.1:6379")


def test_unreachable_ray_address_is_a_clear_error(capsys):
    import ray

    initialized = ray.is_initialized()
    address = f"127.0.0.1:{_free_port()}"
    with pytest.raises(SimExecutorError, match="no Ray cluster answers at") as raised:
        make_executor("ray", 2, address)
    assert "ray start --head" in str(raised.value)
    assert ray.is_initialized() == initialized  # nothing started, nothing joined
    # The CLI says the same, without a traceback.
    from simreal_ros.cli.main import main

    argv = ["eval", "--checkpoint", str(REACH), "--executor", "ray", "--ray-address", address]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"simreal eval: error: no Ray cluster answers at {address}" in err
    assert "Traceback" not in err


def test_split_evenly_deals_every_item_once():
    items = list(range(7))
    parts = split_evenly(items, 3)
    assert parts == [[0, 3, 6], [1, 4], [2, 5]]
    assert split_evenly(items[:2], 5) == [[0], [1]]
    assert sorted(i for p in parts for i in p) == items


# --- same seeds, same results ---------------------------------------------------------


def test_in_process_map_keeps_order_and_passes_fn_errors_through():
    with make_executor("serial") as serial:
        assert serial.kind == "serial" and serial.workers == 1
        assert [r for r, _ in serial.map(square_with_pid, range(5))] == [0, 1, 4, 9, 16]
        with pytest.raises(ValueError, match="item 3 is bad input"):
            serial.map(reject_three, range(5))
    arrived = []
    with make_executor("local", 1) as one:
        assert one.kind == "local" and one.workers == 1
        results = one.map(square_with_pid, range(3), on_result=lambda i, r: arrived.append(i))
    assert {pid for _, pid in results} == {os.getpid()}  # workers=1: this process
    assert arrived == [0, 1, 2]


@pytest.mark.slow
def test_same_seeds_same_episodes_serial_one_and_two_local_processes():
    with make_executor("serial") as serial:
        expected = _records(serial)
    assert [r.seed for r in expected] == SEEDS
    assert len({r.final_goal_distance for r in expected}) == len(SEEDS)  # distinct episodes
    with make_executor("local", 1) as one:
        assert _records(one) == expected
    with make_executor("local", 2) as two:
        assert two.workers == 2
        assert _records(two) == expected
        # Worker processes are used, and the pool is reused by the next map.
        pids = {pid for _, pid in two.map(square_with_pid, range(4))}
        assert os.getpid() not in pids and 1 <= len(pids) <= 2
        with pytest.raises(ValueError, match="item 3 is bad input"):
            two.map(reject_three, range(5))
        assert [r for r, _ in two.map(square_with_pid, range(3))] == [0, 1, 4]


# --- Ray ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_executor():
    """A local Ray instance with 2 CPUs for this module, stopped even when a test fails.
    Its directory is short (not under tmp_path): Ray's socket paths must fit 107 bytes."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    executor = None
    try:
        executor = make_executor(
            "ray",
            2,
            ray_init_options={"_temp_dir": temp_dir, "include_dashboard": False},
        )
        yield executor
    finally:
        if executor is not None:
            executor.close()
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_ray_gives_the_same_episodes_as_serial(ray_executor):
    with make_executor("serial") as serial:
        expected = _records(serial)
    assert ray_executor.kind == "ray" and ray_executor.workers == 2
    assert _records(ray_executor) == expected
    pids = {pid for _, pid in ray_executor.map(square_with_pid, range(4))}
    assert os.getpid() not in pids
    with pytest.raises(ValueError, match="item 3 is bad input"):
        ray_executor.map(reject_three, range(5))


def _kill_one_worker_mid_map(executor, directory: Path, items: int):
    """Run ``slow_square`` over ``items`` items; once one result is back, SIGKILL the
    worker of an item that started and has not returned. Returns (the map's outcome or
    error, the killed (index, pid), the indices returned before the kill)."""
    directory.mkdir(parents=True, exist_ok=True)
    returned: list[int] = []
    lock = threading.Lock()

    def on_result(index, _value):
        with lock:
            returned.append(index)

    work = [(i, str(directory), ITEM_SECONDS) for i in range(items)]
    with ThreadPoolExecutor(1) as thread:
        future = thread.submit(executor.map, slow_square, work, on_result=on_result)
        killed = None
        deadline = time.monotonic() + 120.0
        while killed is None and time.monotonic() < deadline and not future.done():
            with lock:
                before = list(returned)
            if before:
                # An item that started less than ITEM_SECONDS ago is surely mid-item: it
                # sleeps that long after announcing itself. (An older one may have finished
                # with its result still on its way, and its worker moved on.)
                for path in directory.glob("started-*"):
                    _, index, pid = path.name.split("-")
                    age = time.time() - path.stat().st_mtime
                    if int(index) not in before and age < 0.8 * ITEM_SECONDS:
                        killed = (int(index), int(pid))
                        os.kill(int(pid), signal.SIGKILL)
                        break
            time.sleep(0.02)
        assert killed is not None, "no worker was running an item to kill"
        try:
            outcome = future.result(timeout=180)
        except SimExecutorError as error:
            outcome = error
    return outcome, killed, before


@pytest.mark.slow
def test_ray_worker_killed_mid_map_is_retried_on_the_others(ray_executor, tmp_path):
    outcome, (index, pid), before = _kill_one_worker_mid_map(ray_executor, tmp_path, 6)
    assert isinstance(outcome, list), f"the retries should complete the map: {outcome}"
    assert [r for r, _ in outcome] == [i * i for i in range(6)]
    assert outcome[index][1] != pid  # the killed item ran again, in another worker
    assert before  # the kill came after results had returned


@pytest.mark.slow
def test_ray_worker_killed_without_retries_is_a_clear_error_keeping_results(
    ray_executor, tmp_path
):
    no_retries = RayExecutor(workers=2, max_retries=0)  # joins the module's instance
    outcome, (index, _pid), before = _kill_one_worker_mid_map(no_retries, tmp_path, 6)
    assert isinstance(outcome, SimExecutorError), f"expected a clear error, got {outcome!r}"
    message = str(outcome)
    assert "of 6 items failed on the ray executor after 0 retries" in message
    assert "ray status" in message and ".results" in message
    assert index in outcome.failed
    assert len(outcome.failed) < 6
    kept = outcome.completed
    assert set(before) <= set(kept)  # results returned before the kill are kept
    assert set(kept) | set(outcome.failed) == set(range(6))
    assert all(kept[i][0] == i * i for i in kept)
    no_retries.close()  # it did not start Ray, so Ray stays up for the module
    import ray

    assert ray.is_initialized()


@pytest.mark.slow
def test_local_worker_killed_mid_map_reruns_its_items_on_a_new_pool(tmp_path):
    with LocalExecutor(workers=2, max_retries=1) as executor:
        outcome, (index, pid), before = _kill_one_worker_mid_map(executor, tmp_path, 4)
    assert isinstance(outcome, list), f"the retry should complete the map: {outcome}"
    assert [r for r, _ in outcome] == [i * i for i in range(4)]
    assert outcome[index][1] != pid
    assert before
