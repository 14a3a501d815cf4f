"""Where real data lives: an explicit path, else $TPRBENCH_DATA, never a network download."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import DataError

DATA_ENV = "TPRBENCH_DATA"


def data_root(explicit: str | os.PathLike | None = None) -> Path | None:
    """The configured data root (explicit argument first, then $TPRBENCH_DATA), or None."""
    value = explicit if explicit is not None else os.environ.get(DATA_ENV)
    return Path(value).expanduser() if value else None


def require_dir(path: str | os.PathLike, what: str, how: str) -> Path:
    """A directory that must exist; otherwise one clear error naming it and how to get it."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise DataError(f"{what}: directory {p} not found; {how}")
    return p


def require_file(path: str | os.PathLike, what: str, how: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"{what}: file {p} not found; {how}")
    return p
