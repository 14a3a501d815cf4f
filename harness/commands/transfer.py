"""`tprbench transfer RUN_ID --tasks MR,CR,...`: SentEval transfer of a tracked run's encoder."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = (
    "evaluate the frozen sentence encoder of tracked runs on SentEval transfer tasks: accuracy in per cent (Pearson × 100 for "
    "relatedness/STS) per task, printed as a table and logged as a nested `transfer` run under each run"
)

DEFAULT = "MR,CR,SUBJ,MPQA,SST2,TREC,MRPC,SICKEntailment,SICKRelatedness,STSBenchmark"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="MLflow run id(s) of finished seed/trial runs")
    p.add_argument("--tasks", default=DEFAULT, help=f"comma-separated SentEval tasks (default {DEFAULT}); STS12..STS16 too")
    p.add_argument("--root", default="runs", help="run directory (default ./runs)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI holding the runs (default: sqlite under --root)")
    p.add_argument("--task-path", default=None, help="SentEval data/downstream folder (default <run data>/senteval)")
    p.add_argument("--kfold", type=bounds.FOLDS, default=10, help="cross-validation folds for tasks without a test split (default 10)")
    p.add_argument("--out", default=None, help="also write table.md/table.csv here")
    p.add_argument("--no-log", action="store_true", help="do not record the results in MLflow")


def run(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import pandas as pd
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from harness.record.compressed import reading_root, refuse_writing
    from harness.record.layout import RunRoot
    from harness.record.sources import default_tracking_uri
    from harness.record.store_check import check_stores
    from harness.transfer import TransferError, evaluate_run
    from tasks.transfer.senteval_data import TASKS

    if args.out:
        from harness.commands.support.output_path import check_output_path

        check_output_path(args.out, "--out")  # before any encoder is evaluated
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise TransferError(f"--tasks: unknown SentEval task(s) {', '.join(unknown)}; known: {', '.join(TASKS)}")
    root = Path(args.root).resolve()
    if not args.no_log:  # it logs a nested run into the record
        refuse_writing(root, "transfer --root")
    root = reading_root(root)  # --no-log on a committed mlflow.db.gz: its decompressed copy
    uri = args.tracking_uri or default_tracking_uri(root)
    check_stores(args.tracking_uri, reading=True)
    console = Console()
    rows = []
    for run_id in args.run_ids:
        with console.status(f"SentEval on run {run_id}: {', '.join(tasks)}"):
            results = evaluate_run(uri, run_id, tasks, args.task_path, args.kfold, RunRoot(root).cache, log=not args.no_log)
        row = {"run": run_id[:8], "encoder": results.pop("_source")["label"]}
        for task in tasks:
            r = results[task]
            # As the TPRU paper's transfer table: accuracy for classification, Pearson × 100 for relatedness/STS.
            row[task] = round(r["acc"], 1) if "acc" in r else round(100 * r["pearson"], 1)
        row["seconds"] = round(sum(r.get("seconds", 0) for r in results.values()), 1)
        rows.append(row)
    df = pd.DataFrame(rows)
    table = Table(title="SentEval transfer (accuracy %; relatedness/STS: Pearson × 100)")
    for col in df.columns:
        table.add_column(col, justify="left" if col in ("run", "encoder") else "right")
    for row in df.itertuples(index=False):
        table.add_row(*(escape(str(v)) for v in row))
    Console(width=160).print(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        command = "tprbench transfer " + " ".join(args.run_ids) + f" --tasks {args.tasks} --root {args.root}"
        lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
        lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
        (out / "table.md").write_text(f"<!-- regenerate: {command} -->\n\n" + "\n".join(lines) + "\n")
        (out / "table.csv").write_text(df.to_csv(index=False))  # plain CSV: the command is in table.md
        console.print(f"wrote {out}/table.md, table.csv")
    return 0
