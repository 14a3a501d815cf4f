"""`tprbench report STUDY`: the papers' tables and figures, regenerated from the MLflow record."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = "tables (Markdown, LaTeX, CSV) and figures of a study, regenerated from its MLflow record (no training)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="study file (TOML) or the name of a recorded study")
    p.add_argument("--root", default="runs", help="run directory holding the MLflow store (default ./runs)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite under --root)")
    p.add_argument("--out", default=None, help="output folder (default reports/<study>)")
    p.add_argument("--bench", default=None, metavar="CSV", help="a `tprbench bench units --csv` file to plot beside the epoch times")
    p.add_argument(
        "--seeds",
        type=bounds.SEEDS_WANTED,
        default=None,
        help="seeds wanted per cell (default: the study file's study.seeds; for a name, the highest recorded seed + 1)",
    )
    p.add_argument("--no-figures", action="store_true", help="tables only")


def command_line(args: argparse.Namespace) -> str:
    """The exact command that regenerates the files, as the user typed its arguments."""
    import shlex

    parts = ["tprbench", "report", args.study, "--root", args.root]
    for flag, value in (("--tracking-uri", args.tracking_uri), ("--out", args.out), ("--bench", args.bench), ("--seeds", args.seeds)):
        if value is not None:
            parts += [flag, str(value)]
    if args.no_figures:
        parts.append("--no-figures")
    return shlex.join(parts)


def reading(root: str, uri: str | None):
    """(tracking URI, run directory) a reading command uses for `--root`: the root itself, or a
    committed record's decompressed copy when it holds only mlflow.db.gz (harness.record.compressed);
    the run directory is where the reader's caches go, never into the committed folder."""
    from pathlib import Path

    from harness.record.compressed import reading_root
    from harness.record.sources import default_tracking_uri

    read = reading_root(Path(root).expanduser())
    return uri or default_tracking_uri(read), read


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.markup import escape

    from harness.commands.support.output_path import check_output_path
    from harness.record.store_check import check_stores

    if args.out:  # before the record is read (the default folder is known once the study's name is)
        check_output_path(args.out, "--out")
    console = Console()
    uri, read = reading(args.root, args.tracking_uri)
    check_stores(args.tracking_uri, reading=True)  # a dead server: one line, not minutes of retries
    # A first line before pandas and MLflow load (tens of seconds on a busy machine).
    console.print(f"report {args.study}: reading the record in {uri}", markup=False, highlight=False, soft_wrap=True)
    from harness.report import print_sections, resolve_study, write_report

    name, seeds, cell_ids, note = resolve_study(args.study)
    if note:
        console.print(f"[yellow]note:[/] {escape(note)}")
    out = Path(args.out) if args.out else check_output_path(Path("reports") / name, "--out (default reports/<study>)")
    result = write_report(
        uri,
        name,
        out,
        seeds_wanted=args.seeds if args.seeds is not None else seeds,
        cell_ids=cell_ids,
        command=command_line(args),
        bench_csv=args.bench,
        figures=not args.no_figures,
        root=read,
    )
    print_sections(result.sections, console)
    for n in result.notes:
        console.print(f"[dim]{escape(n)}[/]")
    console.print(f"wrote {len(result.files)} files to {escape(str(out))}: " + ", ".join(escape(p.name) for p in result.files))
    return 0
