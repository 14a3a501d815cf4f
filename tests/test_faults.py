"""Fault injection on a simulated cluster: after each fault, nothing lost, nothing recorded
twice, and the numbers equal those of an uninterrupted run with the same seeds.

One cluster for the module (head without CPUs + 2 nodes × 2 CPUs, fast health checks). One
study, run once uninterrupted as the reference: a slow cell (SlowUnit sleeps 0.1 s per training
step, so a trial lasts a few seconds and can be hit mid-epoch), a GRU cell, a cell that diverges
(NaNUnit) and one that raises (RaiseUnit). Each fault runs the same study in a fresh run
directory; "the same numbers" means every run key has the same status, parameters and every
metric except timings, and `harness.report.aggregate` gives the same table. That holds because
training is deterministic given seed, data and one thread, the search proposes the same
parameters per trial whatever was interrupted (per-trial seeded sampler), and a trial resumed
from its epoch checkpoint ends exactly where an uninterrupted one does.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.ray_helpers import (
    NAN,
    RAISE,
    aggregated,
    attempts,
    check_complete,
    count_recorded,
    kill_driver_when,
    kill_session,
    numbers,
    run_study,
    seed_root,
    simulated_cluster,
    start_driver,
    write_study,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]
SLOW = "tests.plugin_units:SlowUnit[delay=0.1]"
UNITS = [SLOW, "gru", NAN, RAISE]
FAILING = (NAN, RAISE)
SEEDS = 1
TOTAL = 2 * (2 + SEEDS) + 2 * 2  # healthy cells: 2 trials + 1 seed; failing cells: 2 failed trials


def make_study(directory: Path) -> Path:
    return write_study(directory, "faults", UNITS, trials=2, seeds=SEEDS)


@pytest.fixture(scope="module", autouse=True)
def errored_once():
    """RaiseUnit's trials end errored; with a cap of one attempt they are final at once (failed in
    Optuna), so every fault below compares with the same reference. Retries of errored runs are
    tested in tests/test_errored.py."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TPRBENCH_ERRORED_ATTEMPTS", "1")
        yield


@pytest.fixture(scope="module")
def cluster():
    with simulated_cluster(nodes=2, cpus=2) as c:
        yield c


@pytest.fixture(scope="module")
def reference(cluster, tmp_path_factory):
    """The uninterrupted run: (numbers per run key, aggregated table)."""
    base = tmp_path_factory.mktemp("reference")
    root = seed_root(base / "root")
    path = make_study(base)
    t0 = time.time()
    run_study(path, root)
    check_complete(path, root, failing=FAILING, errored=(RAISE,))
    print(f"\nreference run: {time.time() - t0:.1f} s")
    return numbers(root, "faults"), aggregated(root, "faults", SEEDS)


def same_as_reference(path: Path, root: Path, reference: Any) -> None:
    import pandas as pd

    counts = check_complete(path, root, failing=FAILING, errored=(RAISE,))
    assert counts["runs"] == TOTAL
    ref_numbers, ref_agg = reference
    got = numbers(root, "faults")
    assert set(got) == set(ref_numbers)
    for key in sorted(got):
        assert got[key] == ref_numbers[key], key
    pd.testing.assert_frame_equal(aggregated(root, "faults", SEEDS), ref_agg)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised by the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def join(thread: threading.Thread, box: dict, timeout: float = 300) -> Any:
    thread.join(timeout)
    assert not thread.is_alive(), "driver still running"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def slow_trial_mid_epoch(root: Path, thread: threading.Thread | None = None, timeout: float = 180) -> Path:
    """A slow-cell trial that has checkpointed epoch 1 and not finished: hit it now."""
    from tests.ray_helpers import cells_of

    slow = next(c.id for c in cells_of(root.parent / "faults.toml") if c.unit == SLOW)
    t0 = time.time()
    while True:
        for d in sorted((root / "work" / "faults" / slow).glob("trial-*")):
            if (d / "checkpoint.pt").exists() and not (d / "result.json").exists() and attempts(d):
                return d
        assert time.time() - t0 < timeout, "no slow trial reached epoch 2"
        assert thread is None or thread.is_alive(), "driver ended before the fault"
        time.sleep(0.05)


def assert_resumed(run_dir: Path) -> None:
    import json

    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "finished" and result["resumed_from_epoch"] == 1, result


def test_diverging_and_raising_trials_are_recorded_diverged_and_errored(reference) -> None:
    ref_numbers, agg = reference
    diverged = {k: v for k, v in ref_numbers.items() if v[0] == "diverged"}
    errored = {k: v for k, v in ref_numbers.items() if v[0] == "errored"}
    assert len(diverged) == len(errored) == 2  # 2 trials each of NaNUnit, RaiseUnit; neither cell has seed runs
    assert len(ref_numbers) == TOTAL
    for _cell_id, group in agg.groupby("cell_id"):
        assert group["trials"].iloc[0] == 2


def test_node_removed_mid_trial(cluster, reference, tmp_path: Path) -> None:
    root = seed_root(tmp_path / "root")
    path = make_study(tmp_path)
    thread, box = in_thread(lambda: run_study(path, root))
    victim_dir = slow_trial_mid_epoch(root, thread)
    node_id = attempts(victim_dir)[-1]["node_id"]
    node = next(n for n in cluster.worker_nodes if n.node_id == node_id)
    cluster.remove_node(node, allow_graceful=False)
    t_kill = time.time()
    try:
        join(thread, box)
    finally:
        cluster.add_node(**cluster.node_args)  # back to two nodes for the next test
    nodes = [a["node_id"] for a in attempts(victim_dir)]
    print(f"\nnode removed under {victim_dir.name}: attempts on {len(set(nodes))} nodes; driver finished {time.time() - t_kill:.1f} s after the kill")
    assert len(set(nodes)) == 2 and nodes[-1] != node_id
    assert_resumed(victim_dir)
    same_as_reference(path, root, reference)


