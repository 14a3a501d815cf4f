"""`tprbench compare A B`: two studies (or two commits of one study) side by side per cell."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = "compare two studies, or two git commits of one study, cell by cell (mean ± std and the difference of means)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("study_a", help="study file (TOML) or recorded study name: the baseline (A)")
    p.add_argument("study_b", help="study file or name compared with A (may be the same study with --commit-a/--commit-b)")
    p.add_argument("--root", default=None, help="run directory of both studies (default ./runs)")
    p.add_argument("--root-a", default=None, help="run directory of study A (overrides --root)")
    p.add_argument("--root-b", default=None, help="run directory of study B (overrides --root)")
    p.add_argument("--tracking-uri-a", default=None, help="MLflow tracking URI of A (default: sqlite under its root)")
    p.add_argument("--tracking-uri-b", default=None, help="MLflow tracking URI of B (default: sqlite under its root)")
    p.add_argument("--commit-a", default=None, metavar="SHA", help="only runs of A whose git commit starts with SHA")
    p.add_argument("--commit-b", default=None, metavar="SHA", help="only runs of B whose git commit starts with SHA")
    p.add_argument("--seeds", type=bounds.SEEDS_WANTED, default=None, help="seeds wanted per cell (default: from the study files / record)")
    p.add_argument("--csv", default=None, help="also write the comparison (raw numbers) to this CSV file")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.commands.support.output_path import check_output_path

    if args.csv:
        check_output_path(args.csv, "--csv", folder=False)  # before pandas is loaded and both records are read
    from rich.console import Console
    from rich.markup import escape

    from harness.commands.report import reading
    from harness.record.store_check import check_stores
    from harness.report import compare_studies, print_comparison

    console = Console()
    side = {}
    for key in ("a", "b"):
        uri, read = reading(getattr(args, f"root_{key}") or args.root or "runs", getattr(args, f"tracking_uri_{key}"))
        side[key] = dict(study=getattr(args, f"study_{key}"), uri=uri, commit=getattr(args, f"commit_{key}"), root=read)
        check_stores(getattr(args, f"tracking_uri_{key}"), reading=True, option=f"--tracking-uri-{key}")
    result = compare_studies(side["a"], side["b"], seeds_wanted=args.seeds)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    print_comparison(result, console)
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        result.frame.to_csv(args.csv, index=False, float_format="%.10g", lineterminator="\n")
        console.print(f"wrote {escape(args.csv)}")
    return 0
