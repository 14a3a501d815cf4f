"""`tprbench bench units|train|harness|record`: measured speed, not guesses."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = (
    "benchmarks: `bench units` times every unit against torch's GRU/LSTM, `bench train` the training "
    "throughput of a logic epoch or of a study's cells, `bench harness` the study driver's overhead, `bench record` the commands that "
    "read a study's record at 1k-100k runs"
)


_ints = bounds.integers(1, bounds.DIM_MAX)  # sizes, lengths, thread counts


def _positive(text: str) -> int:
    return bounds.integer(1, bounds.COUNT_MAX)(text)


_positive.bounds = (1, bounds.COUNT_MAX)  # type: ignore[attr-defined]


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench", metavar="WHAT", required=True)
    u = sub.add_parser("units", help="forward(+backward) time of every unit, ratio to gru (docs/benchmarks.md)")
    u.add_argument("--dims", type=_ints, default=[64, 256, 512], help="nominal sizes d (input size = d), comma-separated (default 64,256,512)")
    u.add_argument("--seq", type=_positive, default=50, help="sequence length T (default 50)")
    u.add_argument("--batch", type=_positive, default=64, help="batch size B (default 64)")
    u.add_argument(
        "--units",
        default=None,
        help="';'-separated unit specs (default: every registered unit and tpru[slices=8]; size rules fill in "
        "roles=d etc. unless the spec sets them)",
    )
    u.add_argument("--repeats", type=_positive, default=10, help="timed rounds; median, min and IQR are reported (default 10)")
    u.add_argument("--warmup", type=bounds.integer(0, 1_000_000), default=3, help="untimed warm-up rounds (default 3)")
    u.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    u.add_argument(
        "--threads", type=_ints, default=None, help="torch threads, comma-separated: each is a block of the table (default: torch's choice)"
    )
    u.add_argument("--padded", action="store_true", help="a padded batch: lengths uniform in [T/2, T]")
    u.add_argument("--forward-only", action="store_true", help="time the forward only, under no_grad (inference, interpretation)")
    u.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall time, or process CPU time (on a loaded machine with --threads 1: not counting waits for a core)",
    )
    u.add_argument(
        "--python-loop", action="store_true", help="run TPRU on its Python loop (the fallback when the C++ one cannot be built), to compare"
    )
    u.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON to PATH ('-' = stdout)")
    u.add_argument("--csv", default=None, metavar="PATH", help="also write the rows to this CSV file")
    u.set_defaults(_bench="units")
    t = sub.add_parser(
        "train",
        help="training throughput: a logic epoch per unit, or each cell of a study (--study) with projected epoch and study cost",
    )
    t.add_argument(
        "--study",
        default=None,
        metavar="FILE",
        help="time each cell of this study file as its seed runs train it (task options, data, arch, unit, sizes, "
        "hyperparameters); the first selected cell is the baseline. Without it: the logic mode below",
    )
    t.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KEY=GLOB",
        help="with --study: only cells matching, as `tprbench run --only` (repeatable; AND-ed; keys: unit, arch, task, dim, id)",
    )
    t.add_argument("--batches", type=_positive, default=None, help="time the first N batches of an epoch (default: the whole epoch)")
    t.add_argument("--units", default=None, help="logic mode: ';'-separated unit specs (default: as `bench units`)")
    t.add_argument("--dim", type=_positive, default=None, help="logic mode: hidden size d (default 64)")
    t.add_argument("--arch", default=None, help="logic mode: architecture (default plain)")
    t.add_argument("--train-size", type=_positive, default=None, help="logic mode: generated training pairs per epoch (default 3200 = 50 batches)")
    t.add_argument("--batch-size", type=_positive, default=None, help="logic mode: batch size (the logic task's default, 64)")
    t.add_argument(
        "--repeats",
        type=_positive,
        default=3,
        help="timed rounds, interleaved across units or cells (one epoch, or --batches, each); the median is reported (default 3)",
    )
    t.add_argument(
        "--threads",
        type=_positive,
        default=None,
        help="torch threads (default: with --study, what each run gets from [resources] cpus; else torch's choice; Ray trials use cpus=1 → 1)",
    )
    t.add_argument("--python-loop", action="store_true", help="TPRU on its Python fallback loop, to compare")
    t.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="wall time or process CPU time (see bench units)")
    t.add_argument("--cache", default=None, metavar="DIR", help="where the data is cached (default: a temporary directory)")
    t.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON to PATH ('-' = stdout)")
    t.set_defaults(_bench="train")
    h = sub.add_parser("harness", help="parallel efficiency and per-trial overhead on a simulated cluster")
    h.add_argument("--nodes", type=bounds.integer(1, 1024), default=4)
    h.add_argument("--trial-seconds", type=bounds.real(0, 86_400, lo_open=True), default=5.0)
    h.add_argument("--trials-per-node", type=bounds.integer(1, 1_000_000), default=4)
    h.add_argument("--cpus-per-node", type=bounds.integer(1, 1024), default=1)
    h.add_argument("--root", default=None, help="run directory (default: a temporary one)")
    h.set_defaults(_bench="harness")
    r = sub.add_parser("record", help="run/study show/report/compare on synthetic records of 1k, 10k, 100k runs")
    r.add_argument(
        "--sizes", default="quickstart,1k,10k", help="comma-separated sizes (quickstart, 1k, 10k, 100k) or case names (default quickstart,1k,10k)"
    )
    r.add_argument(
        "--root",
        default=None,
        help="where the records are built (kept, and reused when already built; default: a temporary folder, deleted afterwards)",
    )
    r.add_argument("--keep", action="store_true", help="keep the temporary records")
    r.add_argument("--code", default=None, metavar="DIR", help="also time another checkout of tprbench on the same records")
    r.add_argument("--code-label", default="before", help="its label in the output (default before)")
    r.add_argument("--only", default=None, help="comma-separated substrings of the commands to time (default all)")
    r.add_argument("--repeat", type=bounds.integer(1, 1000), default=1, help="times each command is run (default 1)")
    r.add_argument("--csv", default=None, help="also write the timings to this CSV file")
    r.add_argument("--tracking-server", action="store_true", help="also time `study show` and `report` through an `mlflow server` over each record")
    r.set_defaults(_bench="record")


def run(args: argparse.Namespace) -> int:
    from harness.commands.support.output_path import check_output_path

    for option in ("--csv", "--json"):  # before anything is timed
        path = getattr(args, option[2:], None)
        if path and path != "-":
            check_output_path(path, option, folder=False)
    if args._bench == "record":
        from harness.bench.record import run_record_bench

        return run_record_bench(args)
    if args._bench == "units":
        from harness.bench.units import run_unit_bench

        return run_unit_bench(args)
    if args._bench == "train":
        from harness.bench.train import run_train_bench

        return run_train_bench(args)
    from harness.bench.harness import run_harness_bench

    return run_harness_bench(args)
