"""Render: the aggregated frame laid out like the papers (`sections`) and written as Markdown,
LaTeX (booktabs) or CSV by one `make_table`, or as rich tables on the console.

Determinism: the same frame gives the same text — rows sorted by a fixed key, numbers in fixed formats.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tasks.meta import ReportLayout
from tasks.metrics import MAXIMIZE, get_metric, metric_direction, metric_scale
from tasks.registry import get_task, task_meta

from ..record.contract import Col
from .aggregate import UnitColumns, _is_missing, records, unit_columns_of
from .pivot import epochs_pivot, split_pivot

DASH = "–"

# -- layout: one section per task, the papers' columns ----------------------------------------

GENERIC = ReportLayout()


@functools.lru_cache(maxsize=256)
def report_layout(task: Any) -> ReportLayout:
    """The layout a task's metadata names (`TaskMeta.report_layout`); the generic one where the
    task's code cannot be loaded (a report reads the record even where a plug-in task is not
    installed). Looking a plug-in task up also imports its module, which registers its metrics."""
    if not isinstance(task, str) or not task:
        return GENERIC
    try:
        return getattr(task_meta(task), "report_layout", GENERIC)
    except Exception:  # gone, or fails to import: laid out generically
        return GENERIC


def _num(v: Any, scale: float, digits: int) -> str:
    if _is_missing(v) or (isinstance(v, float) and math.isnan(v)):
        return DASH
    x = round(float(v) * scale, digits)
    return f"{x + 0.0:.{digits}f}"  # + 0.0: never print -0.0


def format_cell(mean: Any, std: Any, n: int, metric: str) -> str:
    """'87.3 ± 1.2'; one seed: '87.3 ± –'; no finished seed: '–'."""
    if not n:
        return DASH
    scale, digits, _ = metric_scale(metric)
    return f"{_num(mean, scale, digits)} ± {_num(std, scale, digits)}"


def _count(v: Any) -> str:
    return DASH if _is_missing(v) else f"{int(v):,}"


@dataclass
class Section:
    """One rendered table: plain-text cells with markers (renderers escape for their format)."""

    task_label: str
    layout: str
    title: str
    columns: list[str]
    align: list[str]  # "l" | "r" per column
    rows: list[list[str]]
    footnotes: list[str] = field(default_factory=list)
    search_columns: list[str] = field(default_factory=list)
    search_rows: list[list[str]] = field(default_factory=list)
    best: set[tuple[int, int]] = field(default_factory=set)  # (row, column) of the best value per split column


def _best_cells(cells: list[Any], splits: list[str], offset: int, metric: str, direction: str) -> set[tuple[int, int]]:
    """The best mean of each split column as displayed (rounded: ties all count), by the metric's direction."""
    scale, digits, _ = metric_scale(metric)
    best: set[tuple[int, int]] = set()
    for j, split in enumerate(splits):
        shown = {}
        for i, c in enumerate(cells):
            g = next((row for row in c if row["split"] == split), None)
            if g is not None and int(g["n"]) and not _is_missing(g["mean"]):
                shown[i] = round(float(g["mean"]) * scale, digits)
        if len(shown) < 2:
            continue
        top = (max if direction == MAXIMIZE else min)(shown.values())
        best |= {(i, offset + j) for i, v in shown.items() if v == top}
    return best


def _references(task: str) -> dict[str, dict[str, str]]:
    """Published numbers a task declares (`TaskAdapter.references`); none when it cannot be loaded."""
    try:
        return dict(getattr(get_task(task), "references", {}) or {})
    except Exception:  # a report reads the record even where the task's code is not installed
        return {}


