"""`tprbench bench units|harness`: measured speed, not guesses."""

from __future__ import annotations

import argparse

HELP = ("benchmarks: `bench units` times forward+backward of every unit against torch's GRU/LSTM; `bench record` "
        "times the commands that read a study's record at 1k-100k runs")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench", metavar="WHAT", required=True)
    u = sub.add_parser("units", help="forward+backward time of each unit, ratio to gru")
    u.add_argument("--dims", type=_ints, default=[64, 256, 512], help="hidden sizes, comma-separated (default 64,256,512)")
    u.add_argument("--seq", type=int, default=50, help="sequence length T (default 50)")
    u.add_argument("--batch", type=int, default=64, help="batch size B (default 64)")
    u.add_argument("--units", default=None,
                   help="';'-separated unit specs (default: gru;lstm;tpru;tpru-v1;tpru-mod1;tpru-mod2;tpru-mod3;tpru[slices=8] with roles=d)")
    u.add_argument("--repeats", type=int, default=10, help="timed repeats; the median is reported (default 10)")
    u.add_argument("--warmup", type=int, default=3, help="untimed warm-up runs (default 3)")
    u.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    u.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    u.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    u.set_defaults(_bench="units")
    h = sub.add_parser("harness", help="parallel efficiency and per-trial overhead on a simulated cluster")
    h.add_argument("--nodes", type=int, default=4)
    h.add_argument("--trial-seconds", type=float, default=5.0)
    h.add_argument("--trials-per-node", type=int, default=4)
    h.add_argument("--cpus-per-node", type=int, default=1)
    h.add_argument("--root", default=None, help="run directory (default: a temporary one)")
    h.set_defaults(_bench="harness")
    r = sub.add_parser("record", help="run/study show/report/compare on synthetic records of 1k, 10k, 100k runs")
    r.add_argument("--sizes", default="quickstart,1k,10k",
                   help="comma-separated sizes (quickstart, 1k, 10k, 100k) or case names (default quickstart,1k,10k)")
    r.add_argument("--root", default=None, help="where the records are built (kept, and reused when already built; "
                   "default: a temporary folder, deleted afterwards)")
    r.add_argument("--keep", action="store_true", help="keep the temporary records")
    r.add_argument("--code", default=None, metavar="DIR", help="also time another checkout of tprbench on the same records")
    r.add_argument("--code-label", default="before", help="its label in the output (default before)")
    r.add_argument("--only", default=None, help="comma-separated substrings of the commands to time (default all)")
    r.add_argument("--repeat", type=int, default=1, help="times each command is run (default 1)")
    r.add_argument("--csv", default=None, help="also write the timings to this CSV file")
    r.set_defaults(_bench="record")


def run(args: argparse.Namespace) -> int:
    if args._bench == "record":
        from harness.bench_record import run_record_bench

        return run_record_bench(args)
    if args._bench == "units":
        from harness.bench_units import run_unit_bench

        return run_unit_bench(args)
    from harness.bench_harness import run_harness_bench

    return run_harness_bench(args)
