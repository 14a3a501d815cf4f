"""Real small disks and real commands for the record's fault tests (docs/reliability.md).

`small_disk` mounts a size-limited tmpfs (root only: the test skips, saying why, where mounting
is not allowed) and unmounts it afterwards; `fill` leaves a chosen number of bytes free on it;
`tprbench` runs the installed command in a process of its own, as a user types it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ray_helpers import REPO, TPRBENCH, ray_environ


@contextlib.contextmanager
def small_disk(where: Path, size: str = "3m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` for the block (skips the test where mounting is not allowed)."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with mount rights): {done.stderr.strip()[:200]}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)  # a process still holds a file there


def fill(disk: Path, leave: int) -> Path:
    """A file that leaves about `leave` bytes free on `disk`'s file system; returns it."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(free - leave, 0))
    return filler


def tprbench(*argv: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`tprbench ARGV...` in its own process (its output captured)."""
    return subprocess.run(
        [TPRBENCH, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env={**os.environ, **ray_environ(), "COLUMNS": "200", **(env or {})},
    )


def one_line(err: str) -> str:
    """The only non-empty line of `err` (fails on more, or on a traceback)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
