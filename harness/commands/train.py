"""`tprbench train`: one training run of one unit on one task, outside any study.

Resumes from its run directory (per-epoch checkpoints); prints per-epoch progress, then the
best epoch's score per split and the unit's parameter counts.
"""

from __future__ import annotations

import argparse

HELP = "train one model (task × arch × unit × dim) and print per-split scores; resumable"


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default="logic", help="task name (see `tprbench tasks`; default logic)")
    p.add_argument("--unit", required=True, help="unit spec, e.g. 'tpru[roles=64]', 'gru'")
    p.add_argument("--arch", default="plain", help="architecture (plain, bidaf, ...; default plain)")
    p.add_argument("--dim", type=int, default=64, help="hidden size d (default 64)")
    p.add_argument("--input-dim", type=int, default=None, help="embedding size d' (default = --dim)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--data", default=None, help="data directory (default: the task's generated data)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the task's)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--dropout", type=float, default=None)
    p.add_argument("--hp", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="other hyperparameters (clip, lr_step, lr_gamma, weight_decay, mlp_hidden, ...)")
    p.add_argument("--set", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="task options, e.g. --set train_size=50000 (see `tprbench tasks`)")
    p.add_argument("--root", default="runs", help="run directory root (default ./runs); caches live in ROOT/cache")
    p.add_argument("--run-dir", default=None, help="checkpoint directory (default: ROOT/train/<config hash>)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")


def _value(text: str):
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    import units
    from tasks.registry import get_task
    from tasks.training import TrainConfig, train

    if args.threads:
        torch.set_num_threads(args.threads)
    console = Console()
    units.resolve(args.unit, args.dim)  # a bad spec fails here, before any data work
    adapter_cls = get_task(args.task)
    root = Path(args.root)
    adapter = adapter_cls({k: _value(v) for k, v in args.set}, args.data or "generated", root / "cache")
    adapter.check_arch(args.arch)
    hparams = {k: _value(v) for k, v in args.hp}
    for key in ("lr", "batch_size", "dropout"):
        if getattr(args, key) is not None:
            hparams[key] = getattr(args, key)
    config = TrainConfig(unit=args.unit, arch=args.arch, dim=args.dim, input_dim=args.input_dim or args.dim,
                         epochs=args.epochs, seed=args.seed, hparams=hparams)
    fingerprint = config.fingerprint(adapter.name, adapter.options.model_dump(mode="json"))
    run_dir = Path(args.run_dir) if args.run_dir else root / "train" / fingerprint
    t0 = time.perf_counter()
    with console.status(f"preparing {args.task} data ({args.data or 'generated'})"):
        adapter.prepare()
    console.print(f"data ready in {time.perf_counter() - t0:.1f} s: {adapter.describe()}")
    for note in adapter.report_notes(args.arch):
        console.print(f"[dim]{escape(note)}[/]")
    console.print(f"run directory {run_dir} (rerun the same command to resume)")

    def progress(epoch: int, row: dict) -> None:
        shown = " ".join(f"{k}={v:.4g}" for k, v in row.items() if k not in ("epoch",))
        console.print(f"epoch {epoch}/{args.epochs} {escape(shown)}")

    result = train(adapter, config, run_dir, progress=progress, device=args.device)
    if result.resumed_from_epoch:
        console.print(f"(resumed after epoch {result.resumed_from_epoch})")
    if result.status != "finished":
        console.print(f"[red]run {result.status}:[/] {result.reason}")
        return 1
    table = Table(title=f"{args.task} · {escape(args.unit)} · {args.arch} · d={args.dim} · best epoch {result.best_epoch}")
    table.add_column("split")
    metric = adapter.metric
    table.add_column(metric, justify="right")
    table.add_row(adapter.valid_split, f"{result.best_valid:.4f}")
    for split, values in result.test.items():
        table.add_row(split, f"{values[metric]:.4f}")
    console.print(table)
    console.print(f"parameters of the unit: {result.params_formula:,} (papers' formula, no biases), "
                  f"{result.params_total:,} (total)" if result.params_formula is not None else
                  f"parameters of the unit: {result.params_total:,}")
    console.print(f"wall time {result.seconds:.1f} s")
    return 0
