"""The study driver: cells × Optuna search × Ray dispatch × MLflow record, resumable.

One loop keeps the whole cluster busy across all cells: whenever a slot is free it takes the
next piece of work from the cell that has waited longest — a search trial (asked from that
cell's Optuna study) or, once a cell's search is complete, a final-phase seed run with the
cell's best parameters. Results come back to the driver, which logs them to MLflow
(idempotent by run key) and only then tells Optuna, so a driver killed at any point loses
nothing: on restart, trials Optuna still shows as running are dispatched again (their
per-epoch checkpoints make that cheap), records already in MLflow are not written twice, and
finished work is never recomputed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .jobs import TrialRef, WorkerJob
from .record import (
    ERRORED,
    FINAL_PARAMS,
    FINAL_PARAMS_HASH,
    FINAL_TRIALS,
    GIT_COMMIT,
    HOST,
    NOTES,
    PARAMS_FORMULA,
    PARAMS_HASH,
    PARAMS_TOTAL,
    PHASE,
    PRUNED,
    REPRODUCIBLE,
    SEED,
    TAG,
    TRIAL,
    is_failure,
    split_tags,
)
from .storage import default_storage_url, open_storage, trial_states
from .tracking import Tracker, cell_tags, default_tracking_uri, git_commit, with_retry


class RunnerError(RuntimeError):
    user_error = True


def params_hash(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:8]


SEARCH_SEED_OFFSET = 10_000  # search trial n trains with seed 10000+n; final seeds are 0..N-1


@dataclass
class Job:
    """The driver's side of one dispatched run: the `WorkerJob` sent to a worker plus bookkeeping."""

    cell: Any
    phase: str  # search | final
    run_key: str
    work: WorkerJob
    trial_number: int | None = None
    started: float = 0.0
    prepare_seconds: float = 0.0  # driver: Optuna ask + suggest (search trials)

    @property
    def run_dir(self) -> Path:
        return Path(self.work.run_dir)

    @property
    def seed(self) -> int:
        return self.work.seed

    @property
    def hparams(self) -> dict[str, Any]:
        return self.work.hparams


def cell_status(trials_done: int, trials_wanted: int, trials_running: int, trials_without_value: int,
                seeds_done: int, seeds_wanted: int, note: str = "") -> str:
    """A cell's state, for the driver's live view, its summary and `study show` alike:
    pending | searching | failed (every trial failed or was pruned) | final | done, or the
    driver's note (e.g. "failed: no search trial completed")."""
    if note:
        return note
    if trials_done < trials_wanted or trials_running:
        return "pending" if not trials_done and not trials_running else "searching"
    if trials_wanted and trials_done == trials_without_value:
        return "failed"
    if seeds_done < seeds_wanted:
        return "final"
    return "done"


@dataclass
class CellState:
    cell: Any
    study: Any  # optuna.Study, opened on first use (StudyRunner._study): a done cell never opens it
    trials_wanted: int
    seeds_wanted: int
    trials_done: int = 0
    trials_failed: int = 0
    trials_pruned: int = 0
    seeds_done: int = 0
    seeds_failed: int = 0
    running: int = 0
    stale: list[tuple[int, int]] = field(default_factory=list)  # (number, trial id) left RUNNING by a dead driver
    to_ask: int = 0
    final_params: dict[str, Any] | None = None
    final_todo: list[int] = field(default_factory=list)
    note: str = ""
    running_search: int = 0
    records: dict[str, Any] = field(default_factory=dict)  # MLflow records of this cell by run key
    tags: dict[str, str] = field(default_factory=dict)  # the cell run's tags as recorded (prefixed)

    @property
    def status(self) -> str:
        return cell_status(self.trials_done, self.trials_wanted, self.running_search,
                           self.trials_failed + self.trials_pruned, self.seeds_done, self.seeds_wanted, self.note)


