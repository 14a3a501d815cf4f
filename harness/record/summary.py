"""The summary: one compact, columnar file per study holding its ended trial/seed runs.

A run that has ended (MLflow status FINISHED/FAILED/KILLED) is immutable: the driver writes a
run completely and only then ends it (harness/record/writer.py), and never writes to it again. So
every reader keeps what it has read in a Parquet file (`<root>/cache/summary/<study>-<store>.parquet`)
and asks the store only for what is not in it yet. MLflow stays the record; the file is a cache
that can be deleted at any time (the next read rebuilds it) and is never trusted over the record:

- on a SQL store (SQLite, PostgreSQL) each read first lists the asked cells' ended runs —
  run id and end time, one cheap query — and then reads in full only the runs missing from the
  file or whose end time differs; rows of runs no longer in the record (deleted, e.g. by
  `run --force`, or re-logged under a new run id) are dropped;
- on an MLflow tracking server, listing costs as much as reading, so a read asks for the runs
  that ended since the newest one in the file (less a margin for clocks: `MARGIN_MS`), and for
  the experiment's deleted runs, whose rows are dropped (and re-read if a deleted run is restored).

What it does not see: a tag or metric edited by hand on a run that has already ended, without
its end time changing (tprbench never does this). Delete the file, or set
`TPRBENCH_RECORD_SUMMARY=0` to read the record in full, after such an edit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from .cache_note import unsaved
from .contract import Kind, metric_of
from .sources import ClientSource, Columns, SqlSource, empty_columns, kind_filter

VERSION = 1
ENV = "TPRBENCH_RECORD_SUMMARY"  # "0": no summary, every read goes to the record in full
MARGIN_MS = 10 * 60 * 1000  # tracking servers: re-read runs that ended up to 10 min before the newest row


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def summary_path(directory: Path, uri: str, experiment_id: str, study: str) -> Path:
    """One file per study and store: the same study name in two stores has two files."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", study)[:80]
    store = hashlib.sha256(f"{uri}\n{experiment_id}".encode()).hexdigest()[:12]
    return Path(directory) / f"{slug}-{store}.parquet"


def _arrow_type(name: str):
    import pyarrow as pa

    if name in ("start_time", "end_time"):
        return pa.int64()
    if metric_of(name) is not None:
        return pa.float64()
    return pa.string()


def to_table(cols: Columns):
    import pyarrow as pa

    return pa.table({name: pa.array(values, type=_arrow_type(name)) for name, values in cols.items()})


def to_columns(table: Any) -> Columns:
    return {name: table.column(name).to_pylist() for name in table.column_names}


def concat(tables: list[Any]):
    import pyarrow as pa

    tables = [t for t in tables if t is not None]
    if not tables:
        return to_table(empty_columns())
    return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]


class Summary:
    """The summary file of one study in one store (None path: no file, every read is in full)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.table: Any = None
        self.tombstones: list[str] = []  # deleted runs dropped from the file (tracking servers)
        self.changed = False

    def load(self) -> Any:
        """The stored table (empty when there is none, or it does not verify: it is rebuilt).

        The file is used only when its bytes hash to the digest saved beside it
        (`<file>.sha256`, written after the file): a damaged file that still parses — a flipped
        bit in a value page reads as another number — is rebuilt from the record, never used."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.table = None
        data = self._verified_bytes()
        if data is not None:
            try:  # not pq.read_table: it imports pyarrow.dataset (~0.3 s)
                table = pq.ParquetFile(pa.BufferReader(data)).read()
                meta = table.schema.metadata or {}
                if int(meta.get(b"tprbench.summary", b"0")) == VERSION and "run_id" in table.column_names:
                    self.table = table
                    self.tombstones = json.loads(meta.get(b"tprbench.tombstones", b"[]"))
            except Exception:  # unreadable (another version): rebuilt from the record
                self.table = None
        if self.table is None:
            self.table = to_table(empty_columns())
            self.changed = self.path is not None
        return self.table

    def _verified_bytes(self) -> bytes | None:
        """The file's bytes if they match the digest saved beside it, else None."""
        if self.path is None:
            return None
        try:
            data = self.path.read_bytes()
            digest = digest_path(self.path).read_text().strip()
        except OSError:  # no file, or no digest (a file of an older tprbench): rebuilt
            return None
        return data if hashlib.sha256(data).hexdigest() == digest else None

    def save(self) -> None:
        """Atomically (temp file + rename), then its digest beside it (a crash between the two
        leaves a file that does not verify: rebuilt). A reader that cannot write (read-only
        root) says so once (harness.record.cache_note) and goes on."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.path is None or not self.changed:
            return
        table = self.table.replace_schema_metadata({"tprbench.summary": str(VERSION), "tprbench.tombstones": json.dumps(self.tombstones)})
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp_digest = self.path.with_name(f".{self.path.name}.{os.getpid()}.sha256.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, compression="zstd")
            data = sink.getvalue().to_pybytes()
            tmp.write_bytes(data)
            tmp_digest.write_text(hashlib.sha256(data).hexdigest() + "\n")
            os.replace(tmp, self.path)
            os.replace(tmp_digest, digest_path(self.path))
            self.changed = False
        except OSError as exc:
            for left in (tmp, tmp_digest):
                _remove(left)
            unsaved(self.path.parent, exc)


def _remove(path: Path) -> None:
    """Remove a temporary file if it is there. On a read-only filesystem even removing a file
    that does not exist fails (EROFS, not ENOENT): nothing was written, so nothing to remove."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def digest_path(path: Path) -> Path:
    """Where the SHA-256 of a summary file's bytes is kept: `<file>.sha256`."""
    return path.with_name(path.name + ".sha256")


