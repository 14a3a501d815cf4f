"""Files a process writes for itself and removes when it is done, named so that what a killed
process left behind can be told from what a live one is writing.

A new SQLite store is built on a temporary file (harness.record.writer.create_sqlite_store), a
restore builds its copy beside the record and a snapshot is copied to a temporary file before it
is renamed (harness.record.guard); a driver marks the record "changed since its last snapshot".
A SIGKILL leaves them behind, and nothing else ever removes them. Each is named
`.<file>.<what>-<host>-<pid>`, so the next driver (and `tprbench record restore`) removes those
of processes that are gone: on this host, a pid that no longer runs. A file of another host
(a run directory on a shared file system), or of a pid that runs — even one reused by an
unrelated process — is never touched.

Names written before this scheme: `.mlflow.db.creating-<pid>` is read as this host's; the ones
with no pid (`.mlflow.db.restore.tmp`, `snapshots/.mlflow-*.db.tmp`) are removed only when no
process here has them open and they have not changed for `LEGACY_IDLE` seconds (an older
driver still running writes them continuously while it copies).
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

from .lease import process_start

HOST = socket.gethostname()
LEGACY_IDLE = 600.0
CHANGED = "changed"  # a driver's "record changed since the last snapshot" mark (harness.record.guard)
_SIDE = r"(?:-journal|-wal|-shm)?"  # SQLite's files beside a database being written
_OWNED = re.compile(rf"^\.(?P<target>.+)\.(?P<what>creating|restore|snapshot|changed)-(?P<host>.+)-(?P<pid>\d+){_SIDE}$")
_OLD_CREATING = re.compile(rf"^\.(?P<target>.+)\.creating-(?P<pid>\d+){_SIDE}$")
_OLD_NO_PID = re.compile(rf"^\.(.+\.restore|mlflow-.+\.db)\.tmp{_SIDE}$")


def own(path: Path, what: str) -> Path:
    """This process's temporary file for `path` (`what`: creating, restore, snapshot, changed)."""
    return path.with_name(f".{path.name}.{what}-{HOST}-{os.getpid()}")


def owner(path: Path) -> tuple[str, str, int] | None:
    """(what, host, pid) of a file named by `own` (or by the older `.X.creating-PID`), or of SQLite's
    journal beside one, else None."""
    found = _OWNED.match(path.name)
    if found:
        return found["what"], found["host"], int(found["pid"])
    found = _OLD_CREATING.match(path.name)
    return ("creating", HOST, int(found["pid"])) if found else None


def gone(host: str, pid: int) -> bool:
    """Whether the process that wrote a file is known to be gone: only a pid of this host can be asked."""
    return host == HOST and pid != os.getpid() and process_start(pid) is None


def marks(folder: Path, target: str) -> list[tuple[Path, bool]]:
    """The "changed" marks of `target` in `folder`, each with whether its process is gone."""
    out = []
    for path in _entries(folder):
        who = owner(path)
        if who is not None and who[0] == CHANGED and path.name.startswith(f".{target}.{CHANGED}-"):
            out.append((path, gone(who[1], who[2])))
    return out


def sweep(folders: list[Path]) -> list[Path]:
    """Remove the temporary files in `folders` left by processes that are gone (not the "changed"
    marks: a snapshot settles those); returns the files removed."""
    removed = []
    for folder in dict.fromkeys(Path(f) for f in folders):
        for path in _entries(folder):
            who = owner(path)
            dead = _legacy_dead(path) if who is None else who[0] != CHANGED and gone(who[1], who[2])
            if dead:
                try:
                    path.unlink()
                    removed.append(path)
                except OSError:  # removed meanwhile, or a read-only root: left as it is
                    pass
    return removed


def _entries(folder: Path) -> list[Path]:
    try:
        return [p for p in Path(folder).iterdir() if p.name.startswith(".")]
    except OSError:  # no such folder (yet), or unreadable
        return []


def _legacy_dead(path: Path) -> bool:
    """A temporary file named without a pid (older versions): dead when idle and open nowhere here."""
    if not _OLD_NO_PID.match(path.name):
        return False
    try:
        if time.time() - path.stat().st_mtime < LEGACY_IDLE:
            return False
    except OSError:
        return False
    return not _open_here(path)


def _open_here(path: Path) -> bool:
    """Whether a process of this host that we may inspect has `path` open."""
    target = str(path.resolve())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or another user's
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
    return False
