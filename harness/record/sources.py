"""Where a study's record is read from: MLflow's SQL tables directly, or the MLflow client.

MLflow's own `search_runs` builds a Python object per run, tag, param and metric and pages
through the experiment 1,000 runs at a time: ~40 s for a 10k-run record on SQLite, where the
same rows read straight from the four tables (`runs`, `tags`, `params`, `latest_metrics`) take
~1 s (measured on a 10k-run record; MLflow #2730). So a record in a SQL store (a SQLite file,
PostgreSQL, MySQL: `sqlite:///…`, `postgresql://…`) is read here with plain SQL — sqlite3 for
SQLite, which needs neither MLflow nor SQLAlchemy imported — in a few queries per read, however
many cells are asked for. Anything else (an MLflow tracking server, `http(s)://…`) is read through
`MlflowClient.search_runs`. Both sources give the same shapes:

- `Columns`: trial/seed runs as columns (lists of equal length): `run_id`, `mlflow_status`,
  `start_time`, `end_time`, each `tprbench.*` tag under its bare name (without `kind`),
  `param.<name>` (strings, as stored) and `metric.<name>` (the latest value, as MLflow's
  `run.data.metrics` gives it: NaN for NaN, ±1.797e308 for ±inf);
- cell runs as dicts: `run_id`, `start_time`, `tags` (bare names), `params`.

Reading the tables is reading MLflow's schema, which MLflow migrates with alembic and has kept
for these four tables since 1.x; `tests/test_record_summary.py` checks that both sources give
identical frames, so a schema change shows up there. Writing always goes through MLflow
(harness.record.writer), except the bulk writer used to build benchmark records and to restore a
record (`Tracker.log_bulk`), which writes the same rows MLflow's own store writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .contract import FIXED, MLFLOW_ENDED, MLFLOW_UNENDED, PREFIX, Kind, Tag, bare, metric_col, param_col, sql_list
from .guard import check
from .layout import RunRoot

SQL_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mssql")
CHUNK = 500  # ids per IN (...) list: well below every database's bound-parameter limit

Columns = dict[str, list[Any]]

# SQL fragments, from the contract's names (constants of ours: never user input)
_KIND = f"JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = '{Tag.KIND}'"
_CELL = f"LEFT JOIN tags c ON c.run_uuid = r.run_uuid AND c.key = '{Tag.CELL}'"
_OUR_TAGS = f"AND t.key LIKE '{PREFIX}%' AND t.key <> '{Tag.KIND}'"  # every tprbench tag but the kind
_ENDED = sql_list(MLFLOW_ENDED)


def scheme_of(uri: str) -> str:
    return uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""


def is_sql_uri(uri: str) -> bool:
    return scheme_of(uri) in SQL_SCHEMES


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///path` URI (None for anything else, or an in-memory database)."""
    if not uri.startswith("sqlite:"):
        return None
    rest = uri[len("sqlite:") :]
    if rest.startswith("///"):
        rest = rest[3:].split("?", 1)[0]
        return Path(rest) if rest and rest != ":memory:" else None
    return None


def default_tracking_uri(root: Path) -> str:
    return RunRoot(root).tracking_uri


def is_server(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("http://", "https://"))


def empty_columns() -> Columns:
    return {k: [] for k in FIXED}


