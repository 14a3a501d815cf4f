"""The summary of ended runs (harness.record.summary) is a cache, never a second truth.

One record of 2,101 runs (100 cells, 1 search trial and 19 seeds each) is built through the
driver's record-writing code (harness.bench.record.build, as `tprbench bench record` does). On it:
the tables, `study show`'s rows and a comparison read through the summary — cold (no file: it
is built) and warm (from the file) — are byte for byte those of a full read of the record
(`TPRBENCH_RECORD_SUMMARY=0`); a deleted, garbled or stale summary (a run re-logged under a new
run id, a run deleted) is rebuilt or corrected from the record; and the two ways of reading the
record (plain SQL, the MLflow client) give the same frames.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # building the record: ~15 s of CPU

CELLS_ROLES = tuple(range(2, 101))  # gru + 99 tpru cells
TRIALS, SEEDS = 1, 19


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> tuple[Path, object]:
    from harness.bench.record import Case, build

    root = tmp_path_factory.mktemp("summary-record")
    case = Case("summary", (8,), CELLS_ROLES, TRIALS, SEEDS, 2)
    info = build(case, root, say=lambda _text: None)
    assert info["mlflow_runs"] == case.runs == 2101
    return root, case


def _uri(root: Path) -> str:
    return f"sqlite:///{root / 'mlflow.db'}"


def _summary_files(root: Path) -> list[Path]:
    return sorted((root / "cache" / "summary").glob("*.parquet"))


def _tables(root: Path, out: Path, monkeypatch, summary: bool) -> dict[str, bytes]:
    from harness.report import write_report

    monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", "1" if summary else "0")
    shutil.rmtree(out, ignore_errors=True)
    write_report(_uri(root), "bench-summary", out, seeds_wanted=SEEDS, command="tprbench report bench-summary", figures=False)
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}
    assert {"table.md", "table.csv", "search.csv"} <= set(files)
    return files


def _show(root: Path, monkeypatch, summary: bool) -> str:
    from harness.driver.status import study_status
    from harness.study.cells import expand
    from harness.study.load import load_study

    monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", "1" if summary else "0")
    study = load_study(root / "studies" / "summary.toml")
    return json.dumps(study_status(study, expand(study), root), sort_keys=True)


def test_summary_tables_equal_full_read_cold_and_warm(record, tmp_path, monkeypatch) -> None:
    root, _case = record
    full = _tables(root, tmp_path / "full", monkeypatch, summary=False)
    assert not _summary_files(root)  # a full read writes no summary
    cold = _tables(root, tmp_path / "cold", monkeypatch, summary=True)
    (path,) = _summary_files(root)
    built = path.stat().st_mtime_ns
    warm = _tables(root, tmp_path / "warm", monkeypatch, summary=True)
    assert path.stat().st_mtime_ns == built  # nothing new: the file is read, not rewritten
    assert cold == full and warm == full
    import pyarrow.parquet as pq

    assert pq.read_table(path).num_rows == 100 * (TRIALS + SEEDS)  # every ended trial/seed run, nothing else
    assert _show(root, monkeypatch, summary=True) == _show(root, monkeypatch, summary=False)


def test_comparison_through_the_summary_equals_full_read(record, monkeypatch) -> None:
    from harness.report import compare_studies

    root, _case = record
    side = {"study": "bench-summary", "uri": _uri(root)}
    frames = []
    for on in ("0", "1", "1"):
        monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", on)
        frames.append(compare_studies(side, dict(side), seeds_wanted=SEEDS).frame.to_csv(index=False))
    assert frames[0] == frames[1] == frames[2]


@pytest.mark.parametrize("damage", ["deleted", "garbled", "truncated"])
def test_a_deleted_or_damaged_summary_is_rebuilt(record, tmp_path, monkeypatch, damage) -> None:
    root, _case = record
    full = _tables(root, tmp_path / "full", monkeypatch, summary=False)
    _tables(root, tmp_path / "first", monkeypatch, summary=True)
    (path,) = _summary_files(root)
    if damage == "deleted":
        path.unlink()
    elif damage == "garbled":
        path.write_bytes(b"not parquet at all")
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert _tables(root, tmp_path / "again", monkeypatch, summary=True) == full
    import pyarrow.parquet as pq

    assert pq.read_table(path).num_rows == 100 * (TRIALS + SEEDS)


def _relog(root: Path, monkeypatch) -> tuple[str, str]:
    """What `run --force` and a re-dispatched run do to the record: the old run of a key deleted,
    a new run (new id, other numbers) logged under the same key. Returns (old id, new id)."""
    from mlflow.entities import Metric

    from harness.record.reader import RecordReader
    from harness.record.writer import BulkRun, Tracker

    monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", "0")
    reader = RecordReader(_uri(root), "bench-summary")
    runs = reader.runs()
    row = runs[runs["phase"] == "final"].sort_values("run_key").iloc[0]
    old = reader.source.runs_by_id([(row["run_id"], row["mlflow_status"], int(row["start_time"]), None)])
    tags = {
        "tprbench." + k: v[0]
        for k, v in old.items()
        if not k.startswith(("param.", "metric.")) and k not in ("run_id", "mlflow_status", "start_time", "end_time") and v[0] is not None
    }
    tags["tprbench.kind"] = "run"
    cell = reader.cell_runs([row["cell_id"]])[0]
    tags["mlflow.parentRunId"] = cell["run_id"]
    params = {k[len("param.") :]: v[0] for k, v in old.items() if k.startswith("param.") and v[0] is not None}
    metrics = [
        Metric(k[len("metric.") :], (0.01 if "acc" in k else v[0]), 0, 0) for k, v in old.items() if k.startswith("metric.") and v[0] is not None
    ]
    tracker = Tracker(_uri(root), "bench-summary", root / "mlartifacts", root=root)
    tracker.client.delete_run(row["run_id"])
    new = BulkRun("relogged", tags, params, metrics, status="FINISHED", start_time=int(row["start_time"]) + 1, end_time=int(row["start_time"]) + 2)
    tracker.log_bulk([new])
    return row["run_id"], new.run_id


def test_a_stale_row_is_never_trusted_over_the_record(record, tmp_path, monkeypatch) -> None:
    """A run re-logged under a new run id replaces the summary's row (the old id is dropped)."""
    import pyarrow.parquet as pq

    root, _case = record
    before = _tables(root, tmp_path / "before", monkeypatch, summary=True)
    (path,) = _summary_files(root)
    old_id, new_id = _relog(root, monkeypatch)
    full = _tables(root, tmp_path / "full", monkeypatch, summary=False)
    assert full["table.csv"] != before["table.csv"]  # the re-logged run changed a number
    assert _tables(root, tmp_path / "after", monkeypatch, summary=True) == full
    ids = set(pq.read_table(path).column("run_id").to_pylist())
    assert new_id in ids and old_id not in ids
    assert _show(root, monkeypatch, summary=True) == _show(root, monkeypatch, summary=False)


