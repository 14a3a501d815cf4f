"""MLflow as the record of every run: study → cell → trial/seed runs, written by the driver.

Workers return their results and the driver logs them (measured with MLflow 3.17 on this project's
2-core machine: concurrent workers on a fresh SQLite store race on schema creation; batching from one
writer is also fastest, one `log_metric` call per value being ~3x slower than `log_batch`). Each
trial/seed run carries a unique `tprbench.run_key`; logging is idempotent: a finished run with
the same key is never logged twice, and a half-written one (driver killed mid-log) is deleted
and written again. Reports are regenerated from these records alone.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tasks.result import REPLACEABLE, RunResult

from ..faults import fault_point
from . import leftovers, schema_template
from .contract import (
    BEST_EPOCH,
    LIVE_STATUS,
    MLFLOW_ENDED,
    MLFLOW_PARENT,
    PARAMS_FORMULA,
    PARAMS_TOTAL,
    TRAIN_SECONDS,
    VALID,
    CellRecord,
    Kind,
    MlflowStatus,
    RunKey,
    RunRecord,
    Tag,
    WorkerResult,
    best_metric,
    carried_attempt,
    experiment_name,
    mlflow_status,
    split_tags,
    test_metric,
    transfer_metric,
    transfer_run_name,
)
from .guard import RecordCorrupt
from .layout import sqlite_uri
from .reader import RecordReader
from .retry import http_defaults, is_transient, with_retry
from .sources import SqlSource, chunks, is_server, is_sql_uri, sqlite_path

if TYPE_CHECKING:
    from ..study.cells import Cell

T = TypeVar("T")
MAX_BATCH = {"metrics": 1000, "params": 100, "tags": 100}  # MLflow's log_batch limits


#: Tracked folders that hold outputs, not code: the reports `tprbench report` writes and the
#: committed study records. Regenerating them must not mark the next run's commit `-dirty`
#: (a regenerated report made every later run cite uncommitted code).
OUTPUT_DIRS = ("reports", "records")


def git_commit(cwd: str | Path | None = None) -> str:
    """The commit of the code that ran, with '-dirty' if a tracked file outside `OUTPUT_DIRS`
    (code, study files, docs) has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if head.returncode:
            return "unknown"
        outputs = [f":(top,exclude){d}" for d in OUTPUT_DIRS]
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)", *outputs], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def artifact_location(tracking_uri: str, artifact_root: Path | None) -> str | None:
    """Where a new experiment keeps its artifacts (best.pt): with a tracking server, the server's
    own artifact store (None: the server decides, `mlflow-artifacts:/…`), so every machine that
    reaches the server reaches the weights; with a local store, `<root>/mlartifacts`."""
    if is_server(tracking_uri) or artifact_root is None:
        return None
    return artifact_root.resolve().as_uri()


# The experiment's kind, as the UI's experiment-kind switch sets it: model development (runs, not
# GenAI traces). MLflow 3.17's UI still starts in its GenAI mode; docs/cluster.md says how to switch.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def run_name(label: str, run_key: str) -> str:
    """A trial/seed run's name in the UI: its cell's label and what it is (`… trial 3`, `… seed 0`)."""
    key = RunKey.parse(run_key)
    if key is None:  # not a key of the record's form: named as it is
        return f"{label} {run_key}".strip()
    return f"{label} {key.name.split('/')[0]} {key.number}" if label else key.name


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


