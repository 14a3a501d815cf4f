"""`tprbench study show FILE`: the cells of a study and what is already done."""

from __future__ import annotations

import argparse

HELP = "inspect a study: `study show FILE` lists its cells with trials and seeds done"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harness.commands.run import add_common

    sub = p.add_subparsers(dest="study_command", metavar="WHAT", required=True)
    show = sub.add_parser("show", help="cells, ids and progress (add --json for scripts)")
    add_common(show)
    show.add_argument("--json", action="store_true", help='print {"cells": [...]} as JSON')


def run(args: argparse.Namespace) -> int:
    import json
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from harness.commands.run import load_cells
    from harness.driver.status import study_status
    from harness.record.store_check import check_stores

    study, cells = load_cells(args)
    check_stores(args.tracking_uri, args.storage, reading=True)  # a dead server: one line, not minutes of retries
    rows = study_status(study, cells, args.root, args.tracking_uri, args.storage)
    if args.json:
        # A cell a line, each through json's C encoder (indent= takes the pure-Python one: ~0.5 s
        # at 5,000 cells); the same object as json.dumps({"study": …, "cells": rows}).
        cells_text = ",\n".join(json.dumps(r) for r in rows)
        print(f'{{"study": {json.dumps(study.name)}, "cells": [\n{cells_text}\n]}}')
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"study {study.name} ({args.study}) · root {args.root}")
    for col in ("cell", "id", "trials", "pruned", "failed", "errored", "seeds", "status"):
        table.add_column(col, justify="left" if col in ("cell", "id", "status") else "right")
    for r in rows:
        failed = r["trials_failed"] + r["seeds_failed"]
        table.add_row(
            escape(r["label"]),
            r["id"],
            f"{r['trials_done']}/{r['trials_wanted']}",
            str(r["trials_pruned"]),
            str(failed),
            str(r["runs_errored"]),
            f"{r['seeds_done']}/{r['seeds_wanted']}",
            r["status"],
        )
    console = Console(width=max(120, Console().width))
    console.print(table)
    for r in rows:
        if r["runs_errored"]:
            then = (
                "the next `tprbench run` retries them"
                if r["errored_retried"] == r["runs_errored"]
                else f"{r['errored_retried']} retried by the next `tprbench run`, the others reached the retry cap (--force starts the cell over)"
            )
            console.print(
                f"errored {escape(r['label'])}: {r['runs_errored']} run(s) could not be carried out ({then}): {escape(r['errored_reason'][:300])}",
                soft_wrap=True,
                highlight=False,
            )
    return 0
