"""Freed memory kept for reuse in a training process (Linux with glibc; elsewhere nothing changes).

Why: glibc's malloc serves every block above its mmap threshold (which cannot be raised past
32 MB on 64-bit) with a fresh `mmap` and unmaps it on `free`, so a tensor of that size made anew
every batch is page-faulted in again every batch, and trimming returns the heap's top to the
system in the same way. TPR-RNN's per-step memories at bAbI's single-task sizes are ~40 MB a
batch: the page faults were a quarter of its training step (docs/benchmarks.md). With `mmap`
off for malloc (M_MMAP_MAX = 0) and trimming off (M_TRIM_THRESHOLD at its maximum), freed blocks
stay in the heap and the next batch reuses them.

The cost: a process keeps its peak heap until it exits. A training process (a Ray worker, which
runs one trial after another; `tprbench train`) needs that peak again at its next batch anyway.
Set TPRBENCH_MALLOC=0 to leave glibc's defaults (e.g. to compare). Numbers are unchanged: only
where memory comes from changes, not what is computed in it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

ENV = "TPRBENCH_MALLOC"
M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_MAX = -4
_applied: bool | None = None  # once per process: None = not tried yet


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory (once per process); True if it is in effect."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if os.environ.get(ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        if not hasattr(libc, "gnu_get_libc_version"):  # glibc only: musl and others have no such mallopt parameters
            return False
    except OSError:
        return False
    return libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
