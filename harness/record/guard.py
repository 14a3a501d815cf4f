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
  Out of disk space a snapshot is skipped with a note (`DiskFull` from `take_snapshot`): the
  record is sound, only the copy did not fit. A driver killed before its snapshot leaves a
  "changed" mark (harness.record.leftovers), so the next driver — even one with nothing to do —
  takes the snapshot that driver owed.
- `restore(root)` (`tprbench record restore`): puts the newest good snapshot in place of a
  damaged record. It refuses while a driver works on the record (its study lock under the root,
  or a live driver lease in the record) and, unless forced, when the record passes its check
  (a restore would set aside every run recorded since the snapshot). The copy is built and
  checked beside the record before anything is moved, so a full disk or a kill leaves the
  record as it was; the record's name is never without a file (the old one is hard-linked
  aside, the new one renamed over it), and a hot journal goes aside with the file it belongs to
  (SQLite rolls a journal back into whatever file bears its name). Runs that ended after that
  snapshot are not lost: the next `tprbench run` of the study logs again every ended Optuna
  trial whose run directory holds a result.json but whose run the record lacks, and dispatches
  the missing seeds, whose workers return their result.json without training
  (harness.driver.runner).

Only for SQLite files: a PostgreSQL store or a tracking server has its database's own checks
and backups (docs/reliability.md).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from ..diskfull import DiskFull, disk_full_error, free_space, is_disk_full
from ..faults import fault_point
from . import leftovers
from .cache_note import unsaved
from .contract import Tag
from .layout import SNAPSHOTS, RunRoot
from .lease import describe as describe_holder
from .lease import holder_alive, parse

HEADER = b"SQLite format 3\x00"
KEEP = 3
ENV_SECONDS = "TPRBENCH_SNAPSHOT_SECONDS"
DEFAULT_SECONDS = 300.0
SNAPSHOT_DIR = SNAPSHOTS


class RecordCorrupt(RuntimeError):
    """The SQLite record is damaged. One line naming the file and how to restore it; exit 2."""

    user_error = True


class RestoreError(RuntimeError):
    """A restore refused (a sound record, a driver at work) or impossible (no good snapshot). One line, exit 2."""

    user_error = True


class SnapshotError(RuntimeError):
    """A snapshot could not be written (not for a full disk or a damaged record). One line, exit 2."""

    user_error = True


def _stamp(path: Path) -> tuple[Path, str]:
    st = path.stat()
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return RunRoot(path.resolve().parent).record_check / f"{key}.json", f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


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
    oldest beyond `keep` are removed, and so are the "changed" marks of this process and of
    processes that are gone (their writes are in the copy). Only a damaged record raises
    RecordCorrupt, and it never replaces a good snapshot; out of space it raises DiskFull, any
    other failure to write the copy SnapshotError. None when there is no record yet."""
    db = Path(db)
    if not db.exists() or db.stat().st_size == 0:
        return None
    folder = Path(root) / SNAPSHOT_DIR
    name = f"mlflow-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{time.time_ns() % 10**9:09d}.db"
    tmp = leftovers.own(folder / name, "snapshot")
    before = _stamp(db)
    settled = [m for m, dead in leftovers.marks(folder, db.name) if dead or m == leftovers.own(folder / db.name, leftovers.CHANGED)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _backup(db, tmp)
        fault_point("snapshot")  # a kill here leaves the copy half-made and no snapshot (tests/test_record_leftovers.py)
        problem = quick_check(tmp)
        if problem is not None:
            raise _corrupt(db, problem, folder, root)
        os.replace(tmp, folder / name)
    except (OSError, sqlite3.Error) as exc:
        raise _snapshot_failed(exc, db, tmp, root) from None
    finally:
        tmp.unlink(missing_ok=True)
    if _stamp(db) == before:  # the copy checked sound, and the file did not change meanwhile: so is it
        _mark_checked(*before)  # (the next reader skips its quick_check: 5 s at 100k runs)
    for path in [*settled, *snapshots(root)[keep:]]:
        path.unlink(missing_ok=True)
    return folder / name


def _backup(db: Path, dest: Path) -> None:
    """SQLite's online backup of `db` into `dest`: a consistent copy even while MLflow writes."""
    src = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=60)
    try:
        dst = sqlite3.connect(dest)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()


def _corrupt(db: Path, problem: str, folder: Path, root: Path) -> RecordCorrupt:
    return RecordCorrupt(
        f"{db}: the MLflow record is damaged ({problem}); the snapshots in {folder} were kept as "
        f"they are: tprbench record restore --root {root} (docs/reliability.md)"
    )


