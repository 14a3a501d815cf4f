"""Before a driver writes anything: do the MLflow store and the Optuna storage answer at all?

A wrong store address is not an outage. Retried as one (harness.record.retry.with_retry), a missing
directory, an unknown scheme, a refused connection or a bad password cost the user minutes of
retry messages, and left an `mlflow.db` and a RUNNING study run behind. So `tprbench run`
contacts each store once, with a short timeout, before anything is created; a store that does
not answer is one line at once (`StoreRefused`, exit 2). Only a store that answered and then
stopped answering is retried (the driver's writes, harness.record.writer).
"""

from __future__ import annotations

from pathlib import Path

from .sources import SQL_SCHEMES, scheme_of, sqlite_path
from .storage import JOURNAL_PREFIX, StorageError, _check_driver, display_url

CONTACT_TIMEOUT = 5.0  # seconds a store gets to answer the first contact
TRACKING_SCHEMES = (*SQL_SCHEMES, "http", "https", "file", "")


class StoreRefused(RuntimeError):
    """A store that never answered: its address is wrong (or it is down). One line, exit 2."""

    user_error = True


def _refused(option: str, url: str, why: str) -> StoreRefused:
    return StoreRefused(
        f"{option} {display_url(url)}: {why}; nothing was created or recorded (not retried: this "
        "store never answered). Check the address, or start the store, and rerun"
    )


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:200]


def _sqlite_dir(option: str, url: str) -> None:
    path = sqlite_path(url)
    if path is not None and not path.parent.is_dir():
        raise _refused(option, url, f"the directory {path.parent} does not exist")


def _sql_contact(option: str, url: str) -> None:
    """One connection to a database server (nothing is created in it)."""
    import sqlalchemy as sa

    try:
        _check_driver(url)  # a bad URL or a missing database driver: its own line (harness.record.storage.StorageError)
    except StorageError as exc:
        raise StorageError(str(exc).replace("--storage", option, 1)) from None
    except ValueError as exc:  # SQLAlchemy parses the URL lazily: a port that is not a number
        raise _refused(option, url, f"not a database URL ({exc})") from None
    args = {"connect_timeout": int(CONTACT_TIMEOUT)} if scheme_of(url) in ("postgresql", "postgres", "mysql") else {}
    engine = sa.create_engine(url, connect_args=args, poolclass=sa.pool.NullPool)
    try:
        engine.connect().close()
    except Exception as exc:
        raise _refused(option, url, f"cannot connect ({_first_line(exc)})") from None
    finally:
        engine.dispose()


def _http_contact(url: str) -> None:
    """An MLflow server answers `GET /health`; 401/403 is a wrong or missing credential."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=CONTACT_TIMEOUT):
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise _refused("--tracking-uri", url, f"authentication refused (HTTP {exc.code})") from None
        return  # it answered: an older server without /health, or a proxy in front of it
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        why = getattr(reason, "strerror", None) or str(reason)
        raise _refused("--tracking-uri", url, f"no answer ({why})") from None


def check_tracking(uri: str) -> None:
    """The MLflow tracking URI answers (or its SQLite file can be created where it says)."""
    scheme = scheme_of(uri)
    if len(scheme) == 1:  # a Windows drive letter is not a scheme
        scheme = ""
    if scheme not in TRACKING_SCHEMES:
        raise _refused("--tracking-uri", uri, f"unknown scheme {scheme!r} (use sqlite:///…, postgresql://…, http(s)://an MLflow server)")
    if scheme == "sqlite":
        _sqlite_dir("--tracking-uri", uri)
    elif scheme in SQL_SCHEMES:
        _sql_contact("--tracking-uri", uri)
    elif scheme in ("http", "https"):
        _http_contact(uri)
    elif scheme in ("file", ""):
        path = Path(uri[len("file://") :] if scheme == "file" else uri)
        if not path.parent.is_dir():
            raise _refused("--tracking-uri", uri, f"the directory {path.parent} does not exist")


def check_storage(url: str) -> None:
    """The Optuna storage URL answers (a journal file needs only its directory, made by `run`)."""
    if url.startswith(JOURNAL_PREFIX):
        return
    scheme = scheme_of(url)
    if scheme not in SQL_SCHEMES:
        raise _refused(
            "--storage",
            url,
            f"unknown scheme {scheme!r} (use postgresql://…, mysql://…, sqlite:///…, or leave it out for the journal file under --root)",
        )
    if scheme == "sqlite":
        _sqlite_dir("--storage", url)
        return  # SQLite answers once its directory exists (the file is the storage's to create)
    _sql_contact("--storage", url)


def check_stores(tracking_uri: str, storage_url: str) -> None:
    """Both stores, the Optuna storage first (nothing of it is created by the check)."""
    check_storage(storage_url)
    check_tracking(tracking_uri)
