"""Eight trials finishing at once on one machine write their records without storage-lock errors.

Eight processes start together (a barrier) and each (a) records one trial run through
`Tracker.log_run` into one pre-created SQLite MLflow store, and (b) reports 20 intermediate
values to its own trial of one Optuna journal file and tells it. The processes are forked from
a forkserver that has imported mlflow/optuna but opened no store, so each opens its own (no
SQLite connection crosses a fork). Lock trouble would show as an exception, as a retry of the
tracker, or as an ERROR from MLflow's SQL layer — all counted, all must be 0.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import pytest

N = 8
EPOCHS = 20


class _Cell:
    """The fields of a study cell that the tracker reads."""

    study, id, task, arch, unit, unit_canonical, dim, input_dim, label = (
        "conc",
        "c0ffee000000",
        "logic",
        "plain",
        "gru",
        "gru",
        8,
        8,
        "logic/plain/d8/gru",
    )
    epochs, data, task_options = EPOCHS, "generated", {}


def _setup(uri: str) -> str:
    """Create the store, the experiment and the cell run (what the driver does before workers)."""
    from harness.record.writer import Tracker

    tracker = Tracker(uri, "conc")
    return tracker.cell_run(_Cell(), tracker.study_run("test"))


def _result(i: int) -> dict[str, Any]:
    history = [
        {"epoch": e, "train_loss": 1.0 / (e + i), "train_acc": 0.5, "valid_loss": 0.9, "valid_acc": 0.5 + e / 100, "lr": 1e-3, "epoch_seconds": 0.1}
        for e in range(1, EPOCHS + 1)
    ]
    return {
        "status": "finished",
        "metric": "valid_acc",
        "best_valid": history[-1]["valid_acc"],
        "best_epoch": EPOCHS,
        "history": history,
        "test": {"test_easy": {"acc": 0.5, "loss": 0.7}},
        "seconds": 1.0,
        "params_total": 100,
    }


def _writer(i: int, uri: str, cell_run: str, journal: str, study_name: str, trial_id: int, barrier: Any) -> dict[str, Any]:
    import optuna

    from harness.record.contract import WorkerResult
    from harness.record.storage import open_storage
    from harness.record.writer import Tracker

    errors: list[str] = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(record.getMessage()[:200])

    handler = Count(level=logging.ERROR)
    logging.getLogger("mlflow").addHandler(handler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tracker = Tracker(uri, "conc")
    study = optuna.load_study(study_name=study_name, storage=open_storage(journal))
    trial = optuna.trial.Trial(study, trial_id)
    barrier.wait(timeout=120)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"i": i}
    try:
        out["run_id"] = tracker.log_run(
            cell_run, f"c0ffee000000/trial/{i}", {"tprbench.phase": "search"}, {"lr": 1e-3, "seed": i}, WorkerResult.from_dict(_result(i))
        )
        out["mlflow_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        for epoch in range(1, EPOCHS + 1):
            trial.report(0.5 + epoch / 100, epoch)
            trial.should_prune()
        study.tell(trial.number, 0.5 + EPOCHS / 100)
        out["optuna_s"] = time.perf_counter() - t1
    except Exception as exc:  # counted by the test
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["retries"], out["mlflow_errors"] = tracker.retries, errors
    return out


@pytest.fixture(scope="module")
def ctx():
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["mlflow", "mlflow.store.tracking.sqlalchemy_store", "optuna", "harness.record.writer", "harness.record.storage"])
    return context


def test_eight_trials_record_at_once_without_lock_errors(ctx: Any, tmp_path: Path) -> None:
    import optuna

    from harness.record.storage import open_storage
    from harness.record.writer import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    journal = f"journal://{tmp_path / 'optuna.journal'}"
    with ctx.Pool(1) as pool:  # the store is created in a child too: no engine in this process before forking
        cell_run = pool.apply(_setup, (uri,))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="conc/c0ffee000000", storage=open_storage(journal), direction="maximize")
    trial_ids = [study.ask()._trial_id for _ in range(N)]

    barrier = ctx.Manager().Barrier(N)
    t0 = time.perf_counter()
    with ctx.Pool(N) as pool:
        outs = pool.starmap(_writer, [(i, uri, cell_run, journal, study.study_name, trial_ids[i], barrier) for i in range(N)])
    wall = time.perf_counter() - t0

    errors = [o["error"] for o in outs if "error" in o]
    lock_logs = [m for o in outs for m in o["mlflow_errors"]]
    retries = sum(o["retries"] for o in outs)
    tracker = Tracker(uri, "conc", create=False)
    recs = tracker.records()
    rows = tracker.search("tags.`tprbench.kind` = 'run'")
    trials = optuna.load_study(study_name=study.study_name, storage=open_storage(journal)).get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    reports = sum(len(t.intermediate_values) for t in trials)
    print(
        f"\n{N} processes at once: {len(rows)} MLflow runs recorded ({len(recs)} distinct keys, "
        f"{sum(len(r.metrics) for r in recs.values())} metrics), errors {len(errors)}, tracker retries {retries}, "
        f"MLflow SQL errors {len(lock_logs)}; Optuna: {len(complete)}/{N} trials complete, {reports} reports; "
        f"MLflow {max(o.get('mlflow_s', 0) for o in outs):.2f} s, Optuna {max(o.get('optuna_s', 0) for o in outs):.2f} s "
        f"(slowest process), wall {wall:.1f} s"
    )
    assert errors == [] and lock_logs == [] and retries == 0
    assert len(rows) == len(recs) == N
    assert all(r.status == "finished" and len(r.metrics) >= 7 for r in recs.values())
    assert len(complete) == N and reports == N * EPOCHS
