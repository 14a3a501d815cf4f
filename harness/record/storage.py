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

import os
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

from .layout import JOURNAL_PREFIX, RunRoot

DRIVER_HINT = "pip install 'tprbench[cluster]' (psycopg 3, what SQLAlchemy uses for postgresql://)"


class StorageError(RuntimeError):
    """An Optuna storage URL that cannot be used as given (e.g. its database driver is missing)."""

    user_error = True


class JournalError(RuntimeError):
    """The Optuna journal cannot be read (a damaged line inside it). One line, exit 2."""

    user_error = True


def cell_study_name(study: str, cell_id: str) -> str:
    """The Optuna study of one cell of a study (`<study>/<cell id>`)."""
    return f"{study}/{cell_id}"


def default_storage_url(root: Path) -> str:
    return RunRoot(root).storage_url


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
        raise StorageError(
            f"--storage {display_url(url)}: unknown database {parsed.drivername!r} (use postgresql://…, mysql://… or sqlite:///…)"
        ) from None
    except ImportError as exc:
        hint = DRIVER_HINT if parsed.get_backend_name() == "postgresql" else "install the database driver SQLAlchemy names"
        raise StorageError(f"--storage {display_url(url)}: the database driver is not installed ({type(exc).__name__}: {exc}); {hint}") from None


def repair_journal(path: str | Path) -> str | None:
    """Cut an incomplete last record off a journal file; returns what was done (None: nothing).

    A writer killed mid-append (or out of space) leaves a last line without its newline. Optuna
    reads past it (`JournalFileBackend.read_logs` skips an incomplete last line) but the next
    append lands on the same line, and from then on every read fails with a JSONDecodeError;
    Optuna has no repair of its own (optuna/optuna#5138). Optuna appends a whole record, newline
    included, in one write, so a complete record always ends with a newline: the bytes after
    the last newline are the torn record. A copy of the file is kept beside it, then the tail
    is cut — under Optuna's own journal lock, so no writer appends meanwhile. Nothing finished
    is lost: the MLflow record holds every finished run, and a trial whose last journal record
    was torn is dispatched again and finds its result in its run directory."""
    from optuna.storages.journal import JournalFileSymlinkLock

    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            start = max(size - (1 << 20), 0)
            fh.seek(start)
            tail = fh.read()
            while b"\n" not in tail and start > 0:  # a torn record longer than 1 MB
                start = max(start - (1 << 20), 0)
                fh.seek(start)
                tail = fh.read(size - start)
        if tail.endswith(b"\n"):
            return None
        keep = start + tail.rfind(b"\n") + 1  # 0 when the file is one torn line
        copy = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%d-%H%M%S')}")
        import shutil

        shutil.copy2(path, copy)
        with open(path, "r+b") as fh:
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        lock.release()
    return (
        f"{path}: its last record was cut off ({size - keep} bytes without an end of line: a writer stopped "
        f"mid-line, e.g. killed or out of space); dropped it and kept the file as it was in {copy.name}. "
        "Finished runs are in the MLflow record: a trial whose last record was torn runs again from its checkpoint"
    )


