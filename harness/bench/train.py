"""`tprbench bench train`: what a training epoch costs, per unit (logic) or per cell of a study.

What a user's study time depends on: not the recurrence alone but the whole training step —
data batches (with Symbolic Vocabulary Permutation for logic), the embedding, the unit, the
readout, the loss, backward, gradient clipping and the optimiser — as the training loop runs
it. Both modes drive `tasks.training.TrainingSteps`: the model built as `train` builds it, each
batch stepped as `train` steps it (masks checked, auxiliary losses, clip, the optimiser step with
its warm-up counted across rounds, a NaN during warm-up re-initialising the model), the batches
in `train`'s order, under the run's determinism setting. Cases are interleaved across repeats
(one epoch, or its first `--batches` batches, each per round) so load from other processes hits
every case alike; the medians over rounds are reported.

Two modes:

- logic (`--units`, `--dim`, `--arch`, `--train-size`): examples per second of one epoch of
  generated pairs (the easy preset, matching the real training distribution), per unit at a size
  comparable to GRU's (`bench units`' size rules); "× gru speed" is the median over rounds of GRU's
  time / the unit's in the same round.
- `--study FILE [--only KEY=GLOB ...]`: each selected cell of a study, with its task options, data,
  arch, unit, sizes and the hyperparameters its seed runs train with (the worker's `WorkerJob`
  and the task's `resolve_hparams`; with search trials the search space's defaults stand in for
  the best trial's values, and the row says so). Per case: seconds per batch, examples (tokens for
  a language model) per second, the time per batch relative to the first selected case (the
  baseline), the projected full epoch (batches per epoch × seconds per batch) and the projected
  cost of the cell's runs ((trials + seeds) × epochs × that epoch), for estimating a study's
  core-hours before running it.

What the bench leaves out of a run (so a projection is a bound from below on a full epoch's
work and from above on runs that stop early): validation after each epoch, the test, checkpoints,
the learning-rate schedule's step (it changes no step's cost), early stops (`stop_value`,
`stop_patience`, pruning) and the restart of the whole run after a NaN in warm-up (the bench
re-initialises and steps on). A language model's carry starts empty at each timed part, as at
each epoch of a run. Data is cached in a temporary directory unless `--cache` is given.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.bench.units import baseline, check_specs, default_specs, sized_spec, write_json

COUNTED = {"lm": "tokens", "autoencode": "tokens"}  # what a task's loss `count`s (tasks/*/adapter.py); others: examples
LOGIC_DEFAULTS = {"units": None, "dim": 64, "arch": "plain", "train_size": 3200, "batch_size": 64}  # the logic mode's options


class BenchTrainError(ValueError):
    """Options that do not go together (the CLI prints one line, exit 2)."""

    user_error = True


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


@dataclass
class StudyRow:
    label: str  # task label · arch · unit · d
    cell: str  # the cell id
    task: str
    arch: str
    unit: str
    dim: int
    input_dim: int
    threads: int
    counted: str  # "examples" or "tokens": what per_s counts
    epochs: int  # the cell's epochs
    runs: int  # trials + seeds of the study
    batch_size: int | None = None
    hparams_note: str | None = None  # searched hyperparameters and the values timed
    params_model: int | None = None  # trainable parameters of the whole model (embedding, encoder, readout)
    params_units: int | None = None  # the units' count, as a run's record gives it (params_total)
    batches: int = 0  # timed per round
    batches_per_epoch: int | None = None
    seconds_per_batch: float | None = None  # median over rounds
    min_seconds_per_batch: float | None = None
    iqr_seconds_per_batch: float | None = None
    per_s: float | None = None  # examples (or tokens) per second
    time_to_baseline: float | None = None  # median over rounds of this case's s/batch ÷ the baseline's (>1 = slower)
    epoch_seconds: float | None = None  # projected full epoch: batches_per_epoch × seconds_per_batch
    cell_hours: float | None = None  # runs × epochs × epoch_seconds, in hours (× threads = core-hours)
    skipped: str | None = None


@dataclass
class _Case:
    """One thing timed: its row, the trainer's steps, and per round (seconds, batches, counted items)."""

    row: Any
    steps: Any
    samples: list[tuple[float, int, int]] = field(default_factory=list)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:160]


