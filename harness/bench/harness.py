"""`tprbench bench harness`: parallel efficiency and per-trial overhead of the study driver.

A simulated Ray cluster (`ray.cluster_utils.Cluster`: a head without CPUs and N nodes of C
CPUs) runs a study whose trials take a known time: the benchmark-only task `bench-sleep`
sleeps `trial_seconds` per trial (split over its epochs) and trains a 2-parameter model, so
the trials need no CPU and the 2 cores of a small machine can host many simulated nodes. Every
other part is the real path: the same `StudyRunner`, Optuna ask/tell and per-epoch reports
(journal file), Ray dispatch, `train` with per-epoch checkpoints, MLflow records (SQLite).

Reported:
- parallel efficiency = ideal / measured, ideal = trials × S / slots, measured = wall time of
  the dispatch phase (first submit → last trial recorded and told);
- per-trial overhead = driver-side time of a trial (Optuna ask → tell) − S, split into Optuna
  (ask + suggest + tell, on the driver), MLflow (the record), Ray dispatch (submit → the worker
  starts the task), Ray return (worker done → the driver has the result; includes waiting
  while the driver records other trials), and worker overhead (the worker's time − S: imports
  on a fresh worker, `train` set-up, checkpoints, Optuna reports). Cold = the first trial of
  each worker process (it imports torch), warm = the others.

`bench-sleep` is registered only in the benchmark's processes (the driver, and Ray workers via
a worker setup hook): it never appears in `tprbench tasks` or in users' studies.
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tasks.registry import TASKS, register_task
from tasks.result import RunStatus

from ..driver.errors import RunnerError
from ..driver.ray_start import slots
from ..driver.runner import StudyRunner
from ..study.cells import expand
from ..study.load import parse_study

SLEEP_TASK = "bench-sleep"
EPOCHS = 2
SETUP_HOOK = "harness.bench.harness.register_bench_task"


def register_bench_task() -> type:
    """Register the benchmark's sleeping task (idempotent). Also Ray's worker setup hook."""
    import pydantic
    import torch
    from torch import nn
    from torch.nn import functional as F

    from tasks.base import TaskAdapter  # torch: imported when the task is registered

    if SLEEP_TASK in TASKS.entries:
        return TASKS.entries[SLEEP_TASK]

    class SleepOptions(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        epoch_seconds: float = pydantic.Field(1.0, ge=0, description="seconds each epoch sleeps")

    class SleepTask(TaskAdapter):
        """Benchmark only: each epoch sleeps `epoch_seconds` (no CPU) and takes one step on a
        2-parameter model; validation accuracy is a fixed function of the learning rate."""

        archs = ("plain",)
        Options = SleepOptions
        layouts = "benchmark only (tprbench bench harness): no data"
        metric = "acc"
        direction = "maximize"
        defaults = {"lr": 1e-3, "batch_size": 1}

        def prepare(self) -> None:
            self._batch = {"x": torch.ones(1, 1), "y": torch.zeros(1, dtype=torch.long)}

        @property
        def valid_split(self) -> str:
            return "valid"

        @property
        def test_splits(self) -> list[str]:
            return ["test"]

        def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[Any]:
            time.sleep(self.options.epoch_seconds)
            yield self._batch

        def eval_batches(self, split: str, batch_size: int) -> Iterator[Any]:
            yield self._batch

        def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: Any) -> nn.Module:
            return nn.Linear(1, 2, bias=False)

        def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
            logits = model(batch["x"])
            return F.cross_entropy(logits, batch["y"]), {"correct": int(logits.argmax(-1)[0] == 0), "count": 1}

    return register_task(SLEEP_TASK)(SleepTask)


def study_toml(name: str, cells: int, trials: int, epoch_seconds: float) -> str:
    dims = ", ".join(str(4 + i) for i in range(cells))  # one cell per dim: the driver round-robins cells
    return f"""
[study]
name = "{name}"
trials = {trials}
seeds = 0
epochs = {EPOCHS}

[[tasks]]
name = "{SLEEP_TASK}"
data = "generated"
[tasks.options]
epoch_seconds = {epoch_seconds}

[matrix]
dim = [{dims}]
units = ["gru"]

[search]
lr = {{ log_uniform = [1e-4, 1e-2] }}

[pruner]
kind = "median"
startup_trials = 1000

