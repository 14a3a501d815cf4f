"""MLflow as the record of every run: study → cell → trial/seed runs, written by the driver.

Workers return their results and the driver logs them (STACK.md: concurrent workers on a
fresh SQLite store race on schema creation; batching from one writer is also fastest). Each
trial/seed run carries a unique `tprbench.run_key`; logging is idempotent: a finished run with
the same key is never logged twice, and a half-written one (driver killed mid-log) is deleted
and written again. Reports are regenerated from these records alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from .record import (
    ATTEMPT,
    CELL,
    ERRORED,
    KIND,
    KIND_CELL,
    KIND_RUN,
    KIND_STUDY,
    LABEL,
    MLFLOW_ENDED,
    PHASE,
    REASON,
    RUN_KEY,
    STATUS,
    STUDY,
    TAG,
    CellRecord,
    RecordReader,
    RunRecord,
    attempt_of,
    mlflow_status,
    split_tags,
)

__all__ = ["PHASE", "TAG", "RunRecord", "StoreUnavailable", "Tracker", "cell_params", "cell_tags", "default_tracking_uri",
           "final_metrics", "git_commit", "with_retry"]
MAX_BATCH = {"metrics": 1000, "params": 100, "tags": 100}  # MLflow's log_batch limits
RETRY_ENV = "TPRBENCH_STORE_RETRY_SECONDS"  # how long a write waits for an unavailable store
DEFAULT_RETRY_SECONDS = 120.0
T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """The MLflow tracking store (or Optuna storage) stayed unavailable past the retry window.

    The driver stops: what was recorded stays recorded, the runs not recorded yet are still
    RUNNING in Optuna and are dispatched again (from their checkpoints) by the next `run`."""

    user_error = True


def retry_seconds() -> float:
    try:
        return max(float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_SECONDS)), 0.0)
    except ValueError:
        return DEFAULT_RETRY_SECONDS


def is_transient(exc: BaseException) -> bool:
    """An error a store may recover from: database locked/unreachable, connection refused, 5xx."""
    try:
        from mlflow.exceptions import MlflowException
    except ImportError:  # pragma: no cover
        MlflowException = ()  # type: ignore[assignment]
    if isinstance(exc, MlflowException):
        return exc.get_http_status_code() >= 500
    if isinstance(exc, (OSError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    return name in ("OperationalError", "ConnectionError", "Timeout", "ConnectTimeout", "ReadTimeout")


def with_retry(fn: Callable[[], T], what: str, on_retry: Callable[[str], None] | None = None,
               window: float | None = None) -> T:
    """Call `fn`; on a transient store error, retry with exponential backoff (0.5 s doubling to
    8 s) for up to `window` seconds (default $TPRBENCH_STORE_RETRY_SECONDS, else 120), then raise
    StoreUnavailable naming the store and the first line of the error. `fn` must be idempotent."""
    window = retry_seconds() if window is None else window
    deadline, delay = time.monotonic() + window, 0.5
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreUnavailable(
                    f"{what}: unavailable for {window:.0f} s ({type(exc).__name__}: {first}); stopped. Everything "
                    f"recorded so far is kept: rerun the same command to resume (set {RETRY_ENV} to wait longer)") from exc
            if on_retry is not None:
                on_retry(f"{what}: {type(exc).__name__}: {first}; retrying in {min(delay, left):.1f} s")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 8.0)


def git_commit(cwd: str | Path | None = None) -> str:
    """The commit of the code that ran (with '-dirty' if the tree has uncommitted changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if head.returncode:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def experiment_name(study: str) -> str:
    return f"tprbench/{study}"


def default_tracking_uri(root: Path) -> str:
    return f"sqlite:///{(root / 'mlflow.db').resolve()}"


def is_server(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("http://", "https://"))


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
    _, kind, number = (run_key.split("/") + ["", ""])[:3]
    return f"{label} {kind} {number}".strip() if label else run_key.split("/", 1)[-1]


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


class Tracker:
    """The driver's handle on MLflow for one study."""

    def __init__(self, tracking_uri: str, study: str, artifact_root: Path | None = None, create: bool = True) -> None:
        import logging

        from mlflow import MlflowClient

        for name in ("mlflow", "alembic"):  # schema-creation chatter on a fresh store
            logging.getLogger(name).setLevel(logging.WARNING)
        self.uri = tracking_uri
        self.client = MlflowClient(tracking_uri=tracking_uri)
        name = experiment_name(study)
        experiment = with_retry(lambda: self.client.get_experiment_by_name(name), f"MLflow tracking store {tracking_uri}")
        if experiment is None and not create:
            self.experiment_id = None
        elif experiment is None:
            self.experiment_id = with_retry(
                lambda: self.client.create_experiment(name, artifact_location=artifact_location(tracking_uri, artifact_root),
                                                      tags=EXPERIMENT_TAGS), f"MLflow tracking store {tracking_uri}")
        else:
            self.experiment_id = experiment.experiment_id
            if create and any(experiment.tags.get(k) != v for k, v in EXPERIMENT_TAGS.items()):  # records made before the tag
                for k, v in EXPERIMENT_TAGS.items():
                    with_retry(lambda k=k, v=v: self.client.set_experiment_tag(self.experiment_id, k, v),
                               f"MLflow tracking store {tracking_uri}")
        self.study = study
        self.reader = RecordReader.of_client(self.client, tracking_uri, study, self.experiment_id)
        self._parents: dict[str, str] = {}
        self.on_retry: Callable[[str], None] | None = None  # told about each retry (the driver logs it)
        self.retries = 0
        self.window: float | None = None  # how long writes wait for an unavailable store (None: retry_seconds())

    def retry(self, fn: Callable[[], T], what: str = "") -> T:
        """`fn()` with retries while the tracking store is transiently unavailable."""
        def note(message: str) -> None:
            self.retries += 1
            if self.on_retry is not None:
                self.on_retry(message)

        return with_retry(fn, f"MLflow tracking store {self.uri}" + (f" ({what})" if what else ""), note, self.window)

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        self.retry(lambda: self.client.set_tag(run_id, key, value), "set_tag")

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
        """Ended trial/seed runs by run key (harness.record.RecordReader.run_records)."""
        return self.reader.run_records(None if cell_id is None else [cell_id])

    # -- parents ---------------------------------------------------------------------------
    def _find_or_create(self, key: str, tags: dict[str, str], parent: str | None, name: str) -> tuple[str, bool]:
        """A parent run found by its tags, or created; returns (run id, created now)."""
        if key in self._parents:
            return self._parents[key], False
        found = self.search(" and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items()))
        created = not found
        if found:
            run_id = min(found, key=lambda r: r.info.start_time).info.run_id
        else:
            all_tags = dict(tags, **({"mlflow.parentRunId": parent} if parent else {}))
            run_id = self.client.create_run(self.experiment_id, tags=all_tags, run_name=name).info.run_id
        self._parents[key] = run_id
        return run_id, created

    def cell_tags_by_id(self) -> dict[str, dict[str, str]]:
        """Tags of every cell run of the study (e.g. the final-phase parameters hash)."""
        return self.reader.cell_tags()

    def study_run(self, commit: str) -> str:
        run_id, _ = self.retry(lambda: self._find_or_create("study", {KIND: KIND_STUDY, STUDY: self.study}, None, self.study))
        self.set_tag(run_id, TAG + "git_commit", commit)
        self.reopen(run_id)
        return run_id

    def cell_run(self, cell: Any, study_run_id: str) -> str:
        tags = {KIND: KIND_CELL, STUDY: self.study, CELL: cell.id}
        run_id, created = self.retry(lambda: self._find_or_create(f"cell/{cell.id}", tags, study_run_id, cell.label))
        if created:
            record = CellRecord.of_cell(cell)
            self.retry(lambda: self._log(run_id, params=record.params(), tags=record.tags()))
        else:
            self.reopen(run_id)
        return run_id

    # -- study and cell runs: RUNNING while a driver works on them, ended when it exits ------
    def reopen(self, run_id: str) -> None:
        """A study or cell run that an earlier driver ended is RUNNING again while this one works."""
        if self.retry(lambda: self.client.get_run(run_id).info.status, "get run") != "RUNNING":
            self.retry(lambda: self.client.update_run(run_id, status="RUNNING"), "reopen run")

    def end(self, run_id: str, status: str) -> None:
        """End a study or cell run: FINISHED (done), FAILED (failed or errored cells, or the driver
        stopped on an error) or KILLED (interrupted)."""
        self.retry(lambda: self.client.set_terminated(run_id, status), "end run")

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
            for run in self.search(f"tags.`{RUN_KEY}` = '{run_key}'"):
                if run.info.status in MLFLOW_ENDED:
                    if run.data.tags.get(STATUS) != ERRORED:
                        return None
                else:
                    self.client.delete_run(run.info.run_id)
            all_tags = {**{k: str(v) for k, v in tags.items()}, RUN_KEY: run_key, KIND: KIND_RUN, STUDY: self.study,
                        STATUS: "running", "mlflow.parentRunId": cell_run_id}
            return self.client.create_run(self.experiment_id, start_time=_ms(start), tags=all_tags,
                                          run_name=run_name(label, run_key)).info.run_id

        return self.retry(create, f"start {run_key}")

    def log_epochs(self, run_id: str, rows: list[tuple[int, dict[str, float], float]]) -> None:
        """Per-epoch metrics (epoch, metrics, wall time in seconds) of a run that is training."""
        from mlflow.entities import Metric

        metrics = [Metric(k, float(v), int(ts * 1000), int(epoch)) for epoch, row, ts in rows
                   for k, v in row.items() if k != "epoch" and v is not None]
        if metrics:
            self.retry(lambda: self._log(run_id, metrics), "log epochs")

    def drop_live(self, run_id: str) -> None:
        """A live run whose job will not be recorded by this driver (it stopped): the next one starts it again."""
        self.retry(lambda: self.client.delete_run(run_id), "delete unfinished run")

    def set_splits(self, cell_run_id: str, valid_split: str, test_splits: list[str]) -> None:
        """Name the cell's validation split and ordered test splits (known once a worker prepared the data)."""
        self.retry(lambda: self._log(cell_run_id, tags=split_tags(valid_split, test_splits)), "set splits")

    # -- writing runs ----------------------------------------------------------------------
    def _log(self, run_id: str, metrics: Iterable[Any] = (), params: dict[str, Any] | None = None,
             tags: dict[str, Any] | None = None) -> None:
        from mlflow.entities import Param, RunTag

        metrics = list(metrics)
        params_l = [Param(k, param_text(v)[:6000]) for k, v in (params or {}).items()]
        tags_l = [RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()]
        for i in range(0, max(len(params_l), len(tags_l)), MAX_BATCH["params"]):
            self.client.log_batch(run_id, params=params_l[i:i + MAX_BATCH["params"]], tags=tags_l[i:i + MAX_BATCH["tags"]])
        for i in range(0, len(metrics), MAX_BATCH["metrics"]):
            self.client.log_batch(run_id, metrics=metrics[i:i + MAX_BATCH["metrics"]])

    def log_run(self, cell_run_id: str, run_key: str, tags: dict[str, Any], params: dict[str, Any],
                result: dict[str, Any], artifact: Path | None = None, live_run_id: str | None = None,
                logged_epochs: set[int] | None = None) -> str:
        """Record one trial/seed run. Idempotent by `run_key`; returns the MLflow run id.

        `live_run_id`: the run `start_live` created for this job (its epochs in `logged_epochs`
        are not logged again). A transient store error (locked, unreachable) retries the whole
        record with backoff: a half-written attempt is found by its key and replaced, so nothing
        is written twice. An errored record of the key is replaced, its attempt count carried on."""
        return self.retry(lambda: self._log_run(cell_run_id, run_key, tags, params, result, artifact, live_run_id,
                                                logged_epochs or set()), f"record {run_key}")

    def _log_run(self, cell_run_id: str, run_key: str, tags: dict[str, Any], params: dict[str, Any],
                 result: dict[str, Any], artifact: Path | None, live_run_id: str | None, logged_epochs: set[int]) -> str:
        from mlflow.entities import Metric

        errored, live_ok = [], False
        for run in self.search(f"tags.`{RUN_KEY}` = '{run_key}'"):
            if run.info.status in MLFLOW_ENDED:
                if run.data.tags.get(STATUS) != ERRORED:
                    return run.info.run_id  # already recorded: never twice
                errored.append(run)  # replaced below by this attempt
            elif run.info.run_id == live_run_id:
                live_ok = True
            else:
                self.client.delete_run(run.info.run_id)  # half-written by a killed driver: write again
        status = result["status"]
        worker = result.get("worker") or {}
        attempt = max((attempt_of(r.data.tags) for r in errored), default=0) + 1
        all_tags = {**tags, RUN_KEY: run_key, KIND: KIND_RUN, STUDY: self.study, STATUS: status, ATTEMPT: attempt,
                    "mlflow.parentRunId": cell_run_id}
        if result.get("reason"):
            all_tags[REASON] = result["reason"]
        if live_ok:
            run_id = live_run_id
        else:
            run_id = self.client.create_run(self.experiment_id, start_time=_ms(worker.get("start")),
                                            tags={RUN_KEY: run_key, KIND: "pending"},
                                            run_name=run_name(str(tags.get(LABEL, "")), run_key)).info.run_id
            logged_epochs = set()
        now = time.time()
        times = {int(k): float(v) for k, v in (result.get("epoch_times") or {}).items()}
        metrics = []
        for row in result.get("history", []):
            epoch = int(row["epoch"])
            if epoch in logged_epochs:
                continue
            ts = int(times.get(epoch, worker.get("start") or now) * 1000)
            metrics += [Metric(k, float(v), ts, epoch) for k, v in row.items() if k != "epoch" and v is not None]
        end_ms = _ms(worker.get("end")) or int(now * 1000)
        metrics += [Metric(k, v, end_ms, 0) for k, v in final_metrics(result).items()]
        self._log(run_id, metrics, params=params, tags=all_tags)
        if artifact is not None and artifact.exists():
            self.client.log_artifact(run_id, str(artifact))
        for run in errored:
            self.client.delete_run(run.info.run_id)
        self.client.set_terminated(run_id, mlflow_status(status), end_time=end_ms)
        return run_id


def param_text(value: Any) -> str:
    """How a param is stored: strings as they are, anything else as JSON (so `null`, lists and
    booleans read back as what they were; numbers print as before)."""
    return value if isinstance(value, str) else json.dumps(value)


def final_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The summary numbers of a run: best validation score, its epoch, each test split, time."""
    out: dict[str, float] = {}
    metric = result.get("metric") or "valid"
    if result.get("best_valid") is not None:
        out[f"best_{metric}"] = float(result["best_valid"])
        out["best_epoch"] = float(result["best_epoch"])
    for split, values in (result.get("test") or {}).items():
        for k, v in values.items():
            out[f"test_{split}_{k}"] = float(v)
    out["train_seconds"] = float(result.get("seconds") or 0.0)
    if result.get("params_total"):
        out["params_total"] = float(result["params_total"])
    if result.get("params_formula") is not None:
        out["params_formula"] = float(result["params_formula"])
    return out


def cell_tags(cell: Any) -> dict[str, Any]:
    """The cell's tags as every run of it carries them (harness.record.CellRecord.tags)."""
    return CellRecord.of_cell(cell).tags()


def cell_params(cell: Any) -> dict[str, Any]:
    return CellRecord.of_cell(cell).params()
