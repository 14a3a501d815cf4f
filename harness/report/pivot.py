"""A pivot of test splits × models, the layout of bAbI papers: one row per task (test split), one
column per model, mean error and the number of failed tasks at the bottom, published numbers
beside them.

A column ("model") is arch × d × unit × the task options other than which tasks were trained;
its cells may each cover one split (single-task models: one cell per task) or all of them (an
all-task model). Seed s of every cell of a column is run s of that model: the bottom rows are
computed per run (mean error over the rows, failures = rows above `fail_above`) and then
averaged over the runs complete on every row, as the papers do. Values come from the
aggregated frame's per-seed column (`by_seed`); accuracy is shown as error = 100 − 100·acc.
"""

from __future__ import annotations

import json
import re
import statistics
from typing import Any

from ..record.contract import Col
from .aggregate import _is_missing

SPLIT_RE = re.compile(r"^qa(\d+)$")
DASH = "–"


def _error_values(by_seed: str, metric: str) -> dict[int, float]:
    values = {int(k): float(v) for k, v in json.loads(by_seed or "{}").items()}
    if metric == "acc":
        return {s: 100.0 * (1.0 - v) for s, v in values.items()}
    return values  # "error" is already in %


def _stat(values: list[float], digits: int = 2) -> str:
    if not values:
        return DASH
    mean = f"{statistics.fmean(values) + 0.0:.{digits}f}"
    std = f"{statistics.stdev(values) + 0.0:.{digits}f}" if len(values) > 1 else DASH
    return f"{mean} ± {std}"


#: Task options that say which rows a cell fills, not which model it is (a fallback is marked per row).
ROW_OPTIONS = ("tasks", "fallback_1k")


def _options_key(task_options: Any) -> str:
    """The task options that make two cells different models (all but `ROW_OPTIONS`)."""
    try:
        opts = json.loads(task_options) if isinstance(task_options, str) else dict(task_options or {})
    except (TypeError, ValueError):
        return ""
    return json.dumps({k: v for k, v in sorted(opts.items()) if k not in ROW_OPTIONS}, sort_keys=True)


