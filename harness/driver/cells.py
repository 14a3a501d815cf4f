"""A cell's state as the driver counts it, and the driver's side of one dispatched run.

Shared by the driver loop (harness.driver.runner) and `study show` (harness.driver.status),
which must agree on what `done`, `errored` or `failed` means for a cell; no Optuna, Ray or
MLflow here.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.result import CHECKPOINT, REPLACEABLE, RESULT

from ..record.contract import Phase, RunKey, Tag, carried_attempt
from ..record.storage import TRIAL_ENDED, TrialState
from .jobs import WorkerJob

if TYPE_CHECKING:
    from ..study.cells import Cell


def params_hash(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:8]


SEARCH_SEED_OFFSET = 10_000  # search trial n trains with seed 10000+n; final seeds are 0..N-1


def partly_trained_first(states: list[Any], work_dir: Path) -> list[Any]:
    """The cells in dispatch order: those with a partly trained run first, then the rest, each group in
    plan order. A run is partly trained when its directory holds a checkpoint and no result (a run
    killed mid-training, or paused by `run --until-epoch`; a finished run writes `result.json`).

    Why: the driver fills its slots round-robin from the front, so a restarted study (a session's end,
    a preempted node, a narrower `--only` before) otherwise starts the plan's first fresh cells and
    leaves checkpointed runs waiting behind them; their epochs are already paid for, and a study
    staged with `--until-epoch` finishes a stage sooner when its longest runs, once started, keep
    their slot. One walk of the study's work directory (`<cell>/<run>/`), once per driver: 10k run
    directories took 1.0 s on this project's loaded 2-core machine (pathlib's glob: 2.5 s)."""
    partial = _partly_trained_cells(Path(work_dir))
    return sorted(states, key=lambda st: st.cell.id not in partial)  # sorted is stable: plan order kept


def _partly_trained_cells(work_dir: Path) -> set[str]:
    found: set[str] = set()
    try:
        cells = os.scandir(work_dir)
    except FileNotFoundError:  # nothing dispatched yet
        return found
    with cells:
        for cell in cells:
            if not cell.is_dir():
                continue
            try:
                with os.scandir(cell.path) as runs:
                    for run in runs:
                        if run.is_dir():
                            names = os.listdir(run.path)
                            if CHECKPOINT in names and RESULT not in names:
                                found.add(cell.name)
                                break
            except FileNotFoundError:  # removed meanwhile (`run --force` of another selection): nothing to keep
                continue
    return found


@dataclass
class Job:
    """The driver's side of one dispatched run: the `WorkerJob` sent to a worker plus bookkeeping."""

    cell: Cell
    key: RunKey
    work: WorkerJob
    started: float = 0.0
    prepare_seconds: float = 0.0  # driver: Optuna ask + suggest (search trials)

    @property
    def run_key(self) -> str:
        return str(self.key)

    @property
    def phase(self) -> Phase:
        return self.key.phase

    @property
    def trial_number(self) -> int | None:
        return self.key.number if self.key.phase is Phase.SEARCH else None

    @property
    def run_dir(self) -> Path:
        return Path(self.work.run_dir)

    @property
    def seed(self) -> int:
        return self.work.seed

    @property
    def hparams(self) -> dict[str, Any]:
        return self.work.hparams


class CellStatus(StrEnum):
    """A cell's state (`study show`'s status column, the driver's live view)."""

    PENDING = "pending"
    SEARCHING = "searching"
    FAILED = "failed"  # every search trial diverged or was pruned: a result
    FINAL = "final"  # seed runs with the final parameters
    DONE = "done"
    ERRORED = "errored"  # runs that could not be carried out (retried by the next `run`, up to the cap)
    PAUSED = "paused"  # runs stopped at `run --until-epoch` (continued by the next `run`)