def open_storage(url: str, create: bool = True, repair: bool = True, notify: Callable[[str], None] | None = None):
    """The Optuna storage behind `url`. A journal file is read once here: a torn last record is cut
    off first (`repair_journal`, when `repair` and `create`; read-only commands leave the file
    alone, Optuna skips that record when reading) and a damaged record inside the file is one
    clear error. `create=False` (read-only callers such as `study show`) creates nothing: no
    journal file, no directory, no tables in a database."""
    import json

    import optuna
    from optuna.storages.journal import JournalFileBackend

    if url.startswith(JOURNAL_PREFIX):
        path = url[len(JOURNAL_PREFIX) :]
        if create:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        if repair and create:
            note = repair_journal(path)
            if note and notify is not None:
                notify(note)
        try:
            storage = optuna.storages.JournalStorage(JournalFileBackend(path))  # replays the file
            storage.get_all_studies()  # so damage is found here
        except (json.JSONDecodeError, ValueError) as exc:
            raise JournalError(
                f"{path}: the Optuna journal has a damaged record ({exc}); move it aside and restore "
                f"a copy (docs/reliability.md: a damaged Optuna journal)"
            ) from None
        return storage
    _check_driver(url)
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, skip_table_creation=not create)
    if not create:  # a reader says at once that it cannot connect (the driver retries instead: harness.record.writer)
        from sqlalchemy.exc import OperationalError

        try:
            storage.engine.connect().close()
        except OperationalError as exc:
            first = (str(exc.orig) if exc.orig is not None else str(exc)).strip().splitlines()[0][:300]
            raise StorageError(f"--storage {display_url(url)}: cannot connect ({first})") from None
    return storage


def trial_states(storage, study_names: list[str]) -> dict[str, list[tuple[int, int, str]]]:
    """(number, trial id, state name) of every trial of the named studies, in a few reads:
    a journal is replayed once and read from memory; a database is asked one query per 500
    studies (Optuna's own tables), not one round trip per study. Studies that do not exist are
    absent from the result."""
    import optuna

    if isinstance(storage, optuna.storages.RDBStorage):
        try:
            return _rdb_trial_states(storage, study_names)
        except ImportError:  # pragma: no cover - Optuna moved its models: fall back to the public API
            pass
    ids = {s.study_name: s._study_id for s in storage.get_all_studies()}
    out = {}
    for name in study_names:
        if name in ids:
            out[name] = [(t.number, t._trial_id, t.state.name) for t in storage.get_all_trials(ids[name], deepcopy=False)]
    return out


# Optuna's journal op codes and trial states (optuna.storages.journal._storage.JournalOperation,
# optuna.trial.TrialState): the journal is Optuna's file format, stable across 3.x–5.x.
_CREATE_STUDY, _DELETE_STUDY, _CREATE_TRIAL, _SET_TRIAL_STATE = 0, 1, 4, 6
_FINISHED = (1, 2, 3)


class TrialState(StrEnum):
    """optuna.trial.TrialState's names, as `trial_states` gives them (without importing Optuna)."""

    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"
    WAITING = "WAITING"


_STATE_NAMES = {0: TrialState.RUNNING, 1: TrialState.COMPLETE, 2: TrialState.PRUNED, 3: TrialState.FAIL, 4: TrialState.WAITING}
#: A trial in one of these has ended (Optuna will not change it again).
TRIAL_ENDED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def read_trial_states(url: str, study_names: list[str], opened: Callable[[], Any] | None = None) -> dict[str, list[tuple[int, int, str]]]:
    """`trial_states` of the named studies. A journal is read by `journal_trial_states` (no replay
    through Optuna; a journal that does not exist has no studies); a database through Optuna's
    tables, on the storage `opened()` gives (the driver's own), else one opened read-only here,
    which creates nothing."""
    if url.startswith(JOURNAL_PREFIX):
        path = Path(url[len(JOURNAL_PREFIX) :])
        return journal_trial_states(path, study_names) if path.exists() else {}
    if opened is not None:
        return trial_states(opened(), study_names)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return trial_states(open_storage(url, create=False), study_names)


