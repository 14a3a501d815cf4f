"""What killed processes leave of the record is settled by the next driver (issue 43, item 9).

A driver killed during its final snapshot left no snapshot, and the rerun ("nothing to do")
took none; the temporary files of a killed store creation, restore or snapshot stayed forever.
Now each such file is named by its process (harness.record.leftovers): the rerun takes the
snapshot the dead driver owed (its "changed" mark says so) and removes the files of processes
that are gone — never a live process's. Real processes, real SIGKILLs (TPRBENCH_FAULT_AT puts
each at an exact moment: harness/faults.py).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.disk_helpers import tprbench
from tests.ray_helpers import REPO, ray_environ


def _kill_while_creating(db: Path) -> Path:
    """A process creating a new store beside `db` (harness.record.writer), SIGKILLed before its rename."""
    from harness.record.leftovers import HOST

    code = f"from pathlib import Path; from harness.record.writer import create_sqlite_store; create_sqlite_store(Path({str(db)!r}))"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env={**os.environ, **ray_environ(TPRBENCH_FAULT_AT="creating")})
    assert proc.wait(timeout=600) == -signal.SIGKILL
    return db.with_name(f".{db.name}.creating-{HOST}-{proc.pid}")


def test_a_rerun_takes_the_snapshot_a_killed_driver_owed_and_removes_what_dead_processes_left(tmp_path: Path) -> None:
    from harness.record import guard
    from harness.record.leftovers import HOST
    from tests.ray_helpers import seed_root, write_study

    root = seed_root(tmp_path / "runs")
    db, snaps = root / "mlflow.db", root / "snapshots"
    study = write_study(tmp_path, "done", ["gru"], trials=0, seeds=0)  # nothing to train: no Ray
    assert tprbench("record", "snapshot", "--root", str(root)).returncode == 0
    (older,) = guard.snapshots(root)

    killed = tprbench("run", str(study), "--root", str(root), "--quiet", env={"TPRBENCH_FAULT_AT": "snapshot"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr  # it wrote the study's runs, then died copying
    assert guard.snapshots(root) == [older]
    (half_copy,) = [p for p in snaps.iterdir() if ".snapshot-" in p.name]
    record = db.read_bytes()
    assert tprbench("record", "restore", "--root", str(root), "--force", env={"TPRBENCH_FAULT_AT": "restore"}).returncode == -signal.SIGKILL
    assert db.read_bytes() == record  # killed after its copy was made and checked: nothing was moved
    assert not half_copy.exists()  # the restore removed the dead driver's copy before making its own
    (restore_copy,) = root.glob(".mlflow.db.restore-*")
    creating = _kill_while_creating(db)
    dead = subprocess.Popen(["true"])
    dead.wait()
    older_version = [root / f".mlflow.db.creating-{dead.pid}", root / ".mlflow.db.restore.tmp"]  # names of the code before
    for path in older_version:
        path.write_bytes(b"partial")
    os.utime(older_version[1], (time.time() - 3600, time.time() - 3600))
    live = subprocess.Popen(["sleep", "3600"])
    try:
        kept = [root / f".mlflow.db.restore-{HOST}-{live.pid}", snaps / ".mlflow-20990101T000000-000000000.db.tmp"]
        for path in kept:  # a live process's copy; an older version's copy written just now
            path.write_bytes(b"being written")
        gone = [restore_copy, creating, *older_version]
        assert all(p.exists() for p in gone)

        again = tprbench("run", str(study), "--root", str(root), "--quiet")
        out = " ".join(again.stdout.split())
        assert again.returncode == 0 and "nothing to do" in out, again.stdout + again.stderr
        assert "removed 4 temporary file(s) left by processes that are gone" in out
        assert not [p for p in gone if p.exists()] and all(p.exists() for p in kept)
        newest, second = guard.snapshots(root)
        assert second == older and guard.quick_check(newest) is None
        with sqlite3.connect(newest) as con:  # the snapshot holds what the killed driver wrote
            assert con.execute("SELECT status FROM runs WHERE name = 'done'").fetchall() == [("FINISHED",)]
        assert not list(snaps.glob(".mlflow.db.changed-*"))  # the owed snapshot is settled
        assert not guard.behind(db, root)  # a rerun with nothing new takes none
    finally:
        live.kill()
        live.wait()