def test_worker_killed_mid_trial(reference, tmp_path: Path) -> None:
    root = seed_root(tmp_path / "root")
    path = make_study(tmp_path)
    thread, box = in_thread(lambda: run_study(path, root))
    victim_dir = slow_trial_mid_epoch(root, thread)
    pid = attempts(victim_dir)[-1]["pid"]
    os.kill(pid, signal.SIGKILL)
    join(thread, box)
    pids = [a["pid"] for a in attempts(victim_dir)]
    print(f"\nworker {pid} killed under {victim_dir.name}: attempts by pids {pids}")
    assert pids[0] == pid and len(pids) >= 2 and pids[-1] != pid
    assert_resumed(victim_dir)
    same_as_reference(path, root, reference)


def test_driver_killed_and_restarted_twice(cluster, reference, tmp_path: Path) -> None:
    """`tprbench run --address` killed (SIGKILL) twice at different points; the third run
    completes. Finished runs are never retrained (result.json untouched)."""
    from tests.ray_helpers import results

    root = seed_root(tmp_path / "root")
    path = make_study(tmp_path)
    log = tmp_path / "driver.log"
    seen: list[int] = []
    finished: dict = {}
    for kill_at in (1, 5, None):
        proc = start_driver(path, root, log, "--address", cluster.address)
        try:
            if kill_at is None:
                assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
            else:
                kill_driver_when(proc, lambda n=kill_at: count_recorded(root) >= n)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            kill_session(proc.pid)
        seen.append(count_recorded(root))
        now = results(root, "faults")
        assert {k: now[k][0] for k in finished} == {k: v[0] for k, v in finished.items()}, "finished run retrained"
        finished = now
    print(f"\nrecords after each driver: {seen} of {TOTAL}")
    assert seen[0] < seen[1] < TOTAL == seen[2]
    same_as_reference(path, root, reference)


def test_tracking_store_and_journal_locked_mid_study(reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holds the MLflow SQLite store (exclusive lock) while the driver records a
    run — past SQLite's 20 s busy timeout, so MLflow raises and the driver's retry with backoff
    carries on — then the Optuna journal's lock for 3 s (Optuna waits). Nothing is lost or
    duplicated.

    The test drives the lock, not the clock (taking it 'after two records' raced with
    the study, and a driver that happened not to write during the lock never retried): the
    driver's third `log_run` waits until the test holds the store, and the test lets go only
    after the driver has retried at least once."""
    from harness.record.writer import Tracker

    root = seed_root(tmp_path / "root")
    path = make_study(tmp_path)
    at_record, locked = threading.Event(), threading.Event()
    seen: dict[str, Any] = {"calls": 0}
    original = Tracker.log_run

    def log_run(self: Tracker, *args: Any, **kwargs: Any) -> str:
        seen["calls"] += 1
        if seen["calls"] == 3:  # the store is taken right before this record, whatever the timing
            seen["tracker"] = self
            at_record.set()
            assert locked.wait(120), "the test never took the store's lock"
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Tracker, "log_run", log_run)
    thread, box = in_thread(lambda: run_study(path, root))
    t0 = time.time()
    while not at_record.wait(0.1):
        assert time.time() - t0 < 180 and thread.is_alive(), box.get("error")
    con = sqlite3.connect(root / "mlflow.db", timeout=30, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    held = time.time()
    locked.set()
    tracker = seen["tracker"]
    while tracker.retries < 1:  # the driver's write timed out on the lock and is being retried
        assert time.time() - held < 120 and thread.is_alive(), box.get("error")
        time.sleep(0.05)
    # Optuna's journal lock (a symlink next to the journal), as a second writer would hold it,
    # taken while the driver is still held up, so its next Optuna write meets it.
    lock = Path(str(root / "optuna.journal") + ".lock")
    while True:
        try:
            os.symlink(str(root / "optuna.journal"), lock)
            break
        except FileExistsError:
            time.sleep(0.01)
    con.execute("ROLLBACK")
    con.close()
    released = time.time()
    time.sleep(3)
    os.unlink(lock)
    runner, summary = join(thread, box)
    retries = [e for e in runner.events if "retrying" in e]
    print(
        f"\nMLflow store locked {released - held:.1f} s from {held - t0:.1f} s; driver retries: {len(retries)} "
        f"({retries[0] if retries else '-'}); study took {time.time() - t0:.1f} s"
    )
    assert runner.tracker is tracker and tracker.retries >= 1
    same_as_reference(path, root, reference)


def test_unreachable_tracking_server_is_a_clear_error_then_a_rerun_completes(
    reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tracking URI pointing at a stopped MLflow server: after the retry window, one line
    naming the store and what to do; nothing was dispatched; the same command with the store
    back (here: the default SQLite store) completes the study."""
    import socket

    from harness.cli import main

    root = seed_root(tmp_path / "root")
    path = make_study(tmp_path)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TPRBENCH_STORE_RETRY_SECONDS", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    t0 = time.time()
    rc = main(["run", str(path), "--root", str(root), "--tracking-uri", f"http://127.0.0.1:{port}", "--quiet"])
    err = capsys.readouterr().err
    print(f"\nstopped store: rc {rc} after {time.time() - t0:.1f} s: {err.strip()}")
    assert rc == 2
    assert f"--tracking-uri http://127.0.0.1:{port}: no answer" in err and "not retried" in err  # at once
    assert "rerun" in err
    assert not (root / "work").exists() and count_recorded(root) == 0
    monkeypatch.delenv("TPRBENCH_STORE_RETRY_SECONDS")
    run_study(path, root)
    same_as_reference(path, root, reference)
