"""The SQLite record kept safe: checked when opened, snapshotted as a study goes, restorable.

The MLflow store is the only copy of every result. A damaged SQLite file can still answer
queries from its intact pages — a table printed from half a record, exit 0 — so:

- `check(path)`: before a command reads or writes a SQLite record, its header and SQLite's
  `PRAGMA quick_check` (every page and index of the b-trees, not the slower cross-checks of
  `integrity_check`); a damaged file stops the command with `RecordCorrupt`, one line naming
  the file and the way back. A file that passed is remembered by (size, mtime, inode) in
  `<dir>/cache/record-check/`, so an unchanged record is not checked again (any write changes
  its mtime). Cost measured in docs/benchmarks.md.
- `Snapshots`: the driver keeps consistent copies of the record in `<root>/snapshots/`, made
  with SQLite's online backup API (a consistent copy even while MLflow writes), each one
  checked before it replaces the oldest (KEEP rotate). Taken when a cell finishes, at most
  every TPRBENCH_SNAPSHOT_SECONDS (default 300), and when the driver ends.
- `restore(root)` (`tprbench record restore`): moves the damaged file aside and puts the newest
  good snapshot in its place. Runs that ended after that snapshot are not lost: the next
  `tprbench run` of the study logs again every ended Optuna trial whose run directory holds a
  result.json but whose run the record lacks, and dispatches the missing seeds, whose workers
  return their result.json without training (harness.driver.runner).

Only for SQLite files: a PostgreSQL store or a tracking server has its database's own checks
and backups (docs/reliability.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from ..cache_note import unsaved
from ..diskfull import is_disk_full

HEADER = b"SQLite format 3\x00"
KEEP = 3
ENV_SECONDS = "TPRBENCH_SNAPSHOT_SECONDS"
DEFAULT_SECONDS = 300.0
SNAPSHOT_DIR = "snapshots"


class RecordCorrupt(RuntimeError):
    """The SQLite record is damaged. One line naming the file and how to restore it; exit 2."""

    user_error = True


class RestoreError(RuntimeError):
    """Nothing to restore from (no good snapshot). One line, exit 2."""

    user_error = True


def _stamp(path: Path) -> tuple[Path, str]:
    st = path.stat()
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return path.resolve().parent / "cache" / "record-check" / f"{key}.json", f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def quick_check(path: Path) -> str | None:
    """None when the file is a sound SQLite database, else what is wrong (one line)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(HEADER))
    except OSError as exc:
        return f"cannot read it ({exc.strerror})"
    if head != HEADER:
        return "not a SQLite database (its header is damaged)"
    try:
        con = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=60)
        try:
            rows = [r[0] for r in con.execute("PRAGMA quick_check(5)")]
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return None if rows == ["ok"] else "; ".join(str(r) for r in rows)[:300]


def check(path: str | Path) -> None:
    """Raise RecordCorrupt if the SQLite record at `path` is damaged (an empty file is MLflow's to create)."""
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            return
        stamp, key = _stamp(path)
    except OSError:
        return
    try:
        if stamp.read_text() == key:
            return
    except OSError:
        pass
    problem = quick_check(path)
    if problem is not None:
        raise RecordCorrupt(
            f"{path}: the MLflow record is damaged ({problem}); nothing was read or written. Restore "
            f"it from its latest snapshot: tprbench record restore --root {path.parent} "
            "(docs/reliability.md), then rerun the study"
        )
    _mark_checked(stamp, key)


def _mark_checked(stamp: Path, key: str) -> None:
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(key)
    except OSError as exc:  # read-only or full: checked again next time
        unsaved(stamp.parent, exc)


def snapshots(root: Path) -> list[Path]:
    """The record's snapshots under `root`, newest first."""
    return sorted((Path(root) / SNAPSHOT_DIR).glob("mlflow-*.db"), reverse=True)