def _clock(kind: str) -> Callable[[], float]:
    return time.process_time if kind == "cpu" else time.perf_counter


def _spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, interquartile range)."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return statistics.median(values), min(values), q[2] - q[0]


# -- the timing loop (both modes) -------------------------------------------------------------


def _timed_part(steps, epoch: int, limit: int | None, clock: Callable[[], float]) -> tuple[float, int, int]:
    """The first `limit` batches (None: all) of one epoch, stepped as the trainer steps them, the
    carry starting empty as at an epoch's start: (seconds, batches, counted examples or tokens).
    Building the batches is timed too: a run pays for it."""
    carry, n, items = None, 0, 0
    with steps.determinism:
        started = clock()
        for batch in itertools.islice(steps.batches(epoch), limit):
            stats, carry = steps.step(batch, carry)
            n += 1
            items += int(stats.get("count", 0))
        return clock() - started, n, items


def _interleaved(cases: list[_Case], repeats: int, limit: int | None, clock: str, progress=None) -> None:
    """One timed part per case per round (A, B, C, A, B, C, ...); round r is epoch r + 1. A case
    that raises is marked skipped with why, and the others go on."""
    tick = _clock(clock)
    for r in range(repeats):
        for case in cases:
            if case.row.skipped:
                continue
            try:
                case.samples.append(_timed_part(case.steps, r + 1, limit, tick))
            except Exception as exc:  # noqa: BLE001 — listed as skipped, with why
                case.row.skipped = _why(exc)
            if progress and case.samples and not case.row.skipped:
                progress(case.row, case.samples[-1])


# -- logic mode -------------------------------------------------------------------------------


def _logic_cases(adapter, specs: list[str], dim: int, arch: str, batch_size: int, repeats: int) -> list[_Case]:
    """One case per unit spec, sized as `bench units` sizes it; a unit that cannot be built is skipped."""
    import torch

    import units
    from tasks.training import TrainConfig, TrainingSteps

    threads = torch.get_num_threads()
    cases = []
    for raw in specs:
        row = TrainRow(raw, raw, dim, dim, threads, 0)
        try:
            spec, hidden = sized_spec(raw, dim)
            row.spec, row.hidden = spec, hidden
            config = TrainConfig(spec, arch, hidden, dim, epochs=repeats, hparams={"batch_size": batch_size})  # the task's defaults otherwise
            steps = TrainingSteps(adapter, config, "cpu")
            row.params_total = units.model_param_counts(steps.model).total
        except Exception as exc:  # noqa: BLE001 — listed as skipped, with why
            row.skipped = _why(exc)
            steps = None
        cases.append(_Case(row, steps))
    return cases


def _logic_summary(case: _Case, baseline: list[tuple[float, int, int]]) -> None:
    row, samples = case.row, case.samples
    seconds = [s for s, _, _ in samples]
    median, low, iqr = _spread(seconds)
    row.examples = samples[-1][2]
    row.seconds, row.min_seconds, row.iqr_seconds = round(median, 3), round(low, 3), round(iqr, 3)
    row.examples_per_s = round(row.examples / median, 1)
    if baseline:
        row.speed_to_gru = round(statistics.median(g[0] / s for g, s in zip(baseline, seconds)), 3)


def bench_train(
    specs: list[str],
    dim: int,
    arch: str,
    train_size: int,
    batch_size: int,
    repeats: int,
    cache_dir: str,
    clock: str = "wall",
    progress=None,
    batches: int | None = None,
) -> list[TrainRow]:
    """The logic mode: one row per unit (GRU first, the baseline), skipped units last."""
    from tasks.registry import get_task

    specs = check_specs(specs)
    # eval_size 1, the task's least (a run needs a validation split; training steps are timed, not evaluated)
    adapter = get_task("logic")({"train_size": train_size, "eval_size": 1}, "generated", cache_dir)
    adapter.prepare()
    adapter.check_arch(arch)
    cases = _logic_cases(adapter, specs, dim, arch, batch_size, repeats)
    if cases[0].row.skipped or cases[0].row.unit != baseline():
        raise RuntimeError(f"the baseline {baseline()!r} could not be built")
    built, unbuilt = [c for c in cases if not c.row.skipped], [c for c in cases if c.row.skipped]
    _interleaved(built, repeats, batches, clock, progress=progress)
    for case in built:
        if not case.row.skipped and case.samples:
            _logic_summary(case, cases[0].samples)
    return [c.row for c in built + unbuilt]


