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
import os
import shutil
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

from tasks.errors import DataError
from tasks.progress import ConsoleReporter, Reporter, reporting
from tasks.registry import get_task
from tasks.result import BEST_WEIGHTS, CHECKPOINT, RESULT, RunStatus, is_diverged, is_failure, paused_epoch

from ..diskfull import disk_full_error, is_disk_full
from ..faults import fault_point
from ..jobs import TrialRef, WorkerJob
from ..live import LiveRuns, start_sink
from ..progress import EpochEta, live_view
from ..record.contract import (
    BEST,
    MlflowStatus,
    Phase,
    RunKey,
    Tag,
    WorkerResult,
    is_trial_key,
    max_attempts,
    prefixed,
    split_tags,
    will_retry,
)
from ..record.guard import Snapshots
from ..record.layout import RunRoot
from ..record.lease import DriverLease
from ..record.retry import retry_seconds, with_retry
from ..record.sources import default_tracking_uri, sqlite_path
from ..record.storage import TRIAL_ENDED, TrialState, cell_study_name, default_storage_url, display_url, open_storage, read_trial_states
from ..record.store_check import check_stores
from ..record.writer import Tracker, cell_tags, git_commit
from ..report import aggregate
from ..report.aggregate import _is_missing, records
from ..search_space import defaults, make_pruner, suggest
from ..worker import run_job
from .cells import SEARCH_SEED_OFFSET, CellState, CellStatus, Job, count_trials, params_hash, partly_trained_first
from .errors import RunnerError
from .ray_start import check_address, check_fits, init_ray, slots
from .status import describe_optuna_study


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


