"""tprbench's TPR-RNN runs beside the authors' own code, at equal updates: the bAbI side-by-side table.

    TPRBENCH_DATA=../shared/data .venv/bin/python scripts/babi_side_by_side.py studies/babi-qa17-isolate.toml \
        --root records/babi-qa17-isolate --authors reports/babi-authors-code/validation-logs > reports/babi-qa17-isolate/side_by_side.md

Rows: each cell of the study (one per task label: an arm of the isolation study, or a task), then the
authors' code for each task it was run on. Both sides are read the same way: the test error at the
best validation accuracy (ties: the first, as tprbench keeps it), whether a seed failed (> 5% error,
the paper's threshold), and the validation accuracy at fixed numbers of updates — the only way to
compare runs whose "epochs" differ (a pass over the data in tprbench's old loop, 200 updates in the
authors' and in the stream arms).

The authors' runs are the JSON lines their training loop wrote at each validation (one file per task
and seed, `qa{N}-seed{S}.jsonl`: step, valid_acc, test_acc, …), produced outside this project by their
code (ischlag/TPR-RNN, run under TF 2's compat.v1; how is in the report). Those files are data, kept
beside the report; their code is not part of this repository. A run counts once it reaches the cap, or
100% validation accuracy before it: no later validation can then be the first best, so such runs may be
stopped there, as tprbench's `stop_value` ends its own.

Why a script and not `tprbench report`: the report reads one record; this table joins a record with
measurements that are not in it. Fisher's exact test (scipy) says how surprising a difference in the
count of failed seeds is at these seed counts.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

FAILED_ABOVE = 5.0  # % test error: the paper's "failed task"


@dataclass
class SeedRun:
    seed: int
    error: float | None  # test error % at the best validation accuracy (None: not finished)
    curve: list[tuple[int, float]]  # (updates, validation accuracy)
    known_until: int | None = None  # the updates up to which the curve is complete (None: its last point)

    def valid_at(self, updates: int) -> float | None:
        """The validation accuracy of the last validation at or before `updates` (None: none yet, or
        the run had already ended before it: a run that reached 100% stops, so it stays at 1.0)."""
        seen = [acc for step, acc in self.curve if step <= updates]
        if not seen:
            return None
        last_step = self.known_until if self.known_until is not None else self.curve[-1][0]
        if updates > last_step and self.curve[-1][1] < 1.0:
            return None  # cut short for another reason (still running, paused): not known
        return seen[-1]


@dataclass
class Row:
    name: str
    runs: list[SeedRun]


def tprbench_rows(study_path: str, root: str) -> list[Row]:
    from harness.record.compressed import reading_root
    from harness.record.contract import SUMMARY_SPLIT, metric_col, test_metric
    from harness.record.sources import default_tracking_uri
    from harness.report.load import load_history, load_runs
    from harness.study.cells import expand
    from harness.study.load import load_study

    study = load_study(study_path)
    uri = default_tracking_uri(reading_root(Path(root)))  # a committed mlflow.db.gz: its decompressed copy
    runs = load_runs(uri, study.name)
    runs = runs[(runs["phase"] == "final") & (runs["status"].isin(["finished", "diverged"]))]
    history = load_history(uri, study.name, list(runs["run_id"]), ["valid_acc"])
    rows = []
    for cell in expand(study):
        mine = runs[runs["cell_id"] == cell.id].sort_values("seed")
        per_epoch = _updates_per_epoch(cell, mine)
        seeds = []
        for _, run in mine.iterrows():
            h = history[history["run_id"] == run["run_id"]].sort_values("step")
            curve = [(int(step) * per_epoch, float(v)) for step, v in zip(h["step"], h["value"])]
            error = run.get(metric_col(test_metric(SUMMARY_SPLIT, "mean_error")))
            seeds.append(SeedRun(int(run["seed"]), None if _nan(error) else float(error), curve))
        rows.append(Row(cell.task_label or cell.label, seeds))
    return rows


def _updates_per_epoch(cell, runs) -> int:
    """200 for a stream cell (`epoch_updates`), else the batches of one pass over its training data."""
    from harness.record.contract import param_col

    if len(runs):
        value = runs.iloc[0].get(param_col("epoch_updates"))
        if value not in (None, "null", "None") and not _nan(value):
            return int(float(value))
    from tasks.registry import get_task

    adapter = get_task(cell.task)(cell.task_options, cell.data, Path("/tmp/tprbench-side-by-side-cache"))
    adapter.prepare()
    batch = int(float(runs.iloc[0][param_col("batch_size")])) if len(runs) else 128
    return math.ceil(adapter.train_example_count() / batch)


def _nan(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def study_tasks(study_path: str) -> set[int]:
    """The bAbI task numbers the study's cells train on (their `tasks` option): the authors' rows shown."""
    from harness.study.cells import expand
    from harness.study.load import load_study

    out: set[int] = set()
    for cell in expand(load_study(study_path)):
        out.update(int(t) for t in str(cell.task_options.get("tasks", "")).replace(",", " ").split() if t.isdigit())
    return out


def authors_rows(folder: Path, cap: int) -> list[tuple[int, Row]]:
    """(task, row) for each task found in `folder`: the authors' runs, read up to `cap` updates."""
    by_task: dict[int, list[SeedRun]] = {}
    for path in sorted(folder.glob("qa*-seed*.jsonl")):
        match = re.fullmatch(r"qa(\d+)-seed(\d+)\.jsonl", path.name)
        if not match:
            continue
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        reached = any(r["step"] >= cap for r in lines)  # validations are every 200 updates: 7,100 falls between two
        lines = [r for r in lines if r["step"] <= cap]
        solved = any(r["valid_acc"] >= 1.0 for r in lines)  # the first best is then fixed: a run may stop there
        if not lines or not (reached or solved):
            continue  # not yet at the cap: not comparable
        best = max(lines, key=lambda r: (r["valid_acc"], -r["step"]))  # the first best
        curve = [(r["step"], r["valid_acc"]) for r in lines]
        run = SeedRun(int(match.group(2)), 100.0 * (1 - best["test_acc"]), curve, cap if reached else None)
        by_task.setdefault(int(match.group(1)), []).append(run)
    return [(t, Row(f"qa{t} · the authors' code (≤ {cap:,} updates)", sorted(runs, key=lambda r: r.seed))) for t, runs in sorted(by_task.items())]


