"""Before a driver writes anything: do the MLflow store and the Optuna storage answer at all?

A wrong store address is not an outage. Retried as one (harness.record.retry.with_retry), a missing
directory, an unknown scheme, a refused connection or a bad password cost the user minutes of
retry messages, and left an `mlflow.db` and a RUNNING study run behind. So `tprbench run`
contacts each store once, with a short timeout, before anything is created; a store that does
not answer is one line at once (`StoreRefused`, exit 2). Only a store that answered and then
stopped answering is retried (the driver's writes, harness.record.writer).

Every command that opens a store checks it the same way (`check_stores`): the readers too
(`study show`, `report`, `compare`, `transfer`, `gradients`, `interpret`), which on a dead
server used to wait out MLflow's own retries (248 s for `study show`, then five chained
tracebacks). A reader does not need a SQLite file's directory to exist (`reading=True`: it
says "no record" itself); a server must answer as MLflow does, not just answer: a plain web
server, or one answering 404 to MLflow's API, is not a tracking server. A URI without a scheme is
a path, MLflow's file store, which MLflow 3 refuses: said at once, before any folder is made.
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


PROBE = "/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default"  # the first call every reader makes


def _http_headers() -> dict[str, str]:
    """The credentials MLflow's client would send (its environment variables), so the probe is
    answered as the client's own calls will be."""
    import base64
    import os

    token, user = os.environ.get("MLFLOW_TRACKING_TOKEN"), os.environ.get("MLFLOW_TRACKING_USERNAME")
    if token:
        return {"Authorization": f"Bearer {token}"}
    if user:
        pair = f"{user}:{os.environ.get('MLFLOW_TRACKING_PASSWORD', '')}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    return {}


def _tls_context():
    """TLS as MLflow's client verifies it (MLFLOW_TRACKING_INSECURE_TLS, MLFLOW_TRACKING_SERVER_CERT_PATH)."""
    import os
    import ssl

    if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
        return ssl._create_unverified_context()  # noqa: S323 (the user asked MLflow for it)
    return ssl.create_default_context(cafile=os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)


def _is_mlflow_answer(status: int, body: bytes) -> bool:
    """MLflow's REST API answers `get-by-name` with a JSON object: the experiment (200), or an
    `error_code` (404 RESOURCE_DOES_NOT_EXIST when there is no experiment `Default`)."""
    import json

    try:
        answer = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(answer, dict) and ("experiment" in answer if status == 200 else "error_code" in answer)


def _http_contact(option: str, url: str) -> None:
    """One call of MLflow's REST API: a tracking server answers it in JSON; 401/403 is a wrong or
    missing credential; anything else (a web server that is not MLflow, a 404 page) is refused."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url.rstrip("/") + PROBE, headers=_http_headers())
    context = _tls_context() if url.lower().startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=CONTACT_TIMEOUT, context=context) as answer:
            status, kind, body = answer.status, answer.headers.get_content_type(), answer.read(1 << 16)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise _refused(option, url, f"authentication refused (HTTP {exc.code})") from None
        status, kind, body = exc.code, exc.headers.get_content_type(), exc.read(1 << 16)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        why = getattr(reason, "strerror", None) or str(reason)
        raise _refused(option, url, f"no answer ({why})") from None
    if not _is_mlflow_answer(status, body):
        raise _refused(option, url, f"it answers, but not as an MLflow tracking server (GET {PROBE.split('?')[0]}: HTTP {status}, {kind})")


def _path_store(option: str, uri: str, scheme: str) -> None:
    """A path (or file://): MLflow's file store, which MLflow 3 refuses unless MLFLOW_ALLOW_FILE_STORE
    is set; a path with spaces ("not a url") is the usual way to end up here."""
    import os

    if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in ("true", "1"):
        raise _refused(
            option,
            uri,
            "not a tracking URI: a path is MLflow's file store, which MLflow refuses (MLFLOW_ALLOW_FILE_STORE); "
            "use sqlite:///PATH/mlflow.db, postgresql://… or http(s)://an MLflow server",
        )
    path = Path(uri[len("file://") :] if scheme == "file" else uri)
    if not path.parent.is_dir():
        raise _refused(option, uri, f"the directory {path.parent} does not exist")


def check_tracking(uri: str, reading: bool = False, option: str = "--tracking-uri") -> None:
    """The MLflow tracking URI answers (or its SQLite file can be created where it says; a reader
    needs neither: a missing file is "no record", said by the reader)."""
    scheme = scheme_of(uri)
    if len(scheme) == 1:  # a Windows drive letter is not a scheme
        scheme = ""
    if scheme not in TRACKING_SCHEMES:
        raise _refused(option, uri, f"unknown scheme {scheme!r} (use sqlite:///…, postgresql://…, http(s)://an MLflow server)")
    if scheme == "sqlite":
        if not reading:
            _sqlite_dir(option, uri)
    elif scheme in SQL_SCHEMES:
        _sql_contact(option, uri)
    elif scheme in ("http", "https"):
        _http_contact(option, uri)
    else:
        _path_store(option, uri, scheme)


def check_storage(url: str, reading: bool = False) -> None:
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
        if not reading:
            _sqlite_dir("--storage", url)
        return  # SQLite answers once its directory exists (the file is the storage's to create)
    _sql_contact("--storage", url)


_answered: set[tuple[str, str, bool]] = set()  # (which, address, reading) this process found answering


def check_stores(tracking_uri: str | None, storage_url: str | None = None, reading: bool = False, option: str = "--tracking-uri") -> None:
    """The stores a command opens, checked before it opens them: the Optuna storage first (nothing of
    it is created by the check), then the MLflow tracking URI. None: the default under --root, a
    file of ours (nothing to contact). `reading`: a reader's check (a SQLite file's directory need
    not exist). `option`: how the command names the tracking URI in its errors. Each address is
    contacted once per process (`run` checks before it makes --root, then the driver's preflight)."""
    for which, address in (("storage", storage_url), ("tracking", tracking_uri)):
        key = (which, address or "", reading)
        if address is None or key in _answered:
            continue
        if which == "storage":
            check_storage(address, reading=reading)
        else:
            check_tracking(address, reading=reading, option=option)
        _answered.add(key)