class StudyLock:
    """One driver per study and run directory: a second one would dispatch the same trials."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> StudyLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "w")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunnerError(f"{self.path}: another `tprbench run` is driving this study in this run directory") from None
        self.handle.write(str(os.getpid()))
        self.handle.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def init_ray(address: str | None, num_cpus: int | None = None, temp_dir: str | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    if address:
        ray.init(address=address, **{k: v for k, v in kwargs.items() if k != "include_dashboard"})
    else:
        start_local_ray(lambda: ray.init(num_cpus=num_cpus, _temp_dir=temp_dir, **kwargs), ray.shutdown)


LOCAL_RAY_ATTEMPTS = 3


def start_local_ray(init: Any, shutdown: Any, attempts: int = LOCAL_RAY_ATTEMPTS, pause_s: float = 5.0) -> None:
    """Start a local Ray, retrying when its node does not come up in time.

    Ray waits a hard-coded 30 s for its raylet to register with the GCS and then raises
    "The current node timed out during startup"; an overloaded machine misses that (measured on
    this project's 2-core machine at load 38: two studies in a row failed). A retry after
    `ray.shutdown()` usually succeeds; after `attempts` the user gets one line, not a traceback."""
    for attempt in range(1, attempts + 1):
        try:
            init()
            return
        except Exception as exc:  # Ray raises a bare Exception here
            if "timed out during startup" not in str(exc):
                raise
            shutdown()
            if attempt == attempts:
                raise RunnerError(f"local Ray did not start ({attempts} attempts, Ray waits 30 s each for its node): "
                                  "the machine is probably overloaded; rerun later (the study resumes)") from None
            logging.getLogger(__name__).warning("local Ray did not start (attempt %d of %d); retrying", attempt, attempts)
            time.sleep(pause_s * attempt)


def slots(resources: Any) -> int:
    """How many trials the cluster fits at once with the study's per-trial request."""
    import ray

    total = ray.cluster_resources()
    fit = int(total.get("CPU", 1) // max(resources.cpus, 1e-9))
    if resources.gpus:
        fit = min(fit, int(round(total.get("GPU", 0) / resources.gpus, 6)))
    if resources.max_concurrent:
        fit = min(fit, resources.max_concurrent)
    return max(fit, 1)


class StudyRunner:
    def __init__(self, study: Any, cells: list[Any], root: Path, tracking_uri: str | None = None,
                 storage_url: str | None = None, force: bool = False, console: Any = None,
                 project_dir: Path | None = None) -> None:
        self.study, self.cells = study, cells
        self.root = Path(root).resolve()
        self.tracking_uri = tracking_uri or default_tracking_uri(self.root)
        self.storage_url = storage_url or default_storage_url(self.root)
        self.force = force
        self.console = console
        self.commit = git_commit(project_dir)
        self.cache_dir = self.root / "cache"
        self.work_dir = self.root / "work" / study.name
        self.started = time.time()
        self.run_seconds: list[float] = []
        self.events: list[str] = []
        # One row per recorded job: where its wall time went (see `_time`; `tprbench bench harness`).
        self.timings: list[dict[str, Any]] = []
        self.dispatch_started = self.dispatch_ended = 0.0
        self._splits_tagged: set[str] = set()  # cells whose run names its splits (this driver's session)
        self._logged: set[str] = set()  # run keys recorded by this driver
        self.snapshots: Any = None  # harness.record_guard.Snapshots, set when the record is opened
        self.recovered = 0  # ended runs logged again from their run directories (a restored record)

    # -- setup -----------------------------------------------------------------------------
    def _optuna_name(self, cell: Any) -> str:
        return f"{self.study.name}/{cell.id}"

    def _optuna_study(self, cell: Any):
        """The cell's Optuna study, created if it does not exist (one journal append)."""
        import optuna

        from .search_space import make_pruner

        return with_retry(lambda: optuna.create_study(
            study_name=self._optuna_name(cell), storage=self.storage, direction=cell.direction,
            sampler=self._sampler(cell, 0), pruner=make_pruner(self.study.pruner), load_if_exists=True),
            f"Optuna storage {self.storage_url}", self._say)

    def _study(self, st: CellState):
        """The cell's Optuna study, opened (or created) when first needed: a rerun with nothing
        to do, and a study without search trials, never open one per cell."""
        if st.study is None:
            st.study = self._optuna_study(st.cell)
        return st.study

    @staticmethod
    def _sampler(cell: Any, number: int):
        """The sampler that proposes trial `number` of a cell, seeded by (cell id, trial number).

        One seeded sampler per study would make a restarted driver draw its first random
        numbers again: the first trial asked after a restart got the parameters of trial 0 (a
        duplicate search point, and results that differ from an uninterrupted run). Seeding per
        trial makes each trial's proposal independent of restarts (TPE still conditions on the
        trials finished at that moment)."""
        import optuna

        seed = int(hashlib.sha256(f"{cell.id}/{number}".encode()).hexdigest()[:8], 16)
        return optuna.samplers.TPESampler(seed=seed)

    def _datasets(self) -> list[tuple[Any, Any]]:
        """(first cell, task adapter) for each distinct dataset (task, options, data) of the study."""
        from tasks.registry import get_task

        seen: dict[str, tuple[Any, Any]] = {}
        for cell in self.cells:
            key = json.dumps([cell.task, cell.task_options, cell.data], sort_keys=True, default=str)
            if key not in seen:
                seen[key] = (cell, get_task(cell.task)(cell.task_options, cell.data, str(self.cache_dir)))
        return list(seen.values())

    def _prepare_data(self) -> None:
        """Load/generate each distinct dataset once on the driver so workers find it cached,
        and so a bad data path stops the study before anything is dispatched."""
        for cell, adapter in self._datasets():
            self._say(f"preparing data for {cell.task} ({cell.data})")
            adapter.prepare()

    def _check_data(self) -> None:
        """Each task's cheap data check (does the path exist?) before the record is opened, so a
        wrong data path stops the study with nothing written to the run directory."""
        from tasks.errors import DataError

        for cell, adapter in self._datasets():
            try:
                adapter.check_data()
            except DataError as exc:
                raise DataError(f"{self.study.path}: task {cell.task_label!r}: {exc}") from None

    def _cell_state(self, cell: Any, records: dict[str, Any], trials: list[tuple[int, int, str]],
                    tags: dict[str, str]) -> CellState:
        """A cell's state from what the record holds: its runs by run key, its Optuna trials as
        (number, trial id, state) and its cell run's tags — all read in bulk by `_open_record`."""
        st = CellState(cell, None, self.study.study.trials, self.study.study.seeds)
        if self.force:
            import optuna

            for rec in records.values():
                self.tracker.retry(lambda run_id=rec.run_id: self.tracker.client.delete_run(run_id), "delete run")
            records, trials = {}, []
            tags = {k: v for k, v in tags.items() if k not in (FINAL_PARAMS, FINAL_PARAMS_HASH, FINAL_TRIALS)}
            try:
                optuna.delete_study(study_name=self._optuna_name(cell), storage=self.storage)
            except KeyError:
                pass
            # The cell's checkpoints and result.json files go too: a finished run directory is
            # returned as is by `train`, so without this --force recomputed nothing.
            shutil.rmtree(self.work_dir / cell.id, ignore_errors=True)
        st.trials_done, st.trials_failed, st.trials_pruned, st.stale = count_trials(trials)
        st.to_ask = max(st.trials_wanted - st.trials_done - len(st.stale), 0)
        st.trials_wanted = max(st.trials_wanted, st.trials_done + len(st.stale))
        st.records = records
        st.tags = dict(tags)
        return st

    def _cell_run(self, st: CellState, extra_tags: dict[str, Any] | None = None) -> str:
        """The cell's run id; created on first need (its first dispatch or plan), with `extra_tags`."""
        cid = st.cell.id
        if cid not in self.cell_runs:
            self.cell_runs[cid] = self.tracker.create_cell_run(st.cell, self.study_run_id, extra_tags)
            st.tags.update({k: str(v) for k, v in (extra_tags or {}).items()})
        return self.cell_runs[cid]

    def _set_cell_tags(self, st: CellState, tags: dict[str, Any]) -> None:
        """Write the cell run's tags that differ from what it records (nothing on a no-op rerun)."""
        changed = {k: str(v) for k, v in tags.items() if st.tags.get(k) != str(v)}
        if not changed:
            return
        if st.cell.id not in self.cell_runs:
            self._cell_run(st, changed)
            return
        self.tracker.set_tags(self.cell_runs[st.cell.id], changed)
        st.tags.update(changed)

    # -- planning --------------------------------------------------------------------------
    def _final_params(self, st: CellState) -> dict[str, Any] | None:
        from .search_space import defaults

        space = st.cell.search
        if st.trials_wanted == 0:
            return defaults(space)
        # Chosen once from the search: recorded with the number of trials it saw, and current
        # while that number is (trials are only ever added), so a rerun opens no Optuna study.
        recorded = st.tags.get(FINAL_PARAMS)
        if recorded and st.tags.get(FINAL_TRIALS) == str(st.trials_done) and st.tags.get(FINAL_PARAMS_HASH):
            return json.loads(recorded)
        from optuna.trial import TrialState

        study = self._study(st)
        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        if not complete:
            return None
        best = study.best_trial
        return {**defaults(space), **best.params, **best.user_attrs.get("fixed", {})}

    def _plan_final(self, st: CellState) -> None:
        params = self._final_params(st)
        if params is None:
            st.note = "failed: no search trial completed"
            return
        st.final_params = params
        h = params_hash(params)
        # The report reads which seed runs are current from the cell's record.
        self._set_cell_tags(st, {FINAL_PARAMS_HASH: h, FINAL_PARAMS: json.dumps(params, sort_keys=True),
                                 FINAL_TRIALS: st.trials_done})
        done = [s for s in range(st.seeds_wanted) if f"{st.cell.id}/seed/{s}/{h}" in st.records]
        st.seeds_done = len(done)
        st.seeds_failed = sum(is_failure(st.records[f"{st.cell.id}/seed/{s}/{h}"].status) for s in done)
        st.final_todo = [s for s in range(st.seeds_wanted) if s not in done]

    def _has_work(self, st: CellState) -> bool:
        if st.stale or st.to_ask:
            return True
        if st.trials_done < st.trials_wanted:
            return True
        if st.final_params is None and not st.note:
            self._plan_final(st)
        return bool(st.final_todo)

    def _next_job(self, st: CellState) -> Job | None:
        cell = st.cell
        t0 = time.perf_counter()
        if st.stale:
            number, trial_id = st.stale.pop(0)
            return self._trial_job(st, number, trial_id, t0)
        if st.to_ask:
            st.to_ask -= 1
            study = self._study(st)
            trial = with_retry(study.ask, f"Optuna storage {self.storage_url}", self._say)
            return self._trial_job(st, trial.number, trial._trial_id, t0)
        if st.running_search or st.trials_done < st.trials_wanted or st.note:
            return None
        if st.final_params is None:
            self._plan_final(st)
        if st.final_todo:
            seed = st.final_todo.pop(0)
            h = params_hash(st.final_params)
            work = self._work(cell, seed, dict(st.final_params), self.work_dir / cell.id / f"seed-{seed}-{h}")
            return Job(cell, "final", f"{cell.id}/seed/{seed}/{h}", work)
        return None

    def _work(self, cell: Any, seed: int, hparams: dict[str, Any], run_dir: Path,
              trial: TrialRef | None = None) -> WorkerJob:
        res = self.study.resources
        return WorkerJob.for_cell(cell, seed=seed, hparams=hparams, run_dir=str(run_dir), cache_dir=str(self.cache_dir),
                                  threads=int(res.cpus) if res.cpus >= 1 else 1, trial=trial,
                                  deterministic=getattr(self.study, "deterministic", True))

    def _trial_job(self, st: CellState, number: int, trial_id: int, t0: float | None = None) -> Job:
        import optuna

        from .search_space import suggest

        study = self._study(st)

        def propose() -> dict[str, Any]:  # idempotent: stored values come back for a re-dispatched trial
            study.sampler = self._sampler(st.cell, number)
            trial = optuna.trial.Trial(study, trial_id)
            params = suggest(trial, st.cell.search)
            trial.set_user_attr("fixed", {k: v for k, v in params.items() if k not in trial.params})
            return params

        params = with_retry(propose, f"Optuna storage {self.storage_url}", self._say)
        st.running_search += 1
        ref = TrialRef(self.storage_url, study.study_name, trial_id, _dump(self.study.pruner))
        work = self._work(st.cell, SEARCH_SEED_OFFSET + number, params,
                          self.work_dir / st.cell.id / f"trial-{number:04d}", ref)
        job = Job(st.cell, "search", f"{st.cell.id}/trial/{number}", work, number)
        job.prepare_seconds = time.perf_counter() - t0 if t0 is not None else 0.0
        return job

    def _tell(self, st: CellState, job: Job, value: float | None = None, state: Any = None) -> None:
        """Optuna `tell`, retried while the storage is unavailable (skip_if_finished: idempotent)."""
        with_retry(lambda: self._study(st).tell(job.trial_number, value, state=state, skip_if_finished=True),
                   f"Optuna storage {self.storage_url}", self._say)

    # -- results ---------------------------------------------------------------------------
    def _record(self, st: CellState, job: Job, result: dict[str, Any]) -> None:
        """Log one result to MLflow, then tell Optuna (in that order: a crash in between loses nothing)."""
        cell = st.cell
        t0 = time.perf_counter()
        self._tag_splits(st, result)
        params = {**(result.get("hparams") or job.hparams), "seed": job.seed}
        best = job.run_dir / "best.pt"
        self.tracker.log_run(self._cell_run(st), job.run_key, self._run_tags(job, result), params, result,
                             best if result.get("status") == "finished" else None,
                             new=job.run_key not in st.records and job.run_key not in self._logged)
        self._logged.add(job.run_key)
        t1 = time.perf_counter()
        status = result.get("status")
        if job.phase == "search":
            self._tell_result(st, job, result)
        else:
            st.seeds_done += 1
            st.seeds_failed += is_failure(status)
        self._time(job, result, log=t1 - t0, tell=time.perf_counter() - t1)
        if is_failure(status):
            self._say(f"[yellow]{cell.label} {job.run_key.split('/', 1)[1]} {status}:[/] {result.get('reason', '')[:200]}")
        for note in result.get("notes") or []:
            self._say(f"{cell.label} {job.run_key.split('/', 1)[1]}: {note}")
        if result.get("seconds"):
            self.run_seconds.append(float(result["seconds"]))

    def _run_tags(self, job: Job, result: dict[str, Any]) -> dict[str, Any]:
        tags = {PHASE: job.phase, SEED: job.seed, GIT_COMMIT: self.commit, PARAMS_HASH: params_hash(job.hparams),
                **cell_tags(job.cell), HOST: result.get("worker", {}).get("host", "")}
        if job.trial_number is not None:
            tags[TRIAL] = job.trial_number
        if result.get("params_formula") is not None:
            tags[PARAMS_FORMULA] = result["params_formula"]
        if result.get("params_total"):
            tags[PARAMS_TOTAL] = result["params_total"]
        if result.get("reproducible") is not None:
            tags[REPRODUCIBLE] = str(bool(result["reproducible"])).lower()
        if result.get("notes"):
            tags[NOTES] = json.dumps(result["notes"])
        return tags

    def _tag_splits(self, st: CellState, result: dict[str, Any]) -> None:
        """The cell run names its validation and test splits once a worker has seen the data
        (written when they differ from what it records)."""
        splits = result.get("splits")
        if splits and st.cell.id not in self._splits_tagged:
            self._set_cell_tags(st, split_tags(splits["valid"], splits["test"]))
            self._splits_tagged.add(st.cell.id)

    def _tell_result(self, st: CellState, job: Job, result: dict[str, Any]) -> None:
        """Optuna hears the run's best value of the cell's metric — the value the trainer chose
        the best epoch by and the pruner saw each epoch — or PRUNED / FAIL."""
        from optuna.trial import TrialState

        st.running_search -= 1
        st.trials_done += 1
        status = result.get("status")
        if status == "finished" and result.get("best_valid") is not None:
            self._tell(st, job, result["best_valid"])
        elif status == PRUNED:
            st.trials_pruned += 1
            self._tell(st, job, state=TrialState.PRUNED)
        else:
            st.trials_failed += 1
            self._tell(st, job, state=TrialState.FAIL)

    def _time(self, job: Job, result: dict[str, Any], log: float, tell: float) -> None:
        """Where one job's time went: driver (Optuna ask/suggest/tell, MLflow record), Ray
        (submit → worker start, worker end → result seen by the driver) and the worker itself."""
        w = result.get("worker") or {}
        row = {"run_key": job.run_key, "phase": job.phase, "status": result.get("status"),
               "submitted": job.started, "done": time.time(), "optuna_seconds": job.prepare_seconds + tell,
               "prepare_seconds": job.prepare_seconds, "tell_seconds": tell,
               "mlflow_seconds": log, "worker_seconds": w.get("worker_seconds"), "get_seconds": w.get("get_seconds", 0.0),
               **{k: w.get(k) for k in ("node_id", "pid", "resources", "gpu_ids", "start", "end")}}
        if w.get("start") is not None and w.get("end") is not None and w.get("ready_at") is not None:
            row["dispatch_seconds"] = max(w["start"] - job.started, 0.0)
            row["return_seconds"] = max(w["ready_at"] - w["end"], 0.0)
        self.timings.append(row)

    # -- the loop --------------------------------------------------------------------------
    def run(self, address: str | None = None, num_cpus: int | None = None, ray_temp_dir: str | None = None) -> dict[str, Any]:
        """Open the record, plan every cell, dispatch until nothing is left; returns a summary."""
        self._check_data()
        self.root.mkdir(parents=True, exist_ok=True)
        with StudyLock(self.root / "locks" / f"{self.study.name}.lock"):
            states = self._open_record()
            if any(self._has_work(st) for st in states):
                self._prepare_data()
                init_ray(address, num_cpus, ray_temp_dir)
                self._dispatch(states)
            else:
                self._say("nothing to do: every cell is done (use --force to rerun)")
            self.snapshots.take()  # the record as this driver leaves it (only if it wrote anything)
            return {"cells": len(states), "seconds": time.time() - self.started,
                    "states": {st.cell.id: st.status for st in states}}

    def _open_record(self) -> list[CellState]:
        """Optuna storage, the MLflow study run, and each cell's state as recorded — read in bulk:
        a few queries per store whatever the number of cells. Cell runs and Optuna studies that
        do not exist yet are created when their cell is first dispatched."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.storage = with_retry(lambda: open_storage(self.storage_url, notify=self._say), f"Optuna storage {self.storage_url}", self._say)
        self.tracker = Tracker(self.tracking_uri, self.study.name, self.root / "mlartifacts", root=self.root)
        self.tracker.on_retry = self._say
        self.study_run_id = self.tracker.study_run(self.commit)
        self.tracker.delete_pending()
        reader, ids = self.tracker.reader, [c.id for c in self.cells]
        cell_runs = self.tracker.retry(lambda: reader.cell_runs(ids), "read cell runs")
        self.cell_runs, tags = {}, {}
        for run in sorted(cell_runs, key=lambda r: (r["start_time"] or 0, r["run_id"]), reverse=True):
            cid = run["tags"].get("cell_id", "")
            self.cell_runs[cid] = run["run_id"]  # the first created wins (as the report reads it)
            tags[cid] = {TAG + k: v for k, v in run["tags"].items()}
        found = self.tracker.retry(lambda: reader.run_records(ids), "read records")
        by_cell: dict[str, dict[str, Any]] = {c.id: {} for c in self.cells}
        for key, rec in found.items():
            by_cell.setdefault(rec.cell_id, {})[key] = rec
        names = [self._optuna_name(c) for c in self.cells]
        trials = with_retry(lambda: trial_states(self.storage, names), f"Optuna storage {self.storage_url}", self._say)
        states = [self._cell_state(c, by_cell[c.id], trials.get(name, []), tags.get(c.id, {}))
                  for c, name in zip(self.cells, names)]
        from .record_guard import Snapshots
        from .record_sources import sqlite_path

        self.snapshots = Snapshots(sqlite_path(self.tracking_uri), self.root, note=self._say)
        if not self.force:
            for st, name in zip(states, names):
                self._recover_trials(st, trials.get(name, []))
        if self.recovered:
            self._say(f"recorded {self.recovered} ended search trial(s) again from their run directories' result.json "
                      "(the record lacked them: restored from an older snapshot?)")
        return states

    def _recover_trials(self, st: CellState, trials: list[tuple[int, int, str]]) -> None:
        """Log again the search trials that ended (Optuna says so) but that the record lacks —
        a record restored from a snapshot older than them (harness.record_guard) — from the
        result.json their run directory holds. Nothing is trained again. (Missing seed runs
        need nothing here: they are dispatched, and their worker returns the result.json.)"""
        for number, trial_id, state in trials:
            key = f"{st.cell.id}/trial/{number}"
            done = self.work_dir / st.cell.id / f"trial-{number:04d}" / "result.json"  # tasks.training.RESULT
            if state not in ("COMPLETE", "PRUNED", "FAIL") or key in st.records or not done.exists():
                continue
            try:
                result = json.loads(done.read_text())
            except (OSError, ValueError):
                continue  # unreadable: the trial stays unrecorded, as it was
            frozen = with_retry(lambda t=trial_id: self.storage.get_trial(t), f"Optuna storage {self.storage_url}", self._say)
            proposed = {**frozen.params, **frozen.user_attrs.get("fixed", {})}
            work = self._work(st.cell, SEARCH_SEED_OFFSET + number, proposed, done.parent)
            job = Job(st.cell, "search", key, work, number)
            result.pop("fingerprint", None)
            params = {**(result.get("hparams") or proposed), "seed": job.seed}
            best = done.parent / "best.pt"
            self.tracker.log_run(self._cell_run(st), key, self._run_tags(job, result), params, result,
                                 best if result.get("status") == "finished" else None, new=True)
            self._logged.add(key)
            self.recovered += 1
            self.snapshots.changed()

    def _dispatch(self, states: list[CellState]) -> None:
        """Keep every slot busy (fill slots, submit), collect results as they come, until no work is left."""
        import ray

        from .worker import run_job

        res = self.study.resources
        self._remote = ray.remote(max_calls=0)(run_job).options(
            num_cpus=res.cpus, num_gpus=res.gpus or 0, max_retries=res.retries, retry_exceptions=False)
        self._capacity, self._capacity_checked = slots(res), time.monotonic()
        self._say(f"{len(states)} cells, {self._capacity} trial slot(s); tracking {self.tracking_uri}")
        in_flight: dict[Any, tuple[CellState, Job]] = {}
        order = deque(states)
        self.dispatch_started = time.time()
        try:
            with self._live(states) as live:
                self._loop(states, order, in_flight, live)
        finally:
            self.dispatch_ended = time.time()
            # Stopped by an error (store unavailable, Ctrl-C in a notebook): tasks still running
            # would go on writing into run directories that the next `run` dispatches again.
            for ref in in_flight:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # already gone: nothing to cancel
                    pass

    def _loop(self, states: list[CellState], order: deque, in_flight: dict[Any, tuple[CellState, Job]], live: Any) -> None:
        while True:
            self._fill_slots(order, in_flight)
            live(states, len(in_flight))
            if not in_flight:
                return
            self._collect(in_flight)
            live(states, len(in_flight))

    def _fill_slots(self, order: deque, in_flight: dict[Any, tuple[CellState, Job]]) -> None:
        """Take work from the cells round-robin until every slot is busy or no cell has work now."""
        if time.monotonic() - self._capacity_checked > 10:  # nodes come and go
            self._capacity, self._capacity_checked = slots(self.study.resources), time.monotonic()
        idle_rounds = 0
        while len(in_flight) < self._capacity and order and idle_rounds < len(order):
            st = order[0]
            order.rotate(-1)
            job = self._next_job(st)
            if job is None:
                idle_rounds += 1
                continue
            idle_rounds = 0
            in_flight[self._submit(job, st)] = (st, job)
            st.running += 1

    def _submit(self, job: Job, st: CellState) -> Any:
        self._cell_run(st)  # the MLflow UI shows a cell from its first dispatch
        job.run_dir.mkdir(parents=True, exist_ok=True)
        job.started = time.time()
        return self._remote.remote(job.work)

    def _collect(self, in_flight: dict[Any, tuple[CellState, Job]]) -> None:
        """Record whatever finished within a second (a lost worker is an errored run)."""
        import ray

        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
        for ref in ready:
            st, job = in_flight[ref]
            ready_at = time.time()
            try:
                result = ray.get(ref)
            except Exception as exc:  # worker/node lost after all retries
                result = {"status": ERRORED, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                          "history": [], "test": {}}
            _stop_if_disk_full(job, result)
            result.setdefault("worker", {})["ready_at"] = ready_at
            result["worker"]["get_seconds"] = time.time() - ready_at
            self._record(st, job, result)
            del in_flight[ref]  # only once recorded: an error above leaves it to be cancelled
            st.running -= 1
            self.snapshots.changed()
            if st.status in ("done", "failed") or st.note:
                self.snapshots.cell_done()

    # -- progress --------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        self.events.append(text)
        if self.console is not None:
            self.console.print(text)

    def _live(self, states: list[CellState]):
        from .progress import live_view

        return live_view(self, states)


def _stop_if_disk_full(job: Job, result: dict[str, Any]) -> None:
    """A run that ran out of disk space is not a result: it is not recorded (its trial stays
    running in Optuna, its seed to do) and the driver stops with one line (harness.diskfull)."""
    from .diskfull import disk_full_error, is_disk_full

    if result.get("disk_full") is not None or (is_failure(result.get("status")) and is_disk_full(result.get("reason"))):
        raise disk_full_error(None, result.get("disk_full") or job.run_dir, f"run {job.run_key}")


def count_trials(trials: list[tuple[int, int, str]]) -> tuple[int, int, int, list[tuple[int, int]]]:
    """(finished, failed, pruned, unfinished) of a cell's Optuna trials given as (number, trial id,
    state name) (harness.storage.trial_states); finished counts all three end states. Unfinished
    ones, as (number, trial id), are running, or were left running by a driver that died."""
    ended = [t for t in trials if t[2] in ("COMPLETE", "PRUNED", "FAIL")]
    return (len(ended), sum(t[2] == "FAIL" for t in ended), sum(t[2] == "PRUNED" for t in ended),
            [(t[0], t[1]) for t in trials if t[2] in ("RUNNING", "WAITING")])


def study_status(study: Any, cells: list[Any], root: Path, tracking_uri: str | None = None,
                 storage_url: str | None = None) -> list[dict[str, Any]]:
    """What is done per cell, read from Optuna and MLflow without changing (or creating) either."""
    import optuna

    from .record import RecordReader

    root = Path(root).resolve()
    ids = [c.id for c in cells]
    reader = RecordReader(tracking_uri or default_tracking_uri(root), study.name, must_exist=False, root=root)
    records = reader.run_records(ids)
    tags_by_cell = reader.cell_tags(ids)
    journal = storage_url or default_storage_url(root)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = [f"{study.name}/{c.id}" for c in cells]
    exists = not journal.startswith("journal://") or Path(journal[10:]).exists()
    trials = trial_states(open_storage(journal, repair=False), names) if exists else {}
    seeds_by_cell: dict[str, list[Any]] = {}
    for key, rec in records.items():
        if "/seed/" in key:
            seeds_by_cell.setdefault(rec.cell_id, []).append((key, rec))
    rows = []
    for cell, name in zip(cells, names):
        done, failed, pruned, unfinished = count_trials(trials.get(name, []))
        counts = {"done": done, "failed": failed, "pruned": pruned, "running": len(unfinished)}
        final_hash = tags_by_cell.get(cell.id, {}).get(FINAL_PARAMS_HASH)
        seeds = [r for k, r in seeds_by_cell.get(cell.id, []) if final_hash and k.endswith("/" + final_hash)]
        seeds_done = len(seeds)  # records are keyed by run key: one per seed
        status = cell_status(counts["done"], study.trials, counts["running"], counts["failed"] + counts["pruned"],
                             seeds_done, study.seeds)
        rows.append({"id": cell.id, "label": cell.label, "task": cell.task, "arch": cell.arch, "unit": cell.unit,
                     "dims": {"dim": cell.dim, "input_dim": cell.input_dim},
                     "trials_done": counts["done"], "trials_wanted": study.trials, "trials_failed": counts["failed"],
                     "trials_pruned": counts["pruned"], "trials_running": counts["running"],
                     "seeds_done": seeds_done, "seeds_failed": sum(is_failure(r.status) for r in seeds),
                     "seeds_wanted": study.seeds, "status": status})
    return rows


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json") if hasattr(model, "model_dump") else model

