"""`tprbench papers [CLAIMS.toml]`: every seed paper's claims against the committed records, one table."""

from __future__ import annotations

import argparse

HELP = (
    "the papers' claims against the record: the paper's number, ours, the budget, a verdict per claim "
    "(reads studies/papers.toml and the records it names; writes reports/papers/)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "claims",
        nargs="?",
        default="studies/papers.toml",
        help="claims file (default studies/papers.toml); its study and record paths are relative to --base",
    )
    p.add_argument("--out", default="reports/papers", help="output folder (default reports/papers)")
    p.add_argument("--base", default=".", help="folder the claims' paths are relative to (default: the current one)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.commands.support.output_path import check_output_path

    check_output_path(args.out, "--out")  # before the claims and records are read
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Column, Table

    from harness.report.papers import write_papers

    base = Path(args.base)
    if not base.is_dir():
        from harness.report.papers import PapersError

        raise PapersError(f"--base {args.base}: not a folder")
    # The command that regenerates the report (from the checkout's root); --out is where this copy went.
    command = "tprbench papers" + ("" if args.claims == "studies/papers.toml" else f" {args.claims}")
    rows, files = write_papers(Path(args.claims), Path(args.out), base, command)
    console = Console()
    table = Table(Column("claim", overflow="fold"), "paper", "tprbench", "authors' code", "verdict", show_lines=False)  # an id folds, never "…"
    for r in rows:  # the terminal gets the short form; README.md has the claims, budgets and links
        authors = f"{r.claim.authors_code.value:g}" if r.claim.authors_code else "–"  # the number the verdict used
        table.add_row(escape(r.claim.id), escape(r.claim.paper_value), escape(r.ours.text if r.ours else "–"), authors, escape(r.verdict))
    console.print(table)
    console.print(f"wrote {', '.join(escape(str(f)) for f in files)}")
    return 0
