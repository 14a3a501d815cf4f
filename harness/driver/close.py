"""Closing the record when the driver exits: summary metrics, and every run it opened ended.

A part of `StudyRunner` (harness/driver/runner.py), which inherits it. Closing runs however the
driver ends (done, an error, Ctrl-C), so each step is guarded: a summary that cannot be
computed does not keep the runs from ending, and a store that is down leaves them RUNNING for
the next driver to end (`_close_left_open`). Out of disk space is held back and said as one
line at the very end (`_stop_if_close_full`, harness.diskfull).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..diskfull import disk_full_error, is_disk_full
from ..record.contract import BEST, MlflowStatus
from ..record.retry import retry_seconds
from ..report import aggregate
from ..report.aggregate import _is_missing, records
from .cells import CellState, CellStatus

if TYPE_CHECKING:
    from ..study.cells import Cell, Study


class RecordClosing:
    """End the cell runs (with their summary metrics) and the study run as the driver exits."""

    # Set by StudyRunner.__init__ (harness/driver/runner.py); annotated here for the reader.
    study: Study
    cells: list[Cell]

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

    def _close_record(self, states: list[CellState], outcome: str) -> None:
        """When the driver exits (done, error or Ctrl-C): each cell run gets its summary metrics and
        ends FINISHED (done) or FAILED (failed, errored, unfinished) — KILLED for unfinished cells
        when interrupted and for paused ones (`--until-epoch`) — and the study run ends with `outcome`
        (FAILED if any cell is not done, KILLED if the rest are paused)."""
        self.tracker.window = min(retry_seconds(), 10.0)  # the store may be what stopped the driver: do not wait long
        if outcome != MlflowStatus.FINISHED:
            self._retire_half_written()
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

    def _retire_half_written(self) -> None:
        """Delete (ended KILLED) the trial/seed runs a stop left unended: the live runs of the jobs
        still in flight (`LiveRuns`), and a run the stop caught between its creation and its end —
        while a live run was created, or while a finished job's record was written. Left alone, such
        a run stayed RUNNING until the next driver deleted it (`Tracker.delete_pending`, as it opens
        the record); a committed record or the MLflow UI showed it RUNNING meanwhile (seen once in
        CI: tests/test_study_ray.py). Their jobs were cancelled and are dispatched again by the next
        `run`. One sweep under the close's short window: the dispatch loop once deleted the in-flight
        live runs one by one as it stopped, each waiting the whole retry window when the store was
        down. Two queries, then two writes per run found."""
        try:
            self.tracker.delete_pending()
        except Exception as exc:  # the store is down: the next driver deletes them
            self._close_failed("half-written runs not deleted", exc)

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


def _ended(done: bool, stopped: bool) -> MlflowStatus:
    """How a study or cell run ends when the driver exits: FINISHED when done, KILLED when it was
    stopped (the driver interrupted, or its runs paused by `--until-epoch`), FAILED otherwise."""
    if done:
        return MlflowStatus.FINISHED
    return MlflowStatus.KILLED if stopped else MlflowStatus.FAILED
