"""The record contract: every name the record is written and read with, defined once.

What flows worker → driver → MLflow → readers → report has one typed definition, in two leaf
modules. `tasks/result.py` holds what a run ends as (`RunStatus`, `RunResult`): the trainer
produces them and `tasks/` may not import `harness/`. This module holds the rest — how a study
lives in MLflow — and imports nothing from the project but that:

    experiment  tprbench/<study>                          (`experiment_name`)
    ├── study run   tags: kind=study, study, git_commit, driver (the lease)
    └── cell run    tags: kind=cell, study, cell_id, task, arch, unit, dim, input_dim, label,
        │                 metric, direction, valid_split, test_splits (JSON list, the task's order),
        │                 final_params_hash, final_params (JSON), final_trials (how many search
        │                 trials had ended when the final params were chosen: they are current while
        │                 that count is)
        │           params: unit, unit_canonical, task, arch, dim, input_dim, epochs, data, task_options
        └── run     tags: kind=run, study, cell_id, run_key, phase (search|final), seed, trial, status,
                          reason, attempt, params_hash, params_formula, params_total, git_commit, host,
                          reproducible, notes (+ the cell's tags above, minus the final params)
                    params: the resolved hyperparameters and the seed
                    metrics: per-epoch train_*/valid_*/lr/epoch_seconds (step = epoch); at step 0
                          best_<metric>, best_epoch, test_<split>_<name>, train_seconds, params_*

- `Tag`: every `tprbench.*` tag (the MLflow key is the member's value, the frame column its
  `bare` name); `Kind`, `Phase`: the values of the kind and phase tags; `MlflowStatus`: the
  MLflow run states the driver sets and the readers filter on.
- `RunKey`: the record's idempotency key of a trial or seed run (`<cell>/trial/<n>`,
  `<cell>/seed/<s>/<params hash>`): built, parsed and turned into its run directory here only.
- `RUN_COLUMNS`, `CELL_COLUMNS`, `FIXED`: the readers' columns, derived from `Tag`.
- `WorkerResult`: what a worker sends back (the return-trip twin of harness.driver.jobs.WorkerJob).
- The errored-run retry rule (`max_attempts`, `attempt_of`, `will_retry`): an errored run is not
  a result; the next `tprbench run` retries it (a search trial is left unfinished in Optuna and
  dispatched again with the same number and parameters; a seed run is run again) until its key
  has ended errored `max_attempts()` times (tag `tprbench.attempt` counts them; the retried
  record replaces the errored one). Tables show errored seeds as missing (‡, with the reason),
  `study show` as `errored` with the reason — never as †.

Records written before the cell-schema tags (metric, direction, splits) still read: the frame
columns are then missing (None) and the report infers the metric and splits from the names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from tasks.result import RunResult, RunStatus

PREFIX = "tprbench."  # every tag of the record starts with it
EXPERIMENT_PREFIX = "tprbench/"
MLFLOW_PARENT = "mlflow.parentRunId"  # MLflow's own tag: the UI nests a run under this one
LIVE_STATUS = "running"  # the status tag of a trial/seed run still training (readers skip it: not ended)
TRAIN_SPEC = "train.json"  # in a `tprbench train` run directory: what it trained (the analyses rebuild it)


def experiment_name(study: str) -> str:
    return EXPERIMENT_PREFIX + study


class Tag(StrEnum):
    """The record's MLflow tags; a member equals its MLflow key (`tprbench.<bare name>`)."""

    KIND = PREFIX + "kind"
    STUDY = PREFIX + "study"
    CELL = PREFIX + "cell_id"
    TASK = PREFIX + "task"
    ARCH = PREFIX + "arch"
    UNIT = PREFIX + "unit"
    DIM = PREFIX + "dim"
    INPUT_DIM = PREFIX + "input_dim"
    LABEL = PREFIX + "label"
    RUN_KEY = PREFIX + "run_key"
    PHASE = PREFIX + "phase"
    SEED = PREFIX + "seed"
    TRIAL = PREFIX + "trial"
    STATUS = PREFIX + "status"
    REASON = PREFIX + "reason"
    ATTEMPT = PREFIX + "attempt"  # 1, 2, ...: how many times this run key has been recorded
    PARAMS_HASH = PREFIX + "params_hash"
    PARAMS_FORMULA = PREFIX + "params_formula"
    PARAMS_TOTAL = PREFIX + "params_total"
    GIT_COMMIT = PREFIX + "git_commit"
    HOST = PREFIX + "host"
    REPRODUCIBLE = PREFIX + "reproducible"
    NOTES = PREFIX + "notes"
    METRIC = PREFIX + "metric"
    DIRECTION = PREFIX + "direction"
    VALID_SPLIT = PREFIX + "valid_split"
    TEST_SPLITS = PREFIX + "test_splits"
    FINAL_PARAMS_HASH = PREFIX + "final_params_hash"
    FINAL_PARAMS = PREFIX + "final_params"
    FINAL_TRIALS = PREFIX + "final_trials"
    DRIVER = PREFIX + "driver"  # the study run's lease (harness.record.lease)
    SOURCE_RUN = PREFIX + "source_run"  # a transfer run's trained run (harness.transfer)

    @property
    def bare(self) -> str:
        """The name without the prefix: the readers' column, the key of `tags` in a cell-run dict."""
        return self.value[len(PREFIX) :]


