"""The unit of work the driver sends to a worker: one trial or seed run of one cell.

One dataclass, built by the driver (harness/driver/runner.py) and read by the worker
(harness/driver/worker.py), so neither reads the other's dicts. It pickles to the worker through
Ray; everything in it is plain data.

In harness/driver/: the driver builds jobs and its worker reads them (`bench train` builds one
to time it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..study.cells import Cell


@dataclass(frozen=True)
class TrialRef:
    """Where the worker finds its Optuna trial to report epochs to (search phase only)."""

    storage: str
    study_name: str
    trial_id: int
    pruner: dict[str, Any]


@dataclass(frozen=True)
class WorkerJob:
    task: str
    task_options: dict[str, Any]
    data: str
    unit: str
    arch: str
    dim: int
    input_dim: int
    epochs: int
    metric: str  # the cell's validation key: best epoch, pruning reports and the value Optuna is told
    direction: str
    seed: int
    hparams: dict[str, Any]  # the study's values for this run (the trainer adds the task's defaults)
    run_dir: str
    cache_dir: str
    threads: int = 0
    deterministic: bool = True
    trial: TrialRef | None = None
    label: str = ""  # the cell label, for messages
    run_key: str = ""  # the record's key of this run (<cell>/trial/<n> or <cell>/seed/<s>/<hash>)
    sink: Any = None  # harness.driver.live.EpochSink actor: per-epoch metrics go to the driver while training
    until_epoch: int | None = None  # pause the run after this epoch (`run --until-epoch`); None: to the end

    @classmethod
    def for_cell(cls, cell: Cell, **fields: Any) -> WorkerJob:
        """A job for a harness.study.cells.Cell; `fields` gives seed, hparams, run_dir, cache_dir, ..."""
        return cls(
            task=cell.task,
            task_options=dict(cell.task_options),
            data=cell.data,
            unit=cell.unit,
            arch=cell.arch,
            dim=cell.dim,
            input_dim=cell.input_dim,
            epochs=cell.epochs,
            metric=cell.metric,
            direction=cell.direction,
            label=cell.label,
            **fields,
        )

    def train_config(self) -> Any:
        from tasks.training import TrainConfig

        return TrainConfig(
            unit=self.unit,
            arch=self.arch,
            dim=self.dim,
            input_dim=self.input_dim,
            epochs=self.epochs,
            seed=self.seed,
            hparams=dict(self.hparams),
            metric=self.metric,
            direction=self.direction,
            deterministic=self.deterministic,
        )
