"""Figures of a report (matplotlib, Agg, PNG + SVG), from the record alone and byte-deterministic.

- `curves_roles`: training loss, training score and validation score per epoch (the papers'
  panels), one line per number of roles (mean over the counted seed runs; TPRU family, one
  slice) — like the workshop paper's Fig. 1 and the ICLR paper's Fig. 2.
- `curves_slices`: the same with one slice vs several (solid: 1 slice, dashed: more) — Fig. 2.
  Which columns these two sweep is the units' to say (units/meta.py `FIGURE_SWEEP`: TPRU's
  ("roles", "slices"), TPRN's ("roles",)); the figures are named `curves_<column>`.
- `units`: every cell (LSTM, GRU, new units alike) compared per split: mean ± std over the
  counted seeds, one panel per task and split.
- `curves`: learning curves of every cell — training loss and validation score per epoch, the
  mean over the counted seeds with a band of ± one std (two seeds or more).
- `speed`: median seconds per epoch per unit (every recorded run), and with `--bench CSV`
  (from `tprbench bench units --csv`) the forward+backward milliseconds and the ratio to GRU.

Panels are per task, architecture and d, and per encoder shape (the units' `layers`/`bidirectional`
options) where a study's cells differ in it: cells of different shapes are different models.

Large studies: a panel of more cells than MAX_BARS / MAX_LINES draws the baselines and the best
cells (and says how many it left out); a role grid of hundreds draws MAX_LINES evenly spaced
role counts. table.csv keeps every cell.

Determinism: no pyplot state (a `Figure` per plot), fixed sizes and dpi, `svg.hashsalt` fixed,
and `metadata` without Date/Software/Creator; the regenerating command goes in Description.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from tasks.metrics import MAXIMIZE, MINIMIZE, metric_scale

from ..record.contract import Col
from ..record.reader import ReportError
from .aggregate import _is_missing, baseline_order, parse_unit

DPI = 100
SALT = "tprbench"
STYLES = ("-", "--", ":", "-.")


def _figure(rows: int, cols: int, width: float = 5.0, height: float = 3.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def save(fig: Any, out_dir: Path, stem: str, header: list[str]) -> list[Path]:
    """PNG and SVG without timestamps or version strings (same input → same bytes)."""
    import matplotlib as mpl

    desc = " | ".join(header)
    png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
    with mpl.rc_context({"svg.hashsalt": SALT, "svg.fonttype": "path", "path.simplify": True}):
        fig.savefig(png, dpi=DPI, metadata={"Date": None, "Software": None, "Description": desc})
        fig.savefig(svg, metadata={"Date": None, "Creator": None, "Description": desc})
    return [png, svg]


def _cell_info(agg: Any) -> Any:
    return agg.sort_values("order", kind="stable").drop_duplicates(Col.CELL).reset_index(drop=True)


@functools.lru_cache(maxsize=1)
def sweeps() -> tuple[tuple[str, str | None], ...]:
    """(swept column, inner column or None) of every registered unit's `FIGURE_SWEEP`
    (units/meta.py: the TPRU papers' roles and slices figures), each figure once. Every
    registered unit's, present in the record or not, so a report always names the same figures."""
    from units.registry import available, meta_or_none

    out: list[tuple[str, str | None]] = []
    for name in available():
        sweep = tuple(getattr(meta_or_none(name), "FIGURE_SWEEP", ()))  # a plug-in that fails to import: none
        if sweep and (sweep[0], None) not in out:
            out.append((sweep[0], None))
        if len(sweep) > 1 and (sweep[0], sweep[1]) not in out:
            out.append((sweep[0], sweep[1]))
    return tuple(out)


def _family(cells: Any, col: str) -> str | None:
    """The unit name (among those with a value of `col`) with the most distinct values of it."""
    if col not in cells.columns:
        return None
    with_col = cells[cells[col].notna()]
    if not len(with_col):
        return None
    counts = with_col.groupby("unit_name")[col].nunique()
    return sorted(counts.index, key=lambda n: (-int(counts[n]), str(n)))[0]


def _mean_curves(history: Any, run_ids: list[str], key: str) -> Any:
    h = history[(history["key"] == key) & history[Col.RUN_ID].isin(run_ids)]
    return h.groupby("step", sort=True)["value"].mean()


#: Per-epoch gradient-flow panels (hparam `grad_log_batches`, tasks/analysis/gradients.py
#: EPOCH_METRICS), drawn beside the learning curves when the runs logged them; log-scaled keys.
GRADIENT_PANELS = [
    ("grad_ratio_first_last", "‖∂L/∂s_1‖ / ‖∂L/∂s_T‖", 1.0),
    ("grad_frac_sigma_gt_1", "share of steps σ_max(J_t) > 1", 1.0),
    ("grad_sigma_max_mean", "mean σ_max(J_t)", 1.0),
]
LOG_PANELS = {"grad_ratio_first_last"}


def _panel_keys(metric: str, history: Any = None) -> list[tuple[str, str, float]]:
    """The papers' panels (workshop Fig. 1, ICLR Fig. 2): training loss, training accuracy and
    validation accuracy per epoch; the training-score panel only when the runs logged it; then the
    per-epoch gradient-flow panels when the runs logged them."""
    scale, _, desc = metric_scale(metric)
    keys = [("train_loss", "training loss", 1.0)]
    if history is None or (history["key"] == f"train_{metric}").any():
        keys.append((f"train_{metric}", f"training {desc}", scale))
    keys.append((f"valid_{metric}", f"validation {desc}", scale))
    if history is not None:
        keys += [p for p in GRADIENT_PANELS if (history["key"] == p[0]).any()]
    return keys


# Caps for large studies (a 502-cell report once spent 100 of its 108 s drawing 250-entry
# legends and 250 bar labels per panel, which nobody can read). Below them nothing changes.
#: Lines per curves panel: the baselines and the best cells by validation score (`_best_rows`),
#: or evenly spaced role counts (`_spread`).
MAX_LINES = 12
#: Bars per `units` panel: the baselines and the best cells of that split.
MAX_BARS = 40


def _spread(items: list, limit: int) -> list:
    """At most `limit` items evenly spaced over the list, the first and last included."""
    if len(items) <= limit:
        return items
    picks = sorted({round(i * (len(items) - 1) / (limit - 1)) for i in range(limit)})
    return [items[i] for i in picks]


def _best_rows(rows: Any, limit: int, score: str = "mean") -> Any:
    """Rows (cells of one panel, in table order) cut to `limit`: the baselines (LSTM, GRU) and
    then the best by `score` in the metric's direction; the table order is kept."""
    if len(rows) <= limit:
        return rows
    base = rows["unit_name"].map(lambda n: baseline_order(n) != float("inf")).astype(bool)
    others = rows[~base & rows[score].notna()]
    ascending = str(rows.iloc[0].get(Col.DIRECTION) or MAXIMIZE) == MINIMIZE
    keep = set(rows[base].index[:limit]) | set(others.sort_values(score, ascending=ascending, kind="stable").index[: max(limit - int(base.sum()), 0)])
    return rows[rows.index.isin(keep)]


def _legend(ax: Any, shown: int, total: int) -> None:
    """A legend, and a note of the cells left out when a panel was cut to its best ones."""
    if ax.lines:
        ax.legend(fontsize=7)
    if shown < total:
        ax.text(
            0.0,
            -0.28,
            f"{shown} of {total} cells drawn (baselines and the best); table.csv has every cell",
            transform=ax.transAxes,
            fontsize=6,
            va="top",
        )


def _scale_axis(ax: Any, key: str) -> None:
    if key in LOG_PANELS and ax.lines:
        ax.set_yscale("log")
    if key == "grad_sigma_max_mean" and ax.lines:
        ax.axhline(1.0, color="k", linewidth=0.6, alpha=0.5)


SHAPE_OPTIONS = ("layers", "bidirectional")  # options every unit takes (units/wrappers.py): the encoder's shape


def _shape(unit: Any) -> str:
    """The encoder-shape options a unit spec sets (`layers=1, bidirectional=true`; '' where it sets none)."""
    _, opts = parse_unit(str(unit))
    return ", ".join(f"{k}={opts[k]}" for k in SHAPE_OPTIONS if k in opts)


def _groups(cells: Any) -> list[tuple[str, bool, Any]]:
    """One panel's cells: per task, architecture and d, and per encoder shape where the cells of
    one task/arch/d differ in it (a study of two readings, one bidirectional layer and two one-way
    layers: a roles curve averaged the seeds of both as if they were one model's). Each comes with
    its panel title and whether that title names the shape (only where there are several)."""
    out = []
    for (task, arch, dim), g in cells.groupby(["task_label", Col.ARCH, Col.DIM], sort=True):
        shapes = g[Col.UNIT].map(_shape)
        several = shapes.nunique() > 1
        for shape in dict.fromkeys(shapes):  # the cells' order (baselines first), not alphabetical
            title = f"{task} / {arch} / d={dim}" + (f" / {shape or 'default shape'}" if several else "")
            out.append((title, several, g[shapes == shape]))
    return out


def fig_roles(cells: Any, used: Any, history: Any, col: str = "roles") -> Any | None:
    """One line per value of `col` (roles) for the unit that sweeps it most; where the unit also
    sweeps an inner column (slices), at its smallest value only."""
    panels = []
    inners = [inner for swept, inner in sweeps() if swept == col and inner is not None]
    for title, _named, g in _groups(cells):
        fam = _family(g, col)
        if fam is None:
            continue
        f = g[(g["unit_name"] == fam) & g[col].notna()]
        for inner in (c for c in inners if c in f.columns):
            one = f[inner].dropna()
            if len(one):
                f = f[f[inner].isna() | (f[inner] == one.min())]
        lines = []
        for value, rc in f.groupby(col, sort=True):
            ids = list(used[used[Col.CELL].isin(rc[Col.CELL])][Col.RUN_ID])
            if ids:
                lines.append((f"{int(value)} {col}", ids, "-"))
        lines = _spread(lines, MAX_LINES)  # a role grid of hundreds: evenly spaced counts
        if len(lines) >= 2:
            panels.append((f"{title}: {fam}", str(g.iloc[0][Col.METRIC]), lines))
    return _draw(panels, history) if panels else None


def fig_slices(cells: Any, used: Any, history: Any, col: str = "roles", inner: str = "slices") -> Any | None:
    """One line per value of `inner` (slices) at each value of `col` (roles) swept at two or more."""
    panels = []
    for title, _named, g in _groups(cells):
        fam = _family(g, col)
        if fam is None or inner not in g.columns:
            continue
        f = g[(g["unit_name"] == fam) & g[col].notna() & g[inner].notna()]
        lines = [
            line for value, rc in f.groupby(col, sort=True) if rc[inner].nunique() >= 2 for line in _inner_lines(int(value), rc, used, col, inner)
        ]
        if len({ln[3] for ln in lines}) >= 1 and len(lines) >= 2:
            panels.append((f"{title}: {fam}, {inner}", str(g.iloc[0][Col.METRIC]), lines))
    return _draw(panels, history, color_by_group=True) if panels else None


def _inner_lines(value: int, rc: Any, used: Any, col: str, inner: str) -> list[tuple]:
    """One curve per `inner` value (slice count) at this `col` value (number of roles): (label,
    run ids, style, colour group). The label's inner name is singular at 1 ("1 slice")."""
    lines = []
    one = inner[:-1] if inner.endswith("s") else inner
    for i, (n, sc) in enumerate(rc.groupby(inner, sort=True)):
        ids = list(used[used[Col.CELL].isin(sc[Col.CELL])][Col.RUN_ID])
        if ids:
            lines.append((f"{value} {col}, {int(n)} {inner if n != 1 else one}", ids, STYLES[i % len(STYLES)], value))
    return lines


def _plot_lines(ax: Any, lines: list, history: Any, key: str, scale: float, groups: list | None) -> None:
    for i, ln in enumerate(lines):
        label, ids, style = ln[0], ln[1], ln[2]
        curve = _mean_curves(history, ids, key)
        if not len(curve):
            continue
        color = f"C{groups.index(ln[3]) % 10}" if groups is not None else f"C{i % 10}"
        ax.plot(curve.index.to_numpy(), curve.to_numpy() * scale, style, color=color, label=label, linewidth=1.4)


def _draw(panels: list, history: Any, color_by_group: bool = False) -> Any:
    from matplotlib.ticker import MaxNLocator

    columns = max(len(_panel_keys(metric, history)) for _title, metric, _lines in panels)
    fig, axes = _figure(len(panels), columns)
    for row, (title, metric, lines) in enumerate(panels):
        groups = list(dict.fromkeys(ln[3] for ln in lines)) if color_by_group else None
        for col, (key, ylabel, scale) in enumerate(_panel_keys(metric, history)):
            ax = axes[row][col]
            _plot_lines(ax, lines, history, key, scale, groups)
            _scale_axis(ax, key)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(ylabel)
            ax.set_title(title, fontsize=9)
            ax.grid(True, alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=7)
    return fig


def _unit_label(row: Any, many_dims: bool, shape_in_title: bool = False) -> str:
    """The unit as a legend names it; without its shape options where the panel's title names them."""
    unit = str(row["unit_short"] if not _missing(row.get("roles")) else row[Col.UNIT])
    if shape_in_title:
        name, opts = parse_unit(unit)
        rest = [f"{k}={v}" for k, v in opts.items() if k not in SHAPE_OPTIONS]
        unit = name + (f"[{','.join(rest)}]" if rest else "")
    if not _missing(row.get("roles")) and "roles" not in unit:
        unit += f" ({int(row['roles'])} roles)"
    return unit + (f" d={int(row[Col.DIM])}" if many_dims else "")


def _missing(v: Any) -> bool:
    return _is_missing(v)


def fig_units(agg: Any) -> Any | None:
    """Per task and split: a bar per cell (mean over its counted seeds) with ± std error bars."""
    panels = []
    for task, part in agg.groupby(agg["task_label"].fillna(""), sort=True):
        many = part[Col.DIM].nunique() > 1 or part[Col.ARCH].nunique() > 1
        for _, rows in part.groupby("split_order", sort=True):
            rows = rows.sort_values("order", kind="stable")
            rows = rows[rows["n"] > 0]
            if len(rows):
                panels.append((task, str(rows.iloc[0]["split"]), _best_rows(rows, MAX_BARS), many, len(rows)))
    if not panels:
        return None
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    height = max(2.2, 0.32 * max(len(p[2]) for p in panels) + 1.2)
    fig, axes = _figure(nrows, cols, width=4.2, height=height)
    for i, (task, split, rows, many, total) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        metric = str(rows.iloc[0][Col.METRIC])
        scale, _, desc = metric_scale(metric)
        means = rows["mean"].astype(float).to_numpy() * scale
        stds = rows["std"].astype(float).fillna(0.0).to_numpy() * scale
        labels = [(f"{r[Col.ARCH]} " if many else "") + _unit_label(r, many) for _, r in rows.iterrows()]
        y = list(range(len(rows)))
        ax.barh(y, means, xerr=stds, color=[f"C{k % 10}" for k in y], capsize=3, alpha=0.85)
        ax.set_yticks(y, labels, fontsize=7)
        ax.invert_yaxis()
        lo = float(min(means - stds))
        ax.set_xlim(left=min(lo, 0.0) if lo < 0 else max(0.0, lo - 0.1 * (float(max(means + stds)) - lo + 1e-9)))
        ax.set_xlabel(desc, fontsize=8)
        if len(rows) < total:
            ax.set_title(f"{task}: {split}, best {len(rows)} of {total} (mean ± std)", fontsize=8)
        else:
            ax.set_title(f"{task}: {split} (mean ± std over seeds)", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for j in range(len(panels), nrows * cols):
        axes[j // cols][j % cols].set_visible(False)
    return fig


def fig_curves(cells: Any, used: Any, history: Any) -> Any | None:
    """Per task / arch / dim: training loss (training score where the runs logged it) and
    validation score per epoch for every cell, mean over its counted seed runs with a ± std band
    (the same panels as the roles/slices curves: `_panel_keys`)."""
    panels = []
    for title, shape_named, g in _groups(cells):
        g = g[g[Col.CELL].isin(set(used[Col.CELL]))].sort_values("order", kind="stable")
        drawn = _best_rows(g, MAX_LINES)  # `cells` rows are the valid split's
        lines = [(_unit_label(r, False, shape_named), list(used[used[Col.CELL] == r[Col.CELL]][Col.RUN_ID])) for _, r in drawn.iterrows()]
        lines = [ln for ln in lines if ln[1]]
        if lines:
            panels.append((title, str(g.iloc[0][Col.METRIC]), lines, len(g)))
    if not panels:
        return None
    from matplotlib.ticker import MaxNLocator

    columns = max(len(_panel_keys(metric, history)) for _title, metric, _lines, _n in panels)
    fig, axes = _figure(len(panels), columns)
    for row, (title, metric, lines, total) in enumerate(panels):
        for col, (key, ylabel, scale) in enumerate(_panel_keys(metric, history)):
            ax = axes[row][col]
            for i, (label, ids) in enumerate(lines):
                h = history[(history["key"] == key) & history[Col.RUN_ID].isin(ids)]
                if not len(h):
                    continue
                stats = h.groupby("step", sort=True)["value"].agg(["mean", "std", "count"])
                x, mean = stats.index.to_numpy(), stats["mean"].to_numpy() * scale
                ax.plot(x, mean, "-", color=f"C{i % 10}", label=label, linewidth=1.4)
                if int(stats["count"].max()) > 1:
                    std = stats["std"].fillna(0.0).to_numpy() * scale
                    ax.fill_between(x, mean - std, mean + std, color=f"C{i % 10}", alpha=0.2, linewidth=0)
            _scale_axis(ax, key)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(ylabel)
            ax.set_title(f"{title} (mean ± std over seeds)" if len(title) < 40 else f"{title}\n(mean ± std over seeds)", fontsize=9)
            ax.grid(True, alpha=0.3)
            _legend(ax, len(lines), total)
    return fig


def fig_speed(cells: Any, runs: Any, history: Any, bench: Any | None) -> Any | None:
    """Median epoch seconds per unit (and the bench's ms and × gru when given)."""
    es = history[history["key"] == "epoch_seconds"]
    bars = []
    if len(es) and len(runs):  # a record whose runs are all in flight has neither (and empty frames merge badly)
        info = runs[[Col.RUN_ID, Col.CELL]].merge(cells[[Col.CELL, Col.UNIT, Col.DIM, "order"]], on=Col.CELL)
        es = es.merge(info, on=Col.RUN_ID)
        dims = es[Col.DIM].nunique()
        for (_order, unit, dim), g in es.groupby(["order", Col.UNIT, Col.DIM], sort=True):
            bars.append((f"{unit}" + (f" d={dim}" if dims > 1 else ""), float(g["value"].median())))
        # one bar per unit spec and dim (cells of several archs/tasks share it): first occurrence wins
        merged: dict[str, list[float]] = {}
        for label, v in bars:
            merged.setdefault(label, []).append(v)
        bars = [(k, sorted(v)[len(v) // 2]) for k, v in merged.items()]
    panels = (1 if bars else 0) + (1 if bench is not None and len(bench) else 0)
    if not panels:
        return None
    fig, axes = _figure(1, panels, width=6.0, height=max(2.5, 0.35 * max(len(bars), len(bench) if bench is not None else 0) + 1))
    i = 0
    if bars:
        ax = axes[0][i]
        i += 1
        labels, values = [b[0] for b in bars], [b[1] for b in bars]
        ax.barh(range(len(bars)), values, color="C0")
        ax.set_yticks(range(len(bars)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("median seconds per epoch (recorded runs)")
        ax.set_title("training speed per unit", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    if bench is not None and len(bench):
        ax = axes[0][i]
        labels = [f"{u} d={d}" for u, d in zip(bench[Col.UNIT], bench[Col.DIM])]
        values = bench["total_ms"].astype(float).to_numpy()
        ax.barh(range(len(labels)), values, color="C1")
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        for y, (v, r) in enumerate(zip(values, bench.get("ratio_to_gru", [None] * len(values)))):
            if r is not None and r == r:
                ax.text(v, y, f" ×{float(r):.2f} gru", va="center", fontsize=7)
        ax.set_xlabel("forward+backward ms (bench units)")
        ax.set_title("bench units", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    return fig


def make_figures(
    agg: Any, runs: Any, used: Any, history: Any, out_dir: Path, header: list[str], bench_csv: str | Path | None = None
) -> tuple[list[Path], list[str]]:
    """Write every figure the record supports; returns (files, notes on figures left out)."""
    import pandas as pd

    files: list[Path] = []
    notes: list[str] = []
    if agg is None or not len(agg):
        return files, ["no cells: no figures"]
    cells = _cell_info(agg)
    bench = None
    if bench_csv is not None:
        try:
            bench = pd.read_csv(bench_csv, comment="#")
        except (OSError, ValueError) as exc:
            raise ReportError(f"--bench {bench_csv}: cannot read it as a `tprbench bench units --csv` file ({exc})") from None
        missing = {"unit", "dim", "total_ms"} - set(bench.columns)
        if missing:
            raise ReportError(f"--bench {bench_csv}: columns {', '.join(sorted(missing))} missing (expected `bench units --csv` output)")
    swept = [
        (f"curves_{col}", lambda col=col: fig_roles(cells, used, history, col), f"fewer than two values of {col} with finished seed runs")
        if inner is None
        else (
            f"curves_{inner}",
            lambda col=col, inner=inner: fig_slices(cells, used, history, col, inner),
            f"no value of {col} with finished runs at two values of {inner}",
        )
        for col, inner in sweeps()
    ]
    for stem, make, why in (
        ("units", lambda: fig_units(agg), "no cell has a finished seed run"),
        ("curves", lambda: fig_curves(cells, used, history), "no finished seed run with per-epoch metrics"),
        *swept,
        ("speed", lambda: fig_speed(cells, runs, history, bench), "no epoch timings recorded"),
    ):
        fig = make()
        if fig is None:
            notes.append(f"{stem}: not drawn ({why})")
            for ext in ("png", "svg"):  # never leave a stale figure from an older record
                (out_dir / f"{stem}.{ext}").unlink(missing_ok=True)
            continue
        files += save(fig, out_dir, stem, header)
    return files, notes
