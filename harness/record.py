"""The record schema: how a study lives in MLflow, written by harness.tracking, read by everyone else.

    experiment  tprbench/<study>
    ├── study run   tags: kind=study, study, git_commit
    └── cell run    tags: kind=cell, study, cell_id, task, arch, unit, dim, input_dim, label,
        │                 metric, direction, valid_split, test_splits (JSON list, the task's order),
        │                 final_params_hash, final_params (JSON), final_trials (how many search
        │                 trials had ended when the final params were chosen: they are current while
        │                 that count is)
        │           params: unit, unit_canonical, task, arch, dim, input_dim, epochs, data, task_options
        └── run     tags: kind=run, study, cell_id, run_key, phase (search|final), seed, trial, status,
                          reason, params_hash, params_formula, params_total, git_commit, host,
                          reproducible, notes (+ the cell's tags above, minus the final params)
                    params: the resolved hyperparameters and the seed
                    metrics: per-epoch train_*/valid_*/lr/epoch_seconds (step = epoch); at step 0
                          best_<metric>, best_epoch, test_<split>_<name>, train_seconds, params_*

Run statuses (`STATUS`): `finished`, `pruned`, `diverged` (the loss or the validation score
became NaN/inf: a result about the unit, shown as † in tables) and `errored` (the run could not
be carried out — an import error, out of memory, a lost node after retries, a store outage: not
a result about the unit). Records written before this schema say `failed` for both of the last
two; readers treat `failed` as diverged, as tables always did.

An errored run is not a result: the next `tprbench run` retries it (a search trial is left
unfinished in Optuna and dispatched again with the same number and parameters; a seed run is
run again), until its key has ended errored `max_attempts()` times (tag `tprbench.attempt`
counts them; the retried record replaces the errored one). Tables show errored seeds as
missing (‡, with the reason), `study show` as `errored` with the reason — never as †.

Every reader goes through `RecordReader`: a few queries per read whatever the number of cells
asked for (plain SQL on a SQL store, `search_runs` on a tracking server: harness.record_sources),
ended runs through the study's columnar summary (harness.summary), turned into pandas frames
here and nowhere else (`runs(cell_ids)`, `cells(cell_ids)`, `history(...)`). Records without
the cell tags above (before issue 11) still read: the frame columns are then missing (None) and
the report infers the metric and splits as it used to.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAG = "tprbench."
EXPERIMENT_PREFIX = "tprbench/"
KIND, STUDY, CELL, RUN_KEY, PHASE, STATUS = (TAG + k for k in ("kind", "study", "cell_id", "run_key", "phase", "status"))
REASON, SEED, TRIAL, LABEL, GIT_COMMIT, HOST = (TAG + k for k in ("reason", "seed", "trial", "label", "git_commit", "host"))
PARAMS_HASH, PARAMS_FORMULA, PARAMS_TOTAL = (TAG + k for k in ("params_hash", "params_formula", "params_total"))
FINAL_PARAMS_HASH, FINAL_PARAMS, FINAL_TRIALS = TAG + "final_params_hash", TAG + "final_params", TAG + "final_trials"
METRIC, DIRECTION, VALID_SPLIT, TEST_SPLITS = (TAG + k for k in ("metric", "direction", "valid_split", "test_splits"))
REPRODUCIBLE, NOTES = TAG + "reproducible", TAG + "notes"
ATTEMPT = TAG + "attempt"  # 1, 2, ...: how many times this run key has been recorded (an errored one is retried)

# kinds of run
KIND_STUDY, KIND_CELL, KIND_RUN, KIND_TRANSFER = "study", "cell", "run", "transfer"

# run statuses
FINISHED, PRUNED, DIVERGED, ERRORED = "finished", "pruned", "diverged", "errored"
# Stopped on purpose after `run --until-epoch` N: its best model so far is tested and recorded,
# its checkpoint stays, and the next `run` continues it (the record is then replaced).
PAUSED = "paused"
LEGACY_FAILED = "failed"  # before issue 11: diverged and errored were one status
STATUSES = (FINISHED, PRUNED, DIVERGED, ERRORED, PAUSED)
REPLACEABLE = (ERRORED, PAUSED)  # records that the next record of their run key replaces
MLFLOW_ENDED = ("FINISHED", "FAILED", "KILLED")  # an MLflow run in another state is still being written


def is_failure(status: str | None) -> bool:
    """Diverged or errored (or a legacy `failed`): the run produced no score."""
    return status in (DIVERGED, ERRORED, LEGACY_FAILED)


def is_diverged(status: str | None) -> bool:
    """A result about the unit (NaN/inf): shown as † in tables. Errored runs never are."""
    return status in (DIVERGED, LEGACY_FAILED)


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
        return int(tags.get(ATTEMPT, 1))
    except (TypeError, ValueError):
        return 1


def will_retry(status: str | None, tags: dict[str, str]) -> bool:
    """A record that the next `tprbench run` dispatches again: errored with its attempts under
    the cap, or paused (it continues from its checkpoint)."""
    return status == PAUSED or (status == ERRORED and attempt_of(tags) < max_attempts())


def carried_attempt(status: str | None, tags: dict[str, str]) -> int:
    """The attempts a replaced record hands on to the record that replaces it: an errored one
    counts, a pause does not (it was not a failed attempt)."""
    n = attempt_of(tags)
    return n if status == ERRORED else n - 1


def mlflow_status(status: str) -> str:
    """The MLflow run status that goes with a tprbench status (what the MLflow UI shows)."""
    if status == PAUSED:
        return "KILLED"  # stopped on purpose; ended, so readers see it
    return "FINISHED" if status in (FINISHED, PRUNED) else "FAILED"


class ReportError(LookupError):
    """No record to read (no store, unknown study, no cells). Printed as one line, exit 2."""

    user_error = True


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
        """From a harness.study.Cell (or anything with its attributes)."""
        return cls(cell.id, cell.study, cell.label, cell.task, cell.arch, cell.unit,
                   getattr(cell, "unit_canonical", None), cell.dim, cell.input_dim, getattr(cell, "epochs", None),
                   getattr(cell, "data", None), dict(getattr(cell, "task_options", {}) or {}),
                   getattr(cell, "metric", None), getattr(cell, "direction", None))

    def tags(self) -> dict[str, Any]:
        """Tags of the cell run (and, less the final params and splits, of each of its runs)."""
        out: dict[str, Any] = {STUDY: self.study, CELL: self.cell_id, TAG + "task": self.task, TAG + "arch": self.arch,
                               TAG + "unit": self.unit, TAG + "dim": self.dim, TAG + "input_dim": self.input_dim,
                               LABEL: self.label}
        if self.metric:
            out[METRIC], out[DIRECTION] = self.metric, self.direction
        return out

    def params(self) -> dict[str, Any]:
        return {"unit": self.unit, "unit_canonical": self.unit_canonical, "task": self.task, "arch": self.arch,
                "dim": self.dim, "input_dim": self.input_dim, "epochs": self.epochs, "data": self.data,
                "task_options": json.dumps(self.task_options, sort_keys=True)}


def split_tags(valid_split: str, test_splits: Iterable[str]) -> dict[str, str]:
    """The cell-run tags naming the validation split and the ordered test splits."""
    return {VALID_SPLIT: valid_split, TEST_SPLITS: json.dumps(list(test_splits))}


@dataclass
class RunRecord:
    """One finished (ended) trial or seed run, as stored in MLflow."""

    run_id: str
    run_key: str
    status: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]

    @property
    def cell_id(self) -> str:
        return self.tags.get(CELL, "")

    @property
    def phase(self) -> str:
        return self.tags.get(PHASE, "")

    @classmethod
    def from_run(cls, run: Any) -> RunRecord:
        tags = dict(run.data.tags)
        return cls(run.info.run_id, tags.get(RUN_KEY, ""), tags.get(STATUS, ""), tags, dict(run.data.params),
                   dict(run.data.metrics))


# ---------------------------------------------------------------------------------------------
# Frames

#: Per-run columns that hold integers (tags), cast after loading.
INT_TAGS = ("dim", "input_dim", "seed", "trial", "params_formula", "params_total")
#: Metrics logged once per run at step 0 (everything else is per epoch).
FINAL_PREFIXES = ("best_", "test_")
FINAL_KEYS = ("train_seconds", "params_total", "params_formula")
RUN_COLUMNS = ("run_id", "mlflow_status", "start_time", "study", "cell_id", "task", "arch", "unit", "dim",
               "input_dim", "label", "run_key", "phase", "seed", "trial", "status", "reason", "params_hash",
               "params_formula", "params_total", "git_commit", "host")
CELL_COLUMNS = ("run_id", "cell_id", "task", "arch", "unit", "unit_canonical", "dim", "input_dim", "label",
                "epochs", "data", "task_options", "final_params_hash", "final_params")
#: Columns a cell frame carries when the record has them (issue 11's schema); absent otherwise.
CELL_SCHEMA_COLUMNS = ("metric", "direction", "valid_split", "test_splits")


def per_epoch(key: str) -> bool:
    return not key.startswith(FINAL_PREFIXES) and key not in FINAL_KEYS


def _cast(values: list[Any]) -> list[Any] | None:
    """Strings → ints, else floats, else bools, if every non-missing value parses (else None)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    for conv in (int, float):
        try:
            out = [None if v is None else conv(v) for v in values]
        except (TypeError, ValueError):
            continue
        return out
    if all(v in ("True", "False", "true", "false") for v in present):
        return [None if v is None else v.lower() == "true" for v in values]
    return None


