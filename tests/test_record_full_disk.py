"""A full disk is a full disk (issue 43, items 1 and 10), on real size-limited file systems.

- A snapshot that does not fit is reported as out of disk space — by `record snapshot` in one
  line, by the driver as a skipped snapshot — never as a damaged record (the old code said
  "the MLflow record is damaged (database or disk is full) … tprbench record restore").
- `record restore` on a full disk builds its copy before it moves anything: out of space, the
  record is left exactly as it was, with no partial copy (the old code had moved the healthy
  record aside first, then left the root with no `mlflow.db` and a partial `.mlflow.db.restore.tmp`).
- A study that runs out of disk mid-run ends with harness.diskfull's one line and nothing else
  (the old code printed ~8 wrapped lines of SQLAlchemy text from the close before it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.disk_helpers import fill, one_line, small_disk, tprbench


def _damage_middle(db: Path) -> None:
    """8 KB of random bytes written into the middle of the file (its size unchanged)."""
    with open(db, "r+b") as fh:
        fh.seek(db.stat().st_size // 2)
        fh.write(os.urandom(8192))


def test_a_full_disk_at_a_snapshot_is_a_full_disk_not_a_damaged_record(tmp_path: Path) -> None:
    from harness.record import guard
    from tests.ray_helpers import seed_root

    with small_disk(tmp_path / "disk") as disk:
        root = seed_root(disk / "runs")
        db = root / "mlflow.db"
        fill(disk, db.stat().st_size // 4)  # room for a quarter of a copy
        done = tprbench("record", "snapshot", "--root", str(root))
        line = one_line(done.stderr)
        assert done.returncode == 2 and "out of disk space while writing a snapshot of" in line, line
        assert "damaged" not in line and "restore" not in line
        notes: list[str] = []
        snaps = guard.Snapshots(db, root, seconds=0, note=notes.append)
        snaps.changed()
        assert snaps.take() is None  # the driver's snapshot: skipped, the study goes on
        assert notes == [f"snapshot of {db} skipped: out of disk space in {root / 'snapshots'}"]
        assert guard.quick_check(db) is None and tprbench("record", "check", "--root", str(root)).returncode == 0
        assert guard.snapshots(root) == []
        assert not [p for p in (root / "snapshots").iterdir() if ".snapshot-" in p.name]  # no partial copy left


def test_restore_on_a_full_disk_changes_nothing_then_restores_once_there_is_room(tmp_path: Path) -> None:
    from harness.record import guard
    from tests.ray_helpers import seed_root

    with small_disk(tmp_path / "disk") as disk:
        root = seed_root(disk / "runs")
        db = root / "mlflow.db"
        good = guard.take_snapshot(db, root)
        _damage_middle(db)
        damaged = db.read_bytes()
        filler = fill(disk, good.stat().st_size // 2)
        done = tprbench("record", "restore", "--root", str(root))
        line = one_line(done.stderr)
        assert done.returncode == 2 and "not restored: out of disk space while copying the snapshot" in line, line
        assert "nothing was changed" in line
        assert db.read_bytes() == damaged  # the record is where it was, as it was
        assert sorted(p.name for p in root.iterdir() if "mlflow.db" in p.name) == ["mlflow.db"]  # no partial copy, nothing aside
        filler.unlink()
        done = tprbench("record", "restore", "--root", str(root))
        assert done.returncode == 0, done.stderr
        assert guard.quick_check(db) is None and db.read_bytes() == good.read_bytes()
        (aside,) = root.glob("mlflow.db.damaged-*")
        assert aside.read_bytes() == damaged


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(600)
def test_out_of_disk_mid_run_ends_with_one_line(tmp_path: Path) -> None:
    """A two-cell study on a disk with ~250 KB free beside its empty store: the run fills it."""
    from tests.ray_helpers import seed_root, write_study

    study = write_study(tmp_path, "full", ["gru", "lstm"], trials=1, seeds=1, epochs=1, train_size=64, eval_size=16)
    with small_disk(tmp_path / "disk", "1200k") as disk:
        root = seed_root(disk / "runs")
        done = tprbench("run", str(study), "--root", str(root), "--num-cpus", "1", "--quiet", env={"TPRBENCH_SNAPSHOT_SECONDS": "0"}, timeout=500)
        line = one_line(done.stderr)
        assert done.returncode == 2 and "out of disk space" in line and "rerun the same command" in line, done.stdout + done.stderr
        assert "planning" in done.stdout  # it ran out mid-run, not while opening the record
        for text in ("SQL", "sqlite3", "Background on this error", "not ended", "not removed"):
            assert text not in done.stdout + done.stderr, done.stdout + done.stderr