def _snapshot_failed(exc: BaseException, db: Path, tmp: Path, root: Path) -> RuntimeError:
    """What a failed copy was: a full disk, a damaged record (its own check says so), or neither."""
    folder = Path(root) / SNAPSHOT_DIR
    if is_disk_full(exc):
        return disk_full_error(None, folder, f"a snapshot of {db}")
    if isinstance(exc, sqlite3.DatabaseError):
        problem = quick_check(db)
        if problem is not None:
            return _corrupt(db, problem, folder, Path(root))
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
    return SnapshotError(f"{folder}: no snapshot of {db} taken ({why}, writing {tmp.name}); the record itself is unchanged")


def behind(db: Path | None, root: Path) -> bool:
    """Whether the record holds writes no snapshot has: it has none yet, or a process that is gone
    marked it changed and never took its snapshot (a driver killed before or during it)."""
    if db is None or not db.exists() or db.stat().st_size == 0:
        return False
    return not snapshots(root) or any(dead for _, dead in leftovers.marks(Path(root) / SNAPSHOT_DIR, db.name))


def remove_leftovers(db: Path | None, root: Path) -> list[Path]:
    """The temporary files of the record and its snapshots left by processes that are gone (a
    store being created, a restore's copy, a snapshot's copy): removed; returns them."""
    folders = [Path(root) / SNAPSHOT_DIR] + ([Path(db).parent] if db is not None else [])
    return leftovers.sweep(folders)


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
        self.dirty = behind(db, root)  # owed by a driver that is gone: taken by this one
        self.marked = False

    def changed(self) -> None:
        """Something was written to the record since the last snapshot: marked on disk too, so a
        driver killed before its snapshot leaves the next one a note to take it."""
        if self.db is not None and not self.marked:
            mark = leftovers.own(Path(self.root) / SNAPSHOT_DIR / self.db.name, leftovers.CHANGED)
            try:
                mark.parent.mkdir(parents=True, exist_ok=True)
                mark.touch()
                self.marked = True
            except OSError:  # full or read-only: the snapshot at the end is still taken if this driver lives
                pass
        self.dirty = True

    def cell_done(self) -> None:
        if self.db is not None and self.dirty and time.monotonic() - self.last >= self.seconds:
            self.take()

    def take(self) -> Path | None:
        """A snapshot now, if the record holds writes no snapshot has. If the copy cannot be made
        (out of disk space, most often) it is skipped with a note: the record itself is intact,
        and the next one is tried later (this driver's mark stays for the next driver)."""
        if self.db is None or not self.dirty:
            return None
        try:
            path = take_snapshot(self.db, self.root)
        except (DiskFull, SnapshotError) as exc:
            self.last = time.monotonic()
            if self.note is not None:
                why = "out of disk space in " + str(Path(self.root) / SNAPSHOT_DIR) if isinstance(exc, DiskFull) else str(exc)
                self.note(f"snapshot of {self.db} skipped: {why}")
            return None
        self.last, self.dirty, self.marked = time.monotonic(), False, False
        self.taken += path is not None
        return path

    def remove_leftovers(self) -> None:
        """Remove what killed processes left of the record's temporary files (said in one line)."""
        removed = remove_leftovers(self.db, Path(self.root))
        if removed and self.note is not None:
            self.note(f"removed {len(removed)} temporary file(s) left by processes that are gone: {', '.join(str(p) for p in removed)}")


def restore(db: str | Path, root: str | Path, force: bool = False) -> str:
    """Put the newest good snapshot in place of a damaged `db`; returns what was done, as lines
    for the user. Refuses (RestoreError) while a driver works on the record and, unless `force`,
    when the record passes its check; see the module's docstring for the order of the steps."""
    db, root = Path(db), Path(root)
    with _study_locks(root, db):
        _refuse_if_driven(db)
        problem = quick_check(db) if db.exists() else "it does not exist"
        if problem is None and not force:
            raise RestoreError(
                f"{db}: not restored: the record passes its check (SQLite quick_check), so there is nothing to "
                "restore, and a restore would set aside every run recorded since the snapshot; use --force to replace it anyway"
            )
        remove_leftovers(db, root)  # a killed restore's copy, freeing its space first
        good = next((s for s in snapshots(root) if quick_check(s) is None), None)
        if good is None:
            raise RestoreError(
                f"no good snapshot of {db} in {root / SNAPSHOT_DIR}: nothing to restore from (snapshots "
                "are taken by `tprbench run` as cells finish); see docs/reliability.md"
            )
        lines = _put_in_place(db, _verified_copy(good, db), "damaged" if problem is not None else "replaced")
    shutil.rmtree(RunRoot(db.resolve().parent).record_check, ignore_errors=True)
    shutil.rmtree(RunRoot(db.resolve().parent).summary, ignore_errors=True)  # rebuilt from the restored record
    lines.append(f"restored {db} from the snapshot {good.name}")
    lines.append(
        "runs that ended after that snapshot come back from their run directories: rerun each study of "
        "this root with `tprbench run STUDY.toml --root ...` (nothing is trained again)"
    )
    return "\n".join(lines)


