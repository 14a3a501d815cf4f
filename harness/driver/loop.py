"""The dispatch loop: keep every Ray slot busy, collect results as they come, record each.

A part of `StudyRunner` (harness/driver/runner.py), which inherits it. One loop serves all
cells: whenever a slot is free it takes the next job from the cell that has waited longest
(round-robin over cells ordered longest work first, `EpochEta.longest_first`), submits
`run_job` (harness/driver/worker.py) as a Ray task, and records whatever finished within a
second (`_record`, harness/driver/results.py). Per-epoch metrics of jobs in flight go to MLflow
as they arrive (harness/driver/live.py); the live table or progress lines are
harness/driver/progress.py.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tasks.result import is_failure

from ..diskfull import disk_full_error, is_disk_full
from ..record.contract import WorkerResult
from .cells import CellState, CellStatus, Job, partly_trained_first
from .live import LiveRuns, start_sink
from .progress import live_view
from .ray_start import check_fits, slots
from .worker import run_job

if TYPE_CHECKING:
    from ..study.cells import Study


class DispatchLoop:
    """Ray dispatch: fill slots, submit, wait, record; cancel what is left if it stops early."""

    # Set by StudyRunner.__init__ (harness/driver/runner.py); annotated here for the reader.
    study: Study

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
            # The live runs of jobs still in flight are deleted by the close's one sweep
            # (`_retire_half_written`), not here run by run: with the store down, each delete
            # waited the whole retry window (N jobs in flight: N × 120 s before the driver exited).
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
        """The MLflow run of a job whose worker has started (harness/driver/live.py)."""
        return self.tracker.start_live(self.cell_runs[job.cell.id], job.run_key, self.run_tags(job), job.cell.label, start)

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

    def _live_view(self, states: list[CellState]):
        return live_view(self, states)


def _stop_if_disk_full(job: Job, result: WorkerResult) -> None:
    """A run that ran out of disk space is not a result: it is not recorded (its trial stays
    running in Optuna, its seed to do) and the driver stops with one line (harness.diskfull)."""
    if result.disk_full is not None or (is_failure(result.status) and is_disk_full(result.reason)):
        raise disk_full_error(None, result.disk_full or job.run_dir, f"run {job.run_key}")