def frame(records: list[dict[str, Any]], columns: Iterable[str]) -> Any:
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    for col in columns:
        if col not in df.columns:
            df[col] = None
    return df


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _cast_int_column(df: Any, col: str) -> None:
    import pandas as pd

    raw = [None if _missing(v) else v for v in df[col].tolist()]
    try:
        df[col] = pd.array([None if v is None else int(float(v)) for v in raw], dtype="Int64")
    except (TypeError, ValueError):
        pass


def cast_columns(df: Any, cols: Iterable[str], int_cols: Iterable[str] = ()) -> Any:
    """Cast string columns (tags, params) to Int64 / float64 / boolean where every value parses."""
    import pandas as pd

    int_cols = set(int_cols)
    for col in cols:
        if col not in df.columns:
            continue
        if col in int_cols:
            _cast_int_column(df, col)
            continue
        cast = _cast([None if _missing(v) else v for v in df[col].tolist()])
        if cast is None:
            continue
        present = [v for v in cast if v is not None]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            df[col] = pd.array(cast, dtype="Int64")
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            df[col] = pd.array([float("nan") if v is None else float(v) for v in cast], dtype="float64")
        else:
            df[col] = pd.array(cast, dtype="boolean")
    return df


def runs_frame(cols: dict[str, list[Any]]) -> Any:
    """Columns of ended trial/seed runs (harness.record_sources) → the frame `RecordReader.runs` returns."""
    import numpy as np

    data = {k: [np.nan if v is None else v for v in values] for k, values in cols.items() if k != "end_time"}
    import pandas as pd

    df = pd.DataFrame(data)
    for col in RUN_COLUMNS:
        if col not in df.columns:
            df[col] = None
    param_cols = sorted(c for c in df.columns if c.startswith("param."))
    df = cast_columns(df, [*INT_TAGS, *param_cols], int_cols=INT_TAGS)
    # One row per run key (the tracker guarantees it; keep the latest if a store was merged by hand).
    df = df.sort_values(["run_key", "start_time", "run_id"], kind="stable")
    df = df.drop_duplicates("run_key", keep="last")
    order = list(RUN_COLUMNS) + sorted(c for c in df.columns if c not in RUN_COLUMNS)
    return df[order].reset_index(drop=True)


