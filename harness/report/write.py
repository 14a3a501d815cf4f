"""Whole reports: every file of `tprbench report` (tables, search table, figures) and the table
that closes `tprbench run`."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.result import RunStatus

from ..record.contract import CELL_COLUMNS, RUN_COLUMNS, Col, Tag, metric_of
from ..record.reader import RecordReader, ReportError, frame, per_epoch
from . import figures as figs
from .aggregate import aggregate, counted_runs, infer_seeds, search_frame
from .load import load_history, load_record
from .render import Section, make_table, print_sections, sections

if TYPE_CHECKING:
    from ..study.cells import Cell, Study


@dataclass
class Report:
    """What `write_report` made: the aggregated frame, the files, the sections printed on the console."""

    agg: Any
    files: list[Path]
    sections: list[Section]
    notes: list[str]
    runs: Any
    cells: Any
    extra: dict[str, Any] = field(default_factory=dict)


def commits_of(agg: Any) -> list[str]:
    return sorted({c for cs in (agg["git_commits"] if len(agg) else []) for c in str(cs).split(",") if c})


#: What the tables' parameter columns count (`tprbench units` once showed 1,024 for the unit a
#: table counted as 2,048, and nothing said why). provenance.txt carries it beside every table.
PARAMS_NOTE = (
    "# params: the unit's weights as trained, in the task's encoder with all its layers (logic, nli and "
    "transfer stack 2 by default: twice what `tprbench units` shows for one layer; the papers' formula, no "
    "biases); # params (total) adds biases and extras; the embedding and classifier are not counted"
)


def provenance(command: str, agg: Any) -> list[str]:
    commits = commits_of(agg)
    return [f"Regenerate with: {command}", f"From the MLflow record only; runs from git commit(s): {', '.join(commits) or 'none recorded'}"]


def dirty_note(agg: Any) -> str | None:
    """A report that cites uncommitted code cannot be reproduced from the repository: say so."""
    dirty = [c for c in commits_of(agg) if c.endswith("-dirty") or c == "unknown"]
    if not dirty:
        return None
    return (
        f"runs from uncommitted code ({', '.join(dirty)}): rerun the study on a clean commit before committing this "
        "report (`git status` must show no changes to tracked files when `tprbench run` starts)"
    )


def write_report(
    tracking_uri: str,
    study_name: str,
    out_dir: Path,
    *,
    seeds_wanted: int | None = None,
    cell_ids: Iterable[str] | None = None,
    command: str | None = None,
    bench_csv: str | Path | None = None,
    figures: bool = True,
    root: Any = None,
) -> dict[str, Any]:
    """Write table.md, table.tex, table.csv, search.csv and the figures under `out_dir`.

    Returns a `Report`.
    """
    runs, cells = load_record(tracking_uri, study_name, cell_ids, root=root)
    if seeds_wanted is None:
        seeds_wanted = infer_seeds(runs)
    agg = aggregate(runs, cells, seeds_wanted)
    command = command or f"tprbench report {shlex.quote(study_name)} --tracking-uri {shlex.quote(tracking_uri)}"
    header = provenance(command, agg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []

    def write(name: str, text: str) -> None:
        path = out_dir / name
        path.write_text(text, encoding="utf-8", newline="\n")
        files.append(path)

    secs = sections(agg)  # laid out once for every format (5,010 cells: ~4 s each)
    write("table.md", make_table(agg, "markdown", [f"tprbench report: study {study_name}"] + header, secs=secs))
    write(
        "table.tex",
        make_table(agg, "latex", [f"tprbench report: study {study_name}; needs \\usepackage{{booktabs}}"] + header, study=study_name, secs=secs),
    )
    # CSVs load with a plain pandas.read_csv / spreadsheet: no comment lines; provenance.txt says where they come from.
    write("table.csv", make_table(agg, "csv"))
    write("search.csv", search_frame(agg).to_csv(index=False, float_format="%.10g", lineterminator="\n"))
    write(
        "provenance.txt",
        "\n".join(
            [
                f"tprbench report: study {study_name}",
                *header,
                "Files: table.md, table.tex, table.csv (one row per cell, raw numbers), search.csv (search phase per cell), figures (PNG and SVG)",
                PARAMS_NOTE,
            ]
        )
        + "\n",
    )
    notes: list[str] = [n for n in [dirty_note(agg)] if n]
    if figures:
        counted = counted_runs(runs, cells, seeds_wanted)
        used = counted[counted[Col.STATUS].isin([RunStatus.FINISHED, RunStatus.PAUSED])]  # paused: its epochs so far
        history = load_history(
            tracking_uri, study_name, run_ids=list(used[Col.RUN_ID]) + list(runs[Col.RUN_ID]), keys=sorted({*_history_keys(runs), "epoch_seconds"})
        )
        made, fig_notes = figs.make_figures(agg, runs, used, history, out_dir, header, bench_csv=bench_csv)
        files += made
        notes += fig_notes
    return Report(agg, files, secs, notes, runs, cells)


def _history_keys(runs: Any) -> list[str]:
    keys = {metric_of(c) for c in runs.columns if metric_of(c) is not None}
    return sorted(k for k in keys if per_epoch(k) and (k.startswith(("train_", "valid_", "grad_")) or k == "epoch_seconds"))


def cells_frame(cells: Iterable[Any], study_name: str | None = None) -> Any:
    """Cell objects (harness.study.cells.Cell) → the frame `load_cells` returns (no final params)."""
    import pandas as pd

    rows = [
        {
            Col.RUN_ID: None,
            Col.CELL: c.id,
            Col.TASK: c.task,
            Col.ARCH: c.arch,
            Col.UNIT: c.unit,
            Col.UNIT_CANONICAL: getattr(c, "unit_canonical", None),
            Col.DIM: c.dim,
            Col.INPUT_DIM: c.input_dim,
            Col.LABEL: c.label,
            Col.EPOCHS: getattr(c, "epochs", None),
            Col.DATA: getattr(c, "data", None),
            Col.TASK_OPTIONS: json.dumps(getattr(c, "task_options", {}), sort_keys=True, default=str),
            Col.FINAL_PARAMS_HASH: None,
            Col.FINAL_PARAMS: None,
            # the study's metric and direction, so a table of cells not run yet is labelled as it will be
            Col.METRIC: getattr(c, "metric", None),
            Col.DIRECTION: getattr(c, "direction", None),
        }
        for c in cells
    ]
    return pd.DataFrame(rows, columns=[*CELL_COLUMNS, Tag.METRIC.bare, Tag.DIRECTION.bare])


def print_summary(study: Study, cells: list[Cell], tracking_uri: str, console: Any, root: Any = None, reader: Any = None, agg: Any = None) -> Any:
    """The aggregated table of these cells, printed to the console (end of `tprbench run`).

    Cells with no record yet are shown with every seed missing. Returns the aggregated frame.
    `reader`: the driver's own RecordReader (its store is open and was checked when opened: a
    new reader would check the whole file again after the driver's writes — 5 s at 100k runs).
    `agg`: the aggregate of exactly these cells, already computed (the driver's, when it exits).
    """
    import pandas as pd

    if agg is not None:
        print_sections(sections(agg), console)
        return agg
    section = getattr(study, "study", study)
    name, seeds = section.name, int(section.seeds)
    ids = {c.id for c in cells}
    try:
        if reader is None or reader.experiment_id is None:
            reader = RecordReader(tracking_uri, name, root=root)  # `root`: through the summary of ended runs
        runs, recorded = reader.runs(ids), reader.cells(ids)
    except ReportError:  # nothing recorded yet
        runs, recorded = frame([], RUN_COLUMNS), cells_frame([])
    have = set(recorded[Col.CELL])
    unrecorded = [c for c in cells if c.id not in have]
    if unrecorded:
        recorded = pd.concat([recorded, cells_frame(unrecorded)], ignore_index=True)
    agg = aggregate(runs, recorded, seeds)
    print_sections(sections(agg), console)
    return agg
