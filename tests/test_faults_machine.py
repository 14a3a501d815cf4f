"""When the machine misbehaves — a torn journal line, a full disk, a corrupt record, an
unreadable checkpoint. Each fault ends with one clear line (exit 2, no traceback) and a rerun, or
the documented restore, that finishes with nothing lost (docs/reliability.md's fault matrix).

These are the fast, in-process reproductions (a simulated ENOSPC at the write call, a damaged
copy of the golden record); tests/test_faults_machine_e2e.py runs whole studies through the CLI
(a real size-limited filesystem where the machine allows mounting one).
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from harness.cli import main

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "record-v1"


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. A torn Optuna journal line


def _journal_with_trials(path: Path, n: int = 3) -> str:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    study = optuna.create_study(study_name="s/cell", storage=storage)
    for i in range(n):
        trial = study.ask()
        trial.suggest_float("lr", 1e-3, 1e-2, log=True)
        study.tell(trial, float(i))
    return "journal://" + str(path)


def test_a_torn_journal_line_is_cut_off_with_a_copy_kept_and_the_journal_goes_on(tmp_path: Path) -> None:
    """The reproduction: the last 40 bytes of a journal cut off. Optuna alone reads past the torn
    line, but its next append lands on the same line and every later read fails
    (JSONDecodeError); opened through harness.record.storage the torn record is dropped (one line
    saying so), a copy of the file is kept, and appends read back."""
    import optuna

    from harness.record.storage import open_storage, trial_states

    path = tmp_path / "optuna.journal"
    url = _journal_with_trials(path)
    whole = path.read_bytes()
    path.write_bytes(whole[:-40])
    torn = path.read_bytes()
    notes: list[str] = []
    storage = open_storage(url, notify=notes.append)
    assert len(notes) == 1 and str(path) in notes[0] and "cut off" in notes[0] and "\n" not in notes[0]
    (copy,) = tmp_path.glob("optuna.journal.torn-*")
    assert copy.read_bytes() == torn
    assert path.read_bytes() == torn[: torn.rfind(b"\n") + 1]
    before = trial_states(storage, ["s/cell"])["s/cell"]
    assert [s for _n, _i, s in before][:2] == ["COMPLETE", "COMPLETE"]  # the finished trials are kept
    study = optuna.load_study(study_name="s/cell", storage=storage)
    trial = study.ask()
    study.tell(trial, 9.0)
    again = open_storage(url, notify=notes.append)  # a fresh reader replays the file: it parses
    assert len(notes) == 1  # nothing torn any more
    assert len(trial_states(again, ["s/cell"])["s/cell"]) == len(before) + 1


def test_read_only_commands_leave_a_torn_journal_alone(tmp_path: Path) -> None:
    from harness.record.storage import open_storage

    path = tmp_path / "optuna.journal"
    url = _journal_with_trials(path)
    path.write_bytes(path.read_bytes()[:-40])
    torn = path.read_bytes()
    open_storage(url, repair=False)
    assert path.read_bytes() == torn and not list(tmp_path.glob("*.torn-*"))


def test_a_damaged_record_inside_the_journal_is_one_clear_error(tmp_path: Path) -> None:
    from harness.record.storage import JournalError, open_storage

    path = tmp_path / "optuna.journal"
    url = _journal_with_trials(path)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][: len(lines[1]) // 2]  # a complete line (it ends with a newline) that is not JSON
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalError, match="damaged record") as info:
        open_storage(url)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


# ---------------------------------------------------------------------------------------------
# 2. A full disk


def _sqlite_full() -> Exception:
    return sqlite3.OperationalError("database or disk is full")


def _mlflow_full() -> Exception:
    """How MLflow's SQL store reports SQLITE_FULL: an MlflowException marked TEMPORARILY_UNAVAILABLE (503)."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE

    try:
        raise _sqlite_full()
    except sqlite3.OperationalError as exc:
        try:
            raise MlflowException(f"(sqlite3.OperationalError) {exc}", error_code=TEMPORARILY_UNAVAILABLE) from exc
        except MlflowException as wrapped:
            return wrapped


@pytest.mark.parametrize(
    "make",
    [lambda: OSError(errno.ENOSPC, "No space left on device", "/x/cache/data.pt"), _sqlite_full, _mlflow_full],
    ids=["ENOSPC", "sqlite", "mlflow"],
)
def test_out_of_space_is_never_a_transient_outage(make) -> None:
    """A locked store is retried; a full one stops at once (no 120 s of retries)."""
    from harness.diskfull import is_disk_full
    from harness.record.retry import is_transient, with_retry

    exc = make()
    assert is_disk_full(exc) and not is_transient(exc)
    assert is_transient(sqlite3.OperationalError("database is locked"))  # still retried
    calls, retries = [], []

    def write() -> None:
        calls.append(1)
        raise exc

    with pytest.raises(type(exc)):
        with_retry(write, "store", retries.append, window=60)
    assert calls == [1] and retries == []


def _tiny_study(directory: Path, trials: int = 0, seeds: int = 1, name: str = "full") -> Path:
    from tests.ray_helpers import write_study

    return write_study(directory, name, ["gru"], trials=trials, seeds=seeds, epochs=1, train_size=64, eval_size=16)


