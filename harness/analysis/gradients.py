"""`tprbench gradients`: gradient flow of each source's encoder on its task's validation data,
as a table (Markdown + CSV) and figures with one panel per unit (tasks/analysis/gradients.py
says what is measured)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .sources import AnalysisError, Source, analysed_unit

COLUMNS = [
    ("state_size", "D", "{:d}"),
    ("steps", "steps", "{:d}"),
    ("sigma_max_mean", "mean σ_max(J)", "{:.3f}"),
    ("frac_sigma_gt_1", "share σ_max > 1", "{:.3f}"),
    ("radius_mean", "mean ρ(J)", "{:.3f}"),
    ("grad_norm_first", "‖∂L/∂s_1‖", "{:.2e}"),
    ("grad_norm_last", "‖∂L/∂s_T‖", "{:.2e}"),
    ("grad_ratio_first_last", "first/last", "{:.3g}"),
    ("update_cos_mean", "cos(Δs, s_{t−1})", "{:.3f}"),
    ("frac_update_removes", "share Δs·s_{t−1} < 0", "{:.3f}"),
    ("candidate_proj_mean", "⟨b̃,b_{t−1}⟩/‖b_{t−1}‖²", "{:.3f}"),
    ("frac_candidate_positive", "share ⟨b̃,b_{t−1}⟩ > 0", "{:.3f}"),
    ("filler_max_mean", "mean max_n f_t", "{:.3f}"),
    ("frac_filler_max_gt_0.9", "share max_n f_t > 0.9", "{:.3f}"),
]


@dataclass
class GradientResult:
    source: Source
    stats: Any  # tasks.analysis.gradients.GradientStats
    split: str


def first_split(adapter: Any) -> str:
    from tasks.analysis.gradients import first_split as first

    return first(adapter.valid_split)


def measure(
    source: Source, layer: int = 1, batches: int = 4, batch_size: int = 32, max_pairs: int = 2048, split: str | None = None
) -> GradientResult:
    """Run the source's model on `batches` validation batches with the analysed unit recorded."""
    from tasks.analysis.carry import CarryError
    from tasks.analysis.gradients import on_batches

    unit = analysed_unit(source.model, layer)
    split = split or first_split(source.adapter)
    try:
        stats = on_batches(source.model, unit, source.adapter, split, batches, batch_size, max_pairs, "cpu")
    except CarryError as exc:
        raise AnalysisError(f"{source.label}: {exc}") from None
    if stats is None:
        raise AnalysisError(f"{source.label}: split {split!r} gave no batches")
    return GradientResult(source, stats, split)


def table_rows(results: list[GradientResult]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        row = {"task": r.source.task, "unit": r.source.label, "run": (r.source.run_id or "")[:8], "split": r.split}
        row.update(r.stats.summary())
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], header: list[str]) -> str:
    names = ["task", "unit", "run"] + [c[1] for c in COLUMNS]
    lines = [f"<!-- {h} -->" for h in header]
    lines += ["", "| " + " | ".join(names) + " |", "|" + "|".join([":---"] * 3 + ["---:"] * len(COLUMNS)) + "|"]
    for row in rows:
        cells = [row["task"], row["unit"], row["run"]]
        for key, _name, fmt in COLUMNS:
            v = row.get(key)
            cells.append("–" if v is None or v != v else fmt.format(int(v) if fmt == "{:d}" else v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figures(results: list[GradientResult], out: Path, header: list[str]) -> list[Path]:
    """gradients.png/svg: per unit (one panel each) ‖∂L/∂s_t‖ against t (log scale) and mean
    σ_max(J_t) against t on a second axis; spectrum.png/svg: per unit the histogram of σ_max(J_t)."""
    import numpy as np

    from harness.report.figures import _figure, save

    files: list[Path] = []
    n = len(results)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = _figure(rows, cols, width=3.6, height=2.8)
    for i, r in enumerate(results):
        ax = axes[i // cols][i % cols]
        s = r.stats
        t = np.arange(1, len(s.grad_norm) + 1)
        keep = s.grad_count >= max(1, s.grad_count[0] / 10)
        ax.semilogy(t[keep], s.grad_norm[keep], color="C0", linewidth=1.4, label="‖∂L/∂s_t‖")
        ax.set_xlabel("step t")
        ax.set_ylabel("‖∂L/∂s_t‖", color="C0", fontsize=8)
        ax2 = ax.twinx()
        sig_keep = keep & ~np.isnan(s.sigma_max)
        ax2.plot(t[sig_keep], s.sigma_max[sig_keep], color="C3", linewidth=1.0, linestyle="--")
        ax2.axhline(1.0, color="C3", linewidth=0.6, alpha=0.5)
        ax2.set_ylabel("mean σ_max(J_t), J_t = ∂s_t/∂s_t−1", color="C3", fontsize=8)
        ax.set_title(f"{r.source.task}: {r.source.label}", fontsize=8)
        ax.grid(True, alpha=0.3)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    files += save(fig, out, "gradients", header)
    fig, axes = _figure(rows, cols, width=3.6, height=2.6)
    for i, r in enumerate(results):
        ax = axes[i // cols][i % cols]
        sig = r.stats.sigma_all
        if len(sig):
            ax.hist(sig, bins=40, color="C1")
        ax.axvline(1.0, color="k", linewidth=0.8)
        ax.set_xlabel("σ_max(J_t) over real steps")
        ax.set_title(f"{r.source.task}: {r.source.label}", fontsize=8)
        ax.grid(True, alpha=0.3)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    files += save(fig, out, "spectrum", header)
    return files


def write(results: list[GradientResult], out: Path, command: str) -> list[Path]:
    import csv

    out.mkdir(parents=True, exist_ok=True)
    header = [f"Regenerate with: {command}"]
    rows = table_rows(results)
    md = out / "gradients.md"
    md.write_text(markdown(rows, ["tprbench gradients"] + header), encoding="utf-8")
    path_csv = out / "gradients.csv"
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with path_csv.open("w", newline="", encoding="utf-8") as fh:
        fh.write(f"# {header[0]}\n")
        w = csv.DictWriter(fh, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    curves = out / "gradients_curves.csv"
    with curves.open("w", newline="", encoding="utf-8") as fh:
        fh.write(f"# {header[0]}\n")
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["task", "unit", "t", "grad_norm", "sequences", "sigma_max_mean"])
        for r in results:
            s = r.stats
            for t in range(len(s.grad_norm)):
                w.writerow([r.source.task, r.source.label, t + 1, f"{s.grad_norm[t]:.6g}", int(s.grad_count[t]), f"{s.sigma_max[t]:.6g}"])
    return [md, path_csv, curves] + figures(results, out, header)