class Tracker:
    """The driver's handle on MLflow for one study.

    Reads go through `self.reader` (harness.record: plain SQL on a SQL store); the MLflow client
    is created on the first write, so a rerun with nothing to write never imports MLflow."""

    def __init__(self, tracking_uri: str, study: str, artifact_root: Path | None = None, create: bool = True, root: Path | None = None) -> None:
        self.uri, self.study, self.root = tracking_uri, study, root
        self.artifact_root = artifact_root
        self._client: Any = None
        self._parents: dict[str, str] = {}
        self.on_retry: Callable[[str], None] | None = None  # told about each retry (the driver logs it)
        self.retries = 0
        self.window: float | None = None  # how long writes wait for an unavailable store (None: retry_seconds())
        name = experiment_name(study)
        where = f"MLflow tracking store {tracking_uri}"
        source: Any = None
        path = sqlite_path(tracking_uri)
        if path is not None and (not path.exists() or path.stat().st_size == 0):
            with_retry(lambda: create_sqlite_store(path), where)
        if is_sql_uri(tracking_uri) and (path is None or path.exists()):
            try:  # an existing SQL store: found without starting MLflow
                source = SqlSource(tracking_uri)
                exp_id = with_retry(lambda: source.experiment_id(name), where)
            except Exception as exc:
                if isinstance(exc, RecordCorrupt) or (is_transient(exc) and not _no_schema(exc)):
                    raise
                source = None  # not an MLflow store yet (empty file, no tables): MLflow creates it
        if source is None:
            exp_id = with_retry(lambda: self.client.get_experiment_by_name(name), where)
            exp_id = None if exp_id is None else exp_id.experiment_id
        if exp_id is None and create:
            exp_id = with_retry(
                lambda: self.client.create_experiment(name, artifact_location=artifact_location(tracking_uri, artifact_root), tags=EXPERIMENT_TAGS),
                where,
            )
        self.experiment_id = exp_id
        if source is None and is_sql_uri(tracking_uri) and (path is None or path.exists()):
            source = SqlSource(tracking_uri)
        self.reader = RecordReader.of_client(None if source is not None else self.client, tracking_uri, study, exp_id, root, source=source)

    @property
    def client(self) -> Any:
        """MLflow's client, created on first use (importing MLflow costs seconds)."""
        if self._client is None:
            import logging

            from mlflow import MlflowClient

            http_defaults()
            for name in ("mlflow", "alembic"):  # schema-creation chatter on a fresh store
                logging.getLogger(name).setLevel(logging.WARNING)
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def retry(self, fn: Callable[[], T], what: str = "") -> T:
        """`fn()` with retries while the tracking store is transiently unavailable."""

        def note(message: str) -> None:
            self.retries += 1
            if self.on_retry is not None:
                self.on_retry(message)

        return with_retry(fn, f"MLflow tracking store {self.uri}" + (f" ({what})" if what else ""), note, self.window)

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        self.retry(lambda: self.client.set_tag(run_id, key, value), "set_tag")

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        """Several tags of one run in one write."""
        if tags:
            self.retry(lambda: self._log(run_id, tags=tags), "set tags")

    # -- queries ---------------------------------------------------------------------------
    def search(self, filter_string: str = "") -> list[Any]:
        """Every active run of this study's experiment matching the filter (paged)."""
        runs, token = [], None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=filter_string, max_results=1000, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def records(self, cell_id: str | None = None) -> dict[str, RunRecord]:
        """Ended trial/seed runs by run key (harness.record.reader.RecordReader.run_records)."""
        return self.reader.run_records(None if cell_id is None else [cell_id])

    def delete_pending(self) -> int:
        """Delete what a killed driver left half-written (its runs are written again), and end the
        deleted runs an older driver left RUNNING (`_end_deleted`). Two queries."""
        if self.experiment_id is None:
            return 0
        ids = self.retry(lambda: self.reader.source.pending(self.experiment_id), "find half-written runs")
        for run_id in ids:
            self.retry(lambda r=run_id: self._retire(r), "delete a half-written run")
        unended = self.retry(lambda: self.reader.source.deleted_unended(self.experiment_id), "find deleted runs never ended")
        for run_id in unended:
            self.retry(lambda r=run_id: self._end_deleted(r), "end a deleted run")
        return len(ids)

    def _end_deleted(self, run_id: str) -> None:
        """End KILLED a run deleted while RUNNING (drivers before 2026-11-26 deleted without ending).
        MLflow ends only active runs: restored, then `_retire`d. A retry after a store error finds it
        deleted (restored again) or already active (not restored: MLflow refuses to restore an active run)."""
        if self.client.get_run(run_id).info.lifecycle_stage == "deleted":
            self.client.restore_run(run_id)
        self._retire(run_id)

    # -- parents ---------------------------------------------------------------------------
    def cell_tags_by_id(self) -> dict[str, dict[str, str]]:
        """Tags of every cell run of the study (e.g. the final-phase parameters hash)."""
        return self.reader.cell_tags()

    def study_run(self, commit: str) -> str:
        """The study run (found, else created); its git_commit tag is written only when it changes."""
        found = self.retry(lambda: self.reader.source.study_run(self.experiment_id, self.study), "find the study run")
        if found is None:
            run_id = self.retry(
                lambda: (
                    self.client.create_run(self.experiment_id, tags={Tag.KIND: Kind.STUDY, Tag.STUDY: self.study}, run_name=self.study).info.run_id
                )
            )
            recorded, self.study_run_tags, self.study_run_status = None, {}, MlflowStatus.RUNNING
        else:
            run_id, tags, self.study_run_status = found
            self.study_run_tags = tags
            recorded = tags.get(Tag.GIT_COMMIT.bare)
        if recorded != commit:
            self.set_tag(run_id, Tag.GIT_COMMIT, commit)
            self._tag_experiment()
        self._parents["study"] = run_id  # reopened (RUNNING) by the driver only when it has work: `reopen`
        return run_id

    def _tag_experiment(self) -> None:
        """The experiment kind tag on an experiment made before it (checked when the study run is
        written anyway, so a no-op rerun still writes nothing and imports no MLflow)."""
        experiment = self.retry(lambda: self.client.get_experiment(self.experiment_id), "get experiment")
        for k, v in EXPERIMENT_TAGS.items():
            if experiment.tags.get(k) != v:
                self.retry(lambda k=k, v=v: self.client.set_experiment_tag(self.experiment_id, k, v), "experiment tag")

    def create_cell_run(self, cell: Cell, study_run_id: str, extra_tags: dict[str, Any] | None = None) -> str:
        """A new cell run holding the cell's record (and `extra_tags`): two writes."""
        record = CellRecord.of_cell(cell)
        tags = {Tag.KIND: Kind.CELL, Tag.STUDY: self.study, Tag.CELL: cell.id, MLFLOW_PARENT: study_run_id, **record.tags(), **(extra_tags or {})}
        run_id = self.retry(
            lambda: (
                self.client.create_run(self.experiment_id, tags={str(k): str(v)[:5000] for k, v in tags.items()}, run_name=cell.label).info.run_id
            ),
            "create a cell run",
        )
        self.retry(lambda: self._log(run_id, params=record.params()), "cell params")
        self._parents[f"cell/{cell.id}"] = run_id
        return run_id

    def cell_run(self, cell: Cell, study_run_id: str) -> str:
        """The cell's run, found by its tags or created (one query: use `reader.cell_runs` for many)."""
        key = f"cell/{cell.id}"
        if key not in self._parents:
            found = self.retry(lambda: self.reader.cell_runs([cell.id]), "find a cell run")
            if found:
                self._parents[key] = min(found, key=lambda r: (r["start_time"] or 0, r["run_id"]))["run_id"]
                self.reopen(self._parents[key])
            else:
                self.create_cell_run(cell, study_run_id)
        return self._parents[key]

    # -- study and cell runs: RUNNING while a driver works on them, ended when it exits ------
    def reopen(self, run_id: str) -> None:
        """A study or cell run that an earlier driver ended is RUNNING again while this one works."""
        if self.retry(lambda: self.client.get_run(run_id).info.status, "get run") != MlflowStatus.RUNNING:
            self.retry(lambda: self.client.update_run(run_id, status=MlflowStatus.RUNNING), "reopen run")

    def end(self, run_id: str, status: str) -> None:
        """End a study or cell run: FINISHED (done), FAILED (failed or errored cells, or the driver
        stopped on an error) or KILLED (interrupted)."""
        self.retry(lambda: self.client.set_terminated(run_id, status), "end run")

    def end_many(self, ends: list[tuple[str, str, dict[str, float]]]) -> None:
        """End many cell runs, each (run id, status, summary metrics at step 0): what `log_summary`
        then `end` write, run by run. On a SQL store in one transaction per 2,000 runs, through
        MLflow's own store session and tables (`_end_sql`: the rows its log_batch and
        set_terminated write) — through the client, ~25 ms a run made the close of a 5,010-cell
        study take two minutes; elsewhere (a tracking server) run by run."""
        store = self._sql_store()
        if store is not None:
            for chunk in chunks(ends, 2000):
                self.retry(lambda c=chunk: _end_sql(store, c, int(time.time() * 1000)), "end cell runs")
            return
        for run_id, status, metrics in ends:
            if metrics:
                self.log_summary(run_id, metrics)
            self.end(run_id, status)

    def _sql_store(self) -> Any:
        """MLflow's SQL store behind the client (its session and table models: the bulk writes
        `log_bulk` and `end_many`), or None (a tracking server: a REST store)."""
        store = getattr(getattr(self.client, "_tracking_client", None), "store", None)
        return store if hasattr(store, "ManagedSessionMaker") and hasattr(store, "engine") else None

    def log_summary(self, run_id: str, metrics: dict[str, float]) -> None:
        """Summary metrics of a cell run (step 0), so MLflow's runs table compares cells."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows = [Metric(k, float(v), now, 0) for k, v in sorted(metrics.items())]
        self.retry(lambda: self._log(run_id, rows), "log cell summary")

    # -- live trial/seed runs: created at dispatch, per-epoch metrics while they train ------
    def start_live(self, cell_run_id: str, run_key: str, tags: dict[str, Any], label: str, start: float | None) -> str | None:
        """Create the MLflow run of a trial/seed run that a worker has started (`start`: the worker's
        clock), RUNNING with status tag `running`, so its per-epoch metrics can be logged while it
        trains. Readers ignore it until it has ended. A run
        left RUNNING for this key by a driver that died is deleted first. None when the key is
        already recorded (a finished result is never written twice)."""

        def create() -> str | None:
            for run in self.search(f"tags.`{Tag.RUN_KEY}` = '{run_key}'"):
                if run.info.status in MLFLOW_ENDED:
                    if run.data.tags.get(Tag.STATUS) not in REPLACEABLE:
                        return None
                else:
                    self._retire(run.info.run_id)
            all_tags = {**tags, Tag.RUN_KEY: run_key, Tag.KIND: Kind.RUN, Tag.STUDY: self.study, Tag.STATUS: LIVE_STATUS, MLFLOW_PARENT: cell_run_id}
            return self.client.create_run(
                self.experiment_id, start_time=_ms(start), tags={str(k): str(v) for k, v in all_tags.items()}, run_name=run_name(label, run_key)
            ).info.run_id

        return self.retry(create, f"start {run_key}")

    def log_epochs(self, run_id: str, rows: list[tuple[int, dict[str, float], float]]) -> None:
        """Per-epoch metrics (epoch, metrics, wall time in seconds) of a run that is training."""
        from mlflow.entities import Metric

        metrics = [
            Metric(k, float(v), int(ts * 1000), int(epoch)) for epoch, row, ts in rows for k, v in row.items() if k != "epoch" and v is not None
        ]
        if metrics:
            self.retry(lambda: self._log(run_id, metrics), "log epochs")

    def _retire(self, run_id: str) -> None:
        """Delete a run that never ended (a live run given up, or one a dead driver left RUNNING),
        ending it KILLED first: deleted runs stay in the store, and a committed or shared record
        should not carry runs that say RUNNING forever to whoever reads it without MLflow's filter."""
        self.client.set_terminated(run_id, MlflowStatus.KILLED)
        self.client.delete_run(run_id)

    def set_splits(self, cell_run_id: str, valid_split: str, test_splits: list[str]) -> None:
        """Name the cell's validation split and ordered test splits (known once a worker prepared the data)."""
        self.retry(lambda: self._log(cell_run_id, tags=split_tags(valid_split, test_splits)), "set splits")

    def log_transfer(self, source: RunRecord, scores: dict[str, dict[str, Any]]) -> str:
        """A `tprbench transfer` run nested under the trial/seed run `source`: one metric per
        SentEval task and score (`transfer_metric`), at step 0, ended FINISHED. Returns its id."""
        from mlflow.entities import Metric

        tags = {
            Tag.KIND: Kind.TRANSFER,
            Tag.STUDY: source.tags.get(Tag.STUDY, ""),
            MLFLOW_PARENT: source.run_id,
            Tag.SOURCE_RUN: source.run_id,
            Tag.UNIT: source.tags.get(Tag.UNIT, ""),
            Tag.CELL: source.tags.get(Tag.CELL, ""),
        }
        experiment_id = source.experiment_id or self.experiment_id
        run_id = self.retry(
            lambda: (
                self.client.create_run(
                    experiment_id, tags={str(k): str(v) for k, v in tags.items()}, run_name=transfer_run_name(source.run_id)
                ).info.run_id
            ),
            "create a transfer run",
        )
        now = int(time.time() * 1000)
        metrics = [
            Metric(transfer_metric(task, k), float(v), now, 0)
            for task, values in scores.items()
            for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        self.retry(lambda: self._log(run_id, metrics), "log transfer scores")
        self.end(run_id, MlflowStatus.FINISHED)
        return run_id

    # -- writing runs ----------------------------------------------------------------------
    def _log(self, run_id: str, metrics: Iterable[Any] = (), params: dict[str, Any] | None = None, tags: dict[str, Any] | None = None) -> None:
        from mlflow.entities import Param, RunTag

        metrics = list(metrics)
        params_l = [Param(k, param_text(v)[:6000]) for k, v in (params or {}).items()]
        tags_l = [RunTag(str(k), str(v)[:5000]) for k, v in (tags or {}).items()]
        i_p = i_t = i_m = 0
        while True:
            p, t = params_l[i_p : i_p + MAX_BATCH["params"]], tags_l[i_t : i_t + MAX_BATCH["tags"]]
            m = metrics[i_m : i_m + MAX_BATCH["metrics"] - len(p) - len(t)]  # at most 1,000 entities a batch
            if not (p or t or m):
                return
            self.client.log_batch(run_id, metrics=m, params=p, tags=t)
            i_p, i_t, i_m = i_p + len(p), i_t + len(t), i_m + len(m)

    def log_run(
        self,
        cell_run_id: str,
        run_key: str,
        tags: dict[str, Any],
        params: dict[str, Any],
        result: WorkerResult,
        artifact: Path | None = None,
        new: bool = False,
        live_run_id: str | None = None,
        logged_epochs: set[int] | None = None,
    ) -> str:
        """Record one trial/seed run. Idempotent by `run_key`; returns the MLflow run id.

        `new=True`: the caller knows no run with this key exists (the driver read its cells'
        records, errored ones included, and deleted half-written runs when it opened the record),
        so the first attempt skips the search by key (never with a `live_run_id`). `live_run_id`:
        the run `start_live` created for this job (its epochs in `logged_epochs` are not logged
        again). A transient store error (locked, unreachable) retries the whole record with
        backoff, searching by key again: a half-written attempt is found and replaced, so nothing
        is written twice. An errored record of the key is replaced, its attempt count carried on."""
        attempt = [0]

        def once() -> str:
            attempt[0] += 1
            search = live_run_id is not None or not (new and attempt[0] == 1)
            return self._log_run(cell_run_id, run_key, tags, params, result, artifact, live_run_id, logged_epochs or set(), search)

        return self.retry(once, f"record {run_key}")

    def _log_run(
        self,
        cell_run_id: str,
        run_key: str,
        tags: dict[str, Any],
        params: dict[str, Any],
        result: WorkerResult,
        artifact: Path | None,
        live_run_id: str | None,
        logged_epochs: set[int],
        search: bool = True,
    ) -> str:
        errored, live_ok = [], False
        if search:
            for run in self.search(f"tags.`{Tag.RUN_KEY}` = '{run_key}'"):
                if run.info.status in MLFLOW_ENDED:
                    if run.data.tags.get(Tag.STATUS) not in REPLACEABLE:
                        return run.info.run_id  # already recorded: never twice
                    errored.append(run)  # errored or paused: replaced below by this record
                elif run.info.run_id == live_run_id:
                    live_ok = True
                else:
                    self._retire(run.info.run_id)  # half-written by a killed driver: write again
        attempt = max((carried_attempt(r.data.tags.get(Tag.STATUS), r.data.tags) for r in errored), default=0) + 1
        worker = result.worker
        end_ms = _ms(worker.end) or int(time.time() * 1000)
        all_tags, metrics = self.run_payload(cell_run_id, run_key, tags, result, end_ms, attempt, logged_epochs if live_ok else set())
        if live_ok:
            run_id = live_run_id
            self._log(run_id, metrics, params=params, tags=all_tags)
        else:
            # Readers see only ended runs: one created with its tags, then given its metrics and
            # params, then ended, is either complete or invisible (and deleted by the next driver).
            run_id = self.client.create_run(
                self.experiment_id,
                start_time=_ms(worker.start),
                tags={str(k): str(v)[:5000] for k, v in all_tags.items()},
                run_name=run_name(str(tags.get(Tag.LABEL, "")), run_key),
            ).info.run_id
            self._log(run_id, metrics, params=params)
        if artifact is not None and artifact.exists():
            self.client.log_artifact(run_id, str(artifact))
        for run in errored:
            self.client.delete_run(run.info.run_id)
        fault_point("recording")  # a stop here leaves this record half-written (tests/test_study_ray.py)
        self.client.set_terminated(run_id, mlflow_status(result.status), end_time=end_ms)
        return run_id

    def run_payload(
        self,
        cell_run_id: str,
        run_key: str,
        tags: dict[str, Any],
        result: WorkerResult,
        now: int | None = None,
        attempt: int = 1,
        logged_epochs: set[int] | None = None,
    ) -> tuple[dict[str, Any], list[Any]]:
        """(tags, metrics) of a trial/seed run record: what `log_run` and `log_bulk` write. Epoch
        metrics carry the worker's time of each epoch when it sent them (`epoch_times`), else `now`
        (ms); epochs in `logged_epochs` (logged live) are left out."""
        from mlflow.entities import Metric

        all_tags = {
            **tags,
            Tag.RUN_KEY: run_key,
            Tag.KIND: Kind.RUN,
            Tag.STUDY: self.study,
            Tag.STATUS: result.status,
            Tag.ATTEMPT: attempt,
            MLFLOW_PARENT: cell_run_id,
        }
        if result.reason:
            all_tags[Tag.REASON] = result.reason
        now = int(time.time() * 1000) if now is None else now
        worker = result.worker
        times = {int(k): float(v) for k, v in result.epoch_times.items()}
        metrics = []
        for row in result.history:
            epoch = int(row["epoch"])
            if logged_epochs and epoch in logged_epochs:
                continue
            ts = int(times[epoch] * 1000) if epoch in times else (_ms(worker.start) or now)
            metrics += [Metric(k, float(v), ts, epoch) for k, v in row.items() if k != "epoch" and v is not None]
        metrics += [Metric(k, v, now, 0) for k, v in final_metrics(result).items()]
        return all_tags, metrics

    # -- bulk ------------------------------------------------------------------------------
    def log_bulk(self, runs: list[BulkRun]) -> None:
        """Write many complete runs at once: one transaction on a SQL store (the rows MLflow's own
        store writes for create_run + log_batch + set_terminated), else run by run through the
        client. For building benchmark records and restoring a record, not for the driver's loop."""
        store = self._sql_store()
        if store is not None:
            self.retry(lambda: _bulk_sql(store, self.experiment_id, runs), "bulk write")
            return
        for run in runs:
            self.retry(lambda r=run: self._log_one(r), "write")

    def _log_one(self, run: BulkRun) -> None:
        run_id = self.client.create_run(
            self.experiment_id, start_time=run.start_time, tags={str(k): str(v)[:5000] for k, v in run.tags.items()}, run_name=run.name
        ).info.run_id
        run.run_id = run_id
        self._log(run_id, run.metrics, params=run.params)
        if run.status != MlflowStatus.RUNNING:
            self.client.set_terminated(run_id, run.status, end_time=run.end_time)


@dataclass
class BulkRun:
    """One complete run for `Tracker.log_bulk` (run_id is filled in when written)."""

    name: str
    tags: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    metrics: list[Any] = field(default_factory=list)  # mlflow.entities.Metric
    status: str = MlflowStatus.FINISHED  # RUNNING for a cell run
    start_time: int = 0
    end_time: int | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def _sanitize(value: float) -> tuple[bool, float]:
    """What MLflow's SQL store stores for a metric value (NaN → 0 flagged; ±inf → ±max float)."""
    if math.isnan(value):
        return True, 0.0
    if math.isinf(value):
        return False, 1.7976931348623157e308 if value > 0 else -1.7976931348623157e308
    return False, value


def _bulk_sql(store: Any, experiment_id: str, runs: list[BulkRun]) -> None:
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag
    from mlflow.utils.uri import append_to_uri_path

    location = store.get_experiment(experiment_id).artifact_location
    run_rows, tag_rows, param_rows, metric_rows, latest_rows = [], [], [], [], []
    for run in runs:
        run_rows.append(
            {
                "run_uuid": run.run_id,
                "name": run.name,
                "source_type": "UNKNOWN",
                "source_name": "",
                "entry_point_name": "",
                "user_id": "unknown",
                "status": run.status,
                "start_time": run.start_time,
                "end_time": run.end_time,
                "deleted_time": None,
                "source_version": "",
                "lifecycle_stage": "active",
                "artifact_uri": append_to_uri_path(location, run.run_id, "artifacts"),
                "experiment_id": int(experiment_id),
            }
        )
        tags = {"mlflow.runName": run.name, **{str(k): str(v)[:5000] for k, v in run.tags.items()}}
        tag_rows += [{"key": k, "value": v, "run_uuid": run.run_id} for k, v in tags.items()]
        param_rows += [{"key": k, "value": param_text(v)[:6000], "run_uuid": run.run_id} for k, v in run.params.items()]
        latest: dict[str, dict[str, Any]] = {}
        for m in run.metrics:
            is_nan, value = _sanitize(float(m.value))
            row = {"key": m.key, "value": value, "timestamp": m.timestamp, "step": m.step, "is_nan": is_nan, "run_uuid": run.run_id}
            metric_rows.append(row)
            old = latest.get(m.key)
            if old is None or (row["step"], row["timestamp"], row["value"]) > (old["step"], old["timestamp"], old["value"]):
                latest[m.key] = row
        latest_rows += list(latest.values())
    with store.ManagedSessionMaker() as session:
        for model, rows in ((SqlRun, run_rows), (SqlTag, tag_rows), (SqlParam, param_rows), (SqlMetric, metric_rows), (SqlLatestMetric, latest_rows)):
            if rows:
                session.execute(model.__table__.insert(), rows)


def _end_sql(store: Any, ends: list[tuple[str, str, dict[str, float]]], now: int) -> None:
    """`Tracker.end_many` on a SQL store, in one transaction: the summary metrics into `metrics`,
    `latest_metrics` updated where the new value is more recent by MLflow's own rule (step,
    timestamp, value), and each run's status and end time — as log_batch and set_terminated
    write them (tests/test_tracking_end_many.py compares the two paths run by run)."""
    import sqlalchemy as sa
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlRun

    rows = []
    for run_id, _status, metrics in ends:
        for key, value in sorted(metrics.items()):
            is_nan, stored = _sanitize(float(value))
            rows.append({"key": key, "value": stored, "timestamp": now, "step": 0, "is_nan": is_nan, "run_uuid": run_id})
    latest_t = SqlLatestMetric.__table__
    with store.ManagedSessionMaker() as session:
        held: dict[tuple[str, str], tuple[int, int, float]] = {}
        for ids in chunks([e[0] for e in ends]):
            found = session.execute(
                sa.select(latest_t.c.run_uuid, latest_t.c.key, latest_t.c.step, latest_t.c.timestamp, latest_t.c.value).where(
                    latest_t.c.run_uuid.in_(ids)
                )
            )
            held.update({(r[0], r[1]): (r[2], r[3], r[4]) for r in found})
        newer = [
            r for r in rows if (r["run_uuid"], r["key"]) not in held or (r["step"], r["timestamp"], r["value"]) > held[(r["run_uuid"], r["key"])]
        ]
        if rows:
            session.execute(SqlMetric.__table__.insert(), rows)
        replaced = [{"r": r["run_uuid"], "k": r["key"]} for r in newer if (r["run_uuid"], r["key"]) in held]
        if replaced:
            session.execute(latest_t.delete().where(latest_t.c.run_uuid == sa.bindparam("r"), latest_t.c.key == sa.bindparam("k")), replaced)
        if newer:
            session.execute(latest_t.insert(), newer)
        run_t = SqlRun.__table__
        session.execute(
            run_t.update()
            .where(run_t.c.run_uuid == sa.bindparam("r"), run_t.c.lifecycle_stage == "active")
            .values(status=sa.bindparam("s"), end_time=sa.bindparam("e")),
            [{"r": run_id, "s": status, "e": now} for run_id, status, _m in ends],
        )


def create_sqlite_store(path: Path) -> None:
    """Create a new SQLite MLflow store whole or not at all: it is made on a temporary file that is
    renamed into place when it is done. (Made in place, a migration stopped half-way — a full
    disk, a kill — leaves a file MLflow cannot open again: "table … already exists".) The file is
    a copy of an empty store migrated once per MLflow version (harness.record.schema_template);
    where there is none yet, MLflow's migrations run on it, and it is kept for the next store."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = leftovers.own(path, "creating")  # a killed creator's is removed by the next driver
    tmp.unlink(missing_ok=True)
    try:
        if not schema_template.copy_to(tmp):
            _migrate(tmp)
            schema_template.keep(tmp)
        fault_point("creating")  # a kill here leaves the new store unrenamed (tests/test_record_leftovers.py)
        if path.exists() and path.stat().st_size > 0:  # another process created it meanwhile
            return
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _migrate(db: Path) -> None:
    """MLflow's schema migrations on a new file `db` (closed when they are done)."""
    import logging

    from mlflow import MlflowClient

    for name in ("mlflow", "alembic"):  # schema-creation chatter
        if logging.getLogger(name).level < logging.WARNING:
            logging.getLogger(name).setLevel(logging.WARNING)
    MlflowClient(tracking_uri=sqlite_uri(db)).search_experiments()
    _dispose_engine(sqlite_uri(db))


def _dispose_engine(uri: str) -> None:
    """Close MLflow's cached engine of a URI (its file is renamed next)."""
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        engine = SqlAlchemyStore._engine_map.pop(uri, None)
        if engine is not None:
            engine.dispose()
    except Exception:  # nothing cached, or MLflow moved it: the file is closed with the process
        pass


def _no_schema(exc: BaseException) -> bool:
    """A SQL store file that MLflow has not initialised yet (no experiments table)."""
    return "no such table" in str(exc)


def param_text(value: Any) -> str:
    """How a param is stored: strings as they are, anything else as JSON (so `null`, lists and
    booleans read back as what they were; numbers print as before)."""
    return value if isinstance(value, str) else json.dumps(value)


def final_metrics(result: RunResult) -> dict[str, float]:
    """The summary numbers of a run: best validation score, its epoch, each test split, time."""
    out: dict[str, float] = {}
    metric = result.metric or VALID
    if result.best_valid is not None:
        out[best_metric(metric)] = float(result.best_valid)
        out[BEST_EPOCH] = float(result.best_epoch)
    for split, values in (result.test or {}).items():
        for k, v in values.items():
            out[test_metric(split, k)] = float(v)
    out[TRAIN_SECONDS] = float(result.seconds or 0.0)
    if result.params_total:
        out[PARAMS_TOTAL] = float(result.params_total)
    if result.params_formula is not None:
        out[PARAMS_FORMULA] = float(result.params_formula)
    return out


def cell_tags(cell: Cell) -> dict[str, Any]:
    """The cell's tags as every run of it carries them (harness.record.contract.CellRecord.tags)."""
    return CellRecord.of_cell(cell).tags()


def cell_params(cell: Cell) -> dict[str, Any]:
    return CellRecord.of_cell(cell).params()
