"""A store that never answers is one line at once; only a store that stopped answering
is retried, and its messages tell the time really waited.

Each wrong address goes through `tprbench run` in this process against real sockets: a port
nothing listens on, a local HTTP server that refuses the credentials (401), and, where a
PostgreSQL server can be started (tests/servers.py), a wrong password. Each must end with exit
2 and one line within seconds, and leave nothing in the run directory (no mlflow.db, no journal,
no study run).
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.ray_helpers import write_study

# Seconds: the old code retried each of these for 120 s (278 s for an MLflow server). Measured
# 0.0-1.9 s each; the margin is for a loaded machine (35.9 s once at load 12, importing psycopg).
QUICK = 60.0


@pytest.fixture(scope="module", autouse=True)
def imported() -> None:
    """The imports a first contact needs, done before anything is timed (seconds on a busy machine)."""
    import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401

    import harness.commands.run  # noqa: F401
    import harness.driver.runner  # noqa: F401
    import harness.record.store_check  # noqa: F401


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(401)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def refusing_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


CASES = {
    "storage: missing directory": ("--storage", "sqlite:////nonexistent-31/dir/x.db", "does not exist"),
    "storage: unknown scheme": ("--storage", "foo://host/db", "unknown scheme 'foo'"),
    "storage: refused connection": ("--storage", "postgresql://u:p@127.0.0.1:{port}/db", "Connection refused"),
    "storage: not a URL": ("--storage", "postgresql://u:p@127.0.0.1:notaport/db", "--storage"),
    "tracking: missing directory": ("--tracking-uri", "sqlite:////nonexistent-31/dir/m.db", "does not exist"),
    "tracking: unknown scheme": ("--tracking-uri", "foo://bar", "unknown scheme 'foo'"),
    "tracking: refused connection (server)": ("--tracking-uri", "http://127.0.0.1:{port}", "Connection refused"),
    "tracking: refused connection (database)": ("--tracking-uri", "postgresql://u:p@127.0.0.1:{port}/db", "Connection refused"),
    "tracking: authentication": ("--tracking-uri", "{refusing}", "authentication refused (HTTP 401)"),
}


def _run_once(tmp_path: Path, option: str, value: str, capsys) -> tuple[int, str, float, Path]:
    from harness.cli import main

    study = write_study(tmp_path, "perm", ["gru"], trials=0, seeds=1, epochs=1)
    root = tmp_path / "root"
    t0 = time.monotonic()
    rc = main(["run", str(study), "--root", str(root), "--quiet", option, value])
    return rc, capsys.readouterr().err, time.monotonic() - t0, root


@pytest.mark.parametrize("case", list(CASES))
def test_a_store_that_never_answers_is_one_line_at_once(case, tmp_path, capsys, refusing_server) -> None:
    option, value, why = CASES[case]
    value = value.format(port=_closed_port(), refusing=refusing_server)
    rc, err, seconds, root = _run_once(tmp_path, option, value, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    print(f"\n{case}: rc {rc} in {seconds:.1f} s: {lines[-1] if lines else ''}")
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"tprbench run: error: {option} ") and why in lines[0], lines[0]
    assert "Traceback" not in err and seconds < QUICK
    assert not root.exists() or not any(root.iterdir()), sorted(p.name for p in root.iterdir())  # nothing created


def test_a_wrong_password_is_one_line_at_once(tmp_path, capsys) -> None:
    from tests.servers import postgres_server, running, why_no_postgres

    reason = why_no_postgres()
    if reason:
        pytest.skip(reason)
    with running(lambda: postgres_server(tmp_path / "pg")) as pg:
        wrong = pg.info["url"].replace("tprbench@", "nobody31:wrong@", 1)  # a role the server does not know
        rc, err, seconds, root = _run_once(tmp_path, "--storage", wrong, capsys)
    assert rc == 2 and "cannot connect" in err and seconds < QUICK, err
    assert not (root / "mlflow.db").exists()


def test_a_store_that_stopped_answering_is_retried_and_says_the_real_wait() -> None:
    """Each call hangs 0.6 s before it fails (as an MLflow server call does until its timeout):
    the messages count that time, not only the pauses between calls."""
    import sqlite3

    from harness.record.retry import StoreUnavailable, is_transient, with_retry

    assert is_transient(sqlite3.OperationalError("database is locked"))  # its imports (MLflow's exceptions) done
    said: list[str] = []

    def hanging() -> None:
        time.sleep(0.6)
        raise sqlite3.OperationalError("database is locked")

    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        with_retry(hanging, "MLflow tracking store test", said.append, window=2.5)
    waited = time.monotonic() - t0
    assert said and all("giving up after 2 s" in s and "unavailable for" in s for s in said), said
    reported = float(str(info.value).split("unavailable for ", 1)[1].split(" s", 1)[0])
    assert abs(reported - waited) < 1.0, (reported, waited)