class StudyRunner:
    def __init__(
        self,
        study: Any,
        cells: list[Any],
        root: Path,
        tracking_uri: str | None = None,
        storage_url: str | None = None,
        force: bool = False,
        console: Any = None,
        project_dir: Path | None = None,
        until_epoch: int | None = None,
    ) -> None:
        self.study, self.cells = study, cells
        self.until_epoch = until_epoch  # pause every run after this epoch (`run --until-epoch`)
        self.root = Path(root).resolve()
        self.tracking_uri = tracking_uri or default_tracking_uri(self.root)
        self.storage_url = storage_url or default_storage_url(self.root)
        self._storage: Any = None
        self.force = force
        self.console = console
        self.commit = git_commit(project_dir)
        self.cache_dir = RunRoot(self.root).cache
        self.work_dir = RunRoot(self.root).work_dir(study.name)
        self.started = time.time()
        self.eta = EpochEta(until_epoch)  # the progress line's ETA, in epochs (harness/progress.py)
        self.events: list[str] = []
        # One row per recorded job: where its wall time went (see `_time`; `tprbench bench harness`).
        self.timings: list[dict[str, Any]] = []
        self.dispatch_started = self.dispatch_ended = 0.0
        self._splits_tagged: set[str] = set()  # cells whose run names its splits (this driver's session)
        self._logged: set[str] = set()  # run keys recorded by this driver
        self.snapshots: Any = None  # harness.record.guard.Snapshots, set when the record is opened
        self.recovered = 0  # ended runs logged again from their run directories (a restored record)
        self._live: LiveRuns | None = None  # per-epoch metrics while runs train (harness/live.py)
        self._touched: set[str] = set()  # cells whose run this driver reopened or created (ended when it exits)
        # The aggregate of every planned cell computed for the cell summaries when the driver
        # exits, if it covered them all: the closing table prints it instead of reading again.
        self.closing_aggregate: Any = None
        self._preflight_done = False
        self._close_full: Exception | None = None  # the close ran out of disk space (`_close_failed`)

    # -- setup -----------------------------------------------------------------------------
    def _optuna_name(self, cell: Any) -> str:
        return cell_study_name(self.study.name, cell.id)

    def _optuna_study(self, cell: Any):
        """The cell's Optuna study, created if it does not exist (one journal append)."""
        import optuna

        study = with_retry(
            lambda: optuna.create_study(
                study_name=self._optuna_name(cell),
                storage=self.storage,
                direction=cell.direction,
                sampler=self._sampler(cell, 0),
                pruner=make_pruner(self.study.pruner),
                load_if_exists=True,
            ),
            f"Optuna storage {display_url(self.storage_url)}",
            self._say,
        )
        with_retry(lambda: describe_optuna_study(study, cell, self.study.name), f"Optuna storage {display_url(self.storage_url)}", self._say)
        return study

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
        seen: dict[str, tuple[Any, Any]] = {}
        for cell in self.cells:
            key = json.dumps([cell.task, cell.task_options, cell.data], sort_keys=True, default=str)
            if key not in seen:
                seen[key] = (cell, get_task(cell.task)(cell.task_options, cell.data, str(self.cache_dir)))
        return list(seen.values())

    def _prepare_data(self) -> None:
        """Load/generate each distinct dataset once on the driver so workers find it cached,
        and so a bad data path stops the study before anything is dispatched."""
        # Data generation shows its bar (terminal) or a line every 30 s; `--quiet` and library use: none.
        shown = self.console is not None and getattr(self, "show_progress", True)
        with reporting(ConsoleReporter(self.console) if shown else Reporter()):
            for cell, adapter in self._datasets():
                t0 = time.monotonic()
                self._phase(f"preparing data for {cell.task} ({cell.data})")
                adapter.prepare()
                self._phase(f"data for {cell.task} ready in {time.monotonic() - t0:.1f} s")

    def preflight(self, address: str | None = None) -> None:
        """The checks that need nothing written: the Ray address answers (one line within seconds,
        not minutes of Ray's retries) and each task's data is where the study says. `tprbench run`
        calls it before pointing library output at `<root>/logs/`, so bad input leaves the run
        directory as it was; `run()` calls it too (once)."""
        if self._preflight_done:
            return
        if address:
            check_address(address)
        check_stores(self.tracking_uri, self.storage_url)  # a store that never answers: one line, nothing created
        self._check_data()
        self._preflight_done = True

    def _check_data(self) -> None:
        """Each task's cheap data check (does the path exist?) before the record is opened, so a
        wrong data path stops the study with nothing written to the run directory."""
        for cell, adapter in self._datasets():
            try:
                adapter.check_data()
            except DataError as exc:
                raise DataError(f"{self.study.path}: task {cell.task_label!r}: {exc}") from None

    def _cell_state(self, cell: Any, records: dict[str, Any], trials: list[tuple[int, int, str]], tags: dict[str, str]) -> CellState:
        """A cell's state from what the record holds: its runs by run key, its Optuna trials as
        (number, trial id, state) and its cell run's tags — all read in bulk by `_open_record`."""
        st = CellState(cell, None, self.study.study.trials, self.study.study.seeds)
        if self.force:
            import optuna

            for rec in records.values():
                self.tracker.retry(lambda run_id=rec.run_id: self.tracker.client.delete_run(run_id), "delete run")
            records, trials = {}, []
            tags = {k: v for k, v in tags.items() if k not in (Tag.FINAL_PARAMS, Tag.FINAL_PARAMS_HASH, Tag.FINAL_TRIALS)}
            try:
                optuna.delete_study(study_name=self._optuna_name(cell), storage=self.storage)
            except KeyError:
                pass
            # The cell's checkpoints and result.json files go too: a finished run directory is
            # returned as is by `train`, so without this --force recomputed nothing.
            shutil.rmtree(self.work_dir / cell.id, ignore_errors=True)
        st.records = records
        st.tags = dict(tags)
        trials = self._give_up_errored(st, trials)
        st.trials_done, st.trials_failed, st.trials_pruned, st.stale = count_trials(trials)
        st.retried += sum(self._errored(st, RunKey.trial(cell.id, number)) is not None for number, _ in st.stale)
        st.to_ask = max(st.trials_wanted - st.trials_done - len(st.stale), 0)
        st.trials_wanted = max(st.trials_wanted, st.trials_done + len(st.stale))
        at_stage = [t for t in st.stale if self._paused_at_stage(st.records.get(str(RunKey.trial(cell.id, t[0]))))]
        st.paused += len(at_stage)  # unfinished in Optuna, but at this stage's epoch: left as they are
        st.stale = [t for t in st.stale if t not in at_stage]
        return st

    @staticmethod
    def _errored(st: CellState, key: RunKey) -> Any:
        rec = st.records.get(str(key))
        return rec if rec is not None and rec.status == RunStatus.ERRORED else None

    def _give_up_errored(self, st: CellState, trials: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
        """Trials left unfinished because they errored `max_attempts()` times are failed in Optuna
        now, so the search completes without them; returns the trials with their states after that."""
        from optuna.trial import TrialState as OptunaState

        out = []
        for number, trial_id, state in trials:
            rec = self._errored(st, RunKey.trial(st.cell.id, number))
            if state == TrialState.RUNNING and rec is not None and not will_retry(rec.status, rec.tags):
                with_retry(
                    lambda n=number: self._study(st).tell(n, state=OptunaState.FAIL, skip_if_finished=True),
                    f"Optuna storage {display_url(self.storage_url)}",
                    self._say,
                )
                state = TrialState.FAIL
            out.append((number, trial_id, state))
        for key, rec in st.records.items():  # trials that errored past the cap keep the cell errored
            if is_trial_key(key) and rec.status == RunStatus.ERRORED and not will_retry(rec.status, rec.tags):
                st.note_errored(rec.tags.get(Tag.REASON, ""))
        return out

    def _cell_run(self, st: CellState, extra_tags: dict[str, Any] | None = None) -> str:
        """The cell's run id; created on first need (its first dispatch or plan), with `extra_tags`.
        An existing cell run that an earlier driver ended is RUNNING again while this one works on
        the cell (ended with its summary when the driver exits: `_close_record`)."""
        cid = st.cell.id
        if cid not in self.cell_runs:
            self.cell_runs[cid] = self.tracker.create_cell_run(st.cell, self.study_run_id, extra_tags)
            st.tags.update({k: str(v) for k, v in (extra_tags or {}).items()})
        elif cid not in self._touched:
            self.tracker.reopen(self.cell_runs[cid])
        self._touched.add(cid)
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
        space = st.cell.search
        if st.trials_wanted == 0:
            return defaults(space)
        # Chosen once from the search: recorded with the number of trials it saw, and current
        # while that number is (trials are only ever added), so a rerun opens no Optuna study.
        if st.recorded_final_hash():
            return json.loads(st.tags[Tag.FINAL_PARAMS])
        from optuna.trial import TrialState as OptunaState

        study = self._study(st)
        complete = [t for t in study.get_trials(deepcopy=False, states=(OptunaState.COMPLETE,))]
        if not complete:
            return None
        best = study.best_trial
        return {**defaults(space), **best.params, **best.user_attrs.get("fixed", {})}

    def _plan_final(self, st: CellState) -> None:
        params = self._final_params(st)
        if params is None:
            # No trial completed: every one diverged or was pruned (a result: failed), or some
            # errored past the retry cap (not a result: the cell is errored, `study show` says why).
            st.note = CellStatus.ERRORED if st.errored else f"{CellStatus.FAILED}: no search trial completed"
            return
        st.final_params = params
        h = params_hash(params)
        # The report reads which seed runs are current from the cell's record.
        self._set_cell_tags(st, {Tag.FINAL_PARAMS_HASH: h, Tag.FINAL_PARAMS: json.dumps(params, sort_keys=True), Tag.FINAL_TRIALS: st.trials_done})
        recorded = {s: st.records.get(str(RunKey.seed(st.cell.id, s, h))) for s in range(st.seeds_wanted)}
        done = [s for s, rec in recorded.items() if rec is not None and not will_retry(rec.status, rec.tags)]
        st.seeds_done = len(done)
        st.seeds_failed = sum(is_diverged(recorded[s].status) for s in done)
        for s in done:  # seeds that errored past the cap
            if recorded[s].status == RunStatus.ERRORED:
                st.note_errored(recorded[s].tags.get(Tag.REASON, ""))
        st.final_todo = [s for s in range(st.seeds_wanted) if s not in done]
        at_stage = [s for s in st.final_todo if self._paused_at_stage(recorded[s])]
        st.paused += len(at_stage)
        st.final_todo = [s for s in st.final_todo if s not in at_stage]
        st.retried += sum(recorded[s] is not None and recorded[s].status == RunStatus.ERRORED for s in st.final_todo)
        paused = [s for s in st.final_todo if recorded[s] is not None and recorded[s].status == RunStatus.PAUSED]
        saved = sum((RunKey.seed(st.cell.id, s, h).run_dir(self.work_dir) / CHECKPOINT).exists() for s in paused)
        st.continued += saved
        st.started_over += len(paused) - saved

    def _paused_at_stage(self, rec: Any) -> bool:
        """A run recorded paused at this stage's epoch (`--until-epoch`) or later is not dispatched
        again: a worker would load its checkpoint only to pause it at once (~30 s a run on this
        project's machine; thousands of worker-minutes in a study of thousands of cells)."""
        if rec is None or rec.status != RunStatus.PAUSED or self.until_epoch is None:
            return False
        epoch = paused_epoch(rec.tags.get(Tag.REASON))
        return epoch is not None and epoch >= self.until_epoch

    @property
    def storage(self) -> Any:
        """The Optuna storage, opened (a journal replayed, a torn last record repaired) when first
        needed: a rerun with nothing to do reads trial states from the journal and never opens it."""
        if self._storage is None:
            self._storage = with_retry(
                lambda: open_storage(self.storage_url, notify=self._say), f"Optuna storage {display_url(self.storage_url)}", self._say
            )
        return self._storage

    @storage.setter
    def storage(self, storage: Any) -> None:  # an already open storage (tests, `tprbench bench record`)
        self._storage = storage

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
            trial = with_retry(study.ask, f"Optuna storage {display_url(self.storage_url)}", self._say)
            return self._trial_job(st, trial.number, trial._trial_id, t0)
        if st.running_search or st.trials_done < st.trials_wanted or st.note:
            return None
        if st.final_params is None:
            self._plan_final(st)
        if st.final_todo:
            key = RunKey.seed(cell.id, st.final_todo.pop(0), params_hash(st.final_params))
            return Job(cell, key, self._work(cell, key.number, dict(st.final_params), key.run_dir(self.work_dir)))
        return None

    def _work(self, cell: Any, seed: int, hparams: dict[str, Any], run_dir: Path, trial: TrialRef | None = None) -> WorkerJob:
        res = self.study.resources
        return WorkerJob.for_cell(
            cell,
            seed=seed,
            hparams=hparams,
            run_dir=str(run_dir),
            cache_dir=str(self.cache_dir),
            threads=res.threads,
            trial=trial,
            deterministic=getattr(self.study, "deterministic", True),
            until_epoch=self.until_epoch,
        )

    def _trial_job(self, st: CellState, number: int, trial_id: int, t0: float | None = None) -> Job:
        import optuna

        study = self._study(st)

        def propose() -> dict[str, Any]:  # idempotent: stored values come back for a re-dispatched trial
            study.sampler = self._sampler(st.cell, number)
            trial = optuna.trial.Trial(study, trial_id)
            params = suggest(trial, st.cell.search)
            trial.set_user_attr("fixed", {k: v for k, v in params.items() if k not in trial.params})
            return params

        params = with_retry(propose, f"Optuna storage {display_url(self.storage_url)}", self._say)
        st.running_search += 1
        ref = TrialRef(self.storage_url, study.study_name, trial_id, _dump(self.study.pruner))
        key = RunKey.trial(st.cell.id, number)
        job = Job(st.cell, key, self._work(st.cell, SEARCH_SEED_OFFSET + number, params, key.run_dir(self.work_dir), ref))
        job.prepare_seconds = time.perf_counter() - t0 if t0 is not None else 0.0
        return job

    def _tell(self, st: CellState, job: Job, value: float | None = None, state: Any = None) -> None:
        """Optuna `tell`, retried while the storage is unavailable (skip_if_finished: idempotent)."""
        with_retry(
            lambda: self._study(st).tell(job.trial_number, value, state=state, skip_if_finished=True),
            f"Optuna storage {display_url(self.storage_url)}",
            self._say,
        )

    # -- results ---------------------------------------------------------------------------
    def _record(self, st: CellState, job: Job, result: WorkerResult) -> None:
        """Log one result to MLflow, then tell Optuna (in that order: a crash in between loses nothing)."""
        t0 = time.perf_counter()
        self._tag_splits(st, result)
        params = {**(result.hparams or job.hparams), "seed": job.seed}
        live_run, live_epochs = self._live.pop(job.run_key) if self._live is not None else (None, set())
        self.tracker.log_run(
            self._cell_run(st),
            job.run_key,
            self._run_tags(job, result),
            params,
            result,
            job.run_dir / BEST_WEIGHTS if result.status == RunStatus.FINISHED else None,
            new=job.run_key not in st.records and job.run_key not in self._logged,
            live_run_id=live_run,
            logged_epochs=live_epochs,
        )
        self._logged.add(job.run_key)
        t1 = time.perf_counter()
        status = result.status
        attempt = st.attempt(job.run_key)
        retry = status == RunStatus.ERRORED and attempt < max_attempts()
        if status == RunStatus.ERRORED:
            st.note_errored(result.reason)
        st.paused += status == RunStatus.PAUSED
        if job.phase is Phase.SEARCH:
            self._tell_result(st, job, result, retry or status == RunStatus.PAUSED)  # paused: told when it ends
        else:
            st.seeds_done += not retry and status != RunStatus.PAUSED
            st.seeds_failed += is_diverged(status)
        self._time(job, result, log=t1 - t0, tell=time.perf_counter() - t1)
        self._say_result(job, result, attempt, retry)
        self.eta.ended(job.run_key, result)

    def _say_result(self, job: Job, result: WorkerResult, attempt: int, retry: bool) -> None:
        """One line for a run that errored or diverged, one per note the run had."""
        what = f"{job.cell.label} {job.key.name}"
        if result.status == RunStatus.ERRORED:
            then = (
                f"attempt {attempt} of {max_attempts()}: the next `tprbench run` retries it"
                if retry
                else f"attempt {attempt} of {max_attempts()}: not retried again (use --force to start the cell over)"
            )
            self._say(f"[yellow]{what} {RunStatus.ERRORED} ({then}):[/] {result.reason[:200]}")
        elif is_failure(result.status):
            self._say(f"[yellow]{what} {result.status}:[/] {result.reason[:200]}")
        elif result.status == RunStatus.PAUSED:
            self._say(f"{what}: {result.reason}")
        for note in result.notes or []:
            self._say(f"{what}: {note}")

    def _run_tags(self, job: Job, result: WorkerResult | None = None) -> dict[str, Any]:
        """The tags of a trial/seed run besides those the writer adds (none of the result's when
        the run is only starting)."""
        tags = {
            Tag.PHASE: job.phase,
            Tag.SEED: job.seed,
            Tag.GIT_COMMIT: self.commit,
            Tag.PARAMS_HASH: params_hash(job.hparams),
            **cell_tags(job.cell),
            Tag.HOST: result.worker.host if result is not None else "",
        }
        if job.trial_number is not None:
            tags[Tag.TRIAL] = job.trial_number
        if result is None:
            return tags
        if result.params_formula is not None:
            tags[Tag.PARAMS_FORMULA] = result.params_formula
        if result.params_total:
            tags[Tag.PARAMS_TOTAL] = result.params_total
        if result.reproducible is not None:
            tags[Tag.REPRODUCIBLE] = str(bool(result.reproducible)).lower()
        if result.notes:
            tags[Tag.NOTES] = json.dumps(result.notes)
        return tags

    def _tag_splits(self, st: CellState, result: WorkerResult) -> None:
        """The cell run names its validation and test splits once a worker has seen the data
        (written when they differ from what it records)."""
        if result.splits is not None and st.cell.id not in self._splits_tagged:
            self._set_cell_tags(st, split_tags(result.splits.valid, result.splits.test))
            self._splits_tagged.add(st.cell.id)

    def _tell_result(self, st: CellState, job: Job, result: WorkerResult, retry: bool = False) -> None:
        """Optuna hears the run's best value of the cell's metric — the value the trainer chose
        the best epoch by and the pruner saw each epoch — or PRUNED / FAIL. An errored trial that
        will be retried is not told: it stays unfinished, and the next `run` dispatches it again
        with the same number and parameters (from its checkpoint)."""
        from optuna.trial import TrialState as OptunaState

        st.running_search -= 1
        if retry:
            return
        st.trials_done += 1
        if result.status == RunStatus.FINISHED and result.best_valid is not None:
            self._tell(st, job, result.best_valid)
        elif result.status == RunStatus.PRUNED:
            st.trials_pruned += 1
            self._tell(st, job, state=OptunaState.PRUNED)
        else:
            st.trials_failed += 1
            self._tell(st, job, state=OptunaState.FAIL)

    def _time(self, job: Job, result: WorkerResult, log: float, tell: float) -> None:
        """Where one job's time went: driver (Optuna ask/suggest/tell, MLflow record), Ray
        (submit → worker start, worker end → result seen by the driver) and the worker itself."""
        w = result.worker
        row = {
            "run_key": job.run_key,
            "phase": job.phase,
            "status": result.status,
            "submitted": job.started,
            "done": time.time(),
            "optuna_seconds": job.prepare_seconds + tell,
            "prepare_seconds": job.prepare_seconds,
            "tell_seconds": tell,
            "mlflow_seconds": log,
            "worker_seconds": w.worker_seconds,
            "get_seconds": w.get_seconds,
            **{k: getattr(w, k) for k in ("node_id", "pid", "resources", "gpu_ids", "start", "end")},
        }
        if w.start is not None and w.end is not None and w.ready_at is not None:
            row["dispatch_seconds"] = max(w.start - job.started, 0.0)
            row["return_seconds"] = max(w.ready_at - w.end, 0.0)
        self.timings.append(row)

    # -- the loop --------------------------------------------------------------------------
    def run(self, address: str | None = None, num_cpus: int | None = None, ray_temp_dir: str | None = None) -> dict[str, Any]:
        """Open the record, plan every cell, dispatch until nothing is left; returns a summary."""
        self.preflight(address)
        self.root.mkdir(parents=True, exist_ok=True)
        with StudyLock(RunRoot(self.root).lock(self.study.name)):
            self._phase(f"opening the record ({self.tracking_uri})")
            states = self._open_record()
            if any(self._has_work(st) for st in states):
                with self.lease:
                    self._touched |= self.left_open  # closed with the rest when this driver ends
                    self._drive(states, address, num_cpus, ray_temp_dir)
            else:  # a no-op rerun writes nothing (its study and cell runs were ended by the driver that did the work)
                if self.left_open or self.study_left_open:
                    with self.lease:
                        self._close_left_open(states)
                gave_up = sum(st.status == CellStatus.ERRORED for st in states)
                self._say(
                    "nothing to do: every cell is done"
                    + (f" or errored past the retry cap ({gave_up} cell(s); `study show` says why)" if gave_up else "")
                    + " (use --force to rerun)"
                )
            self.snapshots.take()  # the record as this driver leaves it (only if it wrote anything)
            return {"cells": len(states), "seconds": time.time() - self.started, "states": {st.cell.id: st.status for st in states}}

    def _drive(self, states: list[CellState], address: str | None, num_cpus: int | None, ray_temp_dir: str | None) -> None:
        """Dispatch until nothing is left; the record is closed however it ends."""
        outcome = MlflowStatus.FAILED
        try:
            self.tracker.reopen(self.study_run_id)
            self._say_resume(states)
            self._prepare_data()
            t0 = time.monotonic()
            self._phase(f"connecting to Ray at {address}" if address else f"starting a local Ray ({num_cpus or os.cpu_count()} CPU(s))")
            init_ray(address, num_cpus, ray_temp_dir)
            self._phase(f"Ray ready in {time.monotonic() - t0:.1f} s; planning {len(states)} cell(s)")
            self._dispatch(states)
            outcome = MlflowStatus.FINISHED
        except KeyboardInterrupt:
            outcome = MlflowStatus.KILLED
            raise
        finally:
            fault_point("closing")
            self._close_record(states, outcome)
        self._stop_if_close_full()  # reached only when the dispatch itself ended well

    def _close_left_open(self, states: list[CellState]) -> None:
        """Close what a driver killed while closing left RUNNING (its cell runs, the study run)
        as a finished driver closes them: summary metrics, end status; a snapshot follows."""
        self._touched |= self.left_open  # with the cells opening the record touched (a cell run it created)
        self._close_record(states, MlflowStatus.FINISHED)
        self._stop_if_close_full()
        self.snapshots.changed()
        what = [f"{len(self.left_open)} cell run(s)"] if self.left_open else []
        what += ["the study run"] if self.study_left_open else []
        self._say(f"closed what a stopped driver left open ({' and '.join(what)}): summary metrics logged and ended as a finished driver ends them")

    def _say_resume(self, states: list[CellState]) -> None:
        """What a rerun continues: trials from checkpoints, errored runs retried, runs already recorded."""
        recorded = sum(len(st.records) for st in states)
        if not recorded and not any(st.stale for st in states):
            return
        retried = sum(st.retried for st in states)
        # A stale trial continues from its checkpoint only if it wrote one (the message once
        # said so of trials killed in their first epoch, which start over).
        unfinished = [
            RunKey.trial(st.cell.id, number) for st in states for number, _ in st.stale if self._errored(st, RunKey.trial(st.cell.id, number)) is None
        ]
        saved = sum((key.run_dir(self.work_dir) / CHECKPOINT).exists() for key in unfinished)
        parts = [f"{saved} trial(s) continue from their checkpoints"] if saved else []
        if len(unfinished) > saved:
            parts.append(f"{len(unfinished) - saved} unfinished trial(s) start over (no checkpoint written yet)")
        if retried:
            parts.append(f"{retried} errored run(s) retried")
        continued = sum(st.continued for st in states)
        if continued:
            parts.append(f"{continued} paused run(s) continue from their checkpoints")
        started_over = sum(st.started_over for st in states)
        if started_over:
            parts.append(f"{started_over} paused run(s) start over (no checkpoint in this root: `tprbench record load` brings a saved one)")
        parts.append(f"{recorded} run(s) already recorded")
        self._say("resuming: " + ", ".join(parts))

    def _close_record(self, states: list[CellState], outcome: str) -> None:
        """When the driver exits (done, error or Ctrl-C): each cell run gets its summary metrics and
        ends FINISHED (done) or FAILED (failed, errored, unfinished) — KILLED for unfinished cells
        when interrupted and for paused ones (`--until-epoch`) — and the study run ends with `outcome`
        (FAILED if any cell is not done, KILLED if the rest are paused)."""
        self.tracker.window = min(retry_seconds(), 10.0)  # the store may be what stopped the driver: do not wait long
        try:
            summary = self._cell_summaries([st.cell.id for st in states if st.cell.id in self._touched])
        except Exception as exc:  # a summary is a convenience: ending the runs matters more
            self._close_failed("cell summaries not logged", exc)
            summary = {}
        try:
            ends = []
            for st in states:
                if st.cell.id not in self._touched:  # not worked on by this driver: left as it was
                    continue
                stopped = outcome == MlflowStatus.KILLED or st.status == CellStatus.PAUSED
                ends.append((self.cell_runs[st.cell.id], _ended(st.status == CellStatus.DONE, stopped), summary.get(st.cell.id) or {}))
            self.tracker.end_many(ends)  # in bulk: one transaction per 2,000 cells on a SQL store
            study_ok = outcome == MlflowStatus.FINISHED and all(st.status == CellStatus.DONE for st in states)
            paused = outcome == MlflowStatus.FINISHED and all(st.status in (CellStatus.DONE, CellStatus.PAUSED) for st in states)
            self.tracker.end(self.study_run_id, _ended(study_ok, outcome == MlflowStatus.KILLED or paused))
        except Exception as exc:  # the store is down: the runs stay RUNNING until the next driver ends them
            self._close_failed("study and cell runs not ended", exc)

    def _close_failed(self, what: str, exc: Exception) -> None:
        """A write of the close that failed, said in one line — except out of disk space, which is
        kept for `_stop_if_close_full`: the driver then ends with harness.diskfull's one line and
        nothing else (the next driver ends what this one left RUNNING)."""
        if is_disk_full(exc):
            self._close_full = self._close_full or exc
            return
        self._say(f"{what} ({type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]})")

    def _stop_if_close_full(self) -> None:
        """A close that ran out of disk space after the work ended well: the one line (exit 2)."""
        if self._close_full is not None:
            raise disk_full_error(self._close_full, self.root, "the end of the study and cell runs")

    def _cell_summaries(self, cell_ids: list[str]) -> dict[str, dict[str, float]]:
        """Per cell: best validation score of the search, mean and std of the counted seeds per
        split, seeds finished, parameter counts — as `tprbench report` computes them."""
        reader = self.tracker.reader
        runs, cells = reader.runs(cell_ids), reader.cells(cell_ids)
        if not len(cells):
            return {}
        agg = aggregate(runs, cells, self.study.study.seeds)
        if set(cell_ids) == {c.id for c in self.cells} and len(cells) == len(self.cells):
            self.closing_aggregate = agg  # every planned cell, as recorded now (ending the runs changes no column)
        out: dict[str, dict[str, float]] = {}
        for row in agg if isinstance(agg, list) else records(agg):
            m = out.setdefault(row["cell_id"], {})
            key = str(row["metric_key"]).removeprefix(BEST)
            if row["n"]:
                m[f"{key}_mean"] = row["mean"]
                if row["n"] > 1:
                    m[f"{key}_std"] = row["std"]
            if not _is_missing(row["best_search"]):
                m[f"best_search_valid_{row['metric']}"] = row["best_search"]
            m["seeds_finished"] = row["seeds_finished"]
            for count in ("params_formula", "params_total"):
                if not _is_missing(row[count]):
                    m[count] = int(row[count])
        return out

    def _open_record(self) -> list[CellState]:
        """Optuna storage, the MLflow study run, and each cell's state as recorded — read in bulk:
        a few queries per store whatever the number of cells. Cell runs and Optuna studies that
        do not exist yet are created when their cell is first dispatched."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.tracker = Tracker(self.tracking_uri, self.study.name, RunRoot(self.root).artifacts, root=self.root)
        self.tracker.on_retry = self._say
        self.study_run_id = self.tracker.study_run(self.commit)
        self.lease = DriverLease(self.tracker, self.study_run_id, self.root, note=self._say)
        self.lease.check("changed nothing")  # before anything is deleted: the runs a live driver is writing
        self.tracker.delete_pending()
        reader, ids = self.tracker.reader, [c.id for c in self.cells]
        cell_runs = self.tracker.retry(lambda: reader.cell_runs(ids), "read cell runs")
        self.cell_runs, tags = {}, {}
        for run in sorted(cell_runs, key=lambda r: (r["start_time"] or 0, r["run_id"]), reverse=True):
            cid = run["tags"].get(Tag.CELL.bare, "")
            self.cell_runs[cid] = run["run_id"]  # the first created wins (as the report reads it)
            tags[cid] = prefixed(run["tags"])
        # Left RUNNING by a driver that died (no live driver holds the lease): closed by this one.
        self.left_open = {
            cid for cid, rid in self.cell_runs.items() if any(r["run_id"] == rid and r["status"] == MlflowStatus.RUNNING for r in cell_runs)
        }
        self.study_left_open = self.tracker.study_run_status == MlflowStatus.RUNNING
        found = self.tracker.retry(lambda: reader.run_records(ids), "read records")
        by_cell: dict[str, dict[str, Any]] = {c.id: {} for c in self.cells}
        for key, rec in found.items():
            by_cell.setdefault(rec.cell_id, {})[key] = rec
        names = [self._optuna_name(c) for c in self.cells]
        # A journal is read directly (no replay; the storage is opened only when there is work), a
        # database through the driver's own storage.
        trials = with_retry(
            lambda: read_trial_states(self.storage_url, names, opened=lambda: self.storage),
            f"Optuna storage {display_url(self.storage_url)}",
            self._say,
        )
        states = [self._cell_state(c, by_cell[c.id], trials.get(name, []), tags.get(c.id, {})) for c, name in zip(self.cells, names)]
        self.snapshots = Snapshots(sqlite_path(self.tracking_uri), self.root, note=self._say)
        self.snapshots.remove_leftovers()  # temporary files of killed processes (harness.record.leftovers)
        if not self.force:
            for st, name in zip(states, names):
                self._recover_trials(st, trials.get(name, []))
        if self.recovered:
            self._say(
                f"recorded {self.recovered} ended search trial(s) again from their run directories' result.json "
                "(the record lacked them: restored from an older snapshot?)"
            )
        return states

    def _recover_trials(self, st: CellState, trials: list[tuple[int, int, str]]) -> None:
        """Log again the search trials that ended (Optuna says so) but that the record lacks —
        a record restored from a snapshot older than them (harness.record.guard) — from the
        result.json their run directory holds. Nothing is trained again. (Missing seed runs
        need nothing here: they are dispatched, and their worker returns the result.json.)"""
        for number, trial_id, state in trials:
            if state not in TRIAL_ENDED or str(RunKey.trial(st.cell.id, number)) in st.records:
                continue  # the usual case, decided before building a path (90,000 trials at 100k runs)
            key = RunKey.trial(st.cell.id, number)
            done = key.run_dir(self.work_dir) / RESULT
            if not done.exists():
                continue
            try:
                result = WorkerResult.from_json(done.read_text())
            except (OSError, ValueError, TypeError):
                continue  # unreadable: the trial stays unrecorded, as it was
            frozen = with_retry(lambda t=trial_id: self.storage.get_trial(t), f"Optuna storage {display_url(self.storage_url)}", self._say)
            proposed = {**frozen.params, **frozen.user_attrs.get("fixed", {})}
            job = Job(st.cell, key, self._work(st.cell, SEARCH_SEED_OFFSET + number, proposed, done.parent))
            params = {**(result.hparams or proposed), "seed": job.seed}
            self.tracker.log_run(
                self._cell_run(st),
                job.run_key,
                self._run_tags(job, result),
                params,
                result,
                done.parent / BEST_WEIGHTS if result.status == RunStatus.FINISHED else None,
                new=True,
            )
            self._logged.add(job.run_key)
            self.recovered += 1
            self.snapshots.changed()

    def _dispatch(self, states: list[CellState]) -> None:
        """Keep every slot busy (fill slots, submit), collect results as they come, until no work is left."""
        import ray

        res = self.study.resources
        self._remote = ray.remote(max_calls=0)(run_job).options(
            num_cpus=res.cpus, num_gpus=res.gpus or 0, max_retries=res.retries, retry_exceptions=False
        )
        check_fits(res)
        self._capacity, self._capacity_checked = slots(res), time.monotonic()
        self._say(f"{len(states)} cells, {self._capacity} trial slot(s); tracking {self.tracking_uri}")
        in_flight: dict[Any, tuple[CellState, Job]] = {}
        self.eta.start(states)
        order = deque(self.eta.longest_first(partly_trained_first(states, self.work_dir)))
        self.dispatch_started = time.time()
        self._live = LiveRuns(self.tracker, start_sink(), self._say, on_epoch=self.eta.epoch)
        try:
            with self._live_view(states) as view:
                self._loop(states, order, in_flight, view)
        finally:
            self.dispatch_ended = time.time()
            self._live.drop_unrecorded()  # jobs still in flight: their runs start again next time
            if self._live.sink is not None:
                try:
                    ray.kill(self._live.sink)
                except Exception:  # gone already
                    pass
            # Stopped by an error (store unavailable, Ctrl-C in a notebook): tasks still running
            # would go on writing into run directories that the next `run` dispatches again.
            for ref in in_flight:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # already gone: nothing to cancel
                    pass

    def _loop(self, states: list[CellState], order: deque, in_flight: dict[Any, tuple[CellState, Job]], view: Any) -> None:
        while True:
            self._fill_slots(order, in_flight)
            view(states, len(in_flight))
            if not in_flight:
                return
            self._collect(in_flight)
            self._live.poll({job.run_key: job for _, job in in_flight.values()}, self._start_live)
            view(states, len(in_flight))

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
        self.eta.dispatched(job.run_key, job.cell)
        sink = self._live.sink if self._live is not None else None
        return self._remote.remote(replace(job.work, run_key=job.run_key, sink=sink))

    def _start_live(self, job: Job, start: float) -> str | None:
        """The MLflow run of a job whose worker has started (harness/live.py)."""
        return self.tracker.start_live(self.cell_runs[job.cell.id], job.run_key, self._run_tags(job), job.cell.label, start)

    def _collect(self, in_flight: dict[Any, tuple[CellState, Job]]) -> None:
        """Record whatever finished within a second (a lost worker is an errored run)."""
        import ray

        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
        for ref in ready:
            st, job = in_flight[ref]
            ready_at = time.time()
            try:
                result: WorkerResult = ray.get(ref)
            except Exception as exc:  # worker/node lost after all retries
                result = WorkerResult.errored(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            _stop_if_disk_full(job, result)
            result.worker.ready_at = ready_at
            result.worker.get_seconds = time.time() - ready_at
            self._record(st, job, result)
            del in_flight[ref]  # only once recorded: an error above leaves it to be cancelled
            st.running -= 1
            self.snapshots.changed()
            if st.status in (CellStatus.DONE, CellStatus.FAILED) or st.note:
                self.snapshots.cell_done()

    # -- progress --------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        self.events.append(text)
        if self.console is not None:
            self.console.print(text)

    def _phase(self, text: str) -> None:
        """A start-up phase (record, data, Ray, plan), timestamped: a study is never silent for
        minutes before its first progress line."""
        self._say(f"[{time.strftime('%H:%M:%S')}] {text}")

    def _live_view(self, states: list[CellState]):
        return live_view(self, states)


def _stop_if_disk_full(job: Job, result: WorkerResult) -> None:
    """A run that ran out of disk space is not a result: it is not recorded (its trial stays
    running in Optuna, its seed to do) and the driver stops with one line (harness.diskfull)."""
    if result.disk_full is not None or (is_failure(result.status) and is_disk_full(result.reason)):
        raise disk_full_error(None, result.disk_full or job.run_dir, f"run {job.run_key}")


def _ended(done: bool, stopped: bool) -> MlflowStatus:
    """How a study or cell run ends when the driver exits: FINISHED when done, KILLED when it was
    stopped (the driver interrupted, or its runs paused by `--until-epoch`), FAILED otherwise."""
    if done:
        return MlflowStatus.FINISHED
    return MlflowStatus.KILLED if stopped else MlflowStatus.FAILED


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json") if hasattr(model, "model_dump") else model
