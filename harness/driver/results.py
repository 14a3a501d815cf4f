"""The record: opening it (every cell's runs in bulk), and each result logged before Optuna hears it.

A part of `StudyRunner` (harness/driver/runner.py), which inherits it. `_open_record` reads the
MLflow study and cell runs, the runs already recorded and the Optuna trial states — a few
queries per store whatever the number of cells — and builds each cell's state
(`_cell_state`, harness/driver/plan.py). `_record` logs one finished job to MLflow and only then
tells Optuna (a driver killed in between loses nothing: the trial is dispatched again and its
record is not written twice). Closing the record when the driver exits is
harness/driver/close.py.

`run_tags` is public for `tprbench bench record` (harness/bench/record.py).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from tasks.result import BEST_WEIGHTS, RESULT, RunStatus, is_diverged, is_failure

from ..record.contract import MlflowStatus, Phase, RunKey, Tag, WorkerResult, max_attempts, prefixed, split_tags
from ..record.guard import Snapshots
from ..record.layout import RunRoot
from ..record.lease import DriverLease
from ..record.retry import with_retry
from ..record.sources import sqlite_path
from ..record.storage import TRIAL_ENDED, display_url, read_trial_states
from ..record.writer import Tracker, cell_tags
from .cells import SEARCH_SEED_OFFSET, CellState, Job, params_hash

if TYPE_CHECKING:
    from ..study.cells import Cell, Study


class ResultRecording:
    """The record's side of the driver: open it, keep the cell runs, log each result."""

    # Set by StudyRunner.__init__ (harness/driver/runner.py); annotated here for the reader.
    study: Study
    cells: list[Cell]

    def _open_record(self) -> list[CellState]:
        """Optuna storage, the MLflow study run, and each cell's state as recorded — read in bulk:
        a few queries per store whatever the number of cells. A cell run that does not exist yet is
        created at its cell's first dispatch: planning, which a driver with work does for every cell as
        it starts (for the resume line), only notes the tags the new run will carry (`_set_cell_tags`);
        a cell's Optuna study is opened when the cell first needs it."""
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
                self.run_tags(job, result),
                params,
                result,
                done.parent / BEST_WEIGHTS if result.status == RunStatus.FINISHED else None,
                new=True,
            )
            self._logged.add(job.run_key)
            self.recovered += 1
            self.snapshots.changed()

    def _cell_run(self, st: CellState, extra_tags: dict[str, Any] | None = None) -> str:
        """The cell's run id; created on first need (its first dispatch), with the tags planning left
        for it (`_set_cell_tags`) and `extra_tags`. An existing cell run that an earlier driver ended is
        RUNNING again while this one works on the cell (ended with its summary when the driver exits:
        `_close_record`)."""
        cid = st.cell.id
        if cid not in self.cell_runs:
            tags = {**st.unwritten_tags, **{k: str(v) for k, v in (extra_tags or {}).items()}}
            self.cell_runs[cid] = self.tracker.create_cell_run(st.cell, self.study_run_id, tags)
            st.tags.update(tags)
            st.unwritten_tags = {}
        elif cid not in self._touched:
            self.tracker.reopen(self.cell_runs[cid])
        self._touched.add(cid)
        return self.cell_runs[cid]

    def _set_cell_tags(self, st: CellState, tags: dict[str, Any]) -> None:
        """Write the cell run's tags that differ from what it records (nothing on a no-op rerun). A cell
        with no run yet keeps them until its first dispatch creates the run with them: the driver
        plans every cell at start (`_drive`, for the resume line), and creating each cell's run there
        would hold back a fresh study's first job by one create-run round trip per cell (10k cells:
        minutes on an MLflow server) and show every cell RUNNING before any was dispatched. A cell
        without a run has no recorded seed runs, so it is dispatched and its run created then."""
        changed = {k: str(v) for k, v in tags.items() if st.tags.get(k) != str(v)}
        if not changed:
            return
        if st.cell.id not in self.cell_runs:
            st.unwritten_tags.update(changed)
            return
        self.tracker.set_tags(self.cell_runs[st.cell.id], changed)
        st.tags.update(changed)

    def _record(self, st: CellState, job: Job, result: WorkerResult) -> None:
        """Log one result to MLflow, then tell Optuna (in that order: a crash in between loses nothing)."""
        t0 = time.perf_counter()
        self._tag_splits(st, result)
        params = {**(result.hparams or job.hparams), "seed": job.seed}
        live_run, live_epochs = self._live.pop(job.run_key) if self._live is not None else (None, set())
        self.tracker.log_run(
            self._cell_run(st),
            job.run_key,
            self.run_tags(job, result),
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

    def run_tags(self, job: Job, result: WorkerResult | None = None) -> dict[str, Any]:
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