[resources]
cpus = 1
retries = 1
"""


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def summarise(runner: Any, trial_seconds: float, slots: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Efficiency and the overhead split from the runner's per-trial timings."""
    rows = []
    seen_pids: set[Any] = set()
    for r in sorted(runner.timings, key=lambda r: r.get("start") or 0.0):
        cold = r.get("pid") not in seen_pids
        seen_pids.add(r.get("pid"))
        total = r["prepare_seconds"] + (r["done"] - r["submitted"])  # Optuna ask → told
        rows.append(
            {
                "run_key": r["run_key"],
                "status": r["status"],
                "node": (r.get("node_id") or "")[:8],
                "pid": r.get("pid"),
                "cold_worker": cold,
                "trial_wall_s": total,
                "overhead_s": total - trial_seconds,
                "optuna_s": r["optuna_seconds"],
                "mlflow_s": r["mlflow_seconds"],
                "ray_dispatch_s": r.get("dispatch_seconds", float("nan")),
                "ray_return_s": r.get("return_seconds", float("nan")),
                "ray_get_s": r.get("get_seconds", 0.0),
                "worker_overhead_s": (r.get("worker_seconds") or 0.0) - trial_seconds,
            }
        )
    trials = len(rows)
    wall = runner.dispatch_ended - runner.dispatch_started
    ideal = trials * trial_seconds / slots
    warm = [r for r in rows if not r["cold_worker"]]
    summary = {
        "trials": trials,
        "finished": sum(r["status"] == RunStatus.FINISHED for r in rows),
        "slots": slots,
        "trial_seconds": trial_seconds,
        "ideal_s": ideal,
        "wall_s": wall,
        "efficiency": ideal / wall if wall else float("nan"),
        "overhead_s": _mean([r["overhead_s"] for r in rows]),
        "overhead_warm_s": _mean([r["overhead_s"] for r in warm]),
        "driver_s_per_trial": _mean([r["optuna_s"] + r["mlflow_s"] + r["ray_get_s"] for r in rows]),
    }
    for key in ("optuna_s", "mlflow_s", "ray_dispatch_s", "ray_return_s", "worker_overhead_s"):
        summary[key] = _mean([r[key] for r in rows])
        summary[key.replace("_s", "_warm_s")] = _mean([r[key] for r in warm])
    summary["overhead_pct"] = 100 * summary["overhead_s"] / trial_seconds if trial_seconds else float("nan")
    summary["overhead_warm_pct"] = 100 * summary["overhead_warm_s"] / trial_seconds if trial_seconds else float("nan")
    return summary, rows


def bench(
    nodes: int, trial_seconds: float, trials_per_node: int, cpus_per_node: int, root: Path, console: Any = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start the simulated cluster, run the sleeping study on it, shut everything down."""
    import ray
    from ray.cluster_utils import Cluster

    registered_here = SLEEP_TASK not in TASKS.entries
    register_bench_task()
    root.mkdir(parents=True, exist_ok=True)
    path = root / "bench.toml"
    path.write_text(study_toml("bench-harness", cells=nodes, trials=trials_per_node, epoch_seconds=trial_seconds / EPOCHS))
    study = parse_study(path.read_text(), str(path))
    cells = expand(study)
    ray_tmp = tempfile.mkdtemp(prefix="tprb", dir="/tmp")  # short: Ray's socket paths
    os.makedirs(os.path.join(ray_tmp, "ray"))
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE")}
    os.environ.update(RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    cluster = None
    try:
        t0 = time.time()
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 0, "include_dashboard": False, "temp_dir": os.path.join(ray_tmp, "ray"), "object_store_memory": 80 * 2**20},
        )
        for _ in range(nodes):
            cluster.add_node(num_cpus=cpus_per_node, object_store_memory=80 * 2**20)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False, runtime_env={"worker_process_setup_hook": SETUP_HOOK})
        if console is not None:
            console.print(f"cluster: head + {nodes} node(s) × {cpus_per_node} CPU up in {time.time() - t0:.1f} s")
        runner = StudyRunner(study, cells, root)
        runner.run()
        return summarise(runner, trial_seconds, slots(study.resources))
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        if registered_here:  # the benchmark task stays out of this process's task list
            TASKS.remove(SLEEP_TASK)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()})


def run_harness_bench(args: Any) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=120)
    if args.nodes < 1 or args.trials_per_node < 1 or args.cpus_per_node < 1 or args.trial_seconds < 0:
        raise RunnerError("bench harness: --nodes, --trials-per-node and --cpus-per-node must be >= 1, --trial-seconds >= 0")
    root = Path(args.root).expanduser().resolve() if args.root else Path(tempfile.mkdtemp(prefix="tprbench-bench-"))
    trials = args.nodes * args.trials_per_node
    console.print(
        f"[bold]bench harness[/] {args.nodes} node(s) × {args.cpus_per_node} CPU, {trials} trials of {args.trial_seconds:g} s (sleeping), root {root}"
    )
    summary, rows = bench(args.nodes, args.trial_seconds, args.trials_per_node, args.cpus_per_node, root, console)
    s = summary
    table = Table(
        title=f"parallel efficiency: {s['efficiency'] * 100:.1f}%  (ideal {s['ideal_s']:.1f} s = {s['trials']} × "
        f"{s['trial_seconds']:g} s / {s['slots']} slots; measured {s['wall_s']:.1f} s)"
    )
    for col in ("per trial, mean", "all trials (s)", "% of trial", "warm workers (s)"):
        table.add_column(col, justify="left" if col.startswith("per") else "right")
    pct = (lambda v: f"{100 * v / s['trial_seconds']:.2f}") if s["trial_seconds"] else (lambda v: "–")
    for label, key in (
        ("overhead (wall − S)", "overhead"),
        ("  Optuna ask/suggest/tell", "optuna"),
        ("  MLflow record", "mlflow"),
        ("  Ray dispatch (submit → start)", "ray_dispatch"),
        ("  Ray return (end → driver)", "ray_return"),
        ("  worker (its time − S)", "worker_overhead"),
    ):
        table.add_row(label, f"{s[key + '_s']:.3f}", pct(s[key + "_s"]), f"{s[key + '_warm_s']:.3f}")
    console.print(table)
    console.print(
        f"driver time per trial (Optuna + MLflow + ray.get): {s['driver_s_per_trial']:.3f} s; {s['finished']}/{s['trials']} trials finished"
    )
    write_csv(root / "bench-harness.csv", rows)
    write_csv(root / "bench-harness-summary.csv", [summary])
    console.print(f"wrote {root / 'bench-harness.csv'} (per trial) and {root / 'bench-harness-summary.csv'}")
    return 0