def take_snapshot(db: Path, root: Path, keep: int = KEEP) -> Path | None:
    """A consistent copy of `db` (SQLite's online backup) in `<root>/snapshots/`, checked; the
    oldest beyond `keep` are removed. A damaged record (or copy) never replaces a good snapshot:
    it raises RecordCorrupt. None when there is no record yet."""
    db = Path(db)
    if not db.exists() or db.stat().st_size == 0:
        return None
    folder = Path(root) / SNAPSHOT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    name = f"mlflow-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{time.time_ns() % 10**9:09d}.db"
    tmp = folder / f".{name}.tmp"
    before = _stamp(db)
    try:
        src = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=60)
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        problem = quick_check(tmp)
        if problem is not None:
            raise RecordCorrupt(
                f"{db}: the MLflow record is damaged ({problem}); the snapshots in {folder} were "
                f"kept as they are: tprbench record restore --root {root} (docs/reliability.md)"
            )
        os.replace(tmp, folder / name)
        if _stamp(db) == before:  # the copy checked sound, and the file did not change meanwhile: so is it
            _mark_checked(*before)  # (the next reader skips its quick_check: 5 s at 100k runs)
    except sqlite3.DatabaseError as exc:
        raise RecordCorrupt(
            f"{db}: the MLflow record is damaged ({exc}); the snapshots in {folder} were kept as "
            f"they are: tprbench record restore --root {root} (docs/reliability.md)"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    for old in snapshots(root)[keep:]:
        old.unlink(missing_ok=True)
    return folder / name


class Snapshots:
    """The driver's snapshot schedule: when a cell finishes, at most every `seconds`; always at the end."""

    def __init__(self, db: Path | None, root: Path, seconds: float | None = None, note=None) -> None:
        self.db, self.root, self.note = db, root, note
        if seconds is None:
            try:
                seconds = float(os.environ.get(ENV_SECONDS, DEFAULT_SECONDS))
            except ValueError:
                seconds = DEFAULT_SECONDS
        self.seconds = seconds
        self.last = time.monotonic()
        self.taken = 0
        self.dirty = False

    def changed(self) -> None:
        """Something was written to the record since the last snapshot."""
        self.dirty = True

    def cell_done(self) -> None:
        if self.db is not None and self.dirty and time.monotonic() - self.last >= self.seconds:
            self.take()

    def take(self) -> Path | None:
        """A snapshot now, if anything was written since the last one. Out of disk space it is
        skipped with a note (the record itself is intact; the next one is tried later)."""
        if self.db is None or not self.dirty:
            return None
        try:
            path = take_snapshot(self.db, self.root)
        except (OSError, sqlite3.Error) as exc:
            if not is_disk_full(exc):
                raise
            self.last = time.monotonic()
            if self.note is not None:
                self.note(f"snapshot of {self.db} skipped: out of disk space in {Path(self.root) / SNAPSHOT_DIR}")
            return None
        self.last, self.dirty = time.monotonic(), False
        self.taken += path is not None
        return path


def restore(db: str | Path, root: str | Path) -> str:
    """Put the newest good snapshot in place of `db` (the damaged file is moved aside); returns
    what was done, as lines for the user."""
    db, root = Path(db), Path(root)
    good = None
    for snap in snapshots(root):
        if quick_check(snap) is None:
            good = snap
            break
    if good is None:
        raise RestoreError(
            f"no good snapshot of {db} in {root / SNAPSHOT_DIR}: nothing to restore from (snapshots "
            "are taken by `tprbench run` as cells finish); see docs/reliability.md"
        )
    lines = []
    if db.exists():
        aside = db.with_name(f"{db.name}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        os.replace(db, aside)
        lines.append(f"moved the damaged record to {aside}")
    tmp = db.with_name(f".{db.name}.restore.tmp")
    shutil.copy2(good, tmp)
    os.replace(tmp, db)
    shutil.rmtree(db.resolve().parent / "cache" / "record-check", ignore_errors=True)
    shutil.rmtree(db.resolve().parent / "cache" / "summary", ignore_errors=True)  # rebuilt from the restored record
    lines.append(f"restored {db} from the snapshot {good.name}")
    lines.append(
        "runs that ended after that snapshot come back from their run directories: rerun each study of "
        "this root with `tprbench run STUDY.toml --root ...` (nothing is trained again)"
    )
    return "\n".join(lines)


def describe(root: str | Path) -> str:
    """The snapshots of a root, for `tprbench record snapshots`."""
    snaps = snapshots(Path(root))
    if not snaps:
        return f"no snapshots in {Path(root) / SNAPSHOT_DIR}"
    return "\n".join(f"{s}  {s.stat().st_size / 2**20:.1f} MB  {json.dumps(quick_check(s) or 'ok')}" for s in snaps)