def test_full_disk_while_writing_the_data_cache_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """A 1 MB filesystem: ENOSPC while the driver writes the data cache."""
    from harness.driver.runner import StudyRunner
    from tests.ray_helpers import seed_root

    root = seed_root(tmp_path / "root")
    path = _tiny_study(tmp_path)
    cache = root / "cache" / "data" / "logic.pt"

    def full(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(cache))

    monkeypatch.setattr(StudyRunner, "_prepare_data", full)
    capsys.readouterr()
    rc = main(["run", str(path), "--root", str(root), "--quiet"])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and line.startswith("tprbench run: error: ") and str(cache) in line
    assert "out of disk space" in line and "free on its filesystem" in line and "rerun the same command" in line


def test_full_store_stops_at_once_with_one_line_and_library_logs_in_a_file(tmp_path: Path, monkeypatch, capsys) -> None:
    """A 3 MB filesystem: SQLite "database or disk is full" from MLflow's store. Before:
    120 s of retries and ~40 lines of SQLAlchemy tracebacks. Now: no retry, one line; MLflow's
    own log lines go to <root>/logs/libraries.log."""
    import logging

    from mlflow import MlflowClient

    from tests.ray_helpers import seed_root

    root = seed_root(tmp_path / "root")
    path = _tiny_study(tmp_path)
    monkeypatch.setenv("TPRBENCH_STORE_RETRY_SECONDS", "60")

    def full(*_a, **_k):
        logging.getLogger("mlflow.store.db.utils").exception("SQLAlchemy database error (as MLflow logs it)")
        raise _mlflow_full()

    monkeypatch.setattr(MlflowClient, "create_run", full)
    capsys.readouterr()
    rc = main(["run", str(path), "--root", str(root), "--quiet"])
    out, err = capsys.readouterr()
    line = _one_line(err)
    assert rc == 2 and "out of disk space" in line and "retrying" not in out + err
    assert "SQLAlchemy database error" in (root / "logs" / "libraries.log").read_text()


def _worker_job(tmp_path: Path, run_dir: Path):
    from harness.driver.jobs import WorkerJob

    return WorkerJob(
        task="logic",
        task_options={"train_size": 40, "eval_size": 8},
        data="generated",
        unit="gru",
        arch="plain",
        dim=8,
        input_dim=8,
        epochs=1,
        metric="valid_acc",
        direction="maximize",
        seed=0,
        hparams={"lr": 0.01, "batch_size": 8},
        run_dir=str(run_dir),
        cache_dir=str(tmp_path / "cache"),
        threads=1,
    )


def test_a_worker_out_of_space_is_not_recorded_and_stops_the_driver(tmp_path: Path, monkeypatch) -> None:
    """A run that hit ENOSPC (writing its checkpoint) is not a result: the worker marks it, the
    driver stops with DiskFull before recording it, so the rerun dispatches it again."""
    import tasks.training
    from harness.diskfull import DiskFull
    from harness.driver.cells import Job
    from harness.driver.loop import _stop_if_disk_full
    from harness.driver.worker import run_job
    from harness.record.contract import RunKey, WorkerResult

    run_dir = tmp_path / "run"

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "checkpoint.pt.tmp"))

    monkeypatch.setattr(tasks.training, "train", full)
    work = _worker_job(tmp_path, run_dir)
    result = run_job(work)
    assert result.status == "errored" and result.disk_full == str(run_dir / "checkpoint.pt.tmp")
    key = RunKey.seed("c", 0, "ab12cd34")
    with pytest.raises(DiskFull, match="out of disk space while writing run c/seed/0/ab12cd34"):
        _stop_if_disk_full(Job(None, key, work), result)
    _stop_if_disk_full(Job(None, key, work), WorkerResult.errored("ValueError: x"))


# ---------------------------------------------------------------------------------------------
# 3. A corrupt MLflow record


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    root = tmp_path / "golden"
    root.mkdir()
    with gzip.open(FIXTURE / "mlflow.db.gz", "rb") as src, open(root / "mlflow.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(FIXTURE / "optuna.journal", root / "optuna.journal")
    return root


def _report(root: Path, out: Path) -> int:
    return main(["report", "golden", "--root", str(root), "--out", str(out), "--seeds", "2", "--no-figures"])


def _damage_middle(db: Path) -> None:
    """8 KB of random bytes written into the middle of the file."""
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(os.urandom(8192))


@pytest.mark.parametrize("damage", ["header", "middle"])
def test_a_corrupt_record_stops_every_command_with_one_line(golden: Path, tmp_path: Path, capsys, damage) -> None:
    db = golden / "mlflow.db"
    if damage == "header":
        with open(db, "r+b") as fh:
            fh.write(b"\0" * 100)
    else:
        _damage_middle(db)
        try:
            assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] != "ok"
        except sqlite3.DatabaseError:  # "database disk image is malformed": as damaged
            pass
    assert _report(golden, tmp_path / "out") == 2
    line = _one_line(capsys.readouterr().err)
    assert str(db) in line and "the MLflow record is damaged" in line and "tprbench record restore" in line
    assert not (tmp_path / "out" / "table.md").exists()
    study = FIXTURE / "study.toml"
    assert main(["study", "show", str(study), "--root", str(golden)]) == 2
    assert "the MLflow record is damaged" in _one_line(capsys.readouterr().err)
    assert main(["record", "check", "--root", str(golden)]) == 2
    assert "the MLflow record is damaged" in _one_line(capsys.readouterr().err)


