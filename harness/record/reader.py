"""Reading a study's record: `RecordReader`.

Every reader goes through `RecordReader`: a few queries per read whatever the number of cells
asked for (plain SQL on a SQL store, `search_runs` on a tracking server: harness.record.sources),
ended runs through the study's columnar summary (harness.record.summary), turned into pandas
frames here and nowhere else (`runs(cell_ids)`, `cells(cell_ids)`, `history(...)`). The names,
columns and shapes (`CellRecord`, `RunRecord`) are the contract's (harness.record.contract).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .contract import (
    CELL_COLUMNS,
    CELL_SCHEMA_COLUMNS,
    FINAL_KEYS,
    FINAL_PREFIXES,
    FIXED,
    INT_TAGS,
    MLFLOW_PARENT,
    PREFIX,
    RUN_COLUMNS,
    CellRecord,
    RunRecord,
    Tag,
    experiment_name,
    metric_of,
    param_of,
    per_epoch,
    prefixed,
    split_tags,
)
from .layout import RunRoot
from .sources import empty_columns, open_source, sqlite_path
from .summary import Summary, enabled, ended_runs, summary_path


class ReportError(LookupError):
    """No record to read (no store, unknown study, no cells). Printed as one line, exit 2."""

    user_error = True


# ---------------------------------------------------------------------------------------------
# Frames

#: The shapes and step-0 metric keys, as this module named them before the contract held them.
__all__ = [
    "CellRecord",
    "RunRecord",
    "split_tags",
    "FINAL_KEYS",
    "FINAL_PREFIXES",
    "per_epoch",
    "RecordReader",
    "ReportError",
    "RunNotFound",
    "TrackedRuns",
]


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
    """Columns of ended trial/seed runs (harness.record.sources) → the frame `RecordReader.runs` returns."""
    import numpy as np

    data = {k: [np.nan if v is None else v for v in values] for k, values in cols.items() if k != "end_time"}
    import pandas as pd

    df = pd.DataFrame(data)
    for col in RUN_COLUMNS:
        if col not in df.columns:
            df[col] = None
    param_cols = sorted(c for c in df.columns if param_of(c) is not None)
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
        if name in FIXED:
            continue
        if param_of(name) is not None:
            into, key = params, param_of(name)
        elif metric_of(name) is not None:
            into, key = metrics, metric_of(name)
        else:
            into, key = tags, PREFIX + name
        for row, v in zip(into, values):
            if v is not None:
                row[key] = v
    order = sorted(range(n), key=lambda i: (cols["start_time"][i] or 0, cols["run_id"][i]))
    out: dict[str, RunRecord] = {}
    for i in order:
        key = tags[i].get(Tag.RUN_KEY, "")
        out[key] = RunRecord(cols["run_id"][i], key, tags[i].get(Tag.STATUS, ""), tags[i], params[i], metrics[i])
    return out


def summary_dir(tracking_uri: str, root: str | Path | None = None) -> Path | None:
    """Where a study's summary of ended runs lives: `<root>/cache/summary` (the run directory the
    command was given), else next to a SQLite store; None (no summary) for a server without a root."""
    if root is not None:
        return RunRoot(Path(root).expanduser().resolve()).summary
    path = sqlite_path(tracking_uri)
    return None if path is None else RunRoot(path.resolve().parent).summary


class RecordReader:
    """Read one study's record. Every frame a reader (report, study show, compare, transfer, the
    driver's resume) needs comes from here. `cell_ids` restricts a read to the asked cells, and
    every read is a few queries whatever their number (harness.record.sources). Ended runs go
    through the study's summary (harness.record.summary) when there is a place for it (`root`)."""

    def __init__(self, tracking_uri: str, study: str, must_exist: bool = True, root: str | Path | None = None, client: Any = None) -> None:
        self.uri, self.study, self.root = tracking_uri, study, root
        path = sqlite_path(tracking_uri)
        if path is not None and not path.exists():
            if must_exist:
                raise ReportError(f"no MLflow store at {tracking_uri} ({path} does not exist): check --root / --tracking-uri, or run the study first")
            self.source, self.experiment_id = None, None  # never create an empty SQLite file for a wrong --root
            self._summary = None
            return
        self.source = open_source(tracking_uri, client)
        self.experiment_id = self.source.experiment_id(experiment_name(study))
        if self.experiment_id is None and must_exist:
            raise ReportError(self._unknown_study())
        self._summary = None

    @classmethod
    def of_client(
        cls, client: Any, tracking_uri: str, study: str, experiment_id: str | None, root: str | Path | None = None, source: Any = None
    ) -> RecordReader:
        """A reader sharing a writer's client or source (harness.record.writer.Tracker reads through it)."""
        reader = cls.__new__(cls)
        reader.uri, reader.study, reader.root, reader.experiment_id = tracking_uri, study, root, experiment_id
        reader.source = source if source is not None else open_source(tracking_uri, client)
        reader._summary = None
        return reader

    def _unknown_study(self) -> str:
        import difflib

        name, prefix = experiment_name(self.study), experiment_name("")
        known = sorted(n[len(prefix) :] for n in self.source.experiment_names() if n.startswith(prefix))
        close = difflib.get_close_matches(self.study, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return (
            f"study {self.study!r} has no record in {self.uri} (no experiment {name!r}){hint} (studies recorded there: {', '.join(known) or 'none'})"
        )

    @property
    def summary(self) -> Any:
        if self._summary is None:
            where = summary_dir(self.uri, self.root) if enabled() and self.experiment_id is not None else None
            self._summary = Summary(None if where is None else summary_path(where, self.uri, self.experiment_id, self.study))
        return self._summary

    # -- ended trial/seed runs -----------------------------------------------------------------
    def ended(self, cell_ids: Iterable[str] | None = None) -> dict[str, list[Any]]:
        """Ended trial/seed runs of the asked cells as columns (harness.record.sources.Columns)."""
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
        with the cell-schema tags, the metric, direction and splits (CELL_SCHEMA_COLUMNS)."""
        records, schema = [], set()
        for run in self.cell_runs(cell_ids):
            tags, params = run["tags"], run["params"]
            rec = {"run_id": run["run_id"], "start_time": run["start_time"]}
            rec.update(tags)
            for key in ("unit_canonical", "epochs", "data", "task_options"):
                rec[key] = params.get(key)
            for key in ("unit", "task", "arch", "dim", "input_dim"):  # tags too (older records: params only)
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
            out[run["tags"].get(Tag.CELL.bare, "")] = prefixed(run["tags"])
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
                keys = sorted(
                    {
                        metric_of(k)
                        for k, values in cols.items()
                        if metric_of(k) is not None
                        and per_epoch(metric_of(k))
                        and any(v is not None and r in wanted for r, v in zip(cols["run_id"], values))
                    }
                )
        run_ids, keys = sorted(set(run_ids)), list(keys)
        rows = self.source.history(run_ids, keys) if self.source is not None and run_ids and keys else []
        df = pd.DataFrame(rows, columns=["run_id", "key", "step", "value", "timestamp"])
        df = df.sort_values(["run_id", "key", "step", "timestamp"], kind="stable")
        df = df.drop_duplicates(["run_id", "key", "step"], keep="last").drop(columns="timestamp")
        return df.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Runs read by id


class RunNotFound(LookupError):
    """No run with that id in the store (or the store cannot be read). One line, exit 2."""

    user_error = True


class TrackedRuns:
    """Runs read by their id, whatever their study (`tprbench transfer RUN_ID`, the analyses'
    RUN_ID sources), and their artifacts. Through MLflow's client, created on first use; each read
    retried while the store is transiently unavailable (harness.record.retry)."""

    def __init__(self, tracking_uri: str, client: Any = None) -> None:
        self.uri = tracking_uri
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            from mlflow import MlflowClient

            from .retry import http_defaults

            http_defaults()
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _read(self, fn: Any, what: str) -> Any:
        from .retry import with_retry

        return with_retry(fn, f"MLflow tracking store {self.uri} ({what})")

    def run(self, run_id: str) -> RunRecord:
        """The run `run_id` (tags, params, final metrics, experiment); RunNotFound if there is none."""
        try:
            found = self._read(lambda: self.client.get_run(run_id), "get run")
        except Exception as exc:
            from .retry import StoreUnavailable

            if isinstance(exc, StoreUnavailable):
                raise
            raise RunNotFound(f"run {run_id!r} not found in {self.uri}: {str(exc).splitlines()[0]}") from None
        return RunRecord.from_run(found)

    def cell_params(self, run: RunRecord) -> dict[str, str]:
        """The params of the cell run a trial/seed run is nested under (task options, data, epochs)."""
        parent = run.parent
        if parent is None:
            raise RunNotFound(f"run {run.run_id}: no cell run above it (no {MLFLOW_PARENT} tag)")
        return self.run(parent).params

    def artifact(self, run_id: str, path: str, dest: str | Path) -> Path:
        """Download one artifact of a run into `dest`; its local path. RunNotFound if it has none."""
        try:
            return Path(self._read(lambda: self.client.download_artifacts(run_id, path, str(dest)), "download artifact"))
        except Exception as exc:
            from .retry import StoreUnavailable

            if isinstance(exc, StoreUnavailable):
                raise
            raise RunNotFound(f"run {run_id}: no {path} artifact ({str(exc).splitlines()[0]})") from None
