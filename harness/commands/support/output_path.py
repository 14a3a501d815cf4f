"""Where a command writes its output: checked before the command does anything, nothing created.

`report --out` pointed at an existing file, `compare --csv` under a file, `papers --out` in a
read-only folder, `record snapshot --root /dev/null`: each ended in a Python traceback (exit 1),
some after reading a whole record first. Every command that writes files checks each place it
writes with `check_output_path` first: a place that cannot take the output is one line naming the
option, the path and why (`OutputPathError`, exit 2), and nothing is created by the check.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class OutputPathError(ValueError):
    """An output path the command cannot write. One line, exit 2 (harness.cli)."""

    user_error = True


def _kind(mode: int) -> str:
    """What a file that is not the expected one is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _writable(path: Path) -> bool:
    """Whether this process may create and replace entries in folder `path`. os.access sees a
    read-only mount (EROFS) and the permission bits; for root only the mount counts, as for writes."""
    return os.access(path, os.W_OK | os.X_OK)


def _existing_ancestor(path: Path) -> Path:
    """The nearest ancestor of `path` that exists (a file too: then nothing can be made below it)."""
    for parent in path.parents:
        if os.path.lexists(parent):
            return parent
    return Path(path.anchor or ".")


def check_output_path(path: str | os.PathLike, option: str, folder: bool = True) -> Path:
    """`path` can receive the command's output: a folder (`folder=True`: files are written into it)
    or one file (`folder=False`: it is created or replaced; /dev/null and a pipe take it as a
    stream, as every Unix tool's output does). It either exists as that, writable, or
    can be created: its nearest existing ancestor is a writable folder. Returns the path as given,
    user-expanded; raises OutputPathError (one line naming `option`) otherwise. Creates nothing."""
    given = Path(path).expanduser()
    want = "a folder" if folder else "a file"

    def refuse(why: str) -> OutputPathError:
        return OutputPathError(f"{option} {path}: {why}; give {want} this command may write")

    try:
        st = os.stat(given)
    except (FileNotFoundError, NotADirectoryError):  # not there yet, or under a file (found below)
        st = None
    except OSError as exc:
        raise refuse(f"cannot be used ({exc.strerror or exc})") from None
    if st is not None:
        if folder and not stat.S_ISDIR(st.st_mode):
            raise refuse(f"is {_kind(st.st_mode)}, not a folder")
        if not folder and not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            raise refuse(f"is {_kind(st.st_mode)}, not a file")  # a character device or a pipe takes a stream: /dev/null, /dev/stdout
        if folder and not _writable(given):
            raise refuse("the folder is not writable (its permissions, or a read-only file system)")
        if not folder and not (os.access(given, os.W_OK) and _writable(given.parent)):
            raise refuse("the file or its folder is not writable (permissions, or a read-only file system)")
        return given
    ancestor = _existing_ancestor(given)
    try:
        mode = os.stat(ancestor).st_mode
    except OSError as exc:
        raise refuse(f"cannot be created under {ancestor} ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(mode):
        raise refuse(f"cannot be created: {ancestor} is {_kind(mode)}, not a folder")
    if not _writable(ancestor):
        raise refuse(f"cannot be created: the folder {ancestor} is not writable (its permissions, or a read-only file system)")
    return given
