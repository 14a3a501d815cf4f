"""`tprbench bench units`: forward(+backward) time of every registered unit against torch's GRU/LSTM.

In the style of pytorch/benchmarks/fastrnns: every unit runs in one process on the same batch,
forward and backward timed separately after warm-up. Robust to a shared machine:
- rounds are interleaved (unit A, B, C, A, B, C, …), so load from other processes hits every unit
  alike, and the ratio to GRU is the median over rounds of (unit / GRU *in the same round*);
- the spread is reported beside the median: the minimum and the interquartile range;
- `--clock cpu` measures process CPU time instead of wall time (with one thread, time the process
  waited for a core is then not counted).

Which units: every registered unit (built-ins, other helpers' units as they land, entry-point
plug-ins), plus `tpru[slices=8]`, unless `--units` names them. Sizes: a unit runs at the nominal
hidden size d with input size d unless its metadata says how to build it comparably
(`size_against_gru`, units/meta.py): the TPRU family with roles = d (the papers' parameter
formula then equals GRU's 6d²); TPRN with symbol/role counts that give it GRU's parameter count;
TPR-RNN (tpr3), whose state is vec(F) = E·R·E, with E, R chosen so E·R·E ≈ d; TPGN, whose hidden
size is a square p², with the square whose parameter count is nearest GRU's. The table shows each
unit's hidden size and its parameter count next to GRU's. A unit that cannot be built at a size is listed as skipped, with why.
The `recurrence` column names what each TPRU row ran (its C++ or Python loop on CPU; on CUDA the Triton
kernel chosen by shape — `triton/resident`, `triton/tiled` or `triton/persistent`, units/tpru_triton.py's
`kernel_for`, overridable with TPRBENCH_TRITON_KERNEL=auto|batch|persistent).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

EXTRA_SPECS = ["tpru[slices=8]"]  # benchmarked beside every registered unit by default


def baseline() -> str:
    """The unit every other is timed against: the one whose metadata says SPEED_REFERENCE (GRU)."""
    from units.registry import speed_reference

    return speed_reference()


# -- sizes ------------------------------------------------------------------------------------
def size_rule(resolved) -> Callable[[int], tuple[dict[str, object], int]] | None:
    """A resolved unit's own way to be sized against GRU (`size_against_gru` on its metadata or,
    for a plug-in, its class); None for one that keeps units/meta.py's default (no options, hidden d)."""
    from units.meta import UnitMeta

    rule = getattr(resolved.meta, "size_against_gru", None)
    if rule is None or getattr(rule, "__func__", None) is UnitMeta.size_against_gru.__func__:
        return None
    return rule


def sized_spec(raw: str, dim: int) -> tuple[str, int]:
    """The spec to build at nominal size `dim` and its hidden size: options the spec gives win over
    those of the unit's `size_against_gru` (units/meta.py; a plug-in unit may declare one too);
    a unit without one runs at hidden size `dim` with its options as given."""
    import units

    resolved = units.resolve(raw)
    given = resolved.spec.option_dict
    rule = size_rule(resolved)
    options, hidden = rule(dim) if rule is not None else ({}, dim)
    extra = {k: v for k, v in options.items() if k not in given}
    spec = resolved.spec.with_options(**extra) if extra else resolved.spec
    return str(spec), hidden


def check_specs(specs: list[str]) -> list[str]:
    """The baseline first, then the specs; a spec that does not parse or names an unknown unit or
    option is the user's error (UnitSpecError → exit 2). Size-dependent failures are not checked
    here: a unit that cannot be built at one size is listed as skipped there."""
    import units

    for raw in specs:
        units.resolve(raw)
    base = baseline()
    return [base] + [s for s in specs if s != base]


def default_specs() -> list[str]:
    import units
    from units.registry import baselines

    names = units.available()
    base = baseline()
    first = [base] + [n for n in baselines() if n != base]  # the reference, then the other baselines
    ordered = first + [n for n in names if n not in first]
    return ordered + EXTRA_SPECS


# -- timing -----------------------------------------------------------------------------------
@dataclass
class BenchRow:
    unit: str  # as asked
    spec: str  # as built (size-rule options filled in)
    dim: int  # nominal size = input size
    hidden: int
    threads: int
    seq: int
    batch: int
    padded: bool
    mode: str  # "train" (forward + backward) or "forward" (no_grad)
    forward_ms: float | None = None  # medians
    backward_ms: float | None = None
    total_ms: float | None = None
    min_ms: float | None = None  # spread of total_ms
    iqr_ms: float | None = None
    ratio_to_gru: float | None = None  # median over rounds of total / gru's total in the same round
    min_ratio_to_gru: float | None = None  # min / gru's min: least disturbed by intermittent load
    params_formula: int | None = None
    params_total: int | None = None
    params_to_gru: float | None = None
    skipped: str | None = None
    recurrence: str | None = None  # which TPRU recurrence ran (units' `last_recurrence`: cpp, triton/persistent, …)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _clock(kind: str) -> Callable[[], float]:
    return time.process_time if kind == "cpu" else time.perf_counter


