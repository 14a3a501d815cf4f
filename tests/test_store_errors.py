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


class _NotFound(_Refusing):
    """A server answering 404 to everything (a wrong port of a web server, a proxy without the route)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(404)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"not found")


class _LikeMlflow(_Refusing):
    """MLflow's REST API as `mlflow server` answers it (bodies copied from MLflow 3.17)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if "experiment_name=Default" in self.path:  # as if Default had been deleted
            body, code = b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Could not find experiment"}', 404
        else:
            body, code = b"", 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)


def _serve(handler: type[http.server.BaseHTTPRequestHandler]):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module")
def refusing_server():
    server, url = _serve(_Refusing)
    yield url
    server.shutdown()


@pytest.fixture(scope="module")
def not_found_server():
    server, url = _serve(_NotFound)
    yield url
    server.shutdown()


@pytest.fixture(scope="module")
def plain_web_server(tmp_path_factory):
    """A real `python -m http.server` (a web server, not MLflow) on 127.0.0.1, in its own process."""
    import subprocess
    import sys
    import urllib.request

    port = _closed_port()
    folder = tmp_path_factory.mktemp("www")
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


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
    # issue 43 item 4: these three went through, and failed 10-13 s later in MLflow with a traceback
    "tracking: not a URL": ("--tracking-uri", "not a url", "not a tracking URI: a path is MLflow's file store"),
    "tracking: a web server that is not MLflow": (
        "--tracking-uri",
        "{plain}",
        "not as an MLflow tracking server (GET /api/2.0/mlflow/experiments/get-by-name: HTTP 404, text/html)",
    ),
    "tracking: a server answering 404": (
        "--tracking-uri",
        "{not_found}",
        "not as an MLflow tracking server (GET /api/2.0/mlflow/experiments/get-by-name: HTTP 404, text/plain)",
    ),
}


def _run_once(tmp_path: Path, option: str, value: str, capsys) -> tuple[int, str, float, Path]:
    from harness.cli import main

    study = write_study(tmp_path, "perm", ["gru"], trials=0, seeds=1, epochs=1)
    root = tmp_path / "root"
    t0 = time.monotonic()
    rc = main(["run", str(study), "--root", str(root), "--quiet", option, value])
    return rc, capsys.readouterr().err, time.monotonic() - t0, root


@pytest.mark.parametrize("case", list(CASES))
def test_a_store_that_never_answers_is_one_line_at_once(case, tmp_path, capsys, refusing_server, not_found_server, plain_web_server) -> None:
    option, value, why = CASES[case]
    value = value.format(port=_closed_port(), refusing=refusing_server, not_found=not_found_server, plain=plain_web_server)
    rc, err, seconds, root = _run_once(tmp_path, option, value, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    print(f"\n{case}: rc {rc} in {seconds:.1f} s: {lines[-1] if lines else ''}")
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"tprbench run: error: {option} ") and why in lines[0], lines[0]
    assert "Traceback" not in err and seconds < QUICK
    assert not root.exists(), sorted(p.name for p in root.iterdir())  # nothing created: no root, no locks/ or logs/ in it


def test_a_server_answering_as_mlflow_does_passes_the_check() -> None:
    """MLflow's own 404 for a missing experiment is an answer of MLflow's (a JSON `error_code`)."""
    from harness.record.store_check import check_tracking

    server, url = _serve(_LikeMlflow)
    try:
        check_tracking(url)
        check_tracking(url + "/")
    finally:
        server.shutdown()


READERS = {
    "study show": ["study", "show", "{study}", "--root", "{root}"],
    "report": ["report", "{study}", "--root", "{root}", "--out", "{root}/out"],
    "compare": ["compare", "{study}", "{study}", "--root", "{root}", "--tracking-uri-b"],
}


@pytest.mark.parametrize("command", list(READERS))
def test_every_reader_checks_the_store_first_and_says_it_in_one_line(command, tmp_path) -> None:
    """Issue 43 item 3: `study show --tracking-uri http://127.0.0.1:1` returned after 248 s with five
    chained tracebacks, `report` after 290 s: the real `tprbench`, against a closed port, now says it
    in one line within seconds, as `run` does, and creates nothing."""
    import os
    import subprocess

    from tests.ray_helpers import TPRBENCH, ray_environ

    study = write_study(tmp_path, "readers", ["gru"], trials=0, seeds=1, epochs=1)
    root = tmp_path / "root"
    dead = f"http://127.0.0.1:{_closed_port()}"
    argv = [a.format(study=study, root=root) for a in READERS[command]] + (["--tracking-uri"] if command != "compare" else []) + [dead]
    t0 = time.monotonic()
    proc = subprocess.run([TPRBENCH, *argv], capture_output=True, text=True, timeout=600, env={**os.environ, **ray_environ()})
    seconds = time.monotonic() - t0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    print(f"\n{command}: rc {proc.returncode} in {seconds:.1f} s: {lines[-1] if lines else ''}")
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    option = "--tracking-uri-b" if command == "compare" else "--tracking-uri"
    assert lines[0].startswith(f"tprbench {command.split()[0]}: error: {option} {dead}: no answer (Connection refused)"), lines[0]
    assert seconds < QUICK and not root.exists()


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


def test_a_ctrl_c_inside_optunas_journal_lock_release_is_not_retried_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interrupt lands just after the lock's rename file is unlinked: Optuna's
    `except BaseException` unlinks it again, and the FileNotFoundError it raises (an OSError,
    transient) carries the KeyboardInterrupt as its context. `with_retry` must raise the
    interrupt, not retry the write and run on (CI at stop 55: a Ctrl-C'd study ran to the end)."""
    import os

    from optuna.storages.journal import JournalFileOpenLock

    from harness.record.retry import with_retry

    lock = JournalFileOpenLock(str(tmp_path / "optuna.journal"))
    real_unlink, calls = os.unlink, []

    def unlink_then_interrupted(path: str) -> None:
        real_unlink(path)
        if not calls:
            calls.append(path)
            raise KeyboardInterrupt  # the signal handler runs as the syscall returns

    def write() -> None:
        lock.acquire()
        monkeypatch.setattr(os, "unlink", unlink_then_interrupted)
        try:
            lock.release()
        finally:
            monkeypatch.setattr(os, "unlink", real_unlink)

    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with_retry(write, "Optuna storage", said.append, window=5)
    assert calls and said == [], said  # interrupted at once, never retried
