"""Aggregate: runs × cells → one row per cell × split (mean ± std over the counted seeds, search
statistics, parameter counts). Pure pandas, no I/O.

Which seed runs count: phase=final runs whose `tprbench.params_hash` equals the cell's
`tprbench.final_params_hash` (seed runs of an earlier best are ignored) with seed < seeds
wanted. The table metric, its direction and the test splits come from the cell runs' tags;
for records written before those tags they are inferred from the metric columns as they
always were.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tasks.metrics import MINIMIZE, metric_direction, metric_scale
from tasks.result import RunStatus, is_failure
from units.registry import UNITS, meta_or_none
from units.spec import UnitSpecError, parse_spec

from ..record.contract import (
    BEST_EPOCH,
    PARAMS_FORMULA,
    PARAMS_TOTAL,
    SUMMARY_SPLIT,
    TEST,
    Col,
    Phase,
    best_valid,
    metric_col,
    metric_of,
    parse_best_valid,
    parse_test_metric,
    split_metric,
    test_metric,
    valid_metric,
)


@functools.lru_cache(maxsize=1)
def papers_split_order() -> tuple[str, ...]:
    """The test splits tasks want shown in their papers' column order (tasks/meta.py
    `ReportLayout.split_order`: logic's easy … exam), every registered task's in turn; other
    splits follow sorted by name."""
    from tasks.registry import available_tasks, task_meta

    order: list[str] = []
    for name in available_tasks():
        try:
            layout = task_meta(name).report_layout
        except Exception:  # a plug-in task that is gone or fails to import: no order of its own
            continue
        order += [s for s in getattr(layout, "split_order", ()) if s not in order]
    return tuple(order)


@functools.lru_cache(maxsize=256)
def baseline_order(unit_name: str | None) -> float:
    """Baselines first, in the rank their units declare (units/meta.py `BASELINE_RANK`: LSTM, GRU)."""
    from units.registry import baseline_rank

    rank = baseline_rank(unit_name) if unit_name else None
    return float("inf") if rank is None else rank


# -- unit specs → table columns --------------------------------------------------------------


def parse_unit(spec: str | None) -> tuple[str, dict[str, str]]:
    """`tpru[roles=32,slices=8]` → ('tpru', {'roles': '32', 'slices': '8'}); units.spec parses it
    (no torch import: the units package is lazy). A spec that does not parse is its own name."""
    try:
        parsed = parse_spec(spec or "")
    except UnitSpecError:
        return spec or "", {}
    return parsed.name, parsed.option_dict


@dataclass(frozen=True)
class UnitColumns:
    """The unit options a report gives columns of their own, as the units declare them (units/meta.py
    `REPORT_COLUMNS`: in the frame and table.csv, sorted numerically; `TABLE_COLUMNS`: also shown
    beside the unit in the papers' tables)."""

    report: tuple[str, ...]
    table: tuple[str, ...]


@functools.lru_cache(maxsize=256)
def _declared(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(REPORT_COLUMNS, TABLE_COLUMNS) of one unit; none where its code cannot be loaded (a report
    reads the record even where a plug-in unit is not installed)."""
    meta = meta_or_none(name)  # None for a plug-in that is gone or fails to import: no columns of its own
    return tuple(getattr(meta, "REPORT_COLUMNS", ())), tuple(getattr(meta, "TABLE_COLUMNS", ()))


def unit_columns_of(names: Iterable[str] = ()) -> UnitColumns:
    """The columns of every built-in unit (so a report's files have the same columns whichever
    units a study ran), then those the other units `names` (plug-ins) declare, each once, in order."""
    UNITS.load_metas()
    builtin = list(UNITS.metas)
    declared = [_declared(n) for n in builtin + sorted(set(names) - set(builtin))]
    return UnitColumns(
        tuple(dict.fromkeys(c for report, _ in declared for c in report)), tuple(dict.fromkeys(c for _, table in declared for c in table))
    )


def _int_or_none(text: Any) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def unit_columns(unit: str, canonical: str | None, columns: UnitColumns | None = None) -> dict[str, Any]:
    """unit_name, a value per report column (spec first, then defaults from the canonical spec;
    `columns`: the built-in units' by default), and the spec without the table columns' options
    (`unit_short`: the tables show those in columns of their own)."""
    return dict(_unit_columns(unit, canonical, columns or unit_columns_of()))


@functools.lru_cache(maxsize=4096)
def _unit_columns(unit: str, canonical: str | None, columns: UnitColumns) -> dict[str, Any]:
    """unit_columns, parsed once per spec (a study repeats its units at every dim and task)."""
    name, opts = parse_unit(unit)
    _, canon = parse_unit(canonical)
    values = {c: _int_or_none(opts.get(c, canon.get(c))) for c in columns.report}
    rest = {k: v for k, v in opts.items() if k not in columns.table}
    short = name + (f"[{','.join(f'{k}={v}' for k, v in rest.items())}]" if rest else "")
    return {"unit_name": name, **values, "unit_short": short}


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v)  # NaN / pd.NA
    except (TypeError, ValueError):
        return True


def _num(v: Any) -> float:
    return float("inf") if _is_missing(v) else float(v)


def _sort_key(row: dict[str, Any], columns: UnitColumns) -> tuple:
    """Task, architecture, sizes, baselines first, then units by name and their report columns' numbers."""
    return (
        str(row.get("task_label") or ""),
        str(row.get(Col.ARCH) or ""),
        _num(row.get(Col.DIM)),
        _num(row.get(Col.INPUT_DIM)),
        baseline_order(row.get("unit_name")),
        str(row.get("unit_name") or ""),
        *(_num(row.get(c)) for c in columns.report),
        str(row.get(Col.UNIT) or ""),
        str(row.get(Col.CELL)),
    )


# -- aggregation -------------------------------------------------------------------------------


def records(frame: Any, columns: Any = None) -> list[dict[str, Any]]:
    """`frame.to_dict("records")` (of `columns` only, when given), the same values, column by
    column: pandas boxes every value of an Arrow-backed column one by one (~8 s for 90k runs ×
    50 columns), where `tolist` converts a column at once. Nullable integers give None
    for missing values, as to_dict does."""
    from pandas.api.extensions import ExtensionDtype

    names = list(frame.columns) if columns is None else [c for c in columns if c in frame.columns]
    values = []
    for name in names:
        col = frame[name]
        if isinstance(col.dtype, ExtensionDtype) and col.dtype.kind in "iub":
            values.append(col.to_numpy(dtype=object, na_value=None).tolist())
        else:
            values.append(col.tolist())
    return [dict(zip(names, row)) for row in zip(*values)] if names else [{} for _ in range(len(frame))]


def _splits_of(runs: Any, metric: str) -> list[tuple[str, str]]:
    """(display name, metric column) of every test split seen for this metric, papers' order first."""
    found = {}
    for col in runs.columns:
        split = parse_test_metric(metric_of(col) or "", metric)
        if split is not None and runs[col].notna().any():
            found[_display(split)] = col
    order = papers_split_order()
    first = [s for s in order if s in found]
    return [(s, found[s]) for s in first + sorted(s for s in found if s not in order)]


def _metric_of(runs: Any) -> str | None:
    counts: dict[str, int] = {}
    for col in runs.columns:
        name = parse_best_valid(metric_of(col) or "")
        if name is not None:
            counts[name] = int(runs[col].notna().sum())
    counts = {k: v for k, v in counts.items() if v}
    return min(counts, key=lambda k: (-counts[k], k)) if counts else None


def infer_seeds(runs: Any) -> int:
    """Seeds wanted when no study file says: the highest final seed recorded + 1 (at least 1)."""
    final = runs[runs[Col.PHASE] == Phase.FINAL][Col.SEED].dropna()
    return int(final.max()) + 1 if len(final) else 1


def counted_runs(runs: Any, cells: Any, seeds_wanted: int | None = None, any_params: bool = False) -> Any:
    """The final-phase runs that count for each cell: current params hash, seed < seeds wanted.

    `any_params=True` (used for commit comparisons, where the runs are filtered by commit): when
    no run has the cell's current hash, take the hash most of its final runs have.
    """
    if seeds_wanted is None:
        seeds_wanted = infer_seeds(runs)
    final = runs[(runs[Col.PHASE] == Phase.FINAL) & runs[Col.SEED].notna() & (runs[Col.SEED] < seeds_wanted)]
    hashes = dict(zip(cells[Col.CELL], cells[Col.FINAL_PARAMS_HASH]))
    if not any_params:  # one vectorised filter, not a pandas group per cell (5,010 cells: 15 s → 0.1 s)
        current = final[Col.CELL].map({k: v for k, v in hashes.items() if not _is_missing(v)})
        match = final[Col.PARAMS_HASH].eq(current).fillna(False).astype(bool) & current.notna()
        out = final[match.to_numpy()]
        return out.sort_values([Col.CELL, Col.SEED, Col.RUN_KEY], kind="stable").reset_index(drop=True)
    keep = []
    for cid, group in final.groupby(Col.CELL, sort=True):
        h = hashes.get(cid)
        h = None if _is_missing(h) else h
        if h is None or not (group[Col.PARAMS_HASH] == h).any():
            counts = group[Col.PARAMS_HASH].value_counts()
            h = sorted(counts.index[counts == counts.max()])[-1]
        if h is not None:
            keep.append(group[group[Col.PARAMS_HASH] == h])
    if not keep:
        return final.iloc[0:0]
    import pandas as pd

    out = pd.concat(keep)
    return out.sort_values([Col.CELL, Col.SEED, Col.RUN_KEY], kind="stable").reset_index(drop=True)


def _display(split: str) -> str:
    """A split as tables name it (a split named `test_<x>` by its task shows as `<x>`)."""
    return split.removeprefix(TEST)


def _recorded(rows: list[dict[str, Any]], key: str) -> Any:
    """The first value the cell runs record for a schema column (None for older records)."""
    for r in rows:
        v = r.get(key)
        if not _is_missing(v):
            return v
    return None


def _task_tables(cell_rows: list[dict[str, Any]], runs: Any) -> dict[str, tuple]:
    """Per task label: (metric, direction, [(split, metric column)]) — as the cell runs record them,
    else inferred from the runs' metric columns (older records, without those tags)."""
    out = {}
    for task_label in sorted({r["task_label"] or "" for r in cell_rows}):
        rows = [r for r in cell_rows if (r["task_label"] or "") == task_label]
        metric, tests = _recorded(rows, Col.METRIC), _recorded(rows, Col.TEST_SPLITS)
        metric = None if metric is None else str(metric).removeprefix(valid_metric(""))
        if metric is not None and tests is not None:
            splits = [_scored_split(t, metric, runs) for t in json.loads(tests)]
        else:  # an older record, or cells not run yet (their study gives the metric, not the splits)
            task_runs = runs[runs[Col.CELL].isin({r[Col.CELL] for r in rows})] if len(runs) else runs.iloc[0:0]
            metric = metric or _metric_of(task_runs) or "acc"
            splits = _splits_of(task_runs, metric)
        direction = metric_direction(metric, _recorded(rows, Col.DIRECTION))
        out[task_label] = (metric, direction, [("valid", metric_col(best_valid(metric)))] + splits)
    return out


# A test split scored by correlation, not by the task's metric (SentEval's STS/SICK-R in a transfer
# task whose metric is accuracy): its column shows Pearson r on the metric's scale (× 100 for
# accuracy, as `tprbench transfer` and the papers' Table 3 print it), and says so.
CORRELATION_METRICS = ("pearson",)


def _scored_split(split: str, metric: str, runs: Any) -> tuple[str, str]:
    col = metric_col(test_metric(split, metric))
    if len(runs) and col not in runs.columns:
        for alt in CORRELATION_METRICS:
            if metric_col(test_metric(split, alt)) in runs.columns:
                scale = metric_scale(metric)[0]
                return f"{_display(split)} ({alt}{' ×100' if scale == 100 else ''})", metric_col(test_metric(split, alt))
    return _display(split), col


def _present(v: Any) -> bool:
    return not _is_missing(v)


def _search_stats(search: list[dict[str, Any]], metric: str, direction: str) -> dict[str, Any]:
    """Search-phase statistics of one cell from its search runs (dicts): the best trial is the
    first with the best value in trial order (as pandas' idxmax/idxmin over trials sorted stably)."""
    best_col = metric_col(best_valid(metric))
    s_fin = [r for r in search if r.get(Col.STATUS) == RunStatus.FINISHED]
    best_search, best_trial = float("nan"), None
    vals = [r for r in s_fin if _present(r.get(best_col))]
    if vals:
        vals.sort(key=lambda r: (0, float(r[Col.TRIAL])) if _present(r.get(Col.TRIAL)) else (1, 0.0))
        best = vals[0]
        for r in vals[1:]:
            if (r[best_col] < best[best_col]) if direction == MINIMIZE else (r[best_col] > best[best_col]):
                best = r
        best_search, best_trial = float(best[best_col]), best.get(Col.TRIAL)
    return {
        "trials": len(search),
        "trials_finished": len(s_fin),
        "trials_pruned": sum(r.get(Col.STATUS) == RunStatus.PRUNED for r in search),
        "trials_failed": sum(bool(is_failure(r.get(Col.STATUS))) for r in search),
        "best_search": best_search,
        "best_trial": None if _is_missing(best_trial) else int(best_trial),
    }


def _first_count(rows: list[dict[str, Any]], col: str) -> int | None:
    """A parameter count as the runs record it (tag, else the final metric)."""
    for c in (col, metric_col(col)):
        for r in rows:
            if _present(r.get(c)):
                return int(r[c])
    return None


def _summaries(finished: list[dict[str, Any]]) -> str:
    """Means over the counted finished runs of the metrics a task logs over its test splits
    (`TaskAdapter.summarize_tests`, logged as test_summary_<name>): JSON {name: mean}."""
    names = sorted({k for r in finished for k in r if _summary_name(k) is not None})
    out = {}
    for key in names:
        vals = [float(r[key]) for r in finished if _present(r.get(key))]
        if vals:
            out[_summary_name(key)] = sum(vals) / len(vals)
    return json.dumps(out, sort_keys=True)


def _summary_name(col: str) -> str | None:
    """The name of a `metric.test_summary_<name>` column (a task's summary over its test splits)."""
    return split_metric(metric_of(col) or "", SUMMARY_SPLIT)


def _by_seed(finished: list[dict[str, Any]], col: str) -> str:
    """JSON {seed: value} of one metric column over the counted finished runs (reports that pair
    seeds across cells, e.g. bAbI's per-run mean error over single-task models, read it)."""
    pairs = [(int(r[Col.SEED]), float(r[col])) for r in finished if _present(r.get(col))]
    return json.dumps(dict(sorted(pairs)), sort_keys=True)


def mean_std(vals: list[float]) -> tuple[float, float]:
    """Mean and sample std (ddof=1; NaN when undefined) exactly as numpy computes them: for
    fewer than 8 values numpy adds them in order (its pairwise sum starts at 8), so the same
    loop in Python gives the same bits at a twentieth of the cost of two numpy calls — which
    were 4 of a 100k-run report's seconds (tests/test_report.py checks the equality)."""
    n = len(vals)
    if not n:
        return float("nan"), float("nan")
    if n >= 8:
        import numpy as np

        arr = np.asarray(vals, dtype=float)
        return float(np.mean(arr)), float(np.std(arr, ddof=1))
    total = 0.0
    for v in vals:
        total += v
    mean = total / n
    if n == 1:
        return mean, float("nan")
    sq = 0.0
    for v in vals:
        d = v - mean
        sq += d * d
    return mean, math.sqrt(sq / (n - 1))


def _cell_base(
    order: int, cell: dict[str, Any], mine: list[dict[str, Any]], cur: list[dict[str, Any]], seeds_wanted: int, table: tuple, columns: UnitColumns
) -> dict:
    """The per-cell columns of the aggregated frame (shared by its split rows), from the cell's
    runs and counted runs as dicts: plain Python, since a dozen pandas operations on each
    cell's small frames cost ~40 ms a cell — minutes at 5,000 cells."""
    metric, direction, _ = table
    finished = sum(r.get(Col.STATUS) == RunStatus.FINISHED for r in cur)
    # Errored seeds are not results (tasks/result.py): counted apart, shown as missing, never as †.
    errored = [r for r in cur if r.get(Col.STATUS) == RunStatus.ERRORED]
    # Paused seeds (`run --until-epoch`) give their best model so far: averaged, and marked §.
    paused = [r for r in cur if r.get(Col.STATUS) == RunStatus.PAUSED]
    failed = [r for r in cur if r.get(Col.STATUS) not in (RunStatus.FINISHED, RunStatus.ERRORED, RunStatus.PAUSED)]
    valued = [r for r in cur if r.get(Col.STATUS) in (RunStatus.FINISHED, RunStatus.PAUSED)]
    present = {int(r[Col.SEED]) for r in cur}
    missing = [s for s in range(seeds_wanted) if s not in present]
    search = [r for r in mine if r.get(Col.PHASE) == Phase.SEARCH]
    commits = sorted({str(r[Col.GIT_COMMIT]) for r in cur + search if _present(r.get(Col.GIT_COMMIT))})
    reasons = [f"seed {int(r[Col.SEED])}: {r[Col.REASON]}" for r in failed if _present(r.get(Col.REASON))]
    errored_reasons = [f"seed {int(r[Col.SEED])}: {r[Col.REASON]}" for r in errored if _present(r.get(Col.REASON))]
    counts = cur + mine if cur else mine
    return {
        "order": order,
        "cell_id": cell[Col.CELL],
        "task": cell.get(Col.TASK),
        "task_label": cell["task_label"],
        "label": cell.get(Col.LABEL),
        "arch": cell.get(Col.ARCH),
        "dim": cell.get(Col.DIM),
        "input_dim": cell.get(Col.INPUT_DIM),
        "unit": cell.get(Col.UNIT),
        "unit_short": cell["unit_short"],
        "unit_name": cell["unit_name"],
        "unit_canonical": cell.get(Col.UNIT_CANONICAL),
        **{c: cell[c] for c in columns.report},
        "task_options": cell.get(Col.TASK_OPTIONS),
        "summary": _summaries(valued),
        "metric": metric,
        "direction": direction,
        "seeds_wanted": seeds_wanted,
        "seeds_finished": finished,
        "seeds_failed": len(failed),
        "seeds_missing": len(missing),
        "seeds_errored": len(errored),
        "failed_seeds": ",".join(str(int(r[Col.SEED])) for r in failed),
        "missing_seeds": ",".join(map(str, missing)),
        "errored_seeds": ",".join(str(int(r[Col.SEED])) for r in errored),
        "seeds_paused": len(paused),
        "paused_reasons": "; ".join(f"seed {int(r[Col.SEED])} {r[Col.REASON]}" for r in paused if _present(r.get(Col.REASON))),
        "failure_reasons": "; ".join(reasons),
        "errored_reasons": "; ".join(errored_reasons),
        "params_formula": _first_count(counts, "params_formula"),
        "params_total": _first_count(counts, "params_total"),
        "final_params": None if _is_missing(cell.get(Col.FINAL_PARAMS)) else cell.get(Col.FINAL_PARAMS),
        "final_params_hash": None if _is_missing(cell.get(Col.FINAL_PARAMS_HASH)) else cell.get(Col.FINAL_PARAMS_HASH),
        **_search_stats(search, metric, direction),
        "git_commits": ",".join(commits),
        # the epoch each finished seed kept (its best validation epoch): bAbI's "epochs to convergence"
        "best_epochs": _by_seed(valued, metric_col(BEST_EPOCH)),
    }


def _run_columns(frame: Any, tables: dict[str, tuple]) -> list[str]:
    """The runs' columns the per-cell statistics read (`_cell_base`, the split means): a 100k-run
    record has ~50, most of them hyperparameters no table shows."""
    wanted = {
        Col.CELL,
        Col.STATUS,
        Col.PHASE,
        Col.SEED,
        Col.TRIAL,
        Col.GIT_COMMIT,
        Col.REASON,
        PARAMS_FORMULA,
        PARAMS_TOTAL,
        metric_col(PARAMS_FORMULA),
        metric_col(PARAMS_TOTAL),
        metric_col(BEST_EPOCH),
    }
    wanted.update(col for _metric, _direction, splits in tables.values() for _split, col in splits)
    wanted.update(metric_col(best_valid(metric)) for metric, _direction, _splits in tables.values())
    return [c for c in frame.columns if c in wanted or _summary_name(c) is not None]


def _records_by_cell(frame: Any, columns: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in records(frame, columns) if len(frame) else []:
        out.setdefault(rec[Col.CELL], []).append(rec)
    return out


def aggregate(runs: Any, cells: Any, seeds_wanted: int | None = None, *, any_params: bool = False) -> Any:
    """One row per cell × split: mean, std (ddof=1), n; seeds finished/failed/missing; parameter
    counts; best hyperparameters; search statistics. Rows sorted by a fixed key (`order`)."""
    import pandas as pd

    if seeds_wanted is None:
        seeds_wanted = infer_seeds(runs)
    counted = counted_runs(runs, cells, seeds_wanted, any_params)
    cell_rows = records(cells)
    unit_cols = unit_columns_of({parse_unit(r.get(Col.UNIT) or "")[0] for r in cell_rows})
    for r in cell_rows:
        r.update(unit_columns(r.get(Col.UNIT) or "", r.get(Col.UNIT_CANONICAL), unit_cols))
        label = r.get(Col.LABEL) or ""
        r["task_label"] = label.split("/", 1)[0] if "/" in label else r.get(Col.TASK)
    cell_rows.sort(key=lambda r: _sort_key(r, unit_cols))
    tables = _task_tables(cell_rows, runs)

    columns = _run_columns(runs, tables)
    runs_recs, counted_recs = _records_by_cell(runs, columns), _records_by_cell(counted, columns)
    out = []
    for order, cell in enumerate(cell_rows):
        cid = cell[Col.CELL]
        table = tables[cell["task_label"] or ""]
        cur = counted_recs.get(cid, [])
        base = _cell_base(order, cell, runs_recs.get(cid, []), cur, seeds_wanted, table, unit_cols)
        finished = [r for r in cur if r.get(Col.STATUS) in (RunStatus.FINISHED, RunStatus.PAUSED)]  # paused: best so far (§)
        for split_order, (split, col) in enumerate(table[2]):
            vals = [float(r[col]) for r in finished if _present(r.get(col))]
            n = len(vals)
            mean, std = mean_std(vals)
            out.append(
                {
                    **base,
                    "split": split,
                    "split_order": split_order,
                    "metric_key": metric_of(col),
                    "mean": mean,
                    "std": std,
                    "n": n,
                    "by_seed": _by_seed(finished, col),
                }
            )
    df = pd.DataFrame(out)
    if len(df):
        for col in ("dim", "input_dim", *unit_cols.report, "params_formula", "params_total", "best_trial"):
            df[col] = pd.array([None if _is_missing(v) else int(v) for v in df[col]], dtype="Int64")
    return df


def search_frame(df: Any) -> Any:
    """Search-phase statistics, one row per cell."""
    import pandas as pd

    cols = [
        "cell_id",
        "label",
        "metric",
        "trials",
        "trials_finished",
        "trials_pruned",
        "trials_failed",
        "best_search",
        "best_trial",
        "final_params_hash",
        "final_params",
    ]
    if df is None or not len(df):
        return pd.DataFrame(columns=cols)
    out = df.sort_values(["order"], kind="stable").drop_duplicates(Col.CELL)[cols].reset_index(drop=True)
    return out.rename(columns={"best_search": "best_valid"})
