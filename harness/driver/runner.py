"""The study driver: cells × Optuna search × Ray dispatch × MLflow record, resumable.

One loop keeps the whole cluster busy across all cells: whenever a slot is free it takes the
next piece of work from the cell that has waited longest — a search trial (asked from that
cell's Optuna study) or, once a cell's search is complete, a final-phase seed run with the
cell's best parameters. Results come back to the driver, which logs them to MLflow
(idempotent by run key) and only then tells Optuna, so a driver killed at any point loses
nothing: on restart, trials Optuna still shows as running are dispatched again (their
per-epoch checkpoints make that cheap), records already in MLflow are not written twice, and
finished work is never recomputed.

`StudyRunner` is this module; its parts, each a class it inherits, live beside it:

- harness/driver/plan.py (`CellPlanning`): each cell's state, its Optuna study, the next job;
- harness/driver/results.py (`ResultRecording`): opening the record, logging each result;
- harness/driver/close.py (`RecordClosing`): ending the runs when the driver exits;
- harness/driver/loop.py (`DispatchLoop`): the Ray dispatch loop.

Here: the runner's state (`__init__`), the checks before anything is written (`preflight`),
data preparation, `run` (lock, open the record, drive, close) and the driver's messages.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.errors import DataError
from tasks.progress import ConsoleReporter, Reporter, reporting
from tasks.registry import get_task
from tasks.result import CHECKPOINT

from ..faults import fault_point
from ..record.contract import MlflowStatus, RunKey
from ..record.layout import RunRoot
from ..record.sources import default_tracking_uri
from ..record.storage import default_storage_url
from ..record.store_check import check_stores
from ..record.writer import git_commit
from .cells import CellState, CellStatus
from .close import RecordClosing
from .errors import RunnerError
from .live import LiveRuns
from .loop import DispatchLoop
from .plan import CellPlanning
from .progress import EpochEta
from .ray_start import check_address, init_ray
from .results import ResultRecording

if TYPE_CHECKING:
    from ..study.cells import Cell, Study


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


class StudyRunner(CellPlanning, ResultRecording, RecordClosing, DispatchLoop):
    """Drives one study in one run directory: `preflight()`, then `run()`; see the module docstring."""

    def __init__(
        self,
        study: Study,
        cells: list[Cell],
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
        self.eta = EpochEta(until_epoch)  # the progress line's ETA, in epochs (harness/driver/progress.py)
        self.events: list[str] = []
        # One row per recorded job: where its wall time went (see `_time`; `tprbench bench harness`).
        self.timings: list[dict[str, Any]] = []
        self.dispatch_started = self.dispatch_ended = 0.0
        self._splits_tagged: set[str] = set()  # cells whose run names its splits (this driver's session)
        self._logged: set[str] = set()  # run keys recorded by this driver
        self.snapshots: Any = None  # harness.record.guard.Snapshots, set when the record is opened
        self.recovered = 0  # ended runs logged again from their run directories (a restored record)
        self._live: LiveRuns | None = None  # per-epoch metrics while runs train (harness/driver/live.py)
        self._touched: set[str] = set()  # cells whose run this driver reopened or created (ended when it exits)
        # The aggregate of every planned cell computed for the cell summaries when the driver
        # exits, if it covered them all: the closing table prints it instead of reading again.
        self.closing_aggregate: Any = None
        self._preflight_done = False
        self._close_full: Exception | None = None  # the close ran out of disk space (`_close_failed`)

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
            # Every cell planned before the resume line counts their paused and in-flight runs (the
            # `any` above stops at the first cell with work). Here, under the lease and the close
            # guard. Planning writes tags only to cell runs that exist; a new cell's run is created
            # at its first dispatch (`_set_cell_tags`).
            for st in states:
                self._has_work(st)
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

    def _say_resume(self, states: list[CellState]) -> None:
        """What a rerun continues: trials from checkpoints, errored runs retried, runs already recorded."""
        recorded = sum(len(st.records) for st in states)
        interrupted = sum(st.interrupted for st in states)
        if not recorded and not interrupted and not any(st.stale for st in states):
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
        if interrupted:
            parts.append(f"{interrupted} run(s) in flight at the last stop continue from their checkpoints")
        started_over = sum(st.started_over for st in states)
        if started_over:
            parts.append(f"{started_over} paused run(s) start over (no checkpoint in this root: `tprbench record load` brings a saved one)")
        parts.append(f"{recorded} run(s) already recorded")
        self._say("resuming: " + ", ".join(parts))

    def _say(self, text: str) -> None:
        self.events.append(text)
        if self.console is not None:
            self.console.print(text)

    def _phase(self, text: str) -> None:
        """A start-up phase (record, data, Ray, plan), timestamped: a study is never silent for
        minutes before its first progress line."""
        self._say(f"[{time.strftime('%H:%M:%S')}] {text}")