def chunks(items: list[Any], size: int = CHUNK) -> Iterator[list[Any]]:
    """Consecutive slices of at most `size` items (an `IN (…)` list's worth of ids)."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _id_lists(ids: list[str]) -> Iterator[tuple[str, dict[str, str]]]:
    """(":r0, :r1, …", {"r0": id, …}) for each chunk of CHUNK run ids: an `IN (…)` list and its parameters."""
    for chunk in chunks(ids):
        yield ", ".join(f":r{i}" for i in range(len(chunk))), {f"r{i}": rid for i, rid in enumerate(chunk)}


class _Builder:
    """Columns filled run by run (`add_run`) and value by value (`set`), missing values None."""

    def __init__(self) -> None:
        self.cols: Columns = empty_columns()
        self.index: dict[str, int] = {}

    def add_run(self, run_id: str, status: str, start_time: Any, end_time: Any) -> None:
        self.index[run_id] = len(self.cols["run_id"])
        n = len(self.cols["run_id"]) + 1
        for name, col in self.cols.items():
            if name not in FIXED:
                col.append(None)
        for name, value in zip(FIXED, (run_id, status, start_time, end_time)):
            self.cols[name].append(value)
        assert len(self.cols["run_id"]) == n

    def set(self, run_id: str, name: str, value: Any) -> None:
        i = self.index.get(run_id)
        if i is None:
            return
        col = self.cols.get(name)
        if col is None:
            col = self.cols[name] = [None] * len(self.cols["run_id"])
        col[i] = value


def _metric_value(value: Any, is_nan: Any) -> float:
    return float("nan") if is_nan else float(value)


# ---------------------------------------------------------------------------------------------
# SQL


class SqlSource:
    """Read-only plain SQL on an MLflow SQL store (sqlite3 for SQLite files, SQLAlchemy otherwise)."""

    def __init__(self, uri: str, timeout: float = 60.0) -> None:
        self.uri = uri
        path = sqlite_path(uri)
        self._engine = None
        if path is not None:
            check(path)  # a damaged file stops here with one line, before anything reads half of it
            # Read-only: a reader never creates, migrates or locks the store for writing.
            self._con = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=timeout, check_same_thread=False)
        else:
            import sqlalchemy

            self._engine = sqlalchemy.create_engine(uri, pool_pre_ping=True)
            self._con = None

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
        if self._engine is not None:
            self._engine.dispose()

    def query(self, sql: str, params: dict[str, Any] | None = None) -> Iterator[tuple]:
        """Rows of one statement with `:name` parameters (streamed for SQLite)."""
        params = params or {}
        if self._con is not None:
            yield from self._con.execute(sql, params)
            return
        import sqlalchemy

        with self._engine.connect() as con:
            yield from con.execute(sqlalchemy.text(sql), params)

    # -- experiments -------------------------------------------------------------------------
    def experiment_id(self, name: str) -> str | None:
        rows = list(self.query("SELECT experiment_id FROM experiments WHERE name = :n AND lifecycle_stage = 'active'", {"n": name}))
        return str(rows[0][0]) if rows else None

    def experiment_names(self) -> list[str]:
        return [r[0] for r in self.query("SELECT name FROM experiments WHERE lifecycle_stage = 'active'")]

    # -- selections ----------------------------------------------------------------------------
    def index(
        self, experiment_id: str, kind: str, cell_ids: Iterable[str] | None = None, ended: bool = True
    ) -> list[tuple[str, str, int, int | None]]:
        """(run id, status, start time, end time) of the experiment's active runs of one kind
        (ended ones only by default), of `cell_ids` when given: one scan of the experiment's runs
        of that kind, with the asked cells kept here. MLflow indexes tags by (key, run) only, not
        by value, so a database filter on cell ids (`value IN (...)`) scans the same rows again
        for every chunk of ids — 5× slower at 10,000 cells."""
        params: dict[str, Any] = {"exp": int(experiment_id), "kind": kind}
        sql = (
            f"SELECT r.run_uuid, r.status, r.start_time, r.end_time, c.value FROM runs r {_KIND} AND k.value = :kind "
            f"{_CELL} WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active'"
        )
        if ended:
            sql += f" AND r.status IN {_ENDED}"
        wanted = None if cell_ids is None else set(cell_ids)
        return [(r[0], r[1], r[2], r[3]) for r in self.query(sql, params) if wanted is None or r[4] in wanted]

    # -- rows ----------------------------------------------------------------------------------
    def _fill(self, b: _Builder, where: str, params: dict[str, Any], tag_names: bool = True) -> None:
        """Tags, params and latest metrics of the runs `where` lists (run ids)."""
        cut = len(PREFIX) if tag_names else 0  # every key starts with the prefix (the query says so)
        for run_id, key, value in self.query(f"SELECT t.run_uuid, t.key, t.value FROM tags t WHERE t.run_uuid IN ({where}) {_OUR_TAGS}", params):
            b.set(run_id, key[cut:], value)
        for run_id, key, value in self.query(f"SELECT p.run_uuid, p.key, p.value FROM params p WHERE p.run_uuid IN ({where})", params):
            b.set(run_id, param_col(key), value)
        for run_id, key, value, is_nan in self.query(
            f"SELECT m.run_uuid, m.key, m.value, m.is_nan FROM latest_metrics m WHERE m.run_uuid IN ({where})", params
        ):
            b.set(run_id, metric_col(key), _metric_value(value, is_nan))

    def runs(self, experiment_id: str, cell_ids: Iterable[str] | None = None, kind: str = Kind.RUN) -> Columns:
        """Every ended run of one kind of the experiment (of `cell_ids` when given), as Columns:
        one scan for the runs, then their tags, params and metrics 500 runs a query (by the
        tables' run-id index: no rescan of the experiment per chunk)."""
        return self.runs_by_id(self.index(experiment_id, kind, cell_ids))

    def runs_by_id(self, rows: Iterable[tuple[str, str, int, int | None]]) -> Columns:
        """Columns of the given index rows (run id, status, start, end), 500 ids per query."""
        b = _Builder()
        rows = list(rows)
        for run_id, status, start, end in rows:
            b.add_run(run_id, status, start, end)
        for where, params in _id_lists([r[0] for r in rows]):
            self._fill(b, where, params)
        return b.cols

    def cell_runs(self, experiment_id: str, cell_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Every active cell run (any status) of the experiment, of `cell_ids` when given."""
        out: dict[str, dict[str, Any]] = {}
        rows = self.index(experiment_id, Kind.CELL, cell_ids, ended=False)
        for run_id, status, start, _end in rows:
            out[run_id] = {"run_id": run_id, "status": status, "start_time": start, "tags": {}, "params": {}}
        for where, params in _id_lists([r[0] for r in rows]):
            for run_id, key, value in self.query(f"SELECT t.run_uuid, t.key, t.value FROM tags t WHERE t.run_uuid IN ({where}) {_OUR_TAGS}", params):
                out[run_id]["tags"][bare(key)] = value
            for run_id, key, value in self.query(f"SELECT p.run_uuid, p.key, p.value FROM params p WHERE p.run_uuid IN ({where})", params):
                out[run_id]["params"][key] = value
        return list(out.values())

    def study_run(self, experiment_id: str, study: str) -> tuple[str, dict[str, str], str] | None:
        """(run id, tags by bare name, MLflow status) of the study run (the first created), or None."""
        rows = sorted((start or 0, rid, status) for rid, status, start, _e in self.index(experiment_id, Kind.STUDY, ended=False))
        if not rows:
            return None
        _start, rid, status = rows[0]
        tags = {bare(k): v for k, v in self.query("SELECT key, value FROM tags WHERE run_uuid = :r", {"r": rid}) if k.startswith(PREFIX)}
        return rid, tags, status

    def pending(self, experiment_id: str) -> list[str]:
        """Runs a killed driver left half-written: kind `pending`, or a trial/seed run that never ended."""
        sql = (
            f"SELECT r.run_uuid FROM runs r {_KIND} "
            f"WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active' AND (k.value = '{Kind.PENDING}' OR "
            f"(k.value = '{Kind.RUN}' AND r.status NOT IN {_ENDED}))"
        )
        return [r[0] for r in self.query(sql, {"exp": int(experiment_id)})]

    def deleted_unended(self, experiment_id: str) -> list[str]:
        """Deleted runs that never ended (any kind): drivers before 2026-11-26 deleted live runs
        without ending them, and such a run says RUNNING forever to a reader without MLflow's filter."""
        sql = f"SELECT r.run_uuid FROM runs r WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'deleted' AND r.status NOT IN {_ENDED}"
        return [r[0] for r in self.query(sql, {"exp": int(experiment_id)})]

    def history(self, run_ids: list[str], keys: list[str]) -> list[tuple[str, str, int, float, int]]:
        """(run id, key, step, value, timestamp) of every logged value of `keys` for `run_ids`."""
        rows: list[tuple[str, str, int, float, int]] = []
        kparams = {f"k{i}": k for i, k in enumerate(keys)}
        knames = ", ".join(f":k{i}" for i in range(len(keys)))
        if not keys:
            return rows
        for where, ids in _id_lists(sorted(set(run_ids))):
            params = dict(kparams, **ids)
            sql = f"SELECT run_uuid, key, step, value, is_nan, timestamp FROM metrics WHERE key IN ({knames}) AND run_uuid IN ({where})"
            rows += [(r, k, int(s), _metric_value(v, n), int(t)) for r, k, s, v, n, t in self.query(sql, params)]
        return rows


# ---------------------------------------------------------------------------------------------
# The MLflow client (a tracking server, or any store MLflow can open)


def kind_filter(kind: str) -> str:
    """The `search_runs` filter for the runs of one kind."""
    return f"tags.`{Tag.KIND}` = '{kind}'"


class ClientSource:
    """The same reads through `MlflowClient.search_runs` (paged, 1,000 runs a page)."""

    def __init__(self, uri: str, client: Any = None) -> None:
        self.uri = uri
        if client is None:
            from mlflow import MlflowClient

            client = MlflowClient(tracking_uri=uri)
        self.client = client

    def close(self) -> None:
        pass

    def experiment_id(self, name: str) -> str | None:
        exp = self.client.get_experiment_by_name(name)
        return None if exp is None else exp.experiment_id

    def experiment_names(self) -> list[str]:
        return [e.name for e in self.client.search_experiments()]

    def search(self, experiment_id: str, flt: str, deleted: bool = False) -> list[Any]:
        from mlflow.entities import ViewType

        view = ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], filter_string=flt, run_view_type=view, max_results=1000, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    @staticmethod
    def columns(found: Iterable[Any], cell_ids: Iterable[str] | None = None) -> Columns:
        """Columns of ended runs (of `cell_ids` when given) from MLflow Run objects."""
        wanted = None if cell_ids is None else set(cell_ids)
        b = _Builder()
        for run in found:
            tags = run.data.tags
            if run.info.status not in MLFLOW_ENDED or (wanted is not None and tags.get(Tag.CELL) not in wanted):
                continue
            rid = run.info.run_id
            b.add_run(rid, run.info.status, run.info.start_time, run.info.end_time)
            for k, v in tags.items():
                if k.startswith(PREFIX) and k != Tag.KIND:
                    b.set(rid, bare(k), v)
            for k, v in run.data.params.items():
                b.set(rid, param_col(k), v)
            for k, v in run.data.metrics.items():
                b.set(rid, metric_col(k), float(v))
        return b.cols

    def runs(self, experiment_id: str, cell_ids: Iterable[str] | None = None, kind: str = Kind.RUN, extra: str = "") -> Columns:
        wanted = None if cell_ids is None else sorted(set(cell_ids))
        flt = kind_filter(kind)
        if wanted is not None and len(wanted) == 1:
            flt += f" and tags.`{Tag.CELL}` = '{wanted[0]}'"
        if extra:
            flt += " and " + extra
        return self.columns(self.search(experiment_id, flt), wanted)

    def cell_runs(self, experiment_id: str, cell_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        wanted = None if cell_ids is None else set(cell_ids)
        out = []
        for run in self.search(experiment_id, kind_filter(Kind.CELL)):
            tags = run.data.tags
            if wanted is not None and tags.get(Tag.CELL) not in wanted:
                continue
            out.append(
                {
                    "run_id": run.info.run_id,
                    "status": run.info.status,
                    "start_time": run.info.start_time,
                    "tags": {bare(k): v for k, v in tags.items() if k.startswith(PREFIX) and k != Tag.KIND},
                    "params": dict(run.data.params),
                }
            )
        return out

    def study_run(self, experiment_id: str, study: str) -> tuple[str, dict[str, str], str] | None:
        found = self.search(experiment_id, kind_filter(Kind.STUDY))
        if not found:
            return None
        run = min(found, key=lambda r: r.info.start_time)
        return run.info.run_id, {bare(k): v for k, v in run.data.tags.items() if k.startswith(PREFIX)}, run.info.status

    def pending(self, experiment_id: str) -> list[str]:
        """The status is filtered by the server: a driver asks this as it opens the record and as
        it stops, and fetching every trial/seed run to keep the few unended ones cost a full read
        of the record each time (100 pages of 1,000 runs at 100k runs). One search per unended
        status: MLflow's filter takes IN only for run ids."""
        ids = [r.info.run_id for r in self.search(experiment_id, kind_filter(Kind.PENDING))]
        for status in MLFLOW_UNENDED:
            ids += [r.info.run_id for r in self.search(experiment_id, f"{kind_filter(Kind.RUN)} and attributes.status = '{status}'")]
        return ids

    def deleted_unended(self, experiment_id: str) -> list[str]:
        return [r.info.run_id for status in MLFLOW_UNENDED for r in self.search(experiment_id, f"attributes.status = '{status}'", deleted=True)]

    def history(self, run_ids: list[str], keys: list[str]) -> list[tuple[str, str, int, float, int]]:
        rows: list[tuple[str, str, int, float, int]] = []
        store = getattr(getattr(self.client, "_tracking_client", None), "store", None)
        bulk = getattr(store, "get_metric_history_bulk", None)
        run_ids = sorted(set(run_ids))
        for key in keys:
            if bulk is not None:
                for chunk in chunks(run_ids):
                    rows += [(m.run_id, key, int(m.step), float(m.value), int(m.timestamp)) for m in bulk(chunk, key, max_results=10**9)]
            else:
                rows += _history_threaded(self.client, run_ids, key)
        return rows


def _history_threaded(client: Any, run_ids: list[str], key: str) -> list[tuple[str, str, int, float, int]]:
    """Per-run `get_metric_history` calls (a tracking server has no bulk history call), 8 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def one(run_id: str) -> list[tuple[str, str, int, float, int]]:
        return [(run_id, key, int(m.step), float(m.value), int(m.timestamp)) for m in client.get_metric_history(run_id, key)]

    with ThreadPoolExecutor(8) as pool:
        return [row for part in pool.map(one, run_ids) for row in part]


def open_source(uri: str, client: Any = None) -> SqlSource | ClientSource:
    """Plain SQL for a SQL store, the MLflow client for anything else."""
    return SqlSource(uri) if is_sql_uri(uri) else ClientSource(uri, client)
