"""Optuna storage: one journal file by default, an RDB URL (e.g. PostgreSQL) on a cluster.

Optuna's guidance for parallel workers: the journal file backend is safe for several processes
on one machine (file locks), SQLite is not meant for many concurrent writers, and a cluster
without a shared file system wants a database server. Storage is passed around as a string so
Ray workers can open it themselves (they report intermediate values for pruning).
"""

from __future__ import annotations

from pathlib import Path

JOURNAL_PREFIX = "journal://"


def default_storage_url(root: Path) -> str:
    return JOURNAL_PREFIX + str((root / "optuna.journal").resolve())


def open_storage(url: str):
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if url.startswith(JOURNAL_PREFIX):
        path = url[len(JOURNAL_PREFIX):]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(path))
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
