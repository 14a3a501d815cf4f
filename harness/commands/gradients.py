"""`tprbench gradients RUN_ID... | --study NAME | --unit SPEC --task T --data D`: gradient flow of
encoders (ICLR-2020 TPRU §4): ‖∂L/∂s_t‖ against t, the spectrum of ∂s_t/∂s_{t−1}, the update's
overlap with s_{t−1}. One figure panel per unit."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = "gradient flow of trained (or freshly initialised) encoders: ‖∂L/∂s_t‖ vs t, Jacobian spectrum, update overlap"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="MLflow run id(s) of finished trial/seed runs")
    p.add_argument("--study", default=None, help="every finished seed run of this recorded study (one per cell)")
    p.add_argument("--only", action="append", metavar="KEY=VALUE", help="with --study: keep runs whose tag matches, e.g. task=logic")
    p.add_argument("--unit", action="append", metavar="SPEC", help="a freshly initialised unit (repeatable); needs --task")
    p.add_argument("--task", default=None, help="with --unit: the task whose validation data is read")
    p.add_argument("--data", default=None, help="with --unit: the task's data (default: its built-in/generated data)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="with --unit: a task option (JSON value or string)")
    p.add_argument("--arch", default="plain", help="with --unit: architecture (default plain)")
    p.add_argument("--dim", type=bounds.DIM, default=64, help="with --unit: hidden size (default 64)")
    p.add_argument("--seed", type=bounds.SEED, default=0, help="with --unit: initialisation seed")
    p.add_argument("--untrained", action="store_true", help="also analyse each run at its initial weights (its seed)")
    p.add_argument("--layer", type=bounds.LAYER, default=1, help="encoder layer analysed (default 1: the one reading the embeddings)")
    p.add_argument("--batches", type=bounds.integer(1, 1_000_000), default=4, help="validation batches read per source (default 4)")
    p.add_argument("--batch-size", type=bounds.integer(1, 1_000_000), default=32)
    p.add_argument("--max-pairs", type=bounds.COUNT, default=2048, help="Jacobians computed per source (steps of real sequences)")
    p.add_argument("--root", default="runs", help="run directory (default ./runs)")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument(
        "--out",
        default="runs/gradients",
        help="folder for gradients.md/.csv and the figures (default runs/gradients, an ignored folder: a report to keep names its own --out)",
    )


def run(args: argparse.Namespace) -> int:
    import json
    import os
    import shlex
    import sys
    from pathlib import Path

    import torch

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from rich.console import Console
    from rich.markup import escape

    from harness.analysis import gradients as grad
    from harness.analysis.sources import AnalysisError, from_run, from_spec, parse_pairs, study_runs, tracking
    from harness.commands.support.output_path import check_output_path
    from harness.record.compressed import reading_root
    from harness.record.layout import RunRoot
    from harness.record.store_check import check_stores

    check_output_path(args.out, "--out")  # before any model is built or measured
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if not (args.run_ids or args.study or args.unit):
        raise AnalysisError("name what to analyse: RUN_ID(s), --study NAME or --unit SPEC (with --task)")
    if args.unit and not args.task:
        raise AnalysisError("--unit needs --task (whose validation data the unit reads)")
    root = reading_root(Path(args.root).expanduser().resolve())  # a committed mlflow.db.gz: its decompressed copy
    cache = RunRoot(root).cache
    console = Console()
    uri = tracking(root, args.tracking_uri)
    if args.run_ids or args.study:
        check_stores(args.tracking_uri, reading=True)
    runs = [(r, None) for r in args.run_ids]
    if args.study:
        runs += study_runs(uri, args.study, parse_pairs(args.only, "--only"))
    sources, adapters = [], {}
    for run_id, _unit in runs:
        sources.append(lambda r=run_id: from_run(uri, r, cache, trained=True, adapters=adapters))
        if args.untrained:
            sources.append(lambda r=run_id: from_run(uri, r, cache, trained=False, adapters=adapters))
    options = {}
    for key, value in parse_pairs(args.option, "--option").items():
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    for spec in args.unit or []:
        sources.append(lambda s=spec: from_spec(s, args.task, args.data, options, args.arch, args.dim, None, args.seed, cache))
    results = []
    for make in sources:
        source = make()
        with console.status(f"gradients: {escape(source.label)} on {source.task}"):
            result = grad.measure(source, layer=args.layer, batches=args.batches, batch_size=args.batch_size, max_pairs=args.max_pairs)
        s = result.stats.summary()
        console.print(
            f"{escape(source.task)} {escape(source.label)}: mean σ_max {s['sigma_max_mean']:.3f} "
            f"(>1: {s['frac_sigma_gt_1']:.1%}), ‖∂L/∂s_1‖/‖∂L/∂s_T‖ {s['grad_ratio_first_last']:.3g}, "
            f"cos(Δs, s) {s['update_cos_mean']:.3f}"
        )
        results.append(result)
    command = shlex.join(["tprbench", "gradients", *sys.argv[2:]]) if sys.argv[1:2] == ["gradients"] else "tprbench gradients ..."
    files = grad.write(results, Path(args.out), command)
    console.print(f"wrote {len(files)} files to {escape(args.out)}: " + ", ".join(escape(f.name) for f in files))
    return 0
