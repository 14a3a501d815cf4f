"""Optuna storage: one journal file by default, an RDB URL (e.g. PostgreSQL) on a cluster.

Optuna's guidance for parallel workers: the journal file backend is safe for several processes
on one machine (file locks), SQLite is not meant for many concurrent writers, and a cluster
without a shared file system wants a database server. Storage is passed around as a string so
Ray workers can open it themselves (they report intermediate values for pruning).

`postgresql://…` needs a driver: SQLAlchemy 2.1 picks psycopg 3 for that scheme, shipped as the
`cluster` extra (`pip install -e ".[cluster]"`, which scripts/install.sh installs). Without it,
opening the storage is one line naming the URL (password hidden) and the install command.
"""

from __future__ import annotations

from pathlib import Path

JOURNAL_PREFIX = "journal://"
DRIVER_HINT = "pip install 'tprbench[cluster]' (psycopg 3, what SQLAlchemy uses for postgresql://)"


class StorageError(RuntimeError):
    """An Optuna storage URL that cannot be used as given (e.g. its database driver is missing)."""

    user_error = True


def default_storage_url(root: Path) -> str:
    return JOURNAL_PREFIX + str((root / "optuna.journal").resolve())


def display_url(url: str) -> str:
    """The URL as it may be printed: a password in it is hidden (`***`)."""
    if url.startswith(JOURNAL_PREFIX):
        return url
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: Optuna will say so when it is opened
        return url


def _check_driver(url: str) -> None:
    """Import the URL's database driver now, so a missing one is one clear line (Optuna's own
    message is "Failed to import DB access module", after a traceback through SQLAlchemy)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StorageError(f"--storage {url!r}: not a database URL ({exc}); e.g. postgresql://user@host:5432/optuna") from None
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        raise StorageError(f"--storage {display_url(url)}: unknown database {parsed.drivername!r} "
                           "(use postgresql://…, mysql://… or sqlite:///…)") from None
    except ImportError as exc:
        hint = DRIVER_HINT if parsed.get_backend_name() == "postgresql" else "install the database driver SQLAlchemy names"
        raise StorageError(f"--storage {display_url(url)}: the database driver is not installed "
                           f"({type(exc).__name__}: {exc}); {hint}") from None


def open_storage(url: str, create: bool = True):
    """The Optuna storage behind `url`. `create=False` (read-only callers such as `study show`)
    creates nothing: no journal file, no directory, no tables in a database."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if url.startswith(JOURNAL_PREFIX):
        path = url[len(JOURNAL_PREFIX):]
        if create:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(path))
    _check_driver(url)
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, skip_table_creation=not create)
    if not create:  # a reader says at once that it cannot connect (the driver retries instead: harness.tracking)
        from sqlalchemy.exc import OperationalError

        try:
            storage.engine.connect().close()
        except OperationalError as exc:
            first = (str(exc.orig) if exc.orig is not None else str(exc)).strip().splitlines()[0][:300]
            raise StorageError(f"--storage {display_url(url)}: cannot connect ({first})") from None
    return storage
