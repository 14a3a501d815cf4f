"""One driver per study per record, whatever `--root` each was given.

Two drivers share a record (here: one MLflow SQLite store and one Optuna journal, outside both
run directories, as a tracking server and PostgreSQL are shared on a cluster) with different
`--root`s, so the per-root file lock (harness.driver.runner.StudyLock) does not see them. The lease on the
study run does:

- deterministically: a lease naming a live process (a real `sleep`) on this host refuses a
  driver in one line naming it, before anything is written; the same lease once that process
  is gone, and a lease of another host whose heartbeat is older than its timeout, do not;
- with two real drivers: the second is refused while the first works, and the record holds
  every run once.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.ray_helpers import (
    SLOW,
    assert_no_duplicates,
    kill_session,
    seed_root,
    start_driver,
    write_study,
)


def _shared(tmp_path: Path) -> tuple[str, str]:
    shared = seed_root(tmp_path / "shared")
    return f"sqlite:///{shared / 'mlflow.db'}", f"journal://{shared / 'optuna.journal'}"


def _lease_tag(uri: str, name: str) -> str | None:
    """The study run's lease tag as recorded (read only)."""
    from harness.record.sources import SqlSource

    source = SqlSource(uri)
    try:
        exp = source.experiment_id(f"tprbench/{name}")
        found = None if exp is None else source.study_run(exp, name)
        return None if found is None else found[1].get("driver")
    finally:
        source.close()


def _study_run(uri: str, name: str):
    from harness.record.writer import Tracker

    tracker = Tracker(uri, name)
    return tracker, tracker.study_run("test")


def _lease(host: str, pid: int, pid_start: str | None, heartbeat: float) -> str:
    return json.dumps(
        {
            "host": host,
            "pid": pid,
            "pid_start": pid_start,
            "started": heartbeat - 60,
            "heartbeat": heartbeat,
            "root": "/elsewhere/runs",
            "token": "other-driver",
        }
    )


def test_a_live_lease_refuses_a_driver_in_one_line_and_a_dead_one_does_not(tmp_path, capsys) -> None:
    from harness.cli import main
    from harness.record.lease import DriverLease, process_start

    uri, storage = _shared(tmp_path)
    path = write_study(tmp_path, "leased", ["gru"], trials=1, seeds=1, epochs=1)
    tracker, run_id = _study_run(uri, "leased")
    first = subprocess.Popen(["sleep", "300"])  # the "first driver": a live process of this host
    try:
        tracker.set_tag(run_id, "tprbench.driver", _lease(socket.gethostname(), first.pid, process_start(first.pid), time.time()))
        capsys.readouterr()
        t0 = time.monotonic()
        rc = main(["run", str(path), "--root", str(tmp_path / "second"), "--tracking-uri", uri, "--storage", storage, "--quiet"])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        print(f"\nrefused in {time.monotonic() - t0:.1f} s: {lines[-1] if lines else ''}")
        assert rc == 2 and len(lines) == 1, err
        assert f"pid {first.pid}" in lines[0] and f"host {socket.gethostname()}" in lines[0] and "started " in lines[0]
        assert "one driver per study per record" in lines[0]
        assert not (tmp_path / "second" / "work").exists()
    finally:
        first.kill()
        first.wait()
    lease = DriverLease(tracker, run_id, tmp_path / "third")
    lease.check("would not start")  # its process is gone: the lease is dead at once on its host
    far = "another-host-31"
    tracker.set_tag(run_id, "tprbench.driver", _lease(far, 4242, "1", time.time()))
    with pytest.raises(Exception, match=f"host {far}, pid 4242"):
        lease.check("did not start")  # another host, fresh heartbeat: alive
    tracker.set_tag(run_id, "tprbench.driver", _lease(far, 4242, "1", time.time() - lease.seconds - 1))
    lease.check("would not start")  # another host, heartbeat older than the lease: dead


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_drivers_with_different_roots_on_one_record(tmp_path) -> None:
    uri, storage = _shared(tmp_path)
    path = write_study(tmp_path, "twice", [SLOW], trials=1, seeds=1, epochs=2)
    common = ("--tracking-uri", uri, "--storage", storage, "--num-cpus", "1")
    first = start_driver(path, tmp_path / "root-a", tmp_path / "a.log", *common)
    try:
        deadline = time.time() + 300
        while not _lease_tag(uri, "twice"):
            assert first.poll() is None and time.time() < deadline, (tmp_path / "a.log").read_text()[-3000:]
            time.sleep(0.5)
        second = start_driver(path, tmp_path / "root-b", tmp_path / "b.log", *common)
        assert second.wait(timeout=120) == 2, (tmp_path / "b.log").read_text()[-3000:]
        kill_session(second.pid, grace=0)
        said = (tmp_path / "b.log").read_text()
        assert f"pid {first.pid}" in said and "one driver per study per record" in said, said[-2000:]
        assert first.wait(timeout=400) == 0, (tmp_path / "a.log").read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        kill_session(first.pid, grace=0)
    assert not (tmp_path / "root-b" / "work").exists()
    keys = assert_no_duplicates(tmp_path / "shared", "twice")
    assert sorted(k.split("/")[1] for k in keys) == ["seed", "trial"], keys  # every run once
    assert not _lease_tag(uri, "twice")  # released at the end
