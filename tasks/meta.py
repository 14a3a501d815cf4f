"""What a study file needs to know of a task, without torch: `TaskMeta`.

Reading a study checks its task options (`Options`), architectures (`archs`), metric (`metrics`,
`metric`; their directions are the metrics' own, tasks/metrics.py), search names and values
(`HParams`, `defaults`) and which units an architecture takes (`check_unit`); a report reads how
the task's table is laid out (`report_layout`). None of that needs torch, but the adapters (tasks/<name>/
adapter.py) build models and import it (~2 s). So each built-in task declares these in
tasks/<name>/meta.py, registered with `@register_task_meta(name)`, and its adapter subclasses
that class (`class LogicTask(LogicMeta, TaskAdapter)`), so there is one declaration of each.
`tasks.registry.task_meta(name)` returns it (the adapter itself for plug-in tasks);
tests/test_tasks_meta.py checks that every built-in adapter subclasses its metadata and
redeclares none of it. Nothing here, or in any tasks/<name>/meta.py, may import torch.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, ClassVar

import pydantic

from .errors import TaskError
from .hparams import HParams, resolve_hparams
from .metrics import get_metric


class NoOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ReportLayout:
    """How a report lays out a task's table (harness/report/render.py reads it; a task declares it
    as `report_layout`). `name` names the layout in the report's sections; `unit_columns` are unit
    columns (units/meta.py `TABLE_COLUMNS`) the table always has, even where no cell's unit has
    the option (the logic papers' roles column beside GRU and LSTM); `metric_in_split_columns`
    titles each split column with the metric's abbreviation (the LM papers' "test ppl");
    `pivot` adds per-task tables of test splits × models (the bAbI papers': harness/report/pivot.py);
    `split_order` is the papers' column order of the test splits (others follow by name)."""

    name: str = "generic"
    unit_columns: tuple[str, ...] = ()
    metric_in_split_columns: bool = False
    pivot: bool = False
    split_order: tuple[str, ...] = ()


class TaskMeta:
    """The declarative half of a task adapter (tasks/base.py `TaskAdapter` subclasses it)."""

    name: ClassVar[str]
    archs: ClassVar[tuple[str, ...]]
    Options: ClassVar[type[pydantic.BaseModel]] = NoOptions
    HParams: ClassVar[type[HParams]] = HParams  # a task with hyperparameters of its own subclasses it
    layouts: ClassVar[str] = ""  # the data layouts `data` may point at (`tprbench tasks` prints them)
    metric: ClassVar[str] = "acc"  # the default validation metric that selects the best epoch
    # Every metric `evaluate` returns: what a study's `metric` may name. Each is registered with
    # its direction and display in tasks/metrics.py (a plug-in registers its own there).
    metrics: ClassVar[tuple[str, ...]] = ("loss", "acc")
    report_layout: ClassVar[ReportLayout] = ReportLayout()
    # Training defaults of the papers for this task (HParams names); a study's search space overrides them.
    defaults: ClassVar[dict[str, Any]] = {}
    # Published numbers that reports print beside the measured ones: {column title: {row: text}},
    # rows named as the test splits (or a layout's summary rows, e.g. bAbI's "mean error").
    references: ClassVar[dict[str, dict[str, str]]] = {}

    @classmethod
    def resolve_hparams(cls, values: dict[str, Any] | HParams | None) -> HParams:
        """The run's hyperparameters: study values over this task's `defaults` over HParams' own."""
        return resolve_hparams(values, cls.defaults, cls.HParams)

    @classmethod
    def metric_direction(cls, metric: str) -> str | None:
        """Direction of a logged metric (`valid_acc` or `acc`), as registered; None when the task
        does not log it. A metric the task lists but nobody registered is a TaskError."""
        name = metric.removeprefix("valid_")
        if name not in cls.metrics:
            return None
        registered = get_metric(name)
        if registered is None:
            raise TaskError(
                f"task {cls.name!r} lists metric {name!r}, which is not registered: "
                f"register it with tasks.metrics.register_metric(name, higher_is_better=...)"
            )
        return registered.direction

    @classmethod  # noqa: B027 (optional hook: by default every unit fits every architecture)
    def check_unit(cls, arch: str, unit: str) -> None:
        """Raise TaskError when architecture `arch` cannot be built around unit spec `unit` (e.g.
        bAbI's tpr-rnn needs tpr3). The study reader calls it for every cell, so a study that pairs
        them wrongly stops when it is read; `build_model` should call it too."""


def run_metric(adapter: TaskMeta | type[TaskMeta], metric: str | None = None, direction: str | None = None) -> tuple[str, str]:
    """(validation key, direction) of a run: the study's metric, else valid_<the task's metric>;
    its direction as the study states it, else as the metric is registered. A metric the task does
    not log is a TaskError."""
    key = metric or f"valid_{adapter.metric}"
    if not key.startswith("valid_"):
        raise TaskError(
            f"metric {key!r}: the best epoch is chosen on the validation split; use valid_<name> with <name> one of {', '.join(adapter.metrics)}"
        )
    declared = adapter.metric_direction(key)
    if declared is None:
        names = [f"valid_{m}" for m in adapter.metrics]
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TaskError(f"metric {key!r}{hint}: task {adapter.name!r} logs {', '.join(names)}")
    return key, direction or declared
