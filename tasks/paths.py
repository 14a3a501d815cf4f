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


def corpus_folder(data: str | None, task: str, kinds: str, example: str) -> Path | None:
    """A text-corpus task's data folder (None: the task's default lookup under the data root).
    Corpora are never generated: `data = "generated"` is an error saying what to set instead, and
    a folder that does not exist is one line naming it (lm, autoencode)."""
    if data == "generated":
        raise DataError(f"{task}: there is no generated corpus; set data to a {kinds} folder, e.g. {example}")
    if data in (None, ""):
        return None
    path = Path(data).expanduser()
    if not path.is_dir():
        raise DataError(f"{task}: corpus folder {path} not found")
    return path


def require_file(path: str | os.PathLike, what: str, how: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"{what}: file {p} not found; {how}")
    return p


def dataset_dir(what: str, data_dir: str | os.PathLike | None, folder_names: tuple[str, ...], how: str,
                root: str | os.PathLike | None = None) -> Path:
    """The folder of one dataset: `data_dir` when given, else the first of `folder_names` that
    exists under the data root (`root`, else $TPRBENCH_DATA); one clear error otherwise."""
    if data_dir is not None:
        return require_dir(data_dir, what, how)
    base = data_root(root)
    if base is None:
        raise DataError(f"{what}: no data directory; pass data_dir=... or files={{split: path}}, or set "
                        f"{DATA_ENV} to the shared data folder; {how}")
    tried = [base / name for name in folder_names]
    found = next((d for d in tried if d.is_dir()), None)
    if found is None:
        raise DataError(f"{what}: none of {', '.join(map(str, tried))} exists; {how}")
    return found