def pivot_sections(df: Any) -> list[Section]:
    """bAbI-style tables (harness/report/pivot.py): test splits × models, error (%), mean error
    and failed tasks at the bottom, the task's published numbers beside them."""
    out = []
    part = df[df[Col.TASK].map(lambda t: report_layout(t).pivot)]
    for task in sorted(part[Col.TASK].dropna().unique()):
        layout = report_layout(task).name
        made = split_pivot(part[part[Col.TASK] == task], _references(task))
        if made is None:
            continue
        columns, rows, notes = made
        title = (
            f"{task}: test error (%) per task, mean ± std over seeds at each run's best validation epoch; seed s "
            "of every cell of a column is run s of that model, whose mean error and failed tasks (error > 5%) "
            "are then averaged over runs. arch plain = a sentence-level baseline (a unit over sentence "
            "vectors), not the papers' word-level LSTM"
        )
        out.append(Section(f"{task} per task", layout, title, columns, ["l"] + ["r"] * (len(columns) - 1), rows, notes))
        epochs = epochs_pivot(part[part[Col.TASK] == task])
        if epochs is not None:
            head, erows = epochs
            out.append(
                Section(
                    f"{task} epochs",
                    layout,
                    f"{task}: epochs to convergence per task: the epoch each seed "
                    "kept (its best validation accuracy), mean ± std over the finished seeds",
                    head,
                    ["l"] + ["r"] * (len(head) - 1),
                    erows,
                    [],
                )
            )
    return out


