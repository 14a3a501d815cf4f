"""Where real data lives: an explicit path, else $TPRBENCH_DATA, never a network download.

A data path is checked against the files its task expects before anything is read, generated
or trained (the data root once given for `logical_entailment/` was taken as "no data" and
100k pairs were generated without a word): a folder with none of them is one error naming what
was looked for and, when a sub-folder holds them, `did you mean <that folder>?`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from .errors import DataError

DATA_ENV = "TPRBENCH_DATA"


def file_sha256(path: str | os.PathLike) -> str:
    """A file's SHA-256 in hex, read in 1 MiB blocks (a record or a checkpoint need not fit in memory
    twice). One function for every hash of a file: data provenance, saved checkpoints, cached records."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


#: How deep below a data path `expect_files` looks for the folder the user meant (the data root
#: holds each dataset one level down; two levels allow e.g. a checkout's parent given for it).
SEARCH_DEPTH = 2
#: At most this many folders are scanned for a did-you-mean, so a huge tree answers in seconds.
SEARCH_LIMIT = 2000


def _holds(folder: Path, patterns: Sequence[str]) -> bool:
    return any(next(folder.glob(p), None) is not None for p in patterns)


def meant_folder(path: Path, patterns: Sequence[str], depth: int = SEARCH_DEPTH) -> Path | None:
    """The first sub-folder of `path` (breadth first, by name, hidden ones skipped, `depth` levels)
    that holds a file matching one of `patterns`; None when there is none."""
    level, scanned = [path], 0
    for _ in range(depth):
        below = []
        for folder in level:
            try:
                subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for sub in subs:
                scanned += 1
                if scanned > SEARCH_LIMIT:
                    return None
                if _holds(sub, patterns):
                    return sub
                below.append(sub)
        level = below
    return None


def expect_files(what: str, data: str | os.PathLike, patterns: Sequence[str], how: str) -> Path:
    """The folder `data`, checked to hold at least one file matching `patterns` (globs relative to
    it, e.g. `validate.txt`, `en/qa*_train.txt`). Otherwise one DataError naming the folder, the
    files looked for and the sub-folder that has them (`did you mean …?`), else how to get them."""
    path = Path(data).expanduser()
    if not path.is_dir():
        raise DataError(f"{what}: directory {path} not found; {how}")
    if _holds(path, patterns):
        return path
    looked = ", ".join(patterns)
    meant = meant_folder(path, patterns)
    if meant is not None:
        raise DataError(f"{what}: {path} has none of the files the task reads ({looked}); did you mean {meant}?")
    raise DataError(f"{what}: {path} has none of the files the task reads ({looked}); {how}")


def corpus_folder(data: str | None, task: str, kinds: str, example: str, expected: Sequence[str] = ()) -> Path | None:
    """A text-corpus task's data folder (None: the task's default lookup under the data root).
    Corpora are never generated: `data = "generated"` is an error saying what to set instead; a
    folder that does not exist, or holds none of the `expected` files, is one line naming it and
    the sub-folder that has them (lm, autoencode)."""
    if data == "generated":
        raise DataError(f"{task}: there is no generated corpus; set data to a {kinds} folder, e.g. {example}")
    if data in (None, ""):
        return None
    path = Path(data).expanduser()
    if not path.is_dir():
        raise DataError(f"{task}: corpus folder {path} not found")
    if expected:
        expect_files(f"{task} data", path, expected, f"set data to a {kinds} folder, e.g. {example}")
    return path


def require_file(path: str | os.PathLike, what: str, how: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"{what}: file {p} not found; {how}")
    return p


def dataset_dir(
    what: str, data_dir: str | os.PathLike | None, folder_names: tuple[str, ...], how: str, root: str | os.PathLike | None = None
) -> Path:
    """The folder of one dataset: `data_dir` when given, else the first of `folder_names` that
    exists under the data root (`root`, else $TPRBENCH_DATA); one clear error otherwise."""
    if data_dir is not None:
        return require_dir(data_dir, what, how)
    base = data_root(root)
    if base is None:
        raise DataError(f"{what}: no data directory; pass data_dir=... or files={{split: path}}, or set {DATA_ENV} to the shared data folder; {how}")
    tried = [base / name for name in folder_names]
    found = next((d for d in tried if d.is_dir()), None)
    if found is None:
        hint = ""
        if base.is_dir():
            meant = meant_folder(base, folder_names, depth=1)
            hint = f"; did you mean {meant} as the data root?" if meant is not None else ""
        raise DataError(f"{what}: none of {', '.join(map(str, tried))} exists{hint}; {how}")
    return found
