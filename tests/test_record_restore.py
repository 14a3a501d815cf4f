"""`tprbench record restore` refuses what could lose data (issue 43, item 2), as git refuses
unless forced: a record that passes its check is not replaced without --force, and no record
is replaced while a driver works on it — not even with --force (the old code swapped in an older
snapshot in both cases, and a running driver then failed for 120 s with "readonly database",
its runs only in the moved-aside file).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

from tests.disk_helpers import one_line, tprbench


def _record_with_a_snapshot(root: Path) -> tuple[Path, Path]:
    """A sound record, a snapshot of it, then one more write (the snapshot is older than the record)."""
    from harness.record import guard
    from tests.ray_helpers import seed_root

    db = seed_root(root) / "mlflow.db"
    snap = guard.take_snapshot(db, root)
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO experiment_tags (key, value, experiment_id) VALUES ('written', 'after the snapshot', 0)")
    return db, snap


def test_restore_refuses_a_sound_record_unless_forced(tmp_path: Path) -> None:
    db, snap = _record_with_a_snapshot(tmp_path / "runs")
    before = db.read_bytes()
    done = tprbench("record", "restore", "--root", str(db.parent))
    line = one_line(done.stderr)
    assert done.returncode == 2 and "not restored: the record passes its check" in line and "--force" in line, line
    assert db.read_bytes() == before and not list(db.parent.glob("mlflow.db.*"))
    done = tprbench("record", "restore", "--root", str(db.parent), "--force")
    assert done.returncode == 0, done.stderr
    (aside,) = db.parent.glob("mlflow.db.replaced-*")  # set aside, not deleted
    assert aside.read_bytes() == before and db.read_bytes() == snap.read_bytes()


def test_restore_refuses_while_a_driver_holds_the_study(tmp_path: Path) -> None:
    """A real `tprbench run` holding its study lock, then a driver of another root holding the
    lease in this record (a live process of this host): restore refuses, --force too."""
    from mlflow import MlflowClient

    from harness.record.contract import Tag
    from harness.record.lease import process_start
    from tests.ray_helpers import kill_session, start_driver, write_study

    db, _ = _record_with_a_snapshot(tmp_path / "runs")
    study = write_study(tmp_path, "held", ["gru"], trials=1, seeds=0, epochs=1, train_size=64, eval_size=16)
    log = tmp_path / "driver.log"
    driver = start_driver(study, db.parent, log, "--num-cpus", "1")
    try:
        deadline = time.time() + 600  # a loaded machine takes minutes to start a driver
        while "opening the record" not in log.read_text(errors="replace"):  # said once its study lock is held
            assert driver.poll() is None and time.time() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)
        for extra in ([], ["--force"]):
            done = tprbench("record", "restore", "--root", str(db.parent), *extra)
            line = one_line(done.stderr)
            assert done.returncode == 2 and "is driving study 'held' on this record now" in line, line
            assert f"pid {driver.pid}" in line and "Stop it first" in line
        assert not list(db.parent.glob("mlflow.db.*")) and not list(db.parent.glob(".mlflow.db.restore-*"))
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        kill_session(driver.pid)

    other = subprocess.Popen(["sleep", "60"])  # a driver of another root, on this record's file
    try:
        lease = {"host": socket.gethostname(), "pid": other.pid, "pid_start": process_start(other.pid), "token": "t", "root": "/elsewhere"}
        client = MlflowClient(tracking_uri=f"sqlite:///{db}")
        client.set_tag(client.create_run("0").info.run_id, str(Tag.DRIVER), json.dumps(lease))  # as its driver writes it
        done = tprbench("record", "restore", "--root", str(db.parent), "--force")
        line = one_line(done.stderr)
        assert done.returncode == 2 and "is driving a study on this record now" in line and f"pid {other.pid}" in line, line
    finally:
        other.kill()
        other.wait()
    assert tprbench("record", "restore", "--root", str(db.parent), "--force").returncode == 0  # its process gone: restored