def _select(table: Any, cell_ids: list[str] | None, names: list[str] | None = None) -> Columns:
    """The asked cells' rows (`names`: only these columns) as Columns, in the table's order.

    Selected in Python, not with `Table.filter`: pyarrow imports pandas (~0.5 s) for its compute
    functions and for arrays built from Python lists, and a read that finds nothing new to store
    (a warm `study show`) needs neither; the rows are converted to lists anyway."""
    names = table.column_names if names is None else names
    if cell_ids is None or not table.num_rows:
        return {name: table.column(name).to_pylist() for name in names}
    if "cell_id" not in table.column_names:
        return {name: [] for name in names}
    wanted = set(cell_ids)
    keep = [i for i, cell in enumerate(table.column("cell_id").to_pylist()) if cell in wanted]
    if len(keep) == table.num_rows:
        return {name: table.column(name).to_pylist() for name in names}
    out: Columns = {}
    for name in names:
        values = table.column(name).to_pylist()
        out[name] = [values[i] for i in keep]
    return out


def _drop(table: Any, run_ids: set[str]):
    import pyarrow as pa
    import pyarrow.compute as pc

    if not run_ids or not table.num_rows:
        return table
    return table.filter(pc.invert(pc.is_in(table["run_id"], value_set=pa.array(sorted(run_ids), type=pa.string()))))


def ended_runs(source: SqlSource | ClientSource, experiment_id: str, cell_ids: list[str] | None, summary: Summary) -> Columns:
    """The ended trial/seed runs of the asked cells (all when None) as Columns, read through the
    summary: from the file what it holds and the record confirms, from the record the rest."""
    if summary.path is None:
        return source.runs(experiment_id, cell_ids)
    table = summary.load()
    if isinstance(source, SqlSource):
        table = _refresh_sql(source, experiment_id, cell_ids, summary, table)
    else:
        table = _refresh_client(source, experiment_id, summary, table)
    summary.table = table
    summary.save()
    return _select(table, cell_ids)


def _refresh_sql(source: SqlSource, experiment_id: str, cell_ids: list[str] | None, summary: Summary, table: Any):
    index = source.index(experiment_id, "run", cell_ids)
    live = {rid: end for rid, _status, _start, end in index}
    have = _select(table, cell_ids, ["run_id", "end_time"]) if "end_time" in table.column_names else {}
    held = dict(zip(have["run_id"], have["end_time"])) if have else {}
    stale = {rid for rid, end in held.items() if live.get(rid, -1) != end}
    missing = [row for row in index if held.get(row[0], -1) != row[3]]
    if not stale and not missing:
        return table
    summary.changed = True
    new = source.runs_by_id(missing) if missing else None
    return concat([_drop(table, stale), None if new is None else to_table(new)])


def _refresh_client(source: ClientSource, experiment_id: str, summary: Summary, table: Any):
    kind = kind_filter(Kind.RUN)
    deleted = {r.info.run_id for r in source.search(experiment_id, kind, deleted=True)}
    if not table.num_rows:
        fresh = source.runs(experiment_id)
    else:
        newest = max((e for e in table.column("end_time").to_pylist() if e is not None), default=0)
        fresh = source.runs(experiment_id, extra=f"attributes.end_time >= {int(newest) - MARGIN_MS}")
        restored = [r for r in summary.tombstones if r not in deleted]
        if restored:
            ids = ", ".join(f"'{r}'" for r in restored)
            back = source.runs(experiment_id, extra=f"attributes.run_id IN ({ids})")
            fresh = _merge(fresh, back)
    held = set(table.column("run_id").to_pylist())
    gone = deleted & held
    tombstones = sorted((set(summary.tombstones) & deleted) | gone)
    if not gone and _same_rows(table, fresh) and tombstones == summary.tombstones:
        return table
    summary.changed = True
    summary.tombstones = tombstones
    return concat([_drop(table, gone | set(fresh["run_id"])), to_table(fresh) if fresh["run_id"] else None])


def _merge(a: Columns, b: Columns) -> Columns:
    import pyarrow as pa

    return to_columns(pa.concat_tables([to_table(a), to_table(b)], promote_options="default"))


def _same_rows(table: Any, fresh: Columns) -> bool:
    """Whether every fresh run is already held with the same end time (nothing to write)."""
    held = dict(zip(table.column("run_id").to_pylist(), table.column("end_time").to_pylist()))
    return all(held.get(r) == e for r, e in zip(fresh["run_id"], fresh["end_time"]))