# -- study mode -------------------------------------------------------------------------------


def seed_params(study, cell) -> tuple[dict[str, Any], str | None]:
    """The study values a seed run of the cell trains with, and a note when they are a stand-in.

    Without search trials they are the search space's defaults, as the driver's seed phase uses
    (`StudyRunner.final_params`). With trials the seed runs take the best trial's values, unknown before
    the search: the defaults stand in and the note names the searched parameters and their values."""
    from harness.study.search_space import defaults

    params = defaults(cell.search)
    searched = [name for name, p in cell.search.items() if p["kind"] != "fixed"]
    if not study.trials or not searched:
        return params, None
    values = ", ".join(f"{name}={params[name]}" for name in searched)
    return params, f"searched ({study.trials} trials); timed at the search space's defaults {values}"


def _case_label(cell) -> str:
    dims = f"d{cell.dim}" + (f"e{cell.input_dim}" if cell.input_dim != cell.dim else "")
    return f"{cell.task_label} · {cell.arch} · {cell.unit} · {dims}"


def check_study_data(study, cells, cache_dir: str) -> None:
    """Each distinct dataset's cheap check (does the path hold the task's files?), before any data
    is read: one error naming the study file and the task (exit 2), as `tprbench run` says it."""
    from tasks.errors import DataError
    from tasks.registry import get_task

    firsts: dict[str, Any] = {}
    for cell in cells:
        firsts.setdefault(_dataset_key(cell), cell)
    for cell in firsts.values():
        try:
            get_task(cell.task)(cell.task_options, cell.data, cache_dir).check_data()
        except DataError as exc:
            raise DataError(f"{study.path}: task {cell.task_label!r}: {exc}") from None


def _dataset_key(cell) -> str:
    import json

    return json.dumps([cell.task, cell.task_options, cell.data], sort_keys=True, default=str)


def _batches_per_epoch(steps) -> int:
    """An epoch's batch count: the task's own count, else counted from its batches (untimed)."""
    known = steps.ctx.adapter.train_batch_count(steps.hparams.batch_size)
    return known if known is not None else sum(1 for _ in steps.batches(1))


def _study_case(study, cell, adapter, cache_dir: str, threads: int) -> _Case:
    """The cell as one case: its seed run's configuration through the worker's `WorkerJob`."""
    import units
    from harness.driver.jobs import WorkerJob
    from tasks.training import TrainingSteps

    runs = study.trials + study.seeds
    row = StudyRow(
        _case_label(cell),
        cell.id,
        cell.task,
        cell.arch,
        cell.unit,
        cell.dim,
        cell.input_dim,
        threads,
        COUNTED.get(cell.task, "examples"),
        cell.epochs,
        runs,
    )
    params, row.hparams_note = seed_params(study, cell)
    job = WorkerJob.for_cell(cell, seed=0, hparams=params, run_dir="", cache_dir=cache_dir, threads=threads, deterministic=study.deterministic)
    try:
        steps = TrainingSteps(adapter, job.train_config(), "cpu")
        row.batch_size = steps.hparams.batch_size
        row.params_model = sum(p.numel() for p in steps.model.parameters() if p.requires_grad)
        row.params_units = units.model_param_counts(steps.model).total
        row.batches_per_epoch = _batches_per_epoch(steps)
    except Exception as exc:  # noqa: BLE001 — listed as skipped, with why
        row.skipped = _why(exc)
        return _Case(row, None)
    return _Case(row, steps)


