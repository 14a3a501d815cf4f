"""Forward+backward timing of units, in the style of pytorch/benchmarks/fastrnns.

Every unit runs in the same process on the same inputs; forward and backward are timed
separately after warm-up, and the median of the repeats is reported next to the ratio to
torch's GRU measured in the same run.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_UNITS = ["gru", "lstm", "tpru", "tpru-v1", "tpru-mod1", "tpru-mod2", "tpru-mod3", "tpru[slices=8]"]


@dataclass
class BenchRow:
    unit: str
    dim: int
    seq: int
    batch: int
    forward_ms: float
    backward_ms: float
    total_ms: float
    ratio_to_gru: float | None
    params_formula: int | None
    params_total: int


def _with_default_roles(spec: str, dim: int) -> str:
    """TPRU variants are benchmarked with roles = d unless the spec says otherwise."""
    import units

    resolved = units.resolve(spec, dim)
    if "roles" in units.unit_options(resolved.cls) and "roles" not in resolved.spec.option_dict:
        return str(resolved.spec.with_options(roles=dim))
    return str(resolved.spec)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _step(module, x, mask, device: str) -> tuple[float, float]:
    """One forward and one backward, each timed (ms)."""
    _sync(device)
    t0 = time.perf_counter()
    outputs, state = module(x, mask)
    loss = outputs.sum() + state.sum()
    _sync(device)
    t1 = time.perf_counter()
    loss.backward()
    _sync(device)
    t2 = time.perf_counter()
    module.zero_grad(set_to_none=True)
    x.grad = None
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def _interleaved(modules: list, x: Any, mask: Any, device: str, warmup: int, repeats: int) -> list[list[tuple[float, float]]]:
    """(forward ms, backward ms) of each module per timed repeat, units interleaved within a repeat."""
    times: list[list[tuple[float, float]]] = [[] for _ in modules]
    for i in range(warmup + repeats):
        samples = [_step(module, x, mask, device) for module in modules]
        if i >= warmup:
            for j, sample in enumerate(samples):
                times[j].append(sample)
    return times


def bench(specs: list[str], dims: list[int], seq: int, batch: int, repeats: int, warmup: int, device: str,
          progress=None) -> list[BenchRow]:
    """Median forward/backward ms per unit. Repeats are interleaved across units (unit A, B, C,
    A, B, C, ...) so that load from other processes hits every unit alike."""
    import torch

    import units

    rows: list[BenchRow] = []
    for dim in dims:
        torch.manual_seed(0)
        names = [_with_default_roles(raw, dim) for raw in ["gru"] + [s for s in specs if s != "gru"]]
        modules = [units.build(spec, dim, dim).to(device) for spec in names]
        x = torch.randn(batch, seq, dim, device=device, requires_grad=True)
        mask = torch.ones(batch, seq, dtype=torch.bool, device=device)
        times = _interleaved(modules, x, mask, device, warmup, repeats)
        gru_total = None
        for spec, samples in zip(names, times):
            f = statistics.median(t[0] for t in samples)
            b = statistics.median(t[1] for t in samples)
            if gru_total is None:
                gru_total = f + b
            counts = units.param_counts(spec, dim, dim)
            rows.append(BenchRow(spec, dim, seq, batch, round(f, 3), round(b, 3), round(f + b, 3),
                                 round((f + b) / gru_total, 3), counts.formula, counts.total))
            if progress:
                progress(rows[-1])
    return rows


def run_unit_bench(args) -> int:
    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if args.threads:
        torch.set_num_threads(args.threads)
    specs = [s.strip() for s in args.units.split(";")] if args.units else DEFAULT_UNITS
    console = Console(width=140)
    console.print(f"[bold]bench units[/] T={args.seq} B={args.batch} device={args.device} threads={torch.get_num_threads()} "
                  f"torch {torch.__version__}; median of {args.repeats} after {args.warmup} warm-up")
    with console.status("timing...") as status:
        rows = bench(specs, args.dims, args.seq, args.batch, args.repeats, args.warmup, args.device,
                     progress=lambda r: status.update(f"timed {escape(r.unit)} at d={r.dim}: {r.total_ms:.1f} ms"))
    table = Table()
    for col in ("d", "unit", "forward ms", "backward ms", "fwd+bwd ms", "× gru", "params (formula)", "params (total)"):
        table.add_column(col, justify="left" if col == "unit" else "right")
    for r in rows:
        table.add_row(str(r.dim), escape(r.unit), f"{r.forward_ms:.2f}", f"{r.backward_ms:.2f}", f"{r.total_ms:.2f}",
                      f"{r.ratio_to_gru:.2f}" if r.ratio_to_gru is not None else "", f"{r.params_formula:,}" if r.params_formula else "n/a",
                      f"{r.params_total:,}")
    console.print(table)
    if args.csv:
        import pandas as pd

        pd.DataFrame([asdict(r) for r in rows]).to_csv(args.csv, index=False)
        console.print(f"wrote {args.csv}")
    return 0
