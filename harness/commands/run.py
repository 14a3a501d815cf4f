"""`tprbench run STUDY.toml`: search, final seeds, record — resumable; ends with the table."""

from __future__ import annotations

import argparse

HELP = "run a study: Optuna search per cell, final seed runs, everything recorded in MLflow (rerun = resume)"


def add_common(p: argparse.ArgumentParser) -> None:
    """Options shared by `run`, `study show` and `report`: where the record lives."""
    p.add_argument("study", help="study file (TOML), e.g. studies/quickstart.toml")
    p.add_argument("--root", default="runs", help="run directory: MLflow store, Optuna journal, checkpoints, caches (default ./runs)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite under --root)")
    p.add_argument("--storage", default=None, help="Optuna storage URL, e.g. postgresql://... (default: journal file under --root)")
    p.add_argument("--only", action="append", default=[], metavar="KEY=GLOB",
                   help="only cells matching, e.g. 'unit=tpru*' (repeatable; AND-ed; keys: unit, arch, task, dim, id)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common(p)
    p.add_argument("--address", default=None, help="Ray cluster address (default: start Ray locally)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")
    p.add_argument("--force", action="store_true", help="rerun the selected cells from scratch (their records are deleted)")
    p.add_argument("--quiet", action="store_true", help="no live view")


def load_cells(args: argparse.Namespace):
    from harness.study import expand, filter_cells, load_study

    study = load_study(args.study)
    cells = filter_cells(expand(study), args.only) if args.only else expand(study)
    return study, cells


def check_root(root: str):
    """The run directory must be creatable and writable; say so before any work starts."""
    import os
    from pathlib import Path

    from harness.runner import RunnerError

    path = Path(root).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunnerError(f"run directory {path}: cannot create it ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunnerError(f"run directory {path}: not writable")
    return path.resolve()


def run(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from rich.console import Console

    from harness.logs import route_library_logs
    from harness.runner import StudyRunner

    console = Console()
    study, cells = load_cells(args)
    root = check_root(args.root)
    route_library_logs(root)  # SQLAlchemy tracebacks of a failing store go to <root>/logs, not the terminal
    runner = StudyRunner(study, cells, root, args.tracking_uri, args.storage, force=args.force,
                         console=None if args.quiet else console)
    console.print(f"[bold]tprbench run[/] {args.study}: {len(cells)} cells · root {root}")
    # MLflow's UI binds to 127.0.0.1 unless told otherwise; soft_wrap keeps the command on one copyable line.
    console.print(f"watch: mlflow ui --backend-store-uri {runner.tracking_uri} --host 127.0.0.1", soft_wrap=True)
    summary = runner.run(address=args.address, num_cpus=args.num_cpus)
    console.print(f"finished in {summary['seconds']:.1f} s")
    from harness.report import print_summary

    print_summary(study, cells, runner.tracking_uri, console)
    return 0
