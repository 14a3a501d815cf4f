"""Out of disk space: recognised at once, never retried, said in one line.

A full disk shows up in three shapes: `OSError` with errno ENOSPC (or EDQUOT, a quota) from a
plain write (data cache, checkpoint, journal), SQLite's "database or disk is full" (SQLITE_FULL)
from the MLflow store or an Optuna database — which MLflow re-raises as an MlflowException it
marks "temporarily unavailable" — and the same text inside a worker's result. None of them goes
away by waiting, so the store retry (harness.record.retry.with_retry) must not wait for them: the
command stops with `DiskFull`, naming the path and how much space is free there. Everything
recorded before stays recorded; a run that hit the full disk is not recorded (its Optuna trial
stays running, its seed stays to do), so the same command after space is freed resumes it.

At harness/'s root, below every package: the record (stores, leases, retries), the driver and its
worker, and the CLI's last line all use it.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

_CODES = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded", "sqlite_full")


class DiskFull(RuntimeError):
    """Out of disk space (or quota). One line, exit 2: free space, rerun the same command."""

    user_error = True


def exception_chain(exc: BaseException):
    """`exc`, then what it was raised from or while handling (`__cause__`, else `__context__`), to the first."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_disk_full(exc: BaseException | str | None) -> bool:
    """Whether an exception (anywhere in its cause/context chain) or a message says out of space."""
    if exc is None:
        return False
    if isinstance(exc, str):
        return any(t in exc.lower() for t in _TEXTS)
    for e in exception_chain(exc):
        if isinstance(e, OSError) and e.errno in _CODES:
            return True
        if any(t in str(e).lower() for t in _TEXTS):
            return True
    return False


def failed_path(exc: BaseException) -> str | None:
    """The file the failed write was for, when the exception says (OSError.filename)."""
    for e in exception_chain(exc):
        if isinstance(e, OSError) and e.filename:
            return str(e.filename)
    return None


def free_space(path: str | Path) -> int | None:
    """Free bytes on the filesystem of `path` (its nearest existing ancestor), None if unknown."""
    p = Path(path).expanduser()
    for candidate in (p, *p.parents):
        try:
            if candidate.exists():
                return shutil.disk_usage(candidate).free
        except OSError:
            return None
    return None


def _size(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def disk_full_error(exc: BaseException | None, where: str | Path, what: str = "") -> DiskFull:
    """The one line for an out-of-space error at `where` (a path; the exception's own file wins)."""
    path = (failed_path(exc) if exc is not None else None) or str(where)
    doing = f" while writing {what}" if what else ""
    return DiskFull(
        f"{path}: out of disk space{doing} ({_size(free_space(path))} free on its filesystem); nothing "
        "recorded so far is lost: free some space (a study's run directory needs room for its record, "
        "checkpoints and data cache) and rerun the same command to resume"
    )
