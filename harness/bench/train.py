"""`tprbench bench train`: training examples per second of one logic epoch, per unit.

What a user's study time depends on: not the recurrence alone but the whole training step —
data batches (with Symbolic Vocabulary Permutation), the embedding, both sides of each pair
through the unit, pooling, the MLP, the loss, backward, gradient clipping and Adam — as the
training loop (tasks/training.py) runs it. The epoch is driven here through the task adapter's
public pieces (`resolve_hparams`, `train_batches`, `build_model`, `loss`) and the trainer's
optimiser helpers (`tasks.optim`), with the task's own defaults (optimiser, lr, clip), so no
checkpoints or evaluation are timed. Data: generated pairs (the easy
preset, matching the real training distribution), cached in a temporary directory unless
`--cache` is given. Units are interleaved across repeats (one epoch each per round), and the
ratio to GRU is the median over rounds of GRU's time / the unit's time in the same round.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass

from harness.bench.units import BASELINE, check_specs, default_specs, sized_spec, write_json


@dataclass
class TrainRow:
    unit: str
    spec: str
    dim: int
    hidden: int
    threads: int
    examples: int  # per epoch
    seconds: float | None = None  # median epoch time
    examples_per_s: float | None = None  # examples / median epoch time
    min_seconds: float | None = None
    iqr_seconds: float | None = None
    speed_to_gru: float | None = None  # median over rounds of gru's time / this unit's time (>1 = faster)
    params_total: int | None = None
    skipped: str | None = None


def _epoch(adapter, model, optimizer, hp, batch_size: int, seed: int, clock=time.perf_counter) -> tuple[float, int]:
    """One training epoch as the trainer's step does it (clip, then the optimiser step); (seconds, examples)."""
    import torch

    from tasks.optim import optimizer_step

    generator = torch.Generator().manual_seed(seed)
    model.train()
    examples = 0
    started = clock()
    for step, batch in enumerate(adapter.train_batches(batch_size, generator, 0)):
        optimizer.zero_grad(set_to_none=True)
        loss, stats = adapter.loss(model, batch)
        loss.backward()
        if hp.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), hp.clip)
        optimizer_step(optimizer, hp, step)
        examples += int(stats.get("count", 0))
    return clock() - started, examples


def bench_train(
    specs: list[str], dim: int, arch: str, train_size: int, batch_size: int, repeats: int, cache_dir: str, clock: str = "wall", progress=None
) -> list[TrainRow]:
    import torch

    import units
    from tasks.optim import make_optimizer
    from tasks.registry import get_task

    specs = check_specs(specs)
    adapter = get_task("logic")({"train_size": train_size, "eval_size": 0}, "generated", cache_dir)
    adapter.prepare()
    hp = adapter.resolve_hparams({"batch_size": batch_size})  # the task's defaults: optimiser, lr, clip
    threads = torch.get_num_threads()
    cases, skipped = [], []
    for raw in specs:
        row = TrainRow(raw, raw, dim, dim, threads, 0)
        try:
            spec, hidden = sized_spec(raw, dim)
            row.spec, row.hidden = spec, hidden
            torch.manual_seed(0)
            model = adapter.build_model(spec, arch, hidden, dim, hp)
            optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], hp)
            row.params_total = units.model_param_counts(model).total
        except Exception as exc:  # noqa: BLE001 — listed as skipped, with why
            row.skipped = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            skipped.append(row)
            continue
        cases.append((row, model, optimizer))
    if not cases or cases[0][0].unit != BASELINE:
        raise RuntimeError(f"the baseline {BASELINE!r} could not be built")
    times: list[list[float]] = [[] for _ in cases]
    for r in range(repeats):
        for j, (row, model, optimizer) in enumerate(cases):
            if row.skipped:
                continue
            try:
                seconds, examples = _epoch(
                    adapter, model, optimizer, hp, batch_size, seed=r, clock=time.process_time if clock == "cpu" else time.perf_counter
                )
            except Exception as exc:  # noqa: BLE001
                row.skipped = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
                continue
            row.examples = examples
            times[j].append(seconds)
    rows = []
    for (row, _, _), samples in zip(cases, times):
        if row.skipped or not samples:
            rows.append(row)
            continue
        median = statistics.median(samples)
        q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [samples[0]] * 3
        row.seconds, row.min_seconds, row.iqr_seconds = round(median, 3), round(min(samples), 3), round(q[2] - q[0], 3)
        row.examples_per_s = round(row.examples / median, 1)
        row.speed_to_gru = round(statistics.median(g / s for g, s in zip(times[0], samples)), 3)
        rows.append(row)
        if progress:
            progress(row)
    return rows + skipped


def run_train_bench(args) -> int:

    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from units import tpru_ext

    if args.threads:
        torch.set_num_threads(args.threads)
    if getattr(args, "python_loop", False):
        tpru_ext.set_enabled(False)
    specs = [s.strip() for s in args.units.split(";") if s.strip()] if args.units else default_specs()
    console = Console(width=150)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    console.print(
        f"[bold]bench train[/] logic, {args.arch}, d={args.dim}, {args.train_size} generated pairs per epoch, "
        f"batch {args.batch_size}, threads={torch.get_num_threads()}, torch {torch.__version__}, TPRU recurrence: "
        f"{tpru_ext.backend()}; {args.clock} clock, median of {args.repeats} interleaved epochs; load average {load:.1f}"
    )
    with tempfile.TemporaryDirectory(prefix="tprbench-bench-train-") as tmp:
        with console.status("generating data and timing...") as status:
            rows = bench_train(
                specs,
                args.dim,
                args.arch,
                args.train_size,
                args.batch_size,
                args.repeats,
                args.cache or tmp,
                args.clock,
                progress=lambda r: status.update(f"{escape(r.spec)}: {r.examples_per_s:.0f} examples/s"),
            )
    table = Table()
    for col in ("unit", "hidden", "params", "epoch s", "min s", "IQR s", "examples/s", "× gru speed", "100k-pair epoch"):
        table.add_column(col, justify="left" if col == "unit" else "right")
    for r in rows:
        if r.skipped:
            table.add_row(escape(r.spec), str(r.hidden), "", "", "", "", "", "", f"skipped: {escape(r.skipped)}")
            continue
        table.add_row(
            escape(r.spec),
            str(r.hidden),
            f"{r.params_total:,}",
            f"{r.seconds:.2f}",
            f"{r.min_seconds:.2f}",
            f"{r.iqr_seconds:.2f}",
            f"{r.examples_per_s:,.0f}",
            f"{r.speed_to_gru:.2f}",
            f"{100_000 / r.examples_per_s / 60:.1f} min",
        )
    console.print(table)
    end_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    console.print(f"load average at the end: {end_load:.1f}; '× gru speed' > 1 = more examples/s than GRU")
    if args.json:
        meta = {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "tpru_recurrence": tpru_ext.backend(),
            "load_start": load,
            "load_end": end_load,
            "train_size": args.train_size,
            "arch": args.arch,
            "clock": args.clock,
        }
        write_json(args.json, meta, rows, console)
    return 0
