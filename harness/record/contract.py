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
- `RUN_COLUMNS`, `CELL_COLUMNS`, `FIXED`: the readers' columns, derived from `Tag`; `Col`: each
  of them by name. A run frame's metric and param columns and the step-0 metric keys are built
  and parsed here only: `metric_col`/`metric_of`, `param_col`/`param_of`, `valid_metric`,
  `best_metric`/`best_valid`/`parse_best_valid`, `test_metric`/`parse_test_metric`/`split_metric`,
  `per_epoch`; a transfer run's: `transfer_metric`, `transfer_run_name`.
- The shapes: `CellRecord` (what a cell run records about its cell), `split_tags`, `RunRecord`
  (one ended trial/seed run as stored), written by harness.record.writer and read back by
  harness.record.reader.
- `WorkerResult`: what a worker sends back (the return-trip twin of harness.driver.jobs.WorkerJob), with
  `WorkerInfo`: where and how the attempt ran (the worker's fields, and the two the driver adds).
- The errored-run retry rule (`max_attempts`, `attempt_of`, `will_retry`): an errored run is not
  a result; the next `tprbench run` retries it (a search trial is left unfinished in Optuna and
  dispatched again with the same number and parameters; a seed run is run again) until its key
  has ended errored `max_attempts()` times (tag `tprbench.attempt` counts them; the retried
  record replaces the errored one). Tables show errored seeds as missing (‡, with the reason),
  `study show` as `errored` with the reason — never as †.

Records written before the cell-schema tags (metric, direction, splits) still read: the frame
columns are then missing (None) and the report infers the metric and splits from the names.

The files and folders of a study's run root (mlflow.db, optuna.journal, work/, cache/, ...) are
named in harness/record/layout.py. tests/test_record_contract_guard.py keeps the names here and
there: MLflow's client, the MLflow statuses, the tag keys and the root's layout spelled outside
their owners fail it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
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


def transfer_run_name(source_run_id: str) -> str:
    """The name of a `tprbench transfer` run in the UI (`transfer/<source run id, 8 characters>`)."""
    return f"transfer/{source_run_id[:8]}"


def transfer_metric(task: str, key: str) -> str:
    """A transfer run's metric: one SentEval task's score (`MR`, `acc` → `senteval_MR_acc`)."""
    return f"senteval_{task}_{key}"


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
    SCHEDULED = "SCHEDULED"  # never set by the driver: MLflow's fifth state, unended as RUNNING


#: An MLflow run in another state (`MLFLOW_UNENDED`) is still being written.
MLFLOW_ENDED = (MlflowStatus.FINISHED, MlflowStatus.FAILED, MlflowStatus.KILLED)
MLFLOW_UNENDED = (MlflowStatus.RUNNING, MlflowStatus.SCHEDULED)


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


class Col:
    """The readers' frame columns by name (a run frame's RUN_COLUMNS, a cell frame's CELL_COLUMNS
    and CELL_SCHEMA_COLUMNS): what report/ and the other readers index frames and rows with. Plain
    strings (a tag's column is its bare name); metric and param columns: `metric_col`, `param_col`."""

    RUN_ID = "run_id"
    MLFLOW_STATUS = "mlflow_status"
    START_TIME = "start_time"
    END_TIME = "end_time"
    STUDY = Tag.STUDY.bare
    CELL = Tag.CELL.bare
    TASK = Tag.TASK.bare
    ARCH = Tag.ARCH.bare
    UNIT = Tag.UNIT.bare
    DIM = Tag.DIM.bare
    INPUT_DIM = Tag.INPUT_DIM.bare
    LABEL = Tag.LABEL.bare
    RUN_KEY = Tag.RUN_KEY.bare
    PHASE = Tag.PHASE.bare
    SEED = Tag.SEED.bare
    TRIAL = Tag.TRIAL.bare
    STATUS = Tag.STATUS.bare
    REASON = Tag.REASON.bare
    PARAMS_HASH = Tag.PARAMS_HASH.bare
    PARAMS_FORMULA = Tag.PARAMS_FORMULA.bare
    PARAMS_TOTAL = Tag.PARAMS_TOTAL.bare
    GIT_COMMIT = Tag.GIT_COMMIT.bare
    HOST = Tag.HOST.bare
    METRIC = Tag.METRIC.bare
    DIRECTION = Tag.DIRECTION.bare
    VALID_SPLIT = Tag.VALID_SPLIT.bare
    TEST_SPLITS = Tag.TEST_SPLITS.bare
    FINAL_PARAMS_HASH = Tag.FINAL_PARAMS_HASH.bare
    FINAL_PARAMS = Tag.FINAL_PARAMS.bare
    UNIT_CANONICAL = "unit_canonical"
    EPOCHS = "epochs"
    DATA = "data"
    TASK_OPTIONS = "task_options"


# ---------------------------------------------------------------------------------------------
# Column names: the run frame's `metric.<key>` / `param.<name>` columns and the metric keys a run
# logs at step 0 (`best_<metric key>`, `test_<split>_<name>`, ...). Built and parsed here only.

METRIC_PREFIX = "metric."  # a run frame's column of a metric (its final value, or last per-epoch value)
PARAM_PREFIX = "param."  # a run frame's column of a hyperparameter
VALID = "valid"  # the validation split's name in metric keys (`valid_acc`, `best_valid_acc`)
BEST = "best_"  # step-0 metric: the best validation score (`best_<metric key>`)
TEST = "test_"  # step-0 metric: a test split's score of the best model (`test_<split>_<name>`)
BEST_EPOCH = "best_epoch"
TRAIN_SECONDS = "train_seconds"
PARAMS_TOTAL = "params_total"
PARAMS_FORMULA = "params_formula"
SUMMARY_SPLIT = "summary"  # the pseudo split of a task's summary over its test splits (`test_summary_<name>`)
#: Metrics logged once per run at step 0 (everything else is per epoch): these prefixes and keys.
FINAL_PREFIXES = (BEST, TEST)
FINAL_KEYS = (TRAIN_SECONDS, PARAMS_TOTAL, PARAMS_FORMULA)


def metric_col(key: str) -> str:
    """The run frame's column of a metric key (`best_valid_acc` → `metric.best_valid_acc`)."""
    return METRIC_PREFIX + key


def param_col(name: str) -> str:
    """The run frame's column of a hyperparameter (`lr` → `param.lr`)."""
    return PARAM_PREFIX + name


def metric_of(col: str) -> str | None:
    """The metric key of a run frame's metric column; None for any other column."""
    return col[len(METRIC_PREFIX) :] if col.startswith(METRIC_PREFIX) else None


def param_of(col: str) -> str | None:
    """The hyperparameter of a run frame's param column; None for any other column."""
    return col[len(PARAM_PREFIX) :] if col.startswith(PARAM_PREFIX) else None


def valid_metric(name: str) -> str:
    """The validation key of a metric (`acc` → `valid_acc`): what picks best epochs and trials."""
    return f"{VALID}_{name}"


def best_metric(key: str) -> str:
    """The step-0 metric holding a run's best score of a per-epoch key (`valid_acc` → `best_valid_acc`)."""
    return BEST + key


def best_valid(name: str) -> str:
    """`acc` → `best_valid_acc`: a run's best validation score of a metric."""
    return best_metric(valid_metric(name))


def test_metric(split: str, name: str) -> str:
    """The step-0 metric of one test split's score (`hard`, `acc` → `test_hard_acc`)."""
    return f"{TEST}{split}_{name}"


def parse_best_valid(key: str) -> str | None:
    """The metric name of a `best_valid_<name>` key (`best_valid_acc` → `acc`); None otherwise."""
    prefix = best_valid("")
    return key[len(prefix) :] if key.startswith(prefix) and len(key) > len(prefix) else None


def parse_test_metric(key: str, name: str) -> str | None:
    """The split of a `test_<split>_<name>` key of the metric `name`; None otherwise."""
    suffix = "_" + name
    if key.startswith(TEST) and key.endswith(suffix) and len(key) > len(TEST) + len(suffix):
        return key[len(TEST) : -len(suffix)]
    return None


def split_metric(key: str, split: str) -> str | None:
    """The metric name of a `test_<split>_<name>` key of the split `split`; None otherwise."""
    prefix = test_metric(split, "")
    return key[len(prefix) :] if key.startswith(prefix) and len(key) > len(prefix) else None


def per_epoch(key: str) -> bool:
    """A metric key logged once per epoch (not one of the step-0 ones)."""
    return not key.startswith(FINAL_PREFIXES) and key not in FINAL_KEYS


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
# The shapes


@dataclass(frozen=True)
class CellRecord:
    """What a cell run records about its cell, as written (`tags()`) and read (`from_row`)."""

    cell_id: str
    study: str
    label: str
    task: str
    arch: str
    unit: str
    unit_canonical: str | None
    dim: int
    input_dim: int
    epochs: int | None = None
    data: str | None = None
    task_options: dict[str, Any] = field(default_factory=dict)
    metric: str | None = None  # e.g. valid_acc: the validation key that picks best epochs and trials
    direction: str | None = None
    valid_split: str | None = None  # known once a run has prepared the task's data
    test_splits: tuple[str, ...] | None = None
    final_params_hash: str | None = None
    final_params: str | None = None  # JSON

    @classmethod
    def of_cell(cls, cell: Any) -> CellRecord:
        """From a harness.study.cells.Cell (or anything with its attributes)."""
        return cls(
            cell.id,
            cell.study,
            cell.label,
            cell.task,
            cell.arch,
            cell.unit,
            getattr(cell, "unit_canonical", None),
            cell.dim,
            cell.input_dim,
            getattr(cell, "epochs", None),
            getattr(cell, "data", None),
            dict(getattr(cell, "task_options", {}) or {}),
            getattr(cell, "metric", None),
            getattr(cell, "direction", None),
        )

    def tags(self) -> dict[str, Any]:
        """Tags of the cell run (and, less the final params and splits, of each of its runs)."""
        out: dict[str, Any] = {
            Tag.STUDY: self.study,
            Tag.CELL: self.cell_id,
            Tag.TASK: self.task,
            Tag.ARCH: self.arch,
            Tag.UNIT: self.unit,
            Tag.DIM: self.dim,
            Tag.INPUT_DIM: self.input_dim,
            Tag.LABEL: self.label,
        }
        if self.metric:
            out[Tag.METRIC], out[Tag.DIRECTION] = self.metric, self.direction
        return out

    def params(self) -> dict[str, Any]:
        values = (
            self.unit,
            self.unit_canonical,
            self.task,
            self.arch,
            self.dim,
            self.input_dim,
            self.epochs,
            self.data,
            json.dumps(self.task_options, sort_keys=True),
        )
        return dict(zip(CELL_PARAMS, values))


def split_tags(valid_split: str, test_splits: Iterable[str]) -> dict[str, str]:
    """The cell-run tags naming the validation split and the ordered test splits."""
    return {Tag.VALID_SPLIT: valid_split, Tag.TEST_SPLITS: json.dumps(list(test_splits))}


@dataclass
class RunRecord:
    """One finished (ended) trial or seed run, as stored in MLflow."""

    run_id: str
    run_key: str
    status: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    experiment_id: str = ""  # known when read by id (harness.record.reader.TrackedRuns)

    @property
    def cell_id(self) -> str:
        return self.tags.get(Tag.CELL, "")

    @property
    def phase(self) -> str:
        return self.tags.get(Tag.PHASE, "")

    @classmethod
    def from_run(cls, run: Any) -> RunRecord:
        tags = dict(run.data.tags)
        return cls(
            run.info.run_id,
            tags.get(Tag.RUN_KEY, ""),
            tags.get(Tag.STATUS, ""),
            tags,
            dict(run.data.params),
            dict(run.data.metrics),
            str(run.info.experiment_id),
        )

    @property
    def parent(self) -> str | None:
        """The run it is nested under (a trial/seed run's cell run)."""
        return self.tags.get(MLFLOW_PARENT)


# ---------------------------------------------------------------------------------------------
# The way back from a worker


@dataclass
class Splits:
    """The task's validation split and its ordered test splits, as the worker's adapter names them."""

    valid: str
    test: list[str]


@dataclass
class WorkerInfo:
    """Where and how one attempt of a run ran. The worker fills the first fields
    (harness.driver.worker.worker_info, then its timings); the driver adds the last two when it collects
    the result. Every field is optional: a result that never reached a worker (a lost node) has
    none of the worker's."""

    host: str = ""
    pid: int | None = None
    start: float | None = None  # the worker's wall clock when the attempt started (time.time())
    node_id: str | None = None  # under Ray: the node, the resources Ray assigned, the GPU ids
    resources: dict[str, float] | None = None
    gpu_ids: list[str] | None = None
    pruning: str | None = None  # why pruning was turned off (the Optuna storage was unavailable)
    setup_seconds: float | None = None  # preparing the task's data
    worker_seconds: float | None = None  # the whole attempt, in the worker
    end: float | None = None  # the worker's wall clock when it returned
    # Set by the driver:
    ready_at: float | None = None  # when the driver saw the result ready (time.time())
    get_seconds: float = 0.0  # how long fetching it took

    def attempt_line(self) -> dict[str, Any]:
        """The worker's fields that are set, as the run directory's attempts.jsonl lists them."""
        return {k: v for k, v in asdict(self).items() if v is not None and k not in DRIVER_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> WorkerInfo:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


#: The fields of `WorkerInfo` the driver sets (not the worker's: attempts.jsonl leaves them out).
DRIVER_FIELDS = ("ready_at", "get_seconds")


@dataclass
class WorkerResult(RunResult):
    """What `harness.driver.worker.run_job` returns to the driver: the trainer's `RunResult` and where
    and how it ran. An exception in the worker is an `errored` result with the reason and the
    traceback; a run that ran out of disk space names the path (`disk_full`): not a result, the
    driver stops before recording it."""

    splits: Splits | None = None  # known once the worker has prepared the task's data
    worker: WorkerInfo = field(default_factory=WorkerInfo)  # where the attempt ran, and its timings
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
        if isinstance(out.worker, dict):
            out.worker = WorkerInfo.from_dict(out.worker)
        return out
