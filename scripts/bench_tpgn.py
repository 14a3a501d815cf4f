"""Forward+backward ms per step of `tpgn` against a torch LSTM with a matched parameter count.

    .venv/bin/python scripts/bench_tpgn.py --dims 16,25 --input-dim 200 --batch 20 --seq 35 --threads 1

One "step" is one training step of the unit alone (B sequences of T tokens, loss = sum of outputs):
what a truncated-BPTT window costs before the vocabulary layer. Units are timed interleaved
(A, B, C, A, B, C, ...) so background load hits each alike; the median is printed.
`tprbench bench units` cannot do this (it ties the input size to the hidden size).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

import units


def matched_lstm_hidden(params: int, din: int) -> int:
    """The LSTM hidden size whose weights 4h² + 4h·d_in come closest to `params`."""
    h = (-din + math.sqrt(din * din + params)) / 2
    return min((math.floor(h), math.ceil(h)), key=lambda k: abs(4 * k * k + 4 * k * din - params))


def step_ms(module, x) -> float:
    t0 = time.perf_counter()
    out, state = module(x)
    (out.sum() + state.sum()).backward()
    module.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="16,25", help="plan sides d (hidden size d²)")
    ap.add_argument("--input-dim", type=int, default=200)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--seq", type=int, default=35)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    din = args.input_dim
    print(f"B={args.batch} T={args.seq} d_in={din} threads={args.threads} torch {torch.__version__}")
    print(f"{'unit':<28}{'hidden':>8}{'formula':>12}{'total':>12}{'ms/step':>10}{'× lstm':>8}")
    for d in (int(s) for s in args.dims.split(",")):
        tpgn_params = units.param_counts("tpgn", din, d * d)
        h = matched_lstm_hidden(tpgn_params.formula, din)
        specs = [("lstm", h), ("tpgn", d * d), ("tpgn[impl=loop]", d * d), ("lstm", d * d)]
        torch.manual_seed(0)
        mods = [units.build(s, din, hid) for s, hid in specs]
        x = torch.randn(args.batch, args.seq, din)
        times = [[] for _ in mods]
        for i in range(args.warmup + args.repeats):
            for k, m in enumerate(mods):
                ms = step_ms(m, x)
                if i >= args.warmup:
                    times[k].append(ms)
        base = statistics.median(times[0])
        for (s, hid), t in zip(specs, times):
            c = units.param_counts(s, din, hid)
            med = statistics.median(t)
            print(f"{s + (f' (d={d})' if s.startswith('tpgn') else ''):<28}{hid:>8}{c.formula:>12,}{c.total:>12,}{med:>10.1f}{med / base:>8.2f}")


if __name__ == "__main__":
    main()
