"""Reports: the papers' tables and figures, regenerated from the MLflow record alone (never by training).

Four jobs, one module each: `load` (frames from harness.record.reader), `aggregate` (mean ±
std per cell and split; pure pandas), `render` (sections laid out like the papers; one
`make_table` for Markdown, LaTeX and CSV; rich tables) and `compare` (two studies side by
side); `write` puts them together into the files of `tprbench report`.

    runs    = load_runs(uri, "logic-ablation")        # one row per trial/seed run
    cells   = load_cells(uri, "logic-ablation")       # one row per cell run
    agg     = aggregate(runs, cells, seeds_wanted=3)  # one row per cell × split: mean ± std, n, failures ...
    print(make_table(agg, "markdown"))                # also "latex" (booktabs) and "csv" (raw numbers)
    write_report(uri, "logic-ablation", Path("reports/logic-ablation"))   # every file + figures → Report

Which seed runs count: phase=final runs whose `tprbench.params_hash` equals the cell's
`tprbench.final_params_hash` (seed runs of an earlier best are ignored) with seed < seeds
wanted. A seed that diverged (status failed) is marked † and a seed not yet run ‡; both get a
footnote with the counts — they are shown, never hidden. Std is the sample std (ddof=1); one
seed has no std ('–').

Columns of `load_runs` (bare names are the `tprbench.*` tags without the prefix; harness/record/contract.py):
    run_id, mlflow_status, start_time, study, cell_id, task, arch, unit, dim, input_dim, label,
    run_key, phase, seed, trial, status, reason, params_hash, params_formula, params_total,
    git_commit, host, `param.<name>` (hyperparameters, numbers cast) and `metric.<name>`
    (final metrics at step 0, and the last value of each per-epoch metric).

Determinism: the same record gives byte-identical files — no timestamps, rows sorted by a fixed
key, numbers formatted with fixed formats, figures saved without dates or software versions
and with a fixed `svg.hashsalt`.
"""

from __future__ import annotations

from ..record.contract import CELL_COLUMNS, RUN_COLUMNS
from ..record.reader import ReportError
from .aggregate import (
    UnitColumns,
    aggregate,
    counted_runs,
    infer_seeds,
    parse_unit,
    search_frame,
    unit_columns,
    unit_columns_of,
)
from .compare import Comparison, Side, compare_studies, comparison_rows, format_diff, print_comparison
from .load import load_cells, load_history, load_record, load_runs, resolve_study
from .render import (
    DASH,
    Section,
    format_cell,
    make_table,
    print_sections,
    report_layout,
    rich_tables,
    sections,
    tex_escape,
    wide_frame,
)
from .write import Report, cells_frame, print_summary, provenance, write_report

__all__ = [
    "CELL_COLUMNS",
    "Comparison",
    "DASH",
    "RUN_COLUMNS",
    "Report",
    "ReportError",
    "Section",
    "Side",
    "UnitColumns",
    "aggregate",
    "cells_frame",
    "compare_studies",
    "comparison_rows",
    "counted_runs",
    "format_cell",
    "format_diff",
    "infer_seeds",
    "load_cells",
    "load_history",
    "load_record",
    "load_runs",
    "make_table",
    "parse_unit",
    "print_comparison",
    "print_sections",
    "print_summary",
    "provenance",
    "report_layout",
    "resolve_study",
    "rich_tables",
    "search_frame",
    "sections",
    "tex_escape",
    "unit_columns",
    "unit_columns_of",
    "wide_frame",
    "write_report",
]
