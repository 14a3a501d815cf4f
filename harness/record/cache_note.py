"""One line, once per process, when a cache beside the record cannot be written.

The caches under `<root>/cache/` (the summary of ended runs, the record-check stamps) only save
time: every reader works without them. An archived study on a read-only mount (or a root the
user may not write) must still give its tables, so a failed cache write is not an error. It is
not silent either: the user learns once why the next read will be as slow as this one.

In harness/record/: the record's caches (guard, summary) are its only users.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

_said: list[str] = []


READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def unsaved(where: Path, exc: OSError) -> None:
    """Say (once per process, on stderr) that the cache at `where` could not be saved because the
    root is read-only (or not the user's). Other failures (a full disk: harness.diskfull has its
    own one line for the command that fills it) stay silent, as a cache's failures always were."""
    if _said or exc.errno not in READ_ONLY:
        return
    why = exc.strerror or type(exc).__name__
    line = (
        f"note: {where}: the cache could not be saved ({why}); nothing else needed writing: the record was "
        "read as it is, and the next command reads it again in full"
    )
    _said.append(line)
    print(line, file=sys.stderr)


def said() -> list[str]:
    """The note given so far in this process (tests)."""
    return list(_said)
