"""Metrics by name, each registered once with its direction and how reports show it.

A task lists the metrics its `evaluate` returns (`TaskMeta.metrics`, names only); whether a
higher value is better, and how a table prints it, is a fact of the metric, not of the task, so
it is stated here once — as lm-evaluation-harness registers `higher_is_better` with each metric
— and the trainer (which epoch is best), the study reader (a study's `metric`), the search
(Optuna's direction) and the reports (best cells, titles, scales) all read it from here.

    register_metric("miss", higher_is_better=False, scale=100, decimals=1, label="miss rate (%)")
    metric_direction("miss")          # "minimize"
    metric_scale("miss")              # (100.0, 1, "miss rate (%)")

A plug-in task registers its own metrics where it is defined (its module is imported wherever the
task is looked up: study reader, workers, reports). A report reads records whose task code may
not be installed: an unregistered metric is then shown at scale 1 with 3 decimals, in the
direction its runs recorded (`tprbench.direction`), else as higher-is-better.

Torch-free and harness-free: tasks declare metrics, the harness reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAXIMIZE, MINIMIZE = "maximize", "minimize"  # Optuna's words for a direction, as the record stores them


@dataclass(frozen=True)
class Metric:
    """A metric's direction and display. `scale` multiplies recorded values for display (100: a
    fraction shown as a percentage), `decimals` rounds them, `label` names the metric in table
    titles; `abbrev` is what a layout that names the metric in its split columns appends (the LM
    papers' "test ppl")."""

    name: str
    higher_is_better: bool
    scale: float = 1.0
    decimals: int = 3
    label: str = ""
    abbrev: str = ""

    @property
    def direction(self) -> str:
        return MAXIMIZE if self.higher_is_better else MINIMIZE

    def describe(self, direction: str | None = None) -> str:
        """The metric in a table title: its label, else its name (× 100 and the direction said when they apply)."""
        if self.label:
            return self.label
        if self.scale == 100:
            return f"{self.name} (×100)"
        return self.name + (" (lower is better)" if (direction or self.direction) == MINIMIZE else "")


METRICS: dict[str, Metric] = {}


def register_metric(name: str, *, higher_is_better: bool, scale: float = 1.0, decimals: int = 3, label: str = "", abbrev: str = "") -> Metric:
    """Register metric `name` (idempotent: a module imported again registers the same metric
    again). Registering a name again with other properties is a ValueError: one metric, one meaning."""
    metric = Metric(name, higher_is_better, float(scale), decimals, label, abbrev)
    known = METRICS.get(name)
    if known is not None and known != metric:
        raise ValueError(f"metric {name!r} is registered already as {known}; not again as {metric}")
    METRICS[name] = metric
    return metric


def get_metric(name: str) -> Metric | None:
    """The registered metric (`valid_acc` and `acc` name the same), None when nobody registered it."""
    return METRICS.get(name.removeprefix("valid_"))


def metric_direction(name: str, recorded: Any = None) -> str:
    """The direction a record states (a study may set its own), else the registered one; an
    unregistered metric without a recorded direction counts as higher-is-better."""
    if isinstance(recorded, str) and recorded in (MAXIMIZE, MINIMIZE):
        return recorded
    metric = get_metric(name)
    return metric.direction if metric else MAXIMIZE


def metric_scale(name: str, direction: str | None = None) -> tuple[float, int, str]:
    """(multiplier, decimals, description) for displaying a metric (direction: as recorded, if known)."""
    metric = get_metric(name) or Metric(name, higher_is_better=True)
    return metric.scale, metric.decimals, metric.describe(metric_direction(name, direction))


# -- the built-in tasks' metrics (their meta.py files list which each returns) ---------------------
for _name in ("acc", "accuracy"):
    register_metric(_name, higher_is_better=True, scale=100, decimals=1, label="accuracy (%)")
for _name in ("f1", "pearson", "spearman", "corr", "mcc"):  # SentEval's transfer scores: fractions, shown × 100
    register_metric(_name, higher_is_better=True, scale=100, decimals=1)
for _name in ("ppl", "perplexity"):
    register_metric(_name, higher_is_better=False, decimals=1, label="perplexity (lower is better)", abbrev="ppl")
for _name in ("loss", "bpc", "err", "error", "mse", "word_ppl"):  # bAbI's error is a percentage already
    register_metric(_name, higher_is_better=False)
for _name in ("bleu1", "bleu2", "bleu3", "bleu4"):  # the autoencoder's reconstruction BLEU (sacrebleu: 0–100)
    register_metric(_name, higher_is_better=True)