def _step(module, x, mask, device: str, forward_only: bool, clock) -> tuple[float, float]:
    """One forward (and backward), each timed (ms)."""
    import torch

    _sync(device)
    t0 = clock()
    if forward_only:
        with torch.no_grad():
            module(x, mask)
        _sync(device)
        return (clock() - t0) * 1e3, 0.0
    outputs, state = module(x, mask)[:2]
    loss = outputs.sum() + state.sum()
    _sync(device)
    t1 = clock()
    loss.backward()
    _sync(device)
    t2 = clock()
    module.zero_grad(set_to_none=True)
    x.grad = None
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _batch(batch: int, seq: int, dim: int, padded: bool, device: str, seed: int = 0):
    """x [B,T,d] and a right-padded mask; with `padded`, lengths uniform in [T/2, T] (one full)."""
    import torch

    from units.base import mask_from_lengths

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq, dim, generator=gen).to(device).requires_grad_(True)
    if padded:
        lengths = torch.randint(max(1, seq // 2), seq + 1, (batch,), generator=gen)
        lengths[0] = seq
    else:
        lengths = torch.full((batch,), seq)
    mask = mask_from_lengths(lengths, seq).to(device)
    return x, mask


def _build_cases(specs: list[str], dim: int, template: BenchRow, device: str) -> tuple[list, list[BenchRow]]:
    """(row, module) per spec buildable at nominal size `dim`; rows of the others, with why."""
    import units

    cases, skipped = [], []
    for raw in specs:
        row = BenchRow(**{**asdict(template), "unit": raw, "spec": raw})
        try:
            row.spec, row.hidden = sized_spec(raw, dim)
            module = units.build(row.spec, dim, row.hidden).to(device)
            counts = units.param_counts(row.spec, dim, row.hidden)
        except Exception as exc:  # noqa: BLE001 — a unit that cannot be built here is listed, not fatal
            row.skipped = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            skipped.append(row)
            continue
        row.params_formula, row.params_total = counts.formula, counts.total
        cases.append((row, module))
    return cases, skipped


def _interleaved(cases: list, x, mask, device: str, warmup: int, repeats: int, forward_only: bool, tick) -> list[list]:
    """(forward ms, backward ms) per case and timed round; rounds interleave the cases (A, B, C, A, …)."""
    times: list[list[tuple[float, float]]] = [[] for _ in cases]
    for i in range(warmup + repeats):
        for j, (row, module) in enumerate(cases):
            if row.skipped:
                continue
            try:
                sample = _step(module, x, mask, device, forward_only, tick)
            except Exception as exc:  # noqa: BLE001 — a unit that fails at this size is listed, not fatal
                row.skipped = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
                continue
            if i >= warmup:
                times[j].append(sample)
    return times


def recurrence_of(module) -> str | None:
    """The recurrence(s) a TPRU module's last forward ran — "cpp", "triton/tiled", "triton/persistent", …
    (units/tpru_triton.py, `recurrence_name`) — joined over its layers; None for other units."""
    names = sorted({m.last_recurrence for m in module.modules() if getattr(m, "last_recurrence", None)})
    return ", ".join(names) or None


def _summarise(row: BenchRow, samples: list[tuple[float, float]], gru: list[tuple[float, float]], gru_params: int) -> None:
    """Medians, spread, and the ratios to GRU (per round, and of the minima) into `row`."""
    totals = [f + b for f, b in samples]
    gru_totals = [f + b for f, b in gru]
    q1, q3 = _quartiles(totals)
    row.forward_ms = round(statistics.median(s[0] for s in samples), 3)
    row.backward_ms = None if row.mode == "forward" else round(statistics.median(s[1] for s in samples), 3)
    row.total_ms = round(statistics.median(totals), 3)
    row.min_ms, row.iqr_ms = round(min(totals), 3), round(q3 - q1, 3)
    row.ratio_to_gru = round(statistics.median(t / g for t, g in zip(totals, gru_totals)), 3)
    row.min_ratio_to_gru = round(min(totals) / min(gru_totals), 3)
    row.params_to_gru = round(row.params_total / gru_params, 3)


def bench(
    specs: list[str],
    dims: list[int],
    seq: int,
    batch: int,
    repeats: int,
    warmup: int,
    device: str = "cpu",
    threads: list[int | None] | None = None,
    padded: bool = False,
    forward_only: bool = False,
    clock: str = "wall",
    progress=None,
) -> list[BenchRow]:
    """Rows per (threads, dim, unit); GRU is always measured (first) as the reference."""
    import torch

    specs = check_specs(specs)
    tick = _clock(clock)
    rows: list[BenchRow] = []
    for n_threads in threads or [None]:
        if n_threads:
            torch.set_num_threads(n_threads)
        for dim in dims:
            torch.manual_seed(0)
            template = BenchRow("", "", dim, dim, torch.get_num_threads(), seq, batch, padded, "forward" if forward_only else "train")
            cases, skipped = _build_cases(specs, dim, template, device)
            if not cases or cases[0][0].unit != baseline():
                raise RuntimeError(f"the baseline {baseline()!r} could not be built at d={dim}")
            x, mask = _batch(batch, seq, dim, padded, device)
            times = _interleaved(cases, x, mask, device, warmup, repeats, forward_only, tick)
            for (row, module), samples in zip(cases, times):
                if not row.skipped and samples:
                    _summarise(row, samples, times[0], cases[0][0].params_total)
                    row.recurrence = recurrence_of(module)
                    if progress:
                        progress(row)
                rows.append(row)
            rows.extend(skipped)
    return rows


# -- command --------------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def write_json(path: str, meta: dict, rows: list, console) -> None:
    """A bench's `--json` output: {"meta", "rows"} to a file, or to stdout for "-" (bench units and bench train)."""
    import json

    text = json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1)
    if path == "-":
        print(text)
    else:
        with open(path, "w") as fh:
            fh.write(text + "\n")
        console.print(f"wrote {path}")


def run_unit_bench(args) -> int:

    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from units import tpru_ext

    specs = [s.strip() for s in args.units.split(";") if s.strip()] if args.units else default_specs()
    if getattr(args, "python_loop", False):
        tpru_ext.set_enabled(False)
    backend = tpru_ext.backend() if args.device == "cpu" else args.device
    console = Console(width=180)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    what = "forward only (no_grad)" if args.forward_only else "forward+backward"
    console.print(
        f"[bold]bench units[/] {what}, T={args.seq} B={args.batch}{' padded (lengths T/2..T)' if args.padded else ''} "
        f"device={args.device} threads={','.join(str(t) for t in args.threads) if args.threads else torch.get_num_threads()} "
        f"torch {torch.__version__}, TPRU recurrence: {backend}; {args.clock} clock, median of {args.repeats} "
        f"interleaved rounds after {args.warmup} warm-up; load average {load:.1f}"
    )
    with console.status("timing...") as status:
        rows = bench(
            specs,
            args.dims,
            args.seq,
            args.batch,
            args.repeats,
            args.warmup,
            args.device,
            args.threads,
            args.padded,
            args.forward_only,
            args.clock,
            progress=lambda r: status.update(f"timed {escape(r.spec)} at d={r.dim}, {r.threads} thread(s): {r.total_ms:.1f} ms"),
        )
    end_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    table = Table()
    cols = [
        "thr",
        "d",
        "unit",
        "hidden",
        "params",
        "× gru params",
        "fwd ms",
        "bwd ms",
        "median ms",
        "min ms",
        "IQR ms",
        "× gru",
        "× gru (min)",
        "recurrence",
    ]
    for col in cols:
        table.add_column(col, justify="left" if col in ("unit", "recurrence") else "right")
    for r in rows:
        if r.skipped:
            table.add_row(
                str(r.threads), str(r.dim), escape(r.spec), str(r.hidden), "", "", "", "", "", "", "", "", f"skipped: {escape(r.skipped)}", ""
            )
            continue
        table.add_row(
            str(r.threads),
            str(r.dim),
            escape(r.spec),
            str(r.hidden),
            f"{r.params_total:,}",
            _fmt(r.params_to_gru),
            _fmt(r.forward_ms),
            _fmt(r.backward_ms),
            _fmt(r.total_ms),
            _fmt(r.min_ms),
            _fmt(r.iqr_ms),
            _fmt(r.ratio_to_gru),
            _fmt(r.min_ratio_to_gru),
            r.recurrence or "",
        )
    console.print(table)
    console.print(
        f"load average at the end: {end_load:.1f} on {os.cpu_count()} CPU(s) (a load near or above the CPU "
        "count means the absolute times are not an idle machine's; the ratios are from interleaved rounds)"
    )
    meta = {
        "torch": torch.__version__,
        "device": args.device,
        "tpru_recurrence": backend,
        "clock": args.clock,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "load_start": load,
        "load_end": end_load,
        "cpus": os.cpu_count(),
    }
    if args.json:
        write_json(args.json, meta, rows, console)
    if args.csv:
        import pandas as pd

        pd.DataFrame([asdict(r) for r in rows]).to_csv(args.csv, index=False)
        console.print(f"wrote {args.csv}")
    return 0