def _by_order(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows (dicts, sorted by order and split order) grouped per cell, in order. Plain Python:
    a pandas group and `.iloc` per cell cost milliseconds each — minutes at 5,000 cells."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for rec in records:
        groups.setdefault(rec["order"], []).append(rec)
    return [groups[k] for k in sorted(groups)]


def sections(df: Any) -> list[Section]:
    """The aggregated frame laid out like the papers: pivots of splits × models where a task's
    layout has one (bAbI), then one section per task (by task label)."""
    if df is None or not len(df):
        return []
    df = df.sort_values(["order", "split_order"], kind="stable")
    unit_cols = _unit_columns_in(df)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for rec in records(df):
        by_task.setdefault("" if _is_missing(rec["task_label"]) else rec["task_label"], []).append(rec)
    return pivot_sections(df) + [_task_section(label, by_task[label], unit_cols) for label in sorted(by_task)]


@dataclass
class _Table:
    """What one task's section is laid out by: its layout, metric and splits, its cells (rows of
    the frame grouped per cell) and the optional key columns it shows."""

    layout: ReportLayout
    metric: str
    direction: str | None  # as recorded
    splits: list[str]
    cells: list[list[dict[str, Any]]]
    show_input: bool  # a d' column: some cell's input size differs from its size
    unit_columns: list[str]  # unit options shown in columns of their own (taken out of the unit's spec)

    @classmethod
    def of(cls, part: list[dict[str, Any]], unit_cols: UnitColumns) -> _Table:
        first, cells = part[0], _by_order(part)
        layout = report_layout(first[Col.TASK])  # first: a plug-in task's module registers its metrics
        show_input = any(
            int(c[0][Col.INPUT_DIM]) != int(c[0][Col.DIM]) for c in cells if not _is_missing(c[0][Col.INPUT_DIM]) and not _is_missing(c[0][Col.DIM])
        )
        shown = [
            c
            for c in dict.fromkeys((*unit_cols.table, *layout.unit_columns))
            if c in layout.unit_columns or any(not _is_missing(cell[0].get(c)) for cell in cells)
        ]
        return cls(layout, str(first[Col.METRIC]), first.get(Col.DIRECTION), list(dict.fromkeys(r["split"] for r in part)), cells, show_input, shown)

    @property
    def keys(self) -> list[str]:
        return ["arch", "d"] + (["d'"] if self.show_input else []) + ["unit"] + self.unit_columns

    def split_titles(self) -> list[str]:
        """The split columns' titles: the split, with the metric's abbreviation where the layout
        names the metric there (the LM papers' "test ppl")."""
        registered = get_metric(self.metric)
        abbrev = registered.abbrev if registered and self.layout.metric_in_split_columns else ""
        return [f"{s} {abbrev}" if abbrev else s for s in self.splits]

    def row(self, cell: list[dict[str, Any]]) -> list[str]:
        r = cell[0]
        unit = r["unit_short"] if self.unit_columns else r[Col.UNIT]
        errored = int(r.get("seeds_errored") or 0)
        paused = int(r.get("seeds_paused") or 0)
        marks = ("†" if r["seeds_failed"] else "") + ("‡" if r["seeds_missing"] or errored else "") + ("§" if paused else "")
        vals = {g["split"]: format_cell(g["mean"], g["std"], int(g["n"]), self.metric) for g in cell}
        row = [str(r[Col.ARCH]), _count(r[Col.DIM])] + ([_count(r[Col.INPUT_DIM])] if self.show_input else [])
        row += [f"{unit}{marks}"] + [_count(r.get(c)) for c in self.unit_columns]
        row += [vals.get(s, DASH) for s in self.splits]
        return row + [_count(r[Col.PARAMS_FORMULA]), _count(r[Col.PARAMS_TOTAL]), f"{r['seeds_finished'] + paused}/{r['seeds_wanted']}"]

    def search_row(self, r: dict[str, Any]) -> list[str]:
        params = r[Col.FINAL_PARAMS]
        try:
            params = ", ".join(f"{k}={_short(v)}" for k, v in sorted(json.loads(params).items())) if params else DASH
        except (TypeError, ValueError):
            params = str(params)
        return [
            str(r[Col.LABEL]),
            f"{r['trials']}",
            f"{r['trials_pruned']}",
            f"{r['trials_failed']}",
            _num(r["best_search"], *metric_scale(self.metric)[:2]),
            _count(r["best_trial"]),
            params,
        ]


def _task_section(task_label: str, part: list[dict[str, Any]], unit_cols: UnitColumns) -> Section:
    """One task's table: a row per cell (key columns, a mean ± std per split, parameter counts,
    seeds), footnotes for failed, missing, paused and errored seeds, and the search table beside it."""
    t = _Table.of(part, unit_cols)
    keys = t.keys
    columns = keys + t.split_titles() + ["# params", "# params (total)", "seeds"]
    align = ["l" if k in ("arch", "unit") else "r" for k in keys] + ["r"] * (len(columns) - len(keys))
    rows = [t.row(c) for c in t.cells]
    notes = [note for c in t.cells for note in _footnotes(c[0])]
    srows = [t.search_row(c[0]) for c in t.cells]
    desc = metric_scale(t.metric, t.direction)[2]
    title = f"{task_label}: {desc}, mean ± std over seeds; valid = the best epoch's validation score"
    best = _best_cells(t.cells, t.splits, len(keys), t.metric, metric_direction(t.metric, t.direction))
    return Section(
        task_label,
        t.layout.name,
        title,
        columns,
        align,
        rows,
        notes,
        ["cell", "trials", "pruned", "failed", f"best valid {t.metric}", "best trial", "best hyperparameters"],
        srows,
        best,
    )


def _footnotes(r: dict[str, Any]) -> list[str]:
    """A cell's footnotes: † seeds that diverged, ‡ seeds missing, § seeds paused (their best so
    far), ‡ seeds errored (not results)."""
    where = f"{r[Col.LABEL]} ({r[Col.CELL]})"
    notes = []
    if r["seeds_failed"]:
        why = f"; {r['failure_reasons'][:160]}" if r["failure_reasons"] else ""
        notes.append(
            f"† {where}: {r['seeds_failed']} of {r['seeds_wanted']} seeds diverged "
            f"(failed {_seeds(r['failed_seeds'])}{why}); mean over the {r['seeds_finished']} finished"
        )
    if r["seeds_missing"]:
        state = "search not finished" if _is_missing(r[Col.FINAL_PARAMS_HASH]) else "not yet run"
        notes.append(f"‡ {where}: {r['seeds_missing']} of {r['seeds_wanted']} seeds missing ({_seeds(r['missing_seeds'])}: {state})")
    paused = int(r.get("seeds_paused") or 0)
    if paused:
        notes.append(
            f"§ {where}: {paused} of {r['seeds_wanted']} seeds paused, their numbers the best "
            f"so far ({r['paused_reasons'][:160]}); the next `tprbench run` continues them"
        )
    errored = int(r.get("seeds_errored") or 0)
    if errored:
        why = f"; {r['errored_reasons'][:160]}" if r["errored_reasons"] else ""
        notes.append(
            f"‡ {where}: {errored} of {r['seeds_wanted']} seeds errored, not a result "
            f"({_seeds(r['errored_seeds'])}{why}); `tprbench run` retries them"
        )
    return notes


def _seeds(text: str) -> str:
    return ("seeds " if "," in text else "seed ") + text.replace(",", ", ")


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# -- rendering ---------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_TEX_SYMBOLS = {"±": r"$\pm$", "†": r"\textsuperscript{\dag}", "‡": r"\textsuperscript{\ddag}", "§": r"\S{}", "–": "--", "×": r"$\times$", "'": "'"}


def tex_escape(text: str) -> str:
    out = "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)
    for sym, rep in _TEX_SYMBOLS.items():
        out = out.replace(sym, rep)
    return out


def _header(fmt: str, header: Iterable[str] | None) -> list[str]:
    prefix = {"markdown": "<!-- {} -->", "latex": "% {}", "csv": "# {}"}[fmt]
    return [prefix.format(h.replace("-->", "-- >")) for h in (header or [])]


def _fmt(fmt: str) -> str:
    f = fmt.lower()
    f = {"md": "markdown", "tex": "latex"}.get(f, f)
    if f not in ("markdown", "latex", "csv"):
        raise ValueError(f"unknown table format {fmt!r}: use markdown, latex or csv")
    return f


def make_table(df: Any, fmt: str, header: Iterable[str] | None = None, study: str | None = None, secs: list[Section] | None = None) -> str:
    """Render the aggregated frame as Markdown, LaTeX (booktabs) or CSV (raw numbers). Markdown and
    LaTeX start with the `header` lines as comments; CSV never has comment lines (it must load with
    a plain `pandas.read_csv` or a spreadsheet: provenance goes beside it). LaTeX labels name the
    `study` and the task, and the best value of each column is bold. Deterministic: same frame → same text."""
    fmt = _fmt(fmt)
    if fmt == "csv":
        return wide_frame(df).to_csv(index=False, float_format="%.10g", lineterminator="\n").rstrip("\n") + "\n"
    lines = _header(fmt, header)
    for sec in sections(df) if secs is None else secs:  # `secs`: sections(df) already laid out by the caller
        lines += _markdown(sec) if fmt == "markdown" else _latex(sec, study)
    return "\n".join(lines).rstrip("\n") + "\n"


def _markdown(sec: Section) -> list[str]:
    lines = [f"## {sec.task_label}", "", sec.title, ""]
    lines.append("| " + " | ".join(_md_escape(c) for c in sec.columns) + " |")
    lines.append("|" + "|".join(":---" if a == "l" else "---:" for a in sec.align) + "|")
    lines += ["| " + " | ".join(_md_escape(v) for v in row) + " |" for row in sec.rows]
    if sec.footnotes:
        lines += [""] + [f"- {_md_escape(n)}" for n in sec.footnotes]
    if not sec.search_columns:
        return lines + [""]
    lines += ["", f"### {sec.task_label}: search", ""]
    lines.append("| " + " | ".join(sec.search_columns) + " |")
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(sec.search_columns) - 2) + [":---"]) + "|")
    lines += ["| " + " | ".join(_md_escape(v) for v in row) + " |" for row in sec.search_rows]
    lines.append("")
    return lines


