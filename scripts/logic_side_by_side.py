"""tprbench's logic row beside the authors' own TPRU code, epoch by epoch: the logic side-by-side table.

    .venv/bin/python scripts/logic_side_by_side.py studies/logic-paper.toml --root records/logic-paper \\
        --unit 'tpru-v1[roles=512,layers=1,bidirectional=true]' --authors reports/logic-authors-code/logs \\
        > reports/logic-authors-code/side_by_side.md

The authors' runs are their `main_logical.py`'s own terminal logs (shuaitang/TPRU; one file per seed,
`seed{S}.log`), produced outside this project (how: reports/logic-authors-code/README.md). Their loop
prints `Train Acc …, Dev Acc …` after each epoch and, at each better validation accuracy, the test
splits; both are read here, in order, as epochs 1, 2, …. tprbench's side is the study's record: the
cell of `--unit`, its `valid_acc` after each epoch. Both loops validate once an epoch over the same
5,000 validation pairs, so epochs compare like for like (same data, batch 64, Adam at lr 1e-3 until
tprbench's ÷ 10 at epoch 30; the authors' lr stays constant).

Why a script and not `tprbench report`: the report reads one record; this table joins a record with
measurements that are not in it (as scripts/babi_side_by_side.py does for bAbI).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

DEV = re.compile(r"^Train Acc ([\d.]+), Dev Acc ([\d.]+)$")
SEED_LOG = re.compile(r"seed(\d+)\.log")


def authors_curves(folder: Path) -> dict[int, list[float]]:
    """seed -> validation accuracy (%) after each finished epoch, from their logs (a run cut off
    mid-epoch simply has fewer epochs)."""
    curves = {}
    for path in sorted(folder.glob("seed*.log")):
        match = SEED_LOG.fullmatch(path.name)
        if match:
            curves[int(match.group(1))] = [float(m.group(2)) for line in path.read_text().splitlines() if (m := DEV.match(line.strip()))]
    if not curves:
        raise SystemExit(f"no seed*.log with a 'Dev Acc' line in {folder}")
    return curves


def tprbench_curves(study_path: str, root: str, unit: str) -> dict[int, list[float]]:
    """seed -> validation accuracy (%) after each epoch of the study's cell for `unit`: the record's
    ended run of each seed (one per seed: `RecordReader.runs`), its `valid_acc` by step."""
    from harness.record.compressed import reading_root
    from harness.record.sources import default_tracking_uri
    from harness.report.load import load_history, load_runs
    from harness.study.cells import expand, filter_cells
    from harness.study.load import load_study

    study = load_study(study_path)
    every = expand(study)
    cells = filter_cells(every, [f"unit={unit}"])  # options in any order
    if not cells:
        raise SystemExit(f"no cell of {study_path} has unit {unit!r}; its units: {sorted({c.unit for c in every})}")
    uri = default_tracking_uri(reading_root(Path(root)))  # a committed mlflow.db.gz: its decompressed copy
    runs = load_runs(uri, study.name, [c.id for c in cells])
    runs = runs[runs["phase"] == "final"].sort_values("seed")
    history = load_history(uri, study.name, list(runs["run_id"]), ["valid_acc"])  # sorted by step
    return {int(run.seed): [100.0 * v for v in history.loc[history["run_id"] == run.run_id, "value"]] for run in runs.itertuples()}


def table(authors: dict[int, list[float]], ours: dict[int, list[float]], unit: str) -> str:
    """One line per epoch the authors' runs reached: each of their seeds, their mean, and tprbench's seeds."""
    epochs = max(len(c) for c in authors.values())
    a_seeds, o_seeds = sorted(authors), sorted(ours)
    head = ["epoch", "authors' code, seeds " + " / ".join(map(str, a_seeds)), "mean", f"tprbench `{unit}`, seed " + " / ".join(map(str, o_seeds))]
    out = ["| " + " | ".join(head) + " |", "|---:|:---|---:|:---|"]
    for e in range(epochs):
        theirs = [authors[s][e] if e < len(authors[s]) else None for s in a_seeds]
        done = [v for v in theirs if v is not None]
        mine = [f"{ours[s][e]:.1f}" if e < len(ours[s]) else "–" for s in o_seeds]
        cells = [
            str(e + 1),
            " / ".join("–" if v is None else f"{v:.2f}" for v in theirs),
            f"{statistics.mean(done):.1f}" + ("" if len(done) == len(theirs) else f" ({len(done)})"),
            " / ".join(mine) or "–",
        ]
        out.append("| " + " | ".join(cells) + " |")
    best = [f"{max(c):.1f} (epoch {c.index(max(c)) + 1} of {len(c)})" for c in (ours[s] for s in o_seeds) if c]
    out.append("")
    out.append(f"tprbench's best so far: {'; '.join(best) or '–'}. Validation accuracy in %; the authors' to two decimals as their log prints it.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study")
    p.add_argument("--root", required=True, help="the study's record (a run directory holding mlflow.db, or records/<study> with mlflow.db.gz)")
    p.add_argument("--unit", required=True, help="the row: a unit spec as the study file writes it")
    p.add_argument("--authors", type=Path, required=True, help="folder of the authors' logs: seed{S}.log")
    args = p.parse_args(argv)
    print(table(authors_curves(args.authors), tprbench_curves(args.study, args.root, args.unit), args.unit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
