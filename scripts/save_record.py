"""Copy a study's record into the repository, to commit it: `python scripts/save_record.py SRC DEST`.

A long study runs with its root outside the checkout (a run directory under one user's disk, or a
cluster's shared file system); at each milestone its record is committed under records/<study>/ so
that `tprbench report` and `tprbench papers` regenerate the committed reports from a clean clone and
a later session resumes the study from it (copy the files back to the root and rerun: finished runs
are not trained again, runs that were in flight start over).

What is copied: mlflow.db through SQLite's online backup (consistent while the driver writes), then
VACUUMed; the Optuna journal when the study has one. Not copied: checkpoints, caches, logs, locks,
snapshots and artifacts (best.pt weights) — derived or too large to version; records/.gitignore
keeps them out.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path


def save(src: Path, dest: Path) -> list[Path]:
    db = src / "mlflow.db"
    if not db.is_file():
        raise SystemExit(f"save_record: {db} not found (give the study's --root)")
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / "mlflow.db.tmp"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as source, sqlite3.connect(tmp) as copy:
        source.backup(copy)
    with sqlite3.connect(tmp) as copy:
        copy.execute("VACUUM")
    tmp.replace(dest / "mlflow.db")
    out = [dest / "mlflow.db"]
    journal = src / "optuna.journal"
    if journal.is_file():
        shutil.copyfile(journal, dest / "optuna.journal")
        out.append(dest / "optuna.journal")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.splitlines()[0])
    for path in save(Path(sys.argv[1]), Path(sys.argv[2])):
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")