def _study_summary(case: _Case, baseline: list[tuple[float, int, int]]) -> None:
    """Seconds per batch (median, min, IQR over rounds), items per second, the ratio to the
    baseline in the same rounds, and the projections."""
    row = case.row
    per_batch = [s / max(n, 1) for s, n, _ in case.samples]
    median, low, iqr = _spread(per_batch)
    _, row.batches, items = case.samples[-1]
    row.seconds_per_batch, row.min_seconds_per_batch, row.iqr_seconds_per_batch = median, low, iqr
    row.per_s = round(items / max(row.batches, 1) / median, 1) if median > 0 else None
    base = [s / max(n, 1) for s, n, _ in baseline]
    if base:
        row.time_to_baseline = round(statistics.median(t / b for t, b in zip(per_batch, base)), 3)
    if row.batches_per_epoch is not None:
        row.epoch_seconds = row.batches_per_epoch * median
        row.cell_hours = row.runs * row.epochs * row.epoch_seconds / 3600


def bench_study(study, cells, repeats: int, batches: int | None, cache_dir: str, clock: str = "wall", progress=None) -> list[StudyRow]:
    """The study mode: one row per selected cell, in the study's order; the first is the baseline.
    The caller has checked the cells' data paths (`check_study_data`), before printing anything."""
    import torch

    from harness.driver.worker import get_adapter  # prepares each distinct dataset once, as a worker does

    threads = torch.get_num_threads()
    cases = [_study_case(study, cell, get_adapter(cell.task, cell.task_options, cell.data, cache_dir), cache_dir, threads) for cell in cells]
    _interleaved([c for c in cases if c.steps is not None], repeats, batches, clock, progress=progress)
    baseline = cases[0].samples if not cases[0].row.skipped else []
    for case in cases:
        if case.samples and not case.row.skipped:
            _study_summary(case, baseline)
    return [c.row for c in cases]


# -- the command ------------------------------------------------------------------------------


def _check_mode(args) -> None:
    """`--study` and the logic mode's options exclude each other; the logic mode's defaults filled in."""
    given = [k for k in LOGIC_DEFAULTS if getattr(args, k, None) is not None]
    if args.study and given:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        raise BenchTrainError(
            f"{names}: options of the logic mode; with --study each cell's task, unit, sizes and hyperparameters come from the study file"
        )
    if not args.study and args.only:
        raise BenchTrainError("--only selects cells of a study: give --study FILE")
    for key, value in LOGIC_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)


def _environment(args) -> dict[str, Any]:
    """Threads and the TPRU loop set as asked; the facts every output states."""
    import torch

    from units import tpru_ext

    if getattr(args, "python_loop", False):
        tpru_ext.set_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "tpru_recurrence": tpru_ext.backend(),
        "load_start": _load(),
        "clock": args.clock,
        "batches": args.batches,
        "repeats": args.repeats,
    }


def _rate(sample: tuple[float, int, int]) -> str:
    """A timed part's examples (or tokens) per second, for the progress line."""
    seconds, _, items = sample
    return f"{items / seconds:,.0f}" if seconds > 0 else "?"


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def run_train_bench(args) -> int:
    _check_mode(args)
    if args.study:
        return _run_study(args)
    return _run_logic(args)


def _run_logic(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    specs = [s.strip() for s in args.units.split(";") if s.strip()] if args.units else default_specs()
    console = Console(width=150)
    env = _environment(args)
    part = f"the first {args.batches} batches of " if args.batches else ""
    console.print(
        f"[bold]bench train[/] logic, {args.arch}, d={args.dim}, {part}{args.train_size} generated pairs per epoch, "
        f"batch {args.batch_size}, threads={env['threads']}, torch {env['torch']}, TPRU recurrence: "
        f"{env['tpru_recurrence']}; {args.clock} clock, median of {args.repeats} interleaved epochs; load average {env['load_start']:.1f}"
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
                progress=lambda row, last: status.update(f"{escape(row.spec)}: {_rate(last)} examples/s"),
                batches=args.batches,
            )
    console.print(_logic_table(rows))
    end_load = _load()
    console.print(f"load average at the end: {end_load:.1f}; '× gru speed' > 1 = more examples/s than GRU")
    if args.json:
        meta = {**env, "load_end": end_load, "train_size": args.train_size, "arch": args.arch}
        write_json(args.json, meta, rows, console)
    return 0


def _logic_table(rows: list[TrainRow]):
    from rich.markup import escape
    from rich.table import Table

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
            f"{r.speed_to_gru:.2f}" if r.speed_to_gru is not None else "",
            f"{100_000 / r.examples_per_s / 60:.1f} min",
        )
    return table