def run_records(cols: dict[str, list[Any]]) -> dict[str, RunRecord]:
    """Columns → RunRecord by run key (the latest run of a key if a store holds two). Built column
    by column: each column's name is classified once (tag, param or metric), not once per run."""
    n = len(cols["run_id"])
    tags: list[dict[str, Any]] = [{} for _ in range(n)]
    params: list[dict[str, Any]] = [{} for _ in range(n)]
    metrics: list[dict[str, Any]] = [{} for _ in range(n)]
    for name, values in cols.items():
        if name in ("run_id", "mlflow_status", "start_time", "end_time"):
            continue
        if name.startswith("param."):
            into, key = params, name[6:]
        elif name.startswith("metric."):
            into, key = metrics, name[7:]
        else:
            into, key = tags, TAG + name
        for row, v in zip(into, values):
            if v is not None:
                row[key] = v
    order = sorted(range(n), key=lambda i: (cols["start_time"][i] or 0, cols["run_id"][i]))
    out: dict[str, RunRecord] = {}
    for i in order:
        key = tags[i].get(RUN_KEY, "")
        out[key] = RunRecord(cols["run_id"][i], key, tags[i].get(STATUS, ""), tags[i], params[i], metrics[i])
    return out


def summary_dir(tracking_uri: str, root: str | Path | None = None) -> Path | None:
    """Where a study's summary of ended runs lives: `<root>/cache/summary` (the run directory the
    command was given), else next to a SQLite store; None (no summary) for a server without a root."""
    from .record_sources import sqlite_path

    if root is not None:
        return Path(root).expanduser().resolve() / "cache" / "summary"
    path = sqlite_path(tracking_uri)
    return None if path is None else path.resolve().parent / "cache" / "summary"