def _fmt(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def table(rows: list[Row], marks: list[int], reference: Row | None) -> str:
    from scipy.stats import fisher_exact

    head = ["row", "seeds", "test error % per seed", "mean ± std", "failed (> 5%)"]
    head += [f"valid acc @ {m:,}" for m in marks]
    head += [f"failed vs {reference.name.split(' ·')[0]}: Fisher p" if reference else "Fisher p"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        done = [r for r in row.runs if r.error is not None]
        errors = [r.error for r in done]
        failed = sum(e > FAILED_ABOVE for e in errors)
        cells = [
            row.name,
            str(len(done)),
            " ".join(f"{e:.1f}" for e in errors) or "–",
            _fmt(errors),
            f"{failed} / {len(done)}" if done else "–",
        ]
        for m in marks:
            values = [v for v in (r.valid_at(m) for r in done) if v is not None]
            cells.append(f"{statistics.mean(values):.3f} ({len(values)})" if values else "–")
        if reference is not None and row is not reference and done:
            ref = [r.error for r in reference.runs if r.error is not None]
            ref_failed = sum(e > FAILED_ABOVE for e in ref)
            _, p = fisher_exact([[failed, len(done) - failed], [ref_failed, len(ref) - ref_failed]])
            cells.append(f"{p:.3f}")
        else:
            cells.append("")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study")
    p.add_argument("--root", required=True, help="the study's record (a run directory holding mlflow.db, or records/<study> with mlflow.db.gz)")
    p.add_argument("--authors", type=Path, default=None, help="folder of the authors' runs: qa{N}-seed{S}.jsonl")
    p.add_argument("--cap", type=int, default=21_300, help="updates of the authors' runs read (their runs' length)")
    p.add_argument("--marks", default="7100,14200,21300", help="updates at which validation accuracy is shown")
    p.add_argument("--reference", default=None, help="the row the failed counts are tested against (its name's first word)")
    args = p.parse_args(argv)
    rows = tprbench_rows(args.study, args.root)
    if args.authors is not None:
        tasks = study_tasks(args.study)
        rows += [r for t, r in authors_rows(args.authors, args.cap) if t in tasks]
    reference = next((r for r in rows if r.name.split(" ")[0] == args.reference), None) if args.reference else None
    print(table(rows, [int(m) for m in args.marks.split(",")], reference))
    return 0


if __name__ == "__main__":
    sys.exit(main())
