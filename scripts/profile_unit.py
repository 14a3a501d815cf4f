"""Where the time of one unit's forward+backward goes: torch.profiler's self CPU time per op,
averaged over a few iterations (docs/benchmarks.md, "Profile").

    .venv/bin/python scripts/profile_unit.py "tpru[roles=64]" 64 [--python-loop] [--threads 1]

B = 64, T = 50, input size = d, as `tprbench bench units`. Also prints the per-step overhead of the
loop: the same unit at B = 1, d = 8, where the kernels cost almost nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

import units
from units import tpru_ext


def fwd_bwd(module, x, mask) -> None:
    outputs, state = module(x, mask)
    (outputs.sum() + state.sum()).backward()


def per_step_us(spec: str, steps: int = 50, rounds: int = 20) -> tuple[float, float]:
    """Median CPU µs per step of forward and of backward at B = 1, d = 8 or 9 (kernels ≈ free)."""
    resolved = units.resolve(spec)
    options = {k: v for k, v in resolved.spec.option_dict.items() if k not in ("roles",)}
    small = str(resolved.spec.__class__(resolved.spec.name, tuple(sorted(options.items()))))
    if "roles" in units.unit_options(resolved.cls):
        small = str(units.parse_spec(small).with_options(roles=8))
    for size in (8, 9, 16):  # d = 8, or the nearest size the unit takes (tpgn: a perfect square)
        try:
            module = units.build(small, size, size)
            break
        except units.UnitSpecError:
            if size == 16:
                raise
    x = torch.randn(1, steps, size, requires_grad=True)
    f, b = [], []
    for r in range(rounds + 3):
        c0 = time.process_time()
        outputs, state = module(x)
        loss = outputs.sum() + state.sum()
        c1 = time.process_time()
        loss.backward()
        c2 = time.process_time()
        if r >= 3:
            f.append(c1 - c0)
            b.append(c2 - c1)
    return statistics.median(f) / steps * 1e6, statistics.median(b) / steps * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("dim", type=int)
    p.add_argument("--python-loop", action="store_true", help="TPRU on its Python loop instead of the C++ one")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iterations", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.python_loop:
        tpru_ext.set_enabled(False)
    torch.manual_seed(0)
    module = units.build(args.spec, args.dim, args.dim)
    x = torch.randn(64, 50, args.dim, requires_grad=True)
    mask = torch.ones(64, 50, dtype=torch.bool)
    for _ in range(2):
        fwd_bwd(module, x, mask)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.iterations):
            fwd_bwd(module, x, mask)
    rows = sorted(((e.self_cpu_time_total / args.iterations / 1e3, e.count // args.iterations, e.key) for e in prof.key_averages()), reverse=True)
    total = sum(r[0] for r in rows)
    backend = tpru_ext.backend()
    print(
        f"{args.spec} d={args.dim} B=64 T=50 threads={args.threads} (TPRU loop: {backend}): "
        f"{total:.1f} ms self CPU per forward+backward (under the profiler)"
    )
    for ms, calls, name in rows[:12]:
        print(f"  {ms:8.2f} ms {100 * ms / total:5.1f}%  {calls:5d} calls  {name}")
    f, b = per_step_us(args.spec)
    print(f"time per step at B=1, d=8 (kernels ≈ free: the loop's overhead plus the call's fixed costs / T): forward {f:.1f} µs, backward {b:.1f} µs")


if __name__ == "__main__":
    main()
