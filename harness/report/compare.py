"""Compare: two studies (or two commits of one study) cell by cell and split by split."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tasks.metrics import metric_scale

from ..record.contract import Col
from ..record.reader import ReportError
from .aggregate import _is_missing, aggregate, infer_seeds, records
from .load import load_record, resolve_study
from .render import DASH, Section, format_cell, print_sections


@dataclass
class Side:
    """One side of a comparison: the study's aggregated frame and where it came from."""

    name: str
    title: str
    uri: str
    agg: Any
    note: str | None = None


@dataclass
class Comparison:
    """Per cell and split: means, stds, n, parameter counts and B − A (`frame`). Cells on one side
    only are rows too (match "A only" / "B only": their numbers, nothing for the other side, no
    difference), so a new unit compared with a baseline study shows its results; `only_a` and
    `only_b` list their labels."""

    a: Side
    b: Side
    frame: Any
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


COMPARE_COLUMNS = [
    "label",
    "split",
    "metric",
    "match",
    "cell_id_a",
    "cell_id_b",
    "mean_a",
    "std_a",
    "n_a",
    "failed_a",
    "missing_a",
    "mean_b",
    "std_b",
    "n_b",
    "failed_b",
    "missing_b",
    "diff",
    "params_a",
    "params_b",
]
ONLY_A, ONLY_B = "A only", "B only"


def _side(spec: dict[str, Any], seeds_wanted: int | None) -> Side:
    name, seeds, ids, note = resolve_study(spec["study"])
    runs, cells = load_record(spec["uri"], name, ids, root=spec.get("root"))
    commit = spec.get("commit")
    if commit:
        recorded = sorted({str(c) for c in runs[Col.GIT_COMMIT].dropna()})
        runs = runs[runs[Col.GIT_COMMIT].fillna("").astype(str).str.startswith(commit)].reset_index(drop=True)
        if not len(runs):
            raise ReportError(
                f"study {name!r} in {spec['uri']}: no runs at git commit {commit!r} (commits recorded: {', '.join(recorded) or 'none'})"
            )
    seeds = seeds_wanted if seeds_wanted is not None else seeds
    if seeds is None:
        seeds = infer_seeds(runs)
    agg = aggregate(runs, cells, seeds, any_params=bool(commit))
    return Side(name, name + (f"@{commit}" if commit else ""), spec["uri"], agg, note)


def _pairs(ca: Any, cb: Any) -> tuple[list[tuple[str, str, str]], set[str]]:
    """(cell id in A, cell id in B, "id" | "label"): same cell id first, else the same label."""
    b_ids, b_labels = set(cb[Col.CELL]), {}
    for cid, label in zip(cb[Col.CELL], cb[Col.LABEL]):
        b_labels.setdefault(label, cid)
    pairs, used_b = [], set()
    for cid, label in zip(ca[Col.CELL], ca[Col.LABEL]):
        if cid in b_ids:
            pairs.append((cid, cid, "id"))
            used_b.add(cid)
        elif label in b_labels and b_labels[label] not in used_b:
            pairs.append((cid, b_labels[label], "label"))
            used_b.add(b_labels[label])
    return pairs, used_b