def test_a_sound_record_is_checked_once_until_it_changes(golden: Path, monkeypatch) -> None:
    from harness.record import guard as record_guard

    calls: list[Path] = []
    real = record_guard.quick_check
    monkeypatch.setattr(record_guard, "quick_check", lambda p: calls.append(p) or real(p))
    record_guard.check(golden / "mlflow.db")
    record_guard.check(golden / "mlflow.db")
    assert len(calls) == 1
    with sqlite3.connect(golden / "mlflow.db") as con:  # any write changes size/mtime: checked again
        con.execute("CREATE TABLE t (x)")
    record_guard.check(golden / "mlflow.db")
    assert len(calls) == 2


def test_snapshot_then_restore_gives_the_same_tables(golden: Path, tmp_path: Path, capsys) -> None:
    """Snapshots are consistent copies (online backup), checked, rotated; `record restore` moves
    the damaged file aside and puts the newest good snapshot back: the tables come out identical."""
    from harness.record import guard as record_guard

    assert _report(golden, tmp_path / "before") == 0
    for _ in range(record_guard.KEEP + 2):
        assert main(["record", "snapshot", "--root", str(golden)]) == 0
    snaps = record_guard.snapshots(golden)
    assert len(snaps) == record_guard.KEEP and all(record_guard.quick_check(s) is None for s in snaps)
    with open(snaps[0], "r+b") as fh:  # the newest snapshot is damaged too: the next one is used
        fh.write(b"\0" * 100)
    db = golden / "mlflow.db"
    _damage_middle(db)
    capsys.readouterr()
    assert main(["record", "restore", "--root", str(golden)]) == 0
    out = capsys.readouterr().out
    assert f"restored {db} from the snapshot {snaps[1].name}" in out
    assert len(list(golden.glob("mlflow.db.damaged-*"))) == 1
    assert _report(golden, tmp_path / "after") == 0
    for name in ("table.md", "table.csv", "search.csv"):  # equal but for the --out in the regenerate line
        after = (tmp_path / "after" / name).read_bytes().replace(b"/after", b"/before")
        assert after == (tmp_path / "before" / name).read_bytes(), name


def test_a_damaged_record_never_replaces_a_good_snapshot(golden: Path) -> None:
    from harness.record import guard as record_guard

    first = record_guard.take_snapshot(golden / "mlflow.db", golden)
    _damage_middle(golden / "mlflow.db")
    with pytest.raises(record_guard.RecordCorrupt):
        record_guard.take_snapshot(golden / "mlflow.db", golden)
    assert record_guard.snapshots(golden) == [first]


def test_restore_without_a_snapshot_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "mlflow.db").write_bytes(b"\0" * 4096)
    assert main(["record", "restore", "--root", str(tmp_path)]) == 2
    assert "no good snapshot" in _one_line(capsys.readouterr().err)
    assert (tmp_path / "mlflow.db").exists()  # nothing moved when there is nothing to restore


# ---------------------------------------------------------------------------------------------
# 4. An unreadable checkpoint, in a study's worker (tests/test_security.py covers `train` itself)


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_workers_unreadable_checkpoint_is_set_aside_and_the_run_restarts(tmp_path: Path, damage) -> None:
    from harness.driver.jobs import WorkerJob
    from harness.driver.worker import run_job

    def job(run_dir: Path) -> WorkerJob:
        return _worker_job(tmp_path, run_dir)

    clean = run_job(job(tmp_path / "clean"))
    assert clean.status == "finished"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good = (tmp_path / "clean" / "checkpoint.pt").read_bytes()
    (run_dir / "checkpoint.pt").write_bytes(good[: len(good) // 3] if damage == "truncated" else b"")
    result = run_job(job(run_dir))
    assert result.status == "finished", result.reason
    notes = [n for n in result.notes if "restarting the run" in n]
    assert len(notes) == 1 and str(run_dir / "checkpoint.pt") in notes[0] and "\n" not in notes[0]
    assert len(list(run_dir.glob("checkpoint.pt.corrupt-*"))) == 1
    assert result.best_valid == clean.best_valid and result.test == clean.test


def test_closed_pipe_is_quiet() -> None:
    """`tprbench … | head` exits without a BrokenPipeError traceback (a command that
    prints far more than a pipe holds, its reader gone after one line)."""
    import subprocess
    import sys

    script = (
        "import sys, harness.cli as cli, harness.commands.units as u; "
        "u.run = lambda args: [print('x' * 99) for _ in range(20000)] and 0; sys.exit(cli.main(['units']))"
    )
    shell = f'{sys.executable} -c "{script}" | head -n 1 >/dev/null; echo rc=${{PIPESTATUS[0]}} >&2'
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "rc=141", proc.stderr