def cell_status(
    trials_done: int,
    trials_wanted: int,
    trials_running: int,
    trials_without_value: int,
    seeds_done: int,
    seeds_wanted: int,
    note: str = "",
    errored: int = 0,
    seeds_running: int = 0,
    paused: int = 0,
) -> str:
    """A cell's state, for the driver's live view, its summary and `study show` alike:
    pending | searching | failed (every trial diverged or was pruned) | final | done, or the
    driver's note (e.g. "failed: no search trial completed"), or `errored` once nothing of the
    cell runs and `errored` of its runs could not be carried out (retried by the next `run`, up
    to the cap: harness/record/contract.py), or `paused` once nothing runs and `paused` of its runs
    stopped at `run --until-epoch` (continued by the next `run`)."""
    if note:
        return note
    if trials_running or seeds_running:
        return CellStatus.SEARCHING if trials_running or trials_done < trials_wanted else CellStatus.FINAL
    if errored:
        return CellStatus.ERRORED
    if paused:
        return CellStatus.PAUSED
    if trials_done < trials_wanted:
        return CellStatus.PENDING if not trials_done else CellStatus.SEARCHING
    if trials_wanted and trials_done == trials_without_value:
        return CellStatus.FAILED
    if seeds_done < seeds_wanted:
        return CellStatus.FINAL
    return CellStatus.DONE


@dataclass
class CellState:
    cell: Cell
    study: Any  # optuna.Study, opened on first use (StudyRunner.cell_study): a done cell never opens it
    trials_wanted: int
    seeds_wanted: int
    trials_done: int = 0
    trials_failed: int = 0
    trials_pruned: int = 0
    seeds_done: int = 0
    seeds_failed: int = 0
    running: int = 0
    stale: list[Any] = field(default_factory=list)  # optuna trials left RUNNING by a dead driver
    to_ask: int = 0
    final_params: dict[str, Any] | None = None
    final_todo: list[int] = field(default_factory=list)
    note: str = ""
    running_search: int = 0
    records: dict[str, Any] = field(default_factory=dict)  # MLflow records of this cell by run key
    tags: dict[str, str] = field(default_factory=dict)  # the cell run's tags as recorded (prefixed)
    unwritten_tags: dict[str, str] = field(default_factory=dict)  # planned before the cell run exists: written when it is created
    errored: int = 0  # runs whose record is errored (this driver's, and capped ones found at open)
    errored_reason: str = ""
    retried: int = 0  # errored records this driver dispatches again
    continued: int = 0  # paused records this driver continues from their checkpoints
    started_over: int = 0  # paused records whose checkpoint is not in this root: trained again from epoch 1
    interrupted: int = 0  # seed runs a stopped driver left in flight (no record) that continue from a checkpoint
    paused: int = 0  # runs this driver paused (`--until-epoch`), and paused ones it found and left

    @property
    def status(self) -> str:
        return cell_status(
            self.trials_done,
            self.trials_wanted,
            self.running_search,
            self.trials_failed + self.trials_pruned,
            self.seeds_done,
            self.seeds_wanted,
            self.note,
            self.errored,
            self.running - self.running_search,
            self.paused,
        )

    def recorded_final_hash(self) -> str | None:
        """The hash of the final parameters the cell run records, if they are still current: chosen
        from as many trials as are done now (trials are only ever added, so they stay current while
        that number does); None otherwise. The driver then reuses them instead of asking Optuna
        (`StudyRunner.final_params`), and the ETA knows the seeds' run keys before planning."""
        h = self.tags.get(Tag.FINAL_PARAMS_HASH)
        current = self.tags.get(Tag.FINAL_PARAMS) and self.tags.get(Tag.FINAL_TRIALS) == str(self.trials_done)
        return h if current and h else None

    def attempt(self, run_key: str) -> int:
        """The attempt a new record of `run_key` will be (an errored or paused record is replaced, its
        count carried on: harness/record/contract.py `carried_attempt`)."""
        rec = self.records.get(run_key)
        return carried_attempt(rec.status, rec.tags) + 1 if rec is not None and rec.status in REPLACEABLE else 1

    def note_errored(self, reason: str) -> None:
        self.errored += 1
        self.errored_reason = self.errored_reason or reason


def count_trials(trials: list[tuple[int, int, str]]) -> tuple[int, int, int, list[tuple[int, int]]]:
    """(finished, failed, pruned, unfinished) of a cell's Optuna trials given as (number, trial id,
    state name) (harness.record.storage.read_trial_states); finished counts all three end states. Unfinished
    ones, as (number, trial id), are running, or were left running by a driver that died."""
    ended = [t for t in trials if t[2] in TRIAL_ENDED]
    return (
        len(ended),
        sum(t[2] == TrialState.FAIL for t in ended),
        sum(t[2] == TrialState.PRUNED for t in ended),
        [(t[0], t[1]) for t in trials if t[2] in (TrialState.RUNNING, TrialState.WAITING)],
    )