def tex_label(study: str | None, task_label: str) -> str:
    """`tab:<study>-<task>`: unique when several studies' tables go into one paper."""
    return "tab:" + "-".join(re.sub(r"[^A-Za-z0-9]+", "-", p).strip("-") for p in (study, task_label) if p)


def _latex(sec: Section, study: str | None = None) -> list[str]:
    lines = [f"% {sec.task_label}", r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{" + "".join(sec.align) + "}", r"\toprule"]
    lines.append(" & ".join(tex_escape(c) for c in sec.columns) + r" \\")
    lines.append(r"\midrule")
    prev_arch = None
    for i, row in enumerate(sec.rows):
        if prev_arch is not None and row[0] != prev_arch:
            lines.append(r"\midrule")
        prev_arch = row[0]
        cells = [r"\textbf{" + tex_escape(v) + "}" if (i, j) in sec.best else tex_escape(v) for j, v in enumerate(row)]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    caption = tex_escape(sec.title) + ("; best per column in bold." if sec.best else "")
    if sec.footnotes:
        caption += " " + " ".join(tex_escape(n) + "." for n in sec.footnotes)
    lines += [r"\caption{" + caption + "}", r"\label{" + tex_label(study, sec.task_label) + "}", r"\end{table}", ""]
    return lines


def _unit_columns_in(df: Any) -> UnitColumns:
    """The unit columns of an aggregated frame: every built-in unit's, and its plug-in units'."""
    return unit_columns_of(() if df is None or not len(df) else set(df["unit_name"].dropna()))


def wide_frame(df: Any) -> Any:
    """One row per cell with raw numbers: `<split>_mean`, `<split>_std`, `<split>_n` per split."""
    import pandas as pd

    unit_cols = _unit_columns_in(df).report
    keys = [
        "cell_id",
        "label",
        "task",
        "arch",
        "dim",
        "input_dim",
        "unit",
        "unit_canonical",
        *unit_cols,
        "metric",
        "seeds_wanted",
        "seeds_finished",
        "seeds_failed",
        "seeds_missing",
        "seeds_errored",
        "failed_seeds",
        "missing_seeds",
        "params_formula",
        "params_total",
        "final_params",
        "git_commits",
    ]
    if df is None or not len(df):
        return pd.DataFrame(columns=keys)
    df = df.sort_values(["order", "split_order"], kind="stable")
    splits = list(dict.fromkeys(["valid"] + list(df["split"])))
    rows = []
    for g in _by_order(records(df)):
        r = g[0]
        row = {k: r[k] for k in keys}
        by = {s["split"]: s for s in g}
        for s in splits:
            if s in by:
                row.update({f"{s}_mean": by[s]["mean"], f"{s}_std": by[s]["std"], f"{s}_n": int(by[s]["n"])})
        rows.append(row)
    out = pd.DataFrame(rows)
    cols = keys + [f"{s}_{k}" for s in splits for k in ("mean", "std", "n") if f"{s}_{k}" in out.columns]
    out = out[cols]
    for c in [c for c in cols if c.endswith("_n")] + ["dim", "input_dim", *unit_cols, "params_formula", "params_total"]:
        out[c] = pd.array([None if _is_missing(v) else int(v) for v in out[c]], dtype="Int64")
    return out


# -- console ---------------------------------------------------------------------------------


def rich_tables(secs: list[Section]) -> list[Any]:
    """rich Tables (and footnote texts) for the console; unit specs escaped (they hold brackets)."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    for sec in secs:
        table = Table(title=escape(sec.title), title_justify="left")
        for col, a in zip(sec.columns, sec.align):
            table.add_column(escape(col), justify="left" if a == "l" else "right")
        for row in sec.rows:
            table.add_row(*(escape(v) for v in row))
        out.append(table)
        for note in sec.footnotes:
            out.append(Text(note, style="yellow"))
    return out


# Above this many rows a table is printed as aligned plain text: rich measures and renders every
# cell of a Table (~5 ms a row), which made the closing table of a 5,010-cell study take minutes.
PLAIN_ROWS = 200


def print_sections(secs: list[Section], console: Any) -> None:
    """Tables at their natural width even on a narrow (or non-terminal) console: a row per line."""
    from rich.table import Table

    for sec in secs:
        if len(sec.rows) > PLAIN_ROWS:
            console.print(plain_table(sec), markup=False, highlight=False, soft_wrap=True)
            continue
        for item in rich_tables([sec]):
            if isinstance(item, Table):
                _print_wide(console, item)
            else:
                console.print(item, soft_wrap=True)


def plain_table(sec: Section) -> str:
    """A section as aligned plain text (title, header, rule, rows, footnotes): linear in its rows."""
    widths = [max([len(c)] + [len(r[i]) for r in sec.rows]) for i, c in enumerate(sec.columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(v.ljust(w) if a == "l" else v.rjust(w) for v, w, a in zip(cells, widths, sec.align)).rstrip()

    out = [sec.title, line(list(sec.columns)), "  ".join("-" * w for w in widths)]
    out += [line(list(r)) for r in sec.rows]
    return "\n".join(out + list(sec.footnotes))


def _print_wide(console: Any, table: Any) -> None:
    """Print at the table's natural width (rich caps `print(width=)` at the console's width)."""
    from rich.measure import Measurement

    natural = min(Measurement.get(console, console.options.update_width(1000), table).maximum, 1000)
    saved = getattr(console, "_width", None)
    if natural > console.width:
        console.width = natural
    try:
        console.print(table)
    finally:
        console._width = saved