def _by_cell(agg: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """The aggregate's rows per cell id, by split, as plain dicts: one pass over the frame
    (filtering it per matched cell was cells × rows work; pandas row access per split cost
    ~0.5 ms a row at 5,000 cells)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for rec in records(agg) if len(agg) else []:
        out.setdefault(rec[Col.CELL], {})[rec["split"]] = rec
    return out


def _rows(ga: dict[str, dict[str, Any]], gb: dict[str, dict[str, Any]], ida: str, idb: str, how: str) -> list[dict[str, Any]]:
    rows = []
    for split in [s for s in ga if s in gb]:
        ra, rb = ga[split], gb[split]
        rows.append(
            {
                "label": ra[Col.LABEL],
                "split": split,
                "metric": ra[Col.METRIC],
                "match": how,
                "cell_id_a": ida,
                "cell_id_b": idb,
                "mean_a": ra["mean"],
                "std_a": ra["std"],
                "n_a": int(ra["n"]),
                "failed_a": int(ra["seeds_failed"]),
                "missing_a": int(ra["seeds_missing"]),
                "mean_b": rb["mean"],
                "std_b": rb["std"],
                "n_b": int(rb["n"]),
                "failed_b": int(rb["seeds_failed"]),
                "missing_b": int(rb["seeds_missing"]),
                "diff": rb["mean"] - ra["mean"],
                "params_a": _params(ra),
                "params_b": _params(rb),
            }
        )
    return rows


def _params(row: Any) -> Any:
    """The papers' parameter count (weights only) of a cell's row, None when not recorded."""
    v = row[Col.PARAMS_FORMULA]
    return None if _is_missing(v) else int(v)


def _one_side_rows(g: dict[str, dict[str, Any]], cell_id: str, which: str) -> list[dict[str, Any]]:
    """A cell present in one study only (`g`: its aggregate rows by split, `_by_cell`):
    its numbers on its side, nothing on the other."""
    rows = []
    for r in g.values():
        mine = {"mean": r["mean"], "std": r["std"], "n": int(r["n"]), "failed": int(r["seeds_failed"]), "missing": int(r["seeds_missing"])}
        none = {"mean": float("nan"), "std": float("nan"), "n": 0, "failed": 0, "missing": 0}
        a, b = (mine, none) if which == ONLY_A else (none, mine)
        rows.append(
            {
                "label": r[Col.LABEL],
                "split": r["split"],
                "metric": r[Col.METRIC],
                "match": which,
                "cell_id_a": cell_id if which == ONLY_A else "",
                "cell_id_b": cell_id if which == ONLY_B else "",
                **{f"{k}_a": v for k, v in a.items()},
                **{f"{k}_b": v for k, v in b.items()},
                "diff": float("nan"),
                "params_a": _params(r) if which == ONLY_A else None,
                "params_b": _params(r) if which == ONLY_B else None,
            }
        )
    return rows


def compare_studies(a: dict[str, Any], b: dict[str, Any], seeds_wanted: int | None = None) -> Comparison:
    """A and B ({"study": file or name, "uri": tracking URI, "commit": prefix or None}) per matching
    cell (same cell id, else same label) and split: means, stds, n and the difference B − A."""
    import pandas as pd

    sa, sb = _side(a, seeds_wanted), _side(b, seeds_wanted)
    ca = sa.agg.sort_values(["order"], kind="stable").drop_duplicates(Col.CELL)
    cb = sb.agg.sort_values(["order"], kind="stable").drop_duplicates(Col.CELL)
    pairs, used_b = _pairs(ca, cb)
    matched_a = {p[0] for p in pairs}
    by_a, by_b = _by_cell(sa.agg), _by_cell(sb.agg)
    rows = [row for ida, idb, how in pairs for row in _rows(by_a[ida], by_b[idb], ida, idb, how)]
    only_a = [(cid, lbl) for cid, lbl in zip(ca[Col.CELL], ca[Col.LABEL]) if cid not in matched_a]
    only_b = [(cid, lbl) for cid, lbl in zip(cb[Col.CELL], cb[Col.LABEL]) if cid not in used_b]
    rows += [row for cid, _ in only_a for row in _one_side_rows(by_a[cid], cid, ONLY_A)]
    rows += [row for cid, _ in only_b for row in _one_side_rows(by_b[cid], cid, ONLY_B)]
    return Comparison(
        sa,
        sb,
        pd.DataFrame(rows, columns=COMPARE_COLUMNS),
        [lbl for _, lbl in only_a],
        [lbl for _, lbl in only_b],
        [n for n in (sa.note, sb.note) if n],
    )


def format_diff(diff: Any, metric: str) -> str:
    if _is_missing(diff) or (isinstance(diff, float) and math.isnan(diff)):
        return DASH
    scale, digits, _ = metric_scale(metric)
    x = round(float(diff) * scale, digits) + 0.0
    return f"{x:+.{digits}f}"


def comparison_rows(result: Comparison) -> tuple[list[str], list[list[str]]]:
    a, b = result.a.title, result.b.title
    columns = ["cell", "split", f"A: {a}", f"B: {b}", "B − A", "# params (A / B)"]
    rows = []
    for r in records(result.frame):
        ma = format_cell(r["mean_a"], r["std_a"], r["n_a"], r[Col.METRIC]) + ("†" if r["failed_a"] else "") + ("‡" if r["missing_a"] else "")
        mb = format_cell(r["mean_b"], r["std_b"], r["n_b"], r[Col.METRIC]) + ("†" if r["failed_b"] else "") + ("‡" if r["missing_b"] else "")
        label = r[Col.LABEL] + (" (matched by label)" if r["match"] == "label" else "")
        if r["match"] == ONLY_A:
            label, mb = f"{r[Col.LABEL]} (A only)", "not in B"
        elif r["match"] == ONLY_B:
            label, ma = f"{r[Col.LABEL]} (B only)", "not in A"
        rows.append([label, r["split"], ma, mb, format_diff(r["diff"], r[Col.METRIC]), _format_params(r["params_a"], r["params_b"], r["match"])])
    return columns, rows


def _format_params(pa: Any, pb: Any, match: str) -> str:
    """One count where both sides agree (or only one side has the cell), else "A / B"."""
    fa, fb = (DASH if _is_missing(p) else f"{int(p):,}" for p in (pa, pb))
    if match == ONLY_A:
        return fa
    if match == ONLY_B or fa == fb:
        return fb
    return f"{fa} / {fb}"


def print_comparison(result: Comparison, console: Any) -> None:
    columns, rows = comparison_rows(result)
    sa, sb = result.a, result.b
    title = f"A = {sa.title} ({sa.uri})  vs  B = {sb.title} ({sb.uri})"
    # A rich table, or aligned plain text past PLAIN_ROWS rows (harness.report.render).
    print_sections([Section("", "", title, columns, ["l", "l"] + ["r"] * (len(columns) - 2), rows)], console)
    from rich.markup import escape

    percent = any(metric_scale(str(m))[0] == 100 for m in result.frame[Col.METRIC])
    console.print("† some seeds diverged · ‡ some seeds missing" + (" · accuracy in %, B − A in points" if percent else ""))
    for side, labels in (("A", result.only_a), ("B", result.only_b)):
        if labels:
            console.print(f"[yellow]only in {side}:[/] " + escape(", ".join(labels)))
