"""Committed records are gzip-compressed: `records/<study>/mlflow.db.gz`, read through a cached copy.

Why: the SQLite records committed under records/ made the tracked tree 77 MB, and the tool that
copies the working tree to a GPU machine refuses a tree over 64 MiB. gzip shrinks a record about
7x (babi-single-10k: 15.5 MB → 2.4 MB). `tprbench record save` writes the record as
`mlflow.db.gz` (`compress`: gzip with mtime 0 and no file name, so the same database gives the
same bytes and an unchanged record is no diff); `record load` puts a plain `mlflow.db` into the
new run directory.

SQLite cannot read a compressed file, and a committed folder must not change when it is read (a
decompressed `mlflow.db` beside the `.gz` would be a 15 MB untracked file, and a reader writing
into the checkout can race the person committing it). So a command that only reads a root
holding `mlflow.db.gz` and no `mlflow.db` reads `reading_root(root)` instead: a cache folder,
`$XDG_CACHE_HOME/tprbench/records/<sha256 of the .gz>/` (`~/.cache/...`), holding the
decompressed `mlflow.db` — written once (temporary file, then rename, so a killed or concurrent
reader never leaves half a database under the name), reused while the `.gz` is unchanged, and
where that reader's own caches (the summary of ended runs, the record-check stamps) go too. A
command that writes a record refuses such a root (`refuse_writing`): it would start a second,
empty record beside the committed one.
"""

from __future__ import annotations

import gzip
import os
import shutil
import zlib
from pathlib import Path

from tasks.paths import file_sha256

from .guard import RecordCorrupt
from .layout import DB, GZ, user_cache

CACHE = "records"  # under $XDG_CACHE_HOME/tprbench (~/.cache/tprbench: layout.user_cache)
LEVEL = 9
GZIP_DAMAGE = (gzip.BadGzipFile, EOFError, zlib.error)


class CompressedRecordError(Exception):
    """A compressed record used where it cannot be (a writer's root; an unwritable cache): one line, exit 2."""

    user_error = True


def is_compressed(root: Path) -> bool:
    """`root` holds a committed record as `mlflow.db.gz` only (a plain `mlflow.db` is read as it is).

    An empty `mlflow.db` beside the `.gz` is refused (CompressedRecordError). `sqlite3.connect` on
    the path creates one; read as the record, it made `tprbench papers` fail with "no such table:
    experiments", and a writer would start a second, empty record over the committed one."""
    root = Path(root)
    if not (root / GZ).is_file():
        return False
    db = root / DB
    if db.is_file() and db.stat().st_size == 0:
        raise CompressedRecordError(
            f"{db} is an empty file beside the committed record {root / GZ} (opening the path with sqlite3 creates one): "
            "remove it, then rerun (nothing was read or written)"
        )
    return not db.exists()


def stored_record(folder: Path) -> Path | None:
    """The record file in `folder`: its `mlflow.db`, else its `mlflow.db.gz`, else None."""
    folder = Path(folder)
    for name in (DB, GZ):
        if (folder / name).is_file():
            return folder / name
    return None


def compress(db: Path, out: Path) -> None:
    """Write `db` gzip-compressed to `out`, deterministically (mtime 0, no file name in the
    header), through a temporary file renamed over `out`."""
    tmp = out.with_name(out.name + ".tmp")
    with open(db, "rb") as src, open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=LEVEL, mtime=0) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    tmp.replace(out)


def decompress(gz: Path, out: Path) -> None:
    """Write the database in `gz` to `out` (removed again if `gz` is damaged: one line naming it)."""
    try:
        with gzip.open(gz, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except GZIP_DAMAGE as exc:
        out.unlink(missing_ok=True)
        raise RecordCorrupt(f"{gz}: the compressed record is damaged ({exc}); nothing was read. Take it again from git or save it again") from None
    except BaseException:
        out.unlink(missing_ok=True)
        raise


def cache_home() -> Path:
    return user_cache(CACHE)


def reading_root(root: Path) -> Path:
    """The run directory a command that only reads `root` reads: `root` itself, or, for a
    committed record holding only `mlflow.db.gz`, the cache folder holding its decompressed copy
    (the module's docstring says why). Nothing is written under `root`."""
    root = Path(root).expanduser()
    if not is_compressed(root):
        return root
    gz = root / GZ
    folder = cache_home() / file_sha256(gz)
    if not (folder / DB).is_file():
        _fill(gz, folder)
    return folder


def refuse_writing(root: Path, command: str) -> None:
    """Stop a command that would write a record under `root` when `root` is a compressed one."""
    if is_compressed(root):
        raise CompressedRecordError(
            f"{command}: {Path(root) / GZ} is a committed record, read-only; load it into a run directory first: "
            f"tprbench record load --from {root} --root DIR (nothing was changed)"
        )


def _fill(gz: Path, folder: Path) -> None:
    tmp = folder / f".{DB}.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        decompress(gz, tmp)
        tmp.chmod(0o444)  # the copy is read, never written
        tmp.replace(folder / DB)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CompressedRecordError(
            f"{gz}: cannot decompress it into {folder} ({exc.strerror or exc}); set XDG_CACHE_HOME to a writable folder"
        ) from None