def journal_trial_states(path: str | Path, study_names: list[str]) -> dict[str, list[tuple[int, int, str]]]:
    """(number, trial id, state name) of the named studies' trials, read from an Optuna journal file
    directly. Optuna's JournalStorage replays every record into FrozenTrial objects (params,
    distributions, attributes: ~1 s per 10k runs' journal, 10 s at 100k) where `study show` and a
    rerun with nothing to do need only each trial's state; this reads the four kinds of record that
    decide it (study created/deleted, trial created, trial state set) and skips the others unparsed.
    It applies them by Optuna's rules (optuna/storages/journal/_storage.py: a study name is created
    once; trial ids count every trial created in a live study; a finished trial's state is never
    changed again; RUNNING over RUNNING is refused). A torn last record is skipped, as Optuna does;
    a damaged record inside the file is a JournalError. tests/test_journal_read.py checks the result
    against Optuna's own replay."""
    wanted = set(study_names)
    live: dict[int, str] = {}  # study id → name, for studies not deleted
    live_names: set[str] = set()
    next_study = 0
    trial_study: list[int] = []  # trial id → study id
    trial_number: list[int] = []
    trial_state: list[int] = []
    counts: dict[int, int] = {}
    for log in _state_records(Path(path)):
        op = log.get("op_code")
        if op == _CREATE_STUDY:
            if log["study_name"] not in live_names:
                live[next_study] = log["study_name"]
                live_names.add(log["study_name"])
                counts[next_study] = 0
                next_study += 1
        elif op == _DELETE_STUDY:
            live_names.discard(live.pop(log["study_id"], None))
        elif op == _CREATE_TRIAL:
            sid = log["study_id"]
            if sid in live:
                trial_study.append(sid)
                trial_number.append(counts[sid])
                trial_state.append(log.get("state", 0))
                counts[sid] += 1
        elif op == _SET_TRIAL_STATE:
            tid, state = log["trial_id"], log["state"]
            if 0 <= tid < len(trial_state) and trial_state[tid] not in _FINISHED and not (state == 0 and trial_state[tid] == 0):
                trial_state[tid] = state
    wanted_ids = {sid: name for sid, name in live.items() if name in wanted}
    out: dict[str, list[tuple[int, int, str]]] = {name: [] for name in wanted_ids.values()}
    for tid, sid in enumerate(trial_study):
        if sid in wanted_ids:
            out[wanted_ids[sid]].append((trial_number[tid], tid, _STATE_NAMES[trial_state[tid]]))
    return out


def _state_records(path: Path):
    """The journal's records that decide trial states, decoded; the others are skipped unparsed
    (Optuna writes compact JSON with the op code first). Optuna's reading rules: a last record
    without its newline, or one that does not decode, is skipped; any other is a JournalError."""
    import json

    wanted_ops = (_CREATE_STUDY, _DELETE_STUDY, _CREATE_TRIAL, _SET_TRIAL_STATE)
    complete = path.read_bytes().split(b"\n")[:-1]  # the last piece is b"" after a newline, else a torn record
    prefix = b'{"op_code":'
    for i, line in enumerate(complete):
        if line.startswith(prefix):
            op_text = line[len(prefix) : len(prefix) + 3].split(b",", 1)[0]
            if op_text.isdigit() and int(op_text) not in wanted_ops:
                continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(complete) - 1:
                return
            raise JournalError(
                f"{path}: the Optuna journal has a damaged record at line {i + 1} ({exc}); move it aside "
                "and restore a copy (docs/reliability.md: a damaged Optuna journal)"
            ) from None


def _rdb_trial_states(storage, study_names: list[str]) -> dict[str, list[tuple[int, int, str]]]:
    from optuna.storages._rdb import models

    out: dict[str, list[tuple[int, int, str]]] = {}
    session = storage.scoped_session()
    try:
        for i in range(0, len(study_names), 500):
            chunk = study_names[i : i + 500]
            rows = (
                session.query(models.StudyModel.study_name, models.TrialModel.number, models.TrialModel.trial_id, models.TrialModel.state)
                .outerjoin(models.TrialModel, models.TrialModel.study_id == models.StudyModel.study_id)
                .filter(models.StudyModel.study_name.in_(chunk))
                .all()
            )
            for name, number, trial_id, state in rows:
                trials = out.setdefault(name, [])
                if trial_id is not None:
                    trials.append((number, trial_id, state.name))
    finally:
        session.close()
    for trials in out.values():
        trials.sort()
    return out
