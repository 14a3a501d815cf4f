"""Machine faults end to end, through the CLI as a user types it: a study's record damaged after it
finished is restored from a snapshot older than its last runs, and the rerun brings those runs
back from their run directories without training — the tables come out as before the damage."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[1]


def tprbench(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    from tests.ray_helpers import ray_environ

    return subprocess.run(
        [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env={**os.environ, **ray_environ(), "OMP_NUM_THREADS": "1", "COLUMNS": "200", **(env or {})},
    )


def _forget_cell(snapshot: Path, cell_id: str) -> int:
    """Make `snapshot` older than the study's end: hard-delete the cell's trial/seed runs."""
    con = sqlite3.connect(snapshot)
    ids = [
        r[0]
        for r in con.execute(
            "SELECT run_uuid FROM tags WHERE key = 'tprbench.cell_id' AND value = ? AND run_uuid "
            "IN (SELECT run_uuid FROM tags WHERE key = 'tprbench.kind' AND value = 'run')",
            (cell_id,),
        )
    ]
    marks = ", ".join("?" * len(ids))
    for table in ("tags", "params", "metrics", "latest_metrics", "runs"):
        con.execute(f"DELETE FROM {table} WHERE run_uuid IN ({marks})", ids)
    con.commit()
    con.close()
    return len(ids)


def test_restore_from_an_older_snapshot_then_rerun_loses_nothing(tmp_path: Path) -> None:
    from harness.record import guard as record_guard
    from tests.ray_helpers import cells_of, seed_root, write_study

    root = seed_root(tmp_path / "runs")
    study = write_study(tmp_path, "restore", ["gru", "tpru[roles=4]"], trials=1, seeds=1, epochs=1, train_size=64, eval_size=16)
    first = tprbench("run", str(study), "--root", str(root), "--num-cpus", "2", "--quiet", env={"TPRBENCH_SNAPSHOT_SECONDS": "0"})
    assert first.returncode == 0, first.stderr[-3000:]
    snaps = record_guard.snapshots(root)
    assert snaps and record_guard.quick_check(snaps[0]) is None  # taken as cells finished and at the end
    assert tprbench("report", str(study), "--root", str(root), "--out", str(tmp_path / "before")).returncode == 0

    tpru = next(c.id for c in cells_of(study) if c.unit.startswith("tpru"))
    assert _forget_cell(snaps[0], tpru) == 2  # its search trial and its seed "ended after the snapshot"
    db = root / "mlflow.db"
    with open(db, "r+b") as fh:
        fh.seek(db.stat().st_size // 2)
        fh.write(os.urandom(8192))

    broken = tprbench("report", str(study), "--root", str(root), "--out", str(tmp_path / "broken"))
    assert broken.returncode == 2 and "the MLflow record is damaged" in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1 and "Traceback" not in broken.stderr
    restored = tprbench("record", "restore", "--root", str(root))
    assert restored.returncode == 0, restored.stderr
    again = tprbench("run", str(study), "--root", str(root), "--num-cpus", "2")  # not --quiet: it hides the driver's messages
    assert again.returncode == 0, again.stderr[-3000:]
    assert "recorded 1 ended search trial(s) again" in " ".join(again.stdout.split())  # rich wraps lines off a TTY
    assert tprbench("report", str(study), "--root", str(root), "--out", str(tmp_path / "after")).returncode == 0
    for name in ("table.md", "table.csv", "search.csv"):
        after = (tmp_path / "after" / name).read_bytes().replace(b"/after", b"/before")
        assert after == (tmp_path / "before" / name).read_bytes(), name
    # nothing was trained again: each run directory holds one attempt
    for attempts in (root / "work").rglob("attempts.jsonl"):
        lines = attempts.read_text().splitlines()
        assert len(lines) <= 2, attempts  # the seed re-dispatched after the restore returns its result.json