def test_sql_and_client_sources_give_the_same_frames(record, monkeypatch) -> None:
    """Plain SQL on the store and MLflow's search_runs read the same rows (a schema change in
    MLflow's four tables would show here)."""
    import pandas as pd

    from harness.record.reader import runs_frame
    from harness.record.sources import ClientSource, SqlSource

    root, _case = record
    monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", "0")
    sql, client = SqlSource(_uri(root)), ClientSource(_uri(root))
    exp = sql.experiment_id("tprbench/bench-summary")
    assert exp == client.experiment_id("tprbench/bench-summary")
    ids = sorted({c["tags"]["cell_id"] for c in sql.cell_runs(exp)})[:5]
    a, b = runs_frame(sql.runs(exp, ids)), runs_frame(client.runs(exp, ids))
    assert len(a) == 5 * (TRIALS + SEEDS)
    pd.testing.assert_frame_equal(a[sorted(a.columns)], b[sorted(b.columns)])
    by_id = {r["run_id"]: r for r in client.cell_runs(exp, ids)}
    for run in sql.cell_runs(exp, ids):
        assert {k: run[k] for k in ("status", "start_time", "tags", "params")} == {
            k: by_id[run["run_id"]][k] for k in ("status", "start_time", "tags", "params")
        }
    sql.close()


SHOW_MODULES = """
import sys
from harness.cli import main

assert main(["study", "show", sys.argv[1], "--root", sys.argv[2], "--json"]) == 0
print("HEAVY", sorted(m for m in ("torch", "pandas", "mlflow", "sqlalchemy", "ray") if m in sys.modules), file=sys.stderr)
"""


def test_a_warm_study_show_imports_neither_torch_nor_pandas(record) -> None:
    """The fixed cost: with the summary in place, `study show` reads it with pyarrow alone
    (pyarrow imports pandas, ~0.5 s, only to build arrays: when the summary is written)."""
    import os
    import subprocess
    import sys

    root, _case = record
    args = [sys.executable, "-c", SHOW_MODULES, str(root / "studies" / "summary.toml"), str(root)]
    env = {k: v for k, v in os.environ.items() if k != "TPRBENCH_RECORD_SUMMARY"}
    heavy = []
    for _ in range(2):  # the first read may build the summary; the second finds it
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        heavy.append(proc.stderr.split("HEAVY ")[-1].strip())
    assert heavy[1] == "[]", heavy
