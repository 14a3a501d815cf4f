"""A new SQLite store is a copy of an empty one, migrated once per MLflow version on this machine.

Why: MLflow creates a SQLite store by running all of its alembic migrations, each in its own
transaction: 2.3-4.2 s of CPU a store on this project's 2-core machine (measured 2026-11-28,
niced beside a study; a copy: 0.01 s), for every new run root and ~80 times in one CI run. One
MLflow version's migrations give the same schema every time, so the first store made here leaves
an empty copy at `$XDG_CACHE_HOME/tprbench/mlflow-store/mlflow-<version>.db` and the next ones
copy that file (~1 MB) instead of migrating. (CI's wall time did not measurably drop with it:
37:24 before, 37:53 after, within run-to-run noise; its tests mostly wait.)

The copy keeps MLflow's schema and its constant rows (the alembic version, the default
workspace), not the Default experiment (id 0): MLflow writes that row with the artifact root of
the process that makes the store (./mlruns under its working directory, or a server's root) and
the time, and adds it again whenever it opens a store without one, so the first MLflow client
on the new store writes it exactly as a migrating one would have. A copy that cannot be read,
written or checked is skipped, and the store is migrated as before: the copy only saves time.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing, suppress
from importlib import metadata
from pathlib import Path

from .layout import user_cache

FOLDER = "mlflow-store"


def template_path() -> Path | None:
    """The empty store for the installed MLflow (None when MLflow's version cannot be read)."""
    try:
        version = metadata.version("mlflow")
    except metadata.PackageNotFoundError:
        return None
    return user_cache(FOLDER) / f"mlflow-{version}.db"


def copy_to(dest: Path) -> bool:
    """Put the empty store at `dest` (a new file); False, leaving nothing there, when there is
    no usable copy yet and the caller must migrate."""
    src = template_path()
    if src is None or not src.is_file():
        return False
    try:
        shutil.copyfile(src, dest)
    except OSError:
        Path(dest).unlink(missing_ok=True)
        return False
    try:
        _check(dest)
        return True
    except (sqlite3.Error, ValueError):  # a damaged copy: dropped, so the next migrated store replaces it
        Path(dest).unlink(missing_ok=True)
        with suppress(OSError):  # not ours to remove: the store is migrated all the same
            src.unlink(missing_ok=True)
        return False


def keep(store: Path) -> None:
    """Keep an empty copy of `store`, a store MLflow has just migrated and closed, for the next
    new store (written whole or not at all: two processes may race to write it)."""
    dest = template_path()
    if dest is None or dest.is_file():
        return
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.creating")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(store, tmp)
        with closing(sqlite3.connect(tmp)) as con:
            con.execute("DELETE FROM experiments WHERE experiment_id = 0")  # the Default experiment (the docstring)
            con.commit()
        _check(tmp)
        os.replace(tmp, dest)
    except (OSError, sqlite3.Error, ValueError):
        pass
    finally:
        with suppress(OSError):  # e.g. the cache folder could not be made
            tmp.unlink(missing_ok=True)


def _check(path: Path) -> None:
    """Raise ValueError unless `path` is a sound, migrated store with no experiment in it."""
    with closing(sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)) as con:
        (ok,) = con.execute("PRAGMA quick_check").fetchone()
        versions = con.execute("SELECT count(*) FROM alembic_version").fetchone()[0]
        experiments = con.execute("SELECT count(*) FROM experiments").fetchone()[0]
    if ok != "ok" or versions != 1 or experiments != 0:
        raise ValueError(f"{path}: not an empty migrated MLflow store (check {ok!r}, {versions} versions, {experiments} experiments)")
