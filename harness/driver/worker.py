"""What runs inside a Ray task: one trial or seed run of one cell, start to finish.

The worker rebuilds the task adapter (cached per worker process, so consecutive trials of a
task skip data loading), trains with per-epoch checkpoints in the job's run directory (a
retried task resumes there), reports each epoch's validation score to Optuna for pruning, and
returns the result. It never writes to MLflow: the driver does, once, idempotently.

In harness/driver/ with the driver that submits it: Ray imports `run_job` by this module's path
(`harness.driver.worker`) in each worker process. `bench train` also borrows `get_adapter`.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from typing import Any

from ..diskfull import failed_path, is_disk_full
from ..record.contract import Splits, WorkerInfo, WorkerResult
from ..record.retry import StoreUnavailable, with_retry
from ..record.storage import display_url, open_storage
from ..study.search_space import make_pruner
from .jobs import TrialRef, WorkerJob
from .live import sender

# Per-process cache of prepared adapters (key: task, options, data, cache dir). Process-local
# on purpose: each Ray worker keeps the data it has loaded for the next trial it gets.
_ADAPTERS: dict[str, Any] = {}


def get_adapter(task: str, options: dict[str, Any], data: str | None, cache_dir: str):
    from tasks.registry import get_task

    key = json.dumps([task, options, data, cache_dir], sort_keys=True, default=str)
    if key not in _ADAPTERS:
        adapter = get_task(task)(options, data, cache_dir)
        adapter.prepare()
        _ADAPTERS[key] = adapter
    return _ADAPTERS[key]


REPORT_RETRY_SECONDS = 30.0  # a worker waits this long for the Optuna storage, then trains on without pruning


def _pruning_reporter(ref: TrialRef, metric_key: str, info: WorkerInfo):
    """Report each epoch's validation score to the trial in Optuna storage; True = prune.

    Pruning is advisory: if the storage stays unavailable (retried with backoff), the trial is
    not failed for it — it trains on unpruned and `info.pruning` says why."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    where = f"Optuna storage {display_url(ref.storage)}"
    window = min(REPORT_RETRY_SECONDS, float(os.environ.get("TPRBENCH_STORE_RETRY_SECONDS", REPORT_RETRY_SECONDS)))
    try:
        trial = with_retry(
            lambda: optuna.trial.Trial(
                optuna.load_study(study_name=ref.study_name, storage=open_storage(ref.storage), pruner=make_pruner(ref.pruner)), ref.trial_id
            ),
            where,
            window=window,
        )
    except StoreUnavailable as exc:
        info.pruning = f"off: {exc}"
        return None

    def report(epoch: int, row: dict[str, float]) -> bool:
        if info.pruning is not None:
            return False
        try:
            return with_retry(lambda: (trial.report(row[metric_key], epoch), trial.should_prune())[1], where, window=window)
        except StoreUnavailable as exc:
            info.pruning = f"off from epoch {epoch}: {exc}"
            return False

    return report


ATTEMPTS = "attempts.jsonl"


def worker_info() -> WorkerInfo:
    """Where this attempt runs: host, pid, and under Ray the node, the resources Ray assigned to
    the task (e.g. {"CPU": 1.0, "GPU": 0.25}) and the GPU ids it may use."""
    info = WorkerInfo(host=socket.gethostname(), pid=os.getpid(), start=time.time())
    try:
        import ray

        if ray.is_initialized():
            ctx = ray.get_runtime_context()
            info.node_id = ctx.get_node_id()
            info.resources = ctx.get_assigned_resources()
            info.gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    except Exception:  # outside Ray (tests, library use): host and pid are enough
        pass
    return info


def _log_attempt(run_dir: str, info: WorkerInfo) -> None:
    """One line per attempt in the run directory: which worker ran it (a retry adds a line)."""
    try:
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, ATTEMPTS), "a") as fh:
            fh.write(json.dumps(info.attempt_line(), sort_keys=True) + "\n")
    except OSError:
        pass


def run_job(job: WorkerJob) -> WorkerResult:
    """Train one job; never raises for a failing run (the failure is the result).

    A run whose loss became NaN/inf comes back `diverged` (from the trainer); any exception is
    `errored` — the run could not be carried out (import error, out of memory, a bad file), which
    says nothing about the unit (tasks/result.py)."""
    started = time.perf_counter()
    info = worker_info()
    _log_attempt(job.run_dir, info)
    notes: list[str] = []
    epoch_times: dict[int, float] = {}  # the worker's wall clock at the end of each epoch (MLflow timestamps)
    send = sender(job.sink, job.run_key, info.start)
    send(None, None)  # started: the driver creates the run with this worker's start time

    def progress(epoch: int, row: dict[str, float]) -> None:
        epoch_times[epoch] = time.time()
        send(epoch, row)

    try:
        import torch

        from tasks.training import train

        if job.threads:
            torch.set_num_threads(job.threads)
        adapter = get_adapter(job.task, job.task_options, job.data, job.cache_dir)
        ready = time.perf_counter()
        report = _pruning_reporter(job.trial, job.metric, info) if job.trial is not None else None
        device = "cuda" if torch.cuda.is_available() else "cpu"
        result = train(
            adapter,
            job.train_config(),
            job.run_dir,
            report=report,
            progress=progress,
            device=device,
            notice=notes.append,
            until_epoch=job.until_epoch,
        )
        out = WorkerResult.of(result, splits=Splits(adapter.valid_split, list(adapter.test_splits)))
        info.setup_seconds = ready - started
    except Exception as exc:  # a raising trial is an errored trial, not a dead study
        out = WorkerResult.errored(f"{type(exc).__name__}: {exc}", notes=notes, traceback=traceback.format_exc(limit=8))
        if is_disk_full(exc):  # not a result: the driver stops and the run is dispatched again later
            out.disk_full = failed_path(exc) or job.run_dir
    info.worker_seconds = time.perf_counter() - started
    info.end = time.time()
    out.worker = info
    out.epoch_times = epoch_times
    return out