def _run_study(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from harness.study.load import select

    study, cells = select(args.study, args.only)  # `tprbench run --only`'s selection and errors
    if not args.threads:
        args.threads = study.resources.threads  # what the driver gives each run
    console = Console(width=170)
    env = _environment(args)
    part = f"the first {args.batches} batches of an epoch" if args.batches else "whole epochs"
    header = (
        f"[bold]bench train[/] {escape(study.path)}: {len(cells)} cell(s), {part}, threads={env['threads']}, torch {env['torch']}, "
        f"TPRU recurrence: {env['tpru_recurrence']}; {args.clock} clock, median of {args.repeats} interleaved rounds; "
        f"load average {env['load_start']:.1f}\nbaseline (× baseline = 1.00): the first selected cell, {escape(_case_label(cells[0]))}"
    )
    with tempfile.TemporaryDirectory(prefix="tprbench-bench-train-") as tmp:
        check_study_data(study, cells, args.cache or tmp)  # a wrong data path: one line before the header
        console.print(header)
        with console.status("preparing data and timing...") as status:
            rows = bench_study(
                study,
                cells,
                args.repeats,
                args.batches,
                args.cache or tmp,
                args.clock,
                progress=lambda row, last: status.update(f"{escape(row.label)}: {_rate(last)} {row.counted}/s"),
            )
    console.print(_study_table(rows))
    end_load = _load()
    _study_footer(console, rows, env["threads"], end_load)
    if args.json:
        meta = {**env, "load_end": end_load, "study": study.path, "only": list(args.only), "baseline": rows[0].label}
        write_json(args.json, meta, rows, console)
    return 0


def _study_table(rows: list[StudyRow]):
    from rich.markup import escape
    from rich.table import Table

    table = Table()
    columns = ("case", "params", "batch", "s/batch", "min", "IQR", "per s", "× baseline", "batches/epoch", "epoch", "runs × epochs", "cell h")
    for col in columns:
        table.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        label = escape(r.label)
        if r.skipped or r.seconds_per_batch is None:
            table.add_row(label, *[""] * (len(columns) - 2), f"skipped: {escape(r.skipped or 'not timed')}")
            continue
        table.add_row(
            label,
            f"{r.params_model:,}",
            str(r.batch_size),
            f"{r.seconds_per_batch:.4f}",
            f"{r.min_seconds_per_batch:.4f}",
            f"{r.iqr_seconds_per_batch:.4f}",
            f"{r.per_s:,.0f} {r.counted}" if r.per_s else "",
            f"{r.time_to_baseline:.2f}" if r.time_to_baseline is not None else "",
            f"{r.batches_per_epoch:,}",
            _duration(r.epoch_seconds),
            f"{r.runs} × {r.epochs}",
            f"{r.cell_hours:.3g}",
        )
    return table


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def _study_footer(console, rows: list[StudyRow], threads: int, end_load: float) -> None:
    """The selected cells' projected core-hours, what the projection leaves out, and the
    hyperparameters that stood in for a search's result."""
    from rich.markup import escape

    for note in dict.fromkeys(r.hparams_note for r in rows if r.hparams_note):
        console.print(f"note: {escape(note)} ({sum(r.hparams_note == note for r in rows)} case(s))")
    if rows[0].time_to_baseline is None:
        console.print("the baseline (the first selected cell) was not timed: no '× baseline' column")
    hours = sum(r.cell_hours or 0.0 for r in rows)
    console.print(
        f"load average at the end: {end_load:.1f}; '× baseline' = seconds per batch ÷ the baseline's in the same round "
        "(> 1 = slower); 'epoch' = batches/epoch × s/batch; 'cell h' = (trials + seeds) × epochs × epoch"
    )
    console.print(
        f"projected: {hours:.3g} h of training steps for the timed cells, {hours * threads:.3g} core-hours at {threads} "
        "thread(s) a run (no validation, test or checkpoints; runs that stop early or are pruned cost less)"
    )