class _study_locks:
    """The study locks of the drivers of this root (harness.driver.runner.StudyLock's files), held
    while the record is replaced: a driver at work refuses the restore, one that starts meanwhile
    is refused as a second driver is. Lock files are opened without truncating the pid they hold."""

    def __init__(self, root: Path, db: Path) -> None:
        self.root, self.db, self.handles = root, db, []

    def __enter__(self) -> _study_locks:
        for path in sorted(RunRoot(self.root).locks.glob("*.lock")):
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:  # removed meanwhile
                continue
            self.handles.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = path.read_text().strip() or "?"
                self.__exit__()
                raise RestoreError(
                    f"{self.db}: not restored: a `tprbench run` is driving study {path.stem!r} on this record now "
                    f"(pid {pid}, {path}); a restore would replace the file under it. Stop it first, then restore"
                ) from None
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.handles:
            os.close(fd)  # releases its lock
        self.handles = []


def _refuse_if_driven(db: Path) -> None:
    """A live driver lease in the record (a driver of another root on the same file): refuse.
    A record too damaged to read is not asked (its study locks were)."""
    try:
        con = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=10)
        try:
            rows = con.execute(
                "SELECT t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid WHERE t.key = ? AND r.lifecycle_stage = 'active'",
                (str(Tag.DRIVER),),
            ).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return
    for (value,) in rows:
        holder = parse(value)
        if holder is not None and holder_alive(holder):
            raise RestoreError(
                f"{db}: not restored: a `tprbench run` is driving a study on this record now ({describe_holder(holder)}); "
                "a restore would replace the file under it. Stop it first, then restore"
            )


def _verified_copy(good: Path, db: Path) -> Path:
    """The snapshot copied beside the record (same file system: the rename is atomic), flushed
    and checked whole. Out of space, or failing its check, it is removed and nothing was changed."""
    tmp = leftovers.own(db, "restore")
    try:
        shutil.copyfile(good, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        problem = None if tmp.stat().st_size == good.stat().st_size else "its size differs from the snapshot's"
        problem = problem or quick_check(tmp)
        if problem is not None:
            raise RestoreError(f"{db}: not restored: the copy of {good} failed its check ({problem}); nothing was changed")
        fault_point("restore")  # a kill here leaves the copy and the record as it was (tests/test_record_leftovers.py)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise DiskFull(
                f"{db}: not restored: out of disk space while copying the snapshot {good.name} beside it "
                f"({_free(db)} free, {good.stat().st_size / 2**20:.1f} MB needed); nothing was changed: free some space "
                "and rerun `tprbench record restore`"
            ) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _free(path: Path) -> str:
    free = free_space(path)
    return "unknown" if free is None else f"{free / 2**20:.1f} MB"


def _put_in_place(db: Path, copy: Path, why: str) -> list[str]:
    """The old record aside as `<db>.<why>-<time>` (with its hot journal, if any), the checked copy
    renamed over it. A hard link keeps the record's name bound to a file throughout; where links
    are not allowed, the old file is renamed aside and put back if the second rename fails."""
    if not db.exists():
        os.replace(copy, db)
        return []
    aside = db.with_name(f"{db.name}.{why}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    try:
        os.link(db, aside)
        linked = True
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            copy.unlink(missing_ok=True)
            raise
        os.replace(db, aside)
        linked = False
    for suffix in ("-journal", "-wal", "-shm"):  # never paired with the restored file
        side = db.with_name(db.name + suffix)
        if side.exists():
            os.replace(side, aside.with_name(aside.name + suffix))
    try:
        os.replace(copy, db)
    except OSError:
        if not linked:
            os.replace(aside, db)
        copy.unlink(missing_ok=True)
        raise
    return [f"moved the {why} record to {aside}"]


def describe(root: str | Path) -> str:
    """The snapshots of a root, for `tprbench record snapshots`."""
    snaps = snapshots(Path(root))
    if not snaps:
        return f"no snapshots in {Path(root) / SNAPSHOT_DIR}"
    return "\n".join(f"{s}  {s.stat().st_size / 2**20:.1f} MB  {json.dumps(quick_check(s) or 'ok')}" for s in snaps)
