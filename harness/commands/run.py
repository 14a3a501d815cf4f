"""`tprbench run STUDY.toml`: search, final seeds, record — resumable; ends with the table."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = "run a study: Optuna search per cell, final seed runs, everything recorded in MLflow (rerun = resume)"


def add_common(p: argparse.ArgumentParser) -> None:
    """Options shared by `run`, `study show` and `report`: where the record lives."""
    p.add_argument("study", help="study file (TOML), e.g. studies/quickstart.toml")
    p.add_argument("--root", default="runs", help="run directory: MLflow store, Optuna journal, checkpoints, caches (default ./runs)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite under --root)")
    p.add_argument("--storage", default=None, help="Optuna storage URL, e.g. postgresql://... (default: journal file under --root)")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KEY=GLOB",
        help="only cells matching, e.g. 'unit=tpru*' (repeatable; AND-ed; keys: unit, arch, task, dim, id)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common(p)
    p.add_argument("--address", default=None, help="Ray cluster address (default: start Ray locally)")
    p.add_argument("--num-cpus", type=bounds.CPUS, default=None, help="CPUs for a local Ray (default: all)")
    p.add_argument("--force", action="store_true", help="rerun the selected cells from scratch (their records are deleted)")
    p.add_argument(
        "--until-epoch",
        type=bounds.COUNT,
        default=None,
        metavar="N",
        help="pause every run after epoch N (its best model so far tested and recorded as `paused`); "
        "the next `run` continues the paused runs from their checkpoints",
    )
    p.add_argument("--quiet", action="store_true", help="no live view or progress lines")
    p.add_argument("--verbose", action="store_true", help="library messages (Ray, MLflow) on the terminal too, not only in <root>/logs/")


def load_cells(args: argparse.Namespace):
    """The study and its cells, restricted by `--only` (harness.study.load.select: a filter that
    keeps no cell is an error, exit 2, naming the filter and the values the study has)."""
    from harness.study.load import select

    return select(args.study, args.only)


def check_root(root: str):
    """The run directory must be creatable and writable, and not a committed record (mlflow.db.gz,
    harness.record.compressed); say so before any work starts."""
    import os
    from pathlib import Path

    from harness.driver.errors import RunnerError
    from harness.record.compressed import refuse_writing

    path = Path(root).expanduser()
    refuse_writing(path, "run --root")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunnerError(f"run directory {path}: cannot create it ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunnerError(f"run directory {path}: not writable")
    return path.resolve()


def watch_hint(tracking_uri: str) -> str:
    """How to watch the study in MLflow's UI: a server is already serving it (open its URL); a
    store (SQLite, a database URL) needs `mlflow ui` on it, bound to 127.0.0.1 (docs/security.md)."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri.rstrip('/')}/#/experiments in a browser (the MLflow server's UI)"
    return f"mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1 --port 5000, then open http://127.0.0.1:5000"


def run(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import contextlib

    from rich.console import Console

    from harness.commands.support.logs import route_library_logs
    from harness.commands.support.quiet import log_path, quiet_libraries, stderr_to
    from harness.driver.runner import StudyRunner
    from harness.record.store_check import check_stores

    quiet_libraries()
    console = Console()
    study, cells = load_cells(args)
    check_stores(args.tracking_uri, args.storage)  # a wrong address: one line, before --root is made
    root = check_root(args.root)
    route_library_logs(root)  # SQLAlchemy tracebacks of a failing store go to <root>/logs, not the terminal
    runner = StudyRunner(study, cells, root, args.tracking_uri, args.storage, force=args.force, console=console, until_epoch=args.until_epoch)
    runner.show_progress = not args.quiet  # --quiet: no live view or progress lines; the driver's messages stay
    console.print(f"[bold]tprbench run[/] {args.study}: {len(cells)} cells · root {root}")
    # soft_wrap keeps the command on one copyable line.
    console.print(f"watch: {watch_hint(runner.tracking_uri)}", soft_wrap=True, markup=False, highlight=False)
    runner.preflight(args.address)  # bad input (address, data path) stops here, before <root>/logs/ is written
    log = log_path(root, study.name)
    try:
        with contextlib.nullcontext() if args.verbose else stderr_to(log):
            summary = runner.run(address=args.address, num_cpus=args.num_cpus)
    finally:
        if log.exists() and log.stat().st_size:
            console.print(f"library messages (Ray, MLflow): {log}", soft_wrap=True, highlight=False)
    console.print(f"finished in {summary['seconds']:.1f} s")
    from harness.report import print_summary

    tracker = getattr(runner, "tracker", None)
    print_summary(
        study, cells, runner.tracking_uri, console, root=runner.root, reader=None if tracker is None else tracker.reader, agg=runner.closing_aggregate
    )
    return 0