def bare(key: str) -> str:
    """`tprbench.<name>` → `<name>` (any tag of the record, known to `Tag` or not)."""
    return key[len(PREFIX) :] if key.startswith(PREFIX) else key


def prefixed(tags: dict[str, Any]) -> dict[str, Any]:
    """Bare tag names (as the readers give a cell run's tags) → MLflow keys."""
    return {PREFIX + k: v for k, v in tags.items()}


class Kind(StrEnum):
    """The kinds of run (`tprbench.kind`)."""

    STUDY = "study"
    CELL = "cell"
    RUN = "run"  # a trial or seed run
    TRANSFER = "transfer"
    PENDING = "pending"  # a run being created in bulk (deleted by the next driver if left behind)


class Phase(StrEnum):
    """Which part of a cell's work a run is (`tprbench.phase`)."""

    SEARCH = "search"  # a search trial
    FINAL = "final"  # a seed run with the cell's final parameters


class MlflowStatus(StrEnum):
    """MLflow's own run states (what the MLflow UI shows), as the driver sets them."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


#: An MLflow run in another state is still being written.
MLFLOW_ENDED = (MlflowStatus.FINISHED, MlflowStatus.FAILED, MlflowStatus.KILLED)


def mlflow_status(status: str) -> MlflowStatus:
    """The MLflow run status that goes with a tprbench status (what the MLflow UI shows)."""
    if status == RunStatus.PAUSED:
        return MlflowStatus.KILLED  # stopped on purpose; ended, so readers see it
    return MlflowStatus.FINISHED if status in (RunStatus.FINISHED, RunStatus.PRUNED) else MlflowStatus.FAILED


def sql_list(values: tuple[str, ...]) -> str:
    """`('A', 'B')` for an SQL `IN` list of the contract's own constants (never user input)."""
    assert all(re.fullmatch(r"[\w.]+", v) for v in values), values
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# ---------------------------------------------------------------------------------------------
# Run keys


@dataclass(frozen=True)
class RunKey:
    """The record's key of one trial or seed run: `<cell>/trial/<n>` (search) or
    `<cell>/seed/<s>/<params hash>` (final). One record per key: it is what makes recording
    idempotent. `run_dir` is where the run trains: `<cell>/trial-<nnnn>` or `<cell>/seed-<s>-<hash>`."""

    cell_id: str
    phase: Phase
    number: int  # the trial number or the seed
    params_hash: str = ""  # the final parameters' hash (seed runs only)

    @classmethod
    def trial(cls, cell_id: str, number: int) -> RunKey:
        return cls(cell_id, Phase.SEARCH, number)

    @classmethod
    def seed(cls, cell_id: str, seed: int, params_hash: str) -> RunKey:
        return cls(cell_id, Phase.FINAL, seed, params_hash)

    @classmethod
    def parse(cls, text: str) -> RunKey | None:
        """The key a record's `run_key` tag names; None for anything else."""
        parts = text.split("/")
        try:
            if len(parts) == 3 and parts[1] == "trial":
                return cls.trial(parts[0], int(parts[2]))
            if len(parts) == 4 and parts[1] == "seed":
                return cls.seed(parts[0], int(parts[2]), parts[3])
        except ValueError:
            return None
        return None

    @property
    def name(self) -> str:
        """The key without its cell (`trial/3`, `seed/0/ab12cd34`): what messages show beside the cell's label."""
        return f"trial/{self.number}" if self.phase is Phase.SEARCH else f"seed/{self.number}/{self.params_hash}"

    def __str__(self) -> str:
        return f"{self.cell_id}/{self.name}"

    def run_dir(self, work_dir: str | Path) -> Path:
        """The run's directory under a study's work directory (checkpoints, result.json)."""
        leaf = f"trial-{self.number:04d}" if self.phase is Phase.SEARCH else f"seed-{self.number}-{self.params_hash}"
        return Path(work_dir) / self.cell_id / leaf


def is_trial_key(text: str) -> bool:
    key = RunKey.parse(text)
    return key is not None and key.phase is Phase.SEARCH


# ---------------------------------------------------------------------------------------------
# The readers' columns