class RecordReader:
    """Read one study's record. Every frame a reader (report, study show, compare, transfer, the
    driver's resume) needs comes from here. `cell_ids` restricts a read to the asked cells, and
    every read is a few queries whatever their number (harness.record_sources). Ended runs go
    through the study's summary (harness.summary) when there is a place for it (`root`)."""

    def __init__(self, tracking_uri: str, study: str, must_exist: bool = True, root: str | Path | None = None,
                 client: Any = None) -> None:
        from .record_sources import open_source, sqlite_path

        self.uri, self.study, self.root = tracking_uri, study, root
        path = sqlite_path(tracking_uri)
        if path is not None and not path.exists():
            if must_exist:
                raise ReportError(f"no MLflow store at {tracking_uri} ({path} does not exist): "
                                  "check --root / --tracking-uri, or run the study first")
            self.source, self.experiment_id = None, None  # never create an empty SQLite file for a wrong --root
            self._summary = None
            return
        self.source = open_source(tracking_uri, client)
        self.experiment_id = self.source.experiment_id(EXPERIMENT_PREFIX + study)
        if self.experiment_id is None and must_exist:
            raise ReportError(self._unknown_study())
        self._summary = None

    @classmethod
    def of_client(cls, client: Any, tracking_uri: str, study: str, experiment_id: str | None,
                  root: str | Path | None = None, source: Any = None) -> RecordReader:
        """A reader sharing a writer's client or source (harness.tracking.Tracker reads through it)."""
        from .record_sources import open_source

        reader = cls.__new__(cls)
        reader.uri, reader.study, reader.root, reader.experiment_id = tracking_uri, study, root, experiment_id
        reader.source = source if source is not None else open_source(tracking_uri, client)
        reader._summary = None
        return reader

    def _unknown_study(self) -> str:
        import difflib

        name = EXPERIMENT_PREFIX + self.study
        known = sorted(n[len(EXPERIMENT_PREFIX):] for n in self.source.experiment_names() if n.startswith(EXPERIMENT_PREFIX))
        close = difflib.get_close_matches(self.study, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return (f"study {self.study!r} has no record in {self.uri} (no experiment {name!r}){hint} "
                f"(studies recorded there: {', '.join(known) or 'none'})")

    @property
    def summary(self) -> Any:
        from .summary import Summary, enabled, summary_path

        if self._summary is None:
            where = summary_dir(self.uri, self.root) if enabled() and self.experiment_id is not None else None
            self._summary = Summary(None if where is None else summary_path(where, self.uri, self.experiment_id, self.study))
        return self._summary

    # -- ended trial/seed runs -----------------------------------------------------------------
    def ended(self, cell_ids: Iterable[str] | None = None) -> dict[str, list[Any]]:
        """Ended trial/seed runs of the asked cells as columns (harness.record_sources.Columns)."""
        from .record_sources import empty_columns
        from .summary import ended_runs

        if self.experiment_id is None:
            return empty_columns()
        ids = None if cell_ids is None else sorted(set(cell_ids))
        if ids is not None and not ids:
            return empty_columns()
        return ended_runs(self.source, self.experiment_id, ids, self.summary)

    def run_records(self, cell_ids: Iterable[str] | None = None) -> dict[str, RunRecord]:
        """Ended trial/seed runs by run key (one per key: duplicates are what the writer prevents)."""
        return run_records(self.ended(cell_ids))

    # -- frames ------------------------------------------------------------------------------
    def runs(self, cell_ids: Iterable[str] | None = None) -> Any:
        """One row per ended trial/seed run of the asked cells (all when None). Columns: RUN_COLUMNS,
        `param.<name>` (hyperparameters, numbers cast) and `metric.<name>` (final metrics at step 0,
        and the last value of each per-epoch metric)."""
        return runs_frame(self.ended(cell_ids))

    def cell_runs(self, cell_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Cell runs as dicts: run_id, status, start_time, tags (bare names), params."""
        if self.experiment_id is None:
            return []
        ids = None if cell_ids is None else sorted(set(cell_ids))
        return self.source.cell_runs(self.experiment_id, ids) if ids is None or ids else []

    def cells(self, cell_ids: Iterable[str] | None = None) -> Any:
        """One row per cell run: what was crossed, the planned final parameters and, for records
        with issue 11's schema, the metric, direction and splits (CELL_SCHEMA_COLUMNS)."""
        records, schema = [], set()
        for run in self.cell_runs(cell_ids):
            tags, params = run["tags"], run["params"]
            rec = {"run_id": run["run_id"], "start_time": run["start_time"]}
            rec.update(tags)
            for key in ("unit_canonical", "epochs", "data", "task_options"):
                rec[key] = params.get(key)
            for key in ("unit", "task", "arch", "dim", "input_dim"):
                rec.setdefault(key, params.get(key))
            schema.update(k for k in CELL_SCHEMA_COLUMNS if k in rec)
            records.append(rec)
        df = frame(records, (*CELL_COLUMNS, "start_time"))
        df = cast_columns(df, ["dim", "input_dim", "epochs"], int_cols=["dim", "input_dim", "epochs"])
        df = df.sort_values(["cell_id", "start_time", "run_id"], kind="stable").drop_duplicates("cell_id", keep="first")
        return df[list(CELL_COLUMNS) + [c for c in CELL_SCHEMA_COLUMNS if c in schema]].reset_index(drop=True)

    def cell_tags(self, cell_ids: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
        """Tags of the cell runs by cell id (e.g. the final-parameters hash), with their prefix."""
        out: dict[str, dict[str, str]] = {}
        for run in sorted(self.cell_runs(cell_ids), key=lambda r: (r["start_time"] or 0, r["run_id"]), reverse=True):
            out[run["tags"].get("cell_id", "")] = {TAG + k: v for k, v in run["tags"].items()}
        return out

    def history(self, run_ids: Iterable[str] | None = None, keys: Iterable[str] | None = None) -> Any:
        """Per-epoch metrics as a long frame: run_id, key, step (= epoch), value; sorted.

        One query per 500 runs for all keys on a SQL store; per run and key through a tracking
        server (which has no bulk history call), 8 calls at a time."""
        import pandas as pd

        if run_ids is None or keys is None:
            cols = self.ended(None)
            if run_ids is None:
                run_ids = list(cols["run_id"])
            if keys is None:
                wanted = set(run_ids)
                keys = sorted({k[len("metric."):] for k, values in cols.items() if k.startswith("metric.")
                               and per_epoch(k[len("metric."):])
                               and any(v is not None and r in wanted for r, v in zip(cols["run_id"], values))})
        run_ids, keys = sorted(set(run_ids)), list(keys)
        rows = self.source.history(run_ids, keys) if self.source is not None and run_ids and keys else []
        df = pd.DataFrame(rows, columns=["run_id", "key", "step", "value", "timestamp"])
        df = df.sort_values(["run_id", "key", "step", "timestamp"], kind="stable")
        df = df.drop_duplicates(["run_id", "key", "step"], keep="last").drop(columns="timestamp")
        return df.reset_index(drop=True)
