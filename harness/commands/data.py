"""`tprbench data logic`: generate a logical-entailment dataset in the DeepMind format."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = "generate task data: `data logic` writes train/validate/test_* pairs of the logical entailment task"

# Statistics of a generated split are computed on at most this many lines (train is big).
STATS_LINES = 20000


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="dataset", metavar="DATASET", required=True)
    lg = sub.add_parser(
        "logic",
        help="logical entailment pairs (Evans et al. 2018 four-tuples, exact labels)",
        description="Write train.txt, validate.txt and test_{easy,hard,big,massive,exam}.txt in the DeepMind "
        "format A,B,E,H1,H2,H3 plus generator.json. Rerunning with the same parameters reuses the "
        "files. When $TPRBENCH_DATA is set, the statistics are printed next to the real splits'.",
    )
    lg.add_argument("--out", required=True, help="output directory")
    lg.add_argument("--train", type=bounds.COUNTS, default=100000, help="train lines (default 100000; rounded up to a multiple of 4)")
    lg.add_argument("--seed", type=bounds.SEED, default=0, help="random seed (default 0); same seed, same bytes")
    lg.add_argument(
        "--eval-size",
        type=bounds.integer(0, 100_000_000),
        default=1000,
        help="lines per evaluation split (default 1000; test_exam at most 100; 0 leaves them out)",
    )
    lg.add_argument(
        "--exclude",
        nargs="+",
        action="extend",
        default=[],
        metavar="DIR_OR_FILE",
        help="split files, or directories holding them, whose pairs (up to renaming) must not be "
        "generated, e.g. the real DeepMind files: --exclude $TPRBENCH_DATA/logical_entailment",
    )
    lg.add_argument("--force", action="store_true", help="regenerate even if the directory is up to date")
    lg.add_argument("--no-stats", action="store_true", help="skip the statistics table")
    lg.set_defaults(_dataset="logic")


def _check_args(args: argparse.Namespace) -> None:
    from tasks.errors import DataError

    if args.train < 0:
        raise DataError(f"--train must be >= 0, got {args.train}")
    if args.eval_size < 0:
        raise DataError(f"--eval-size must be >= 0, got {args.eval_size}")
    from pathlib import Path

    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: exists and is not a directory; give a directory (new or earlier output)")


def run(args: argparse.Namespace) -> int:
    if args._dataset == "logic":
        return _run_logic(args)
    raise AssertionError(args._dataset)  # argparse only offers known datasets


def _run_logic(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from tasks.errors import DataError
    from tasks.logic import generator as G
    from tasks.progress import ConsoleReporter, per_split, reporting

    _check_args(args)
    console = Console(width=150)
    console.print(
        f"logical entailment dataset → {args.out} (train {args.train:,} lines, seed {args.seed})", markup=False, highlight=False, soft_wrap=True
    )
    # A bar per split on a terminal; unattended, a line as each split starts and every 30 s.
    with reporting(ConsoleReporter(console)), per_split("generating", units={G.EXCLUDING: "files"}) as progress:
        try:
            info = G.write_dataset(
                args.out, train=args.train, seed=args.seed, eval_size=args.eval_size, exclude=args.exclude, force=args.force, progress=progress
            )
        except ValueError as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(str(exc)) from None
        except OSError as exc:  # e.g. a parent of --out is a file, or no permission
            raise DataError(f"--out {args.out}: cannot write the dataset ({exc.strerror}: {exc.filename})") from None

    state = "up to date, nothing regenerated" if info.cached else f"written in {info.seconds:.1f} s"
    console.print(f"logical entailment dataset in {info.out_dir} ({state}; seed {args.seed})")
    table = Table(show_header=True)
    for col in ("split", "file", "lines", "preset", "seconds"):
        table.add_column(col, justify="right" if col in ("lines", "seconds") else "left")
    for split, path in info.files.items():
        preset = info.params["splits"][split]["preset"]["name"]
        secs = info.split_seconds.get(split)
        table.add_row(split, path.name, f"{info.counts.get(split, 0):,}", preset, f"{secs:.1f}" if secs is not None else "")
    console.print(table)
    if info.params["exclude"]:
        console.print(f"excluded pairs of {len(info.params['exclude'])} file(s) (up to renaming of variables)")
    if not args.no_stats:
        console.print(_stats_table(info, STATS_LINES))
    return 0


def _stats_table(info, limit: int):
    """Generated splits' statistics, each next to the real split's when $TPRBENCH_DATA is set."""
    import itertools

    from rich.table import Table

    from tasks.errors import DataError
    from tasks.logic import data as D
    from tasks.logic import generator as G
    from tasks.paths import data_root

    real: dict = {}
    root = data_root()
    if root is not None:
        try:
            real = D.find_splits(root / "logical_entailment")
        except DataError:
            real = {}
    table = Table(
        title="statistics (as in $TPRBENCH_DATA/logical_entailment/STATS.md)"
        + ("" if real else "; set TPRBENCH_DATA to compare with the real splits")
    )
    for col in G.STATS_HEADER:
        table.add_column(col, justify="left" if col == "split" else "right")
    for split, path in info.files.items():
        examples = list(itertools.islice(D.read_split(path), limit))
        label = f"{split} (generated" + (f", first {limit:,})" if info.counts.get(split, 0) > limit else ")")
        table.add_row(*G.format_stats_row(label, G.split_stats(examples)))
        if split in real:
            table.add_row(*G.format_stats_row(f"{split} (real)", G.split_stats(D.read_split(real[split]))), style="dim")
    return table
