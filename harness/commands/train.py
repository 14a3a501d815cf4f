"""`tprbench train`: one training run of one unit on one task, outside any study.

Resumes from its run directory (per-epoch checkpoints); prints per-epoch progress, then the
best epoch's score per split and the unit's parameter counts.
"""

from __future__ import annotations

import argparse

from harness.commands.support import bounds
from harness.record.contract import TRAIN_SPEC
from tasks.result import RunStatus

HELP = "train one model (task × arch × unit × dim) and print per-split scores; resumable"


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default="logic", help="task name (see `tprbench tasks`; default logic)")
    p.add_argument("--unit", required=True, help="unit spec, e.g. 'tpru[roles=64]', 'gru'")
    p.add_argument("--arch", default=None, help="architecture (plain, bidaf, ...; default: the task's first)")
    p.add_argument(
        "--dim", type=bounds.DIM, default=None, help="hidden size d (default: the size the unit's options fix, e.g. tpr3's E·R·E; else 64)"
    )
    p.add_argument("--input-dim", type=bounds.DIM, default=None, help="embedding size d' (default = --dim)")
    p.add_argument("--epochs", type=bounds.integer(1, 100_000), default=10)
    p.add_argument("--data", default=None, help="data directory (default: the task's generated data)")
    p.add_argument("--seed", type=bounds.SEED, default=0)
    p.add_argument("--lr", type=bounds.real(0, 100, lo_open=True), default=None, help="learning rate (default: the task's)")
    p.add_argument("--batch-size", type=bounds.integer(1, 1_000_000), default=None)
    p.add_argument("--dropout", type=bounds.real(0, 0.99), default=None)
    p.add_argument(
        "--hp",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="other hyperparameters (clip, lr_step, lr_gamma, weight_decay, mlp_hidden, ...)",
    )
    p.add_argument(
        "--set",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task options, e.g. --set train_size=50000 (see `tprbench tasks`)",
    )
    p.add_argument("--root", default="runs", help="run directory root (default ./runs); caches live in ROOT/cache")
    p.add_argument("--run-dir", default=None, help="checkpoint directory (default: ROOT/train/<config hash>)")
    p.add_argument("--threads", type=bounds.THREADS, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--metric", default=None, help="validation metric that picks the best epoch, e.g. valid_loss (default: the task's)")
    p.add_argument(
        "--no-deterministic",
        dest="deterministic",
        action="store_false",
        help="allow non-deterministic kernels (default: bitwise-reproducible training)",
    )


def _value(text: str):
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _setup(args: argparse.Namespace):
    """(adapter, config, run directory): every user error (spec, task, arch, --hp, --metric) is
    raised here, before any data work."""
    from pathlib import Path

    import units
    from harness.record.layout import RunRoot
    from tasks.meta import run_metric
    from tasks.registry import get_task
    from tasks.training import TrainConfig, fingerprint_of

    if args.dim is None:
        args.dim = units.resolve(args.unit).implied_hidden_size or 64
    units.resolve(args.unit, args.dim)
    adapter_cls = get_task(args.task)
    root = Path(args.root)
    adapter = adapter_cls({k: _value(v) for k, v in args.set}, args.data or "generated", RunRoot(root).cache)
    adapter.check_data()  # a wrong data folder is one line now, not after minutes of data work
    arch = args.arch or adapter_cls.archs[0]
    adapter.check_arch(arch)
    adapter_cls.check_unit(arch, args.unit)
    hparams = {k: _value(v) for k, v in args.hp}
    for key in ("lr", "batch_size", "dropout"):
        if getattr(args, key) is not None:
            hparams[key] = getattr(args, key)
    adapter.resolve_hparams(hparams)
    run_metric(adapter, args.metric)
    config = TrainConfig(
        unit=args.unit,
        arch=arch,
        dim=args.dim,
        input_dim=args.input_dim or args.dim,
        epochs=args.epochs,
        seed=args.seed,
        hparams=hparams,
        metric=args.metric,
        deterministic=args.deterministic,
    )
    run_dir = Path(args.run_dir) if args.run_dir else RunRoot(root).train / fingerprint_of(adapter, config)
    return adapter, config, run_dir


def _write_spec(args: argparse.Namespace, config, run_dir) -> None:
    """train.json: what rebuilds the model later (`tprbench interpret RUN_DIR`, harness/analysis/
    sources.py from_run_dir). Written once the trainer has accepted the run directory."""
    import json

    spec = {
        "task": args.task,
        "options": {k: _value(v) for k, v in args.set},
        "data": args.data or "generated",
        "unit": args.unit,
        "arch": config.arch,
        "dim": config.dim,
        "input_dim": config.input_dim,
        "epochs": config.epochs,
        "seed": config.seed,
        "hparams": config.hparams,
    }
    tmp = run_dir / (TRAIN_SPEC + ".tmp")
    tmp.write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(run_dir / TRAIN_SPEC)


def _print_result(console, args: argparse.Namespace, adapter, config, result) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{args.task} · {escape(args.unit)} · {config.arch} · d={args.dim} · best epoch {result.best_epoch}")
    table.add_column("split")
    name = result.metric.removeprefix("valid_")
    table.add_column(name, justify="right")
    table.add_row(adapter.valid_split, f"{result.best_valid:.4f}")
    for split, values in result.test.items():  # test splits, then the task's summaries over them
        table.add_row(split, f"{values[name]:.4f}" if name in values else ", ".join(f"{k} {v:.4g}" for k, v in values.items()))
    console.print(table)
    console.print(
        f"parameters of the unit: {result.params_formula:,} (papers' formula, no biases), {result.params_total:,} (total)"
        if result.params_formula is not None
        else f"parameters of the unit: {result.params_total:,}"
    )
    console.print(f"wall time {result.seconds:.1f} s")


def run(args: argparse.Namespace) -> int:
    import time

    from rich.console import Console
    from rich.markup import escape

    console = Console()
    # The first line before torch loads (seconds on a busy machine): the command has started.
    console.print(f"train {args.task} · {args.unit} · data {args.data or 'generated'}: setting up", markup=False, highlight=False, soft_wrap=True)
    import torch

    from tasks.progress import ConsoleReporter, reporting
    from tasks.training import train

    if args.threads:
        torch.set_num_threads(args.threads)
    adapter, config, run_dir = _setup(args)
    t0 = time.perf_counter()
    console.print(f"preparing {args.task} data ({args.data or 'generated'})", markup=False, highlight=False, soft_wrap=True)
    # Bars inside data generation and each epoch on a terminal; unattended, a line every 30 s.
    reporter = ConsoleReporter(console)
    with reporting(reporter):
        adapter.prepare()
    console.print(f"data ready in {time.perf_counter() - t0:.1f} s: {adapter.describe()}")
    for note in adapter.report_notes(config.arch):
        console.print(f"[dim]{escape(note)}[/]")
    console.print(f"run directory {run_dir} (rerun the same command to resume)")

    def progress(epoch: int, row: dict) -> None:
        shown = " ".join(f"{k}={v:.4g}" for k, v in row.items() if k not in ("epoch",))
        console.print(f"epoch {epoch}/{args.epochs} {escape(shown)}")

    with reporting(reporter):
        result = train(
            adapter, config, run_dir, progress=progress, device=args.device, notice=lambda line: console.print(f"[yellow]note:[/] {escape(line)}")
        )
    _write_spec(args, config, run_dir)
    if result.resumed_from_epoch:
        console.print(f"(resumed after epoch {result.resumed_from_epoch})")
    if result.status != RunStatus.FINISHED:
        console.print(f"[red]run {result.status}:[/] {result.reason}")
        return 1
    _print_result(console, args, adapter, config, result)
    return 0