#: Columns every reader gives for a trial/seed run besides its tags, params and metrics.
FIXED = ("run_id", "mlflow_status", "start_time", "end_time")
#: The tags a trial/seed run frame has a column of (bare names), in the frame's order.
RUN_TAGS = (
    Tag.STUDY,
    Tag.CELL,
    Tag.TASK,
    Tag.ARCH,
    Tag.UNIT,
    Tag.DIM,
    Tag.INPUT_DIM,
    Tag.LABEL,
    Tag.RUN_KEY,
    Tag.PHASE,
    Tag.SEED,
    Tag.TRIAL,
    Tag.STATUS,
    Tag.REASON,
    Tag.PARAMS_HASH,
    Tag.PARAMS_FORMULA,
    Tag.PARAMS_TOTAL,
    Tag.GIT_COMMIT,
    Tag.HOST,
)
RUN_COLUMNS = ("run_id", "mlflow_status", "start_time", *(t.bare for t in RUN_TAGS))
#: Per-run columns that hold integers (tags), cast after loading.
INT_TAGS = tuple(t.bare for t in (Tag.DIM, Tag.INPUT_DIM, Tag.SEED, Tag.TRIAL, Tag.PARAMS_FORMULA, Tag.PARAMS_TOTAL))
#: The cell run's params (`CellRecord.params`), read back as the cell frame's columns.
CELL_PARAMS = ("unit", "unit_canonical", "task", "arch", "dim", "input_dim", "epochs", "data", "task_options")
CELL_COLUMNS = (
    "run_id",
    Tag.CELL.bare,
    Tag.TASK.bare,
    Tag.ARCH.bare,
    Tag.UNIT.bare,
    "unit_canonical",
    Tag.DIM.bare,
    Tag.INPUT_DIM.bare,
    Tag.LABEL.bare,
    "epochs",
    "data",
    "task_options",
    Tag.FINAL_PARAMS_HASH.bare,
    Tag.FINAL_PARAMS.bare,
)
#: Columns a cell frame carries when the record has them (the cell-schema tags); absent otherwise.
CELL_SCHEMA_COLUMNS = tuple(t.bare for t in (Tag.METRIC, Tag.DIRECTION, Tag.VALID_SPLIT, Tag.TEST_SPLITS))


# ---------------------------------------------------------------------------------------------
# Errored runs: retried up to a cap; paused runs: continued

ATTEMPTS_ENV = "TPRBENCH_ERRORED_ATTEMPTS"
DEFAULT_ATTEMPTS = 3


def max_attempts() -> int:
    """How many times a run key may end `errored` before `tprbench run` stops retrying it
    ($TPRBENCH_ERRORED_ATTEMPTS, default 3; `--force` starts a cell over whatever the count)."""
    try:
        return max(int(os.environ.get(ATTEMPTS_ENV, DEFAULT_ATTEMPTS)), 1)
    except ValueError:
        return DEFAULT_ATTEMPTS


def attempt_of(tags: dict[str, str]) -> int:
    try:
        return int(tags.get(Tag.ATTEMPT, 1))
    except (TypeError, ValueError):
        return 1


def will_retry(status: str | None, tags: dict[str, str]) -> bool:
    """A record that the next `tprbench run` dispatches again: errored with its attempts under
    the cap, or paused (it continues from its checkpoint)."""
    return status == RunStatus.PAUSED or (status == RunStatus.ERRORED and attempt_of(tags) < max_attempts())


def carried_attempt(status: str | None, tags: dict[str, str]) -> int:
    """The attempts a replaced record hands on to the record that replaces it: an errored one
    counts, a pause does not (it was not a failed attempt)."""
    n = attempt_of(tags)
    return n if status == RunStatus.ERRORED else n - 1


# ---------------------------------------------------------------------------------------------
# The way back from a worker


@dataclass
class Splits:
    """The task's validation split and its ordered test splits, as the worker's adapter names them."""

    valid: str
    test: list[str]


@dataclass
class WorkerResult(RunResult):
    """What `harness.driver.worker.run_job` returns to the driver: the trainer's `RunResult` and where
    and how it ran. An exception in the worker is an `errored` result with the reason and the
    traceback; a run that ran out of disk space names the path (`disk_full`): not a result, the
    driver stops before recording it."""

    splits: Splits | None = None  # known once the worker has prepared the task's data
    worker: dict[str, Any] = field(default_factory=dict)  # harness.driver.worker.worker_info, the attempt's timings
    epoch_times: dict[int, float] = field(default_factory=dict)  # the worker's wall clock at each epoch's end
    traceback: str = ""
    disk_full: str | None = None

    @classmethod
    def of(cls, result: RunResult, **extra: Any) -> WorkerResult:
        """The trainer's result with the worker's additions."""
        return cls(**{**vars(result), **extra})

    @classmethod
    def errored(cls, reason: str, **extra: Any) -> WorkerResult:
        return cls(status=RunStatus.ERRORED, reason=reason, **extra)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerResult:
        """From plain data (a result.json, a test's dict): unknown keys ignored, splits typed."""
        out = super().from_dict(data)
        if isinstance(out.splits, dict):
            out.splits = Splits(out.splits["valid"], list(out.splits["test"]))
        return out