class _Column:
    """One model: its rows' per-seed errors and the marks of its cells."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: dict[str, dict[int, float]] = {}
        self.marks: dict[str, str] = {}
        self.fallbacks: set[str] = set()
        self.epochs: dict[str, dict[int, float]] = {}  # split → {seed: the best validation epoch}


def _pivot_cells(df: Any) -> list[tuple[Any, Any, tuple]]:
    """(the cell's first row, its qa test rows, its model key) per cell with qa splits, in cell order."""
    out = []
    for _, cell in df.sort_values(["order", "split_order"], kind="stable").groupby("order", sort=True):
        first = cell.iloc[0]
        tests = cell[cell["split"].map(lambda s: bool(SPLIT_RE.match(str(s))))]
        if str(first[Col.METRIC]) not in ("acc", "error") or not len(tests):
            continue
        setting = "all-task" if len(tests) > 1 else "single-task"
        key = (setting, _options_key(first.get(Col.TASK_OPTIONS)), str(first[Col.ARCH]), first[Col.DIM], str(first[Col.UNIT]))
        out.append((first, tests, key))
    return out


def _arm_keys(cells: list[tuple[Any, Any, tuple]]) -> set[tuple]:
    """Model keys whose cells cover one split twice under different task labels: arms of one study
    that differ in what the task entry sets (its `search`, `epochs`), e.g. babi-qa17-isolate's six
    qa17 loops. Such a key's columns are split by arm (`_arm`), so no arm hides another's row."""
    labels: dict[tuple, dict[str, set[str]]] = {}
    for first, tests, key in cells:
        for split in tests["split"]:
            labels.setdefault(key, {}).setdefault(str(split), set()).add(str(first.get("task_label") or ""))
    return {key for key, by_split in labels.items() if any(len(ls) > 1 for ls in by_split.values())}


def _arm(task_label: str, splits: list[str]) -> str:
    """A cell's arm: its task label less the name of its one split ("qa17-stream" → "stream",
    "qa1" → ""), so a study's per-task labels (qa1 … qa20) stay one column and its arms get one each."""
    if len(splits) == 1 and task_label.startswith(splits[0]):
        return task_label[len(splits[0]) :].lstrip("-_ :")
    return task_label


def _columns(df: Any, notes: list[str]) -> list[_Column]:
    """Model columns in the frame's cell order, each with its splits' per-seed errors."""
    columns: dict[tuple, _Column] = {}
    cells = _pivot_cells(df)
    arms = _arm_keys(cells)
    for first, tests, key in cells:
        metric = str(first[Col.METRIC])
        setting = key[0]
        title = f"{first[Col.ARCH]} · {first['unit_short']} · d={first[Col.DIM]} ({setting})"
        arm = _arm(str(first.get("task_label") or ""), [str(x) for x in tests["split"]]) if key in arms else ""
        if arm:
            key, title = key + (arm,), f"{title} · {arm}"
        col = columns.get(key)
        if col is None:
            col = columns[key] = _Column(title)
        marks = ("†" if first["seeds_failed"] else "") + ("‡" if first["seeds_missing"] else "")
        summary = json.loads(first.get("summary") or "{}") if not _is_missing(first.get("summary")) else {}
        for _, row in tests.iterrows():
            split = str(row["split"])
            if split in col.rows:
                notes.append(f"{col.title}: {split} is covered by two cells; the first ({split} of an earlier cell) is shown")
                continue
            col.rows[split] = _error_values(row.get("by_seed"), metric)
            col.epochs[split] = {int(k): float(v) for k, v in json.loads(row.get("best_epochs") or "{}").items()}
            col.marks[split] = marks
            if summary.get(f"fallback_1k_{split}"):
                col.fallbacks.add(split)
    return list(columns.values())


def _summary_rows(cols: list[_Column], splits: list[str], fail_above: float, notes: list[str]) -> tuple[list[str], list[str]]:
    """The bottom rows: per run (seed) mean error and failures over the column's rows, then mean ± std."""
    mean_row, fail_row = ["mean error"], [f"failed (> {fail_above:g}%)"]
    for col in cols:
        rows = [s for s in splits if s in col.rows]
        seeds = sorted(set.intersection(*(set(col.rows[s]) for s in rows))) if rows else []
        runs = [[col.rows[s][seed] for s in rows] for seed in seeds]
        mean_row.append(_stat([statistics.fmean(r) for r in runs]))
        fail_row.append(_stat([float(sum(e > fail_above for e in r)) for r in runs]))
        partial = [s for s in rows if set(col.rows[s]) - set(seeds)]
        if partial:
            notes.append(f"{col.title}: bottom rows over the {len(seeds)} run(s) complete on every task ({', '.join(partial)} have more seeds)")
        if len(rows) < len(splits):
            notes.append(f"{col.title}: bottom rows over its {len(rows)} of {len(splits)} tasks")
    return mean_row, fail_row


def split_pivot(
    df: Any, references: dict[str, dict[str, str]] | None = None, fail_above: float = 5.0, label: str = "babi"
) -> tuple[list[str], list[list[str]], list[str]] | None:
    """(columns, rows, footnotes) of the splits × models table, or None when no cell has a qa split.

    Cells read "mean ± std over seeds" of the test error (%) at each cell's best epoch."""
    notes: list[str] = []
    cols = _columns(df, notes)
    if not cols:
        return None
    splits = sorted({s for c in cols for s in c.rows}, key=lambda s: int(SPLIT_RE.match(s).group(1)))
    refs = references or {}
    header = ["task"] + [c.title for c in cols] + list(refs)
    rows = []
    for split in splits:
        mark = "¹" if any(split in c.fallbacks for c in cols) else ""
        row = [split + mark]
        for col in cols:
            values = list(col.rows.get(split, {}).values())
            row.append(_stat(values) + col.marks.get(split, "") if split in col.rows else DASH)
        rows.append(row + [ref.get(split, DASH) for ref in refs.values()])
    mean_row, fail_row = _summary_rows(cols, splits, fail_above, notes)
    rows.append(mean_row + [ref.get("mean error", DASH) for ref in refs.values()])
    rows.append(fail_row + [ref.get("failed", DASH) for ref in refs.values()])
    fell_back = sorted({s for c in cols for s in c.fallbacks}, key=lambda s: int(s[2:]))
    if fell_back:
        notes.insert(0, f"¹ {', '.join(fell_back)}: trained on the 1k train file (no 10k file in the data), so not comparable with 10k numbers")
    if any("†" in m for c in cols for m in c.marks.values()):
        notes.append("† some seeds of that cell diverged: mean over the finished ones")
    if any("‡" in m for c in cols for m in c.marks.values()):
        notes.append("‡ some seeds of that cell are missing")
    return header, rows, notes


def epochs_pivot(df: Any) -> tuple[list[str], list[list[str]]] | None:
    """(columns, rows) of the same splits × models, each cell the epoch its seeds kept (their best
    validation epoch: "epochs to convergence"), mean ± std over seeds; an all-task model's epoch
    repeats on every row. None when no cell has a qa split or no seed recorded its epoch."""
    cols = _columns(df, [])
    if not cols or not any(v for c in cols for v in c.epochs.values()):
        return None
    splits = sorted({s for c in cols for s in c.rows}, key=lambda s: int(SPLIT_RE.match(s).group(1)))
    rows = []
    for split in splits:
        mark = "¹" if any(split in c.fallbacks for c in cols) else ""
        rows.append([split + mark] + [_stat(list(c.epochs.get(split, {}).values()), 1) if c.epochs.get(split) else DASH for c in cols])
    return ["task"] + [c.title for c in cols], rows
