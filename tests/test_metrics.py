"""The metric registry (tasks/metrics.py): each metric's direction and display, stated once.

The table below pins what the trainer (best epoch), the study reader (the study's direction),
Optuna and the reports read: removing a metric's direction, or changing its scale, fails here —
and a report of a record without direction tags (older records) must follow the registry.
"""

from __future__ import annotations

import pytest

from tasks.metrics import METRICS, get_metric, metric_direction, metric_scale, register_metric
from tasks.registry import TASKS, task_meta

# name: (direction, scale, decimals, description in a table title)
PINNED = {
    "acc": ("maximize", 100.0, 1, "accuracy (%)"),
    "accuracy": ("maximize", 100.0, 1, "accuracy (%)"),
    "f1": ("maximize", 100.0, 1, "f1 (×100)"),
    "pearson": ("maximize", 100.0, 1, "pearson (×100)"),
    "spearman": ("maximize", 100.0, 1, "spearman (×100)"),
    "corr": ("maximize", 100.0, 1, "corr (×100)"),
    "mcc": ("maximize", 100.0, 1, "mcc (×100)"),
    "ppl": ("minimize", 1.0, 1, "perplexity (lower is better)"),
    "perplexity": ("minimize", 1.0, 1, "perplexity (lower is better)"),
    "word_ppl": ("minimize", 1.0, 3, "word_ppl (lower is better)"),
    "loss": ("minimize", 1.0, 3, "loss (lower is better)"),
    "bpc": ("minimize", 1.0, 3, "bpc (lower is better)"),
    "err": ("minimize", 1.0, 3, "err (lower is better)"),
    "error": ("minimize", 1.0, 3, "error (lower is better)"),
    "mse": ("minimize", 1.0, 3, "mse (lower is better)"),
    **{f"bleu{n}": ("maximize", 1.0, 3, f"bleu{n}") for n in range(1, 5)},
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_every_builtin_metric_has_its_direction_and_display(name):
    direction, scale, decimals, description = PINNED[name]
    assert metric_direction(name) == direction
    assert metric_direction(f"valid_{name}") == direction
    assert metric_scale(name) == (scale, decimals, description)


def test_the_registry_holds_the_pinned_metrics_and_no_others():
    assert sorted(METRICS) == sorted(PINNED)


def test_every_metric_a_builtin_task_lists_is_registered_with_the_tasks_direction():
    TASKS.load_metas()
    for name in TASKS.metas:
        meta = task_meta(name)
        assert meta.metric in meta.metrics, name
        for metric in meta.metrics:
            assert get_metric(metric) is not None, f"task {name!r} lists unregistered metric {metric!r}"
            assert meta.metric_direction(f"valid_{metric}") == metric_direction(metric)
    assert task_meta("lm").metric_direction("valid_ppl") == "minimize"
    assert task_meta("logic").metric_direction("valid_acc") == "maximize"
    assert task_meta("logic").metric_direction("valid_ppl") is None  # logic does not log it


def test_a_recorded_direction_wins_and_an_unknown_metric_reads_as_recorded():
    assert metric_direction("acc", "minimize") == "minimize"  # a study may set its own direction
    assert metric_direction("no_such_metric") == "maximize"
    assert metric_direction("no_such_metric", "minimize") == "minimize"
    assert metric_scale("no_such_metric", "minimize") == (1.0, 3, "no_such_metric (lower is better)")
    assert metric_scale("no_such_metric") == (1.0, 3, "no_such_metric")


def test_registering_is_idempotent_and_a_conflict_is_an_error():
    assert register_metric("loss", higher_is_better=False) is not None  # again, the same: fine
    with pytest.raises(ValueError, match="registered already"):
        register_metric("loss", higher_is_better=True)
    assert metric_direction("loss") == "minimize"


def test_a_task_listing_an_unregistered_metric_is_refused_when_a_study_reads_it():
    from tasks.errors import TaskError
    from tasks.meta import TaskMeta, run_metric

    class Unregistered(TaskMeta):
        name = "unregistered"
        metric = "mystery"
        metrics = ("loss", "mystery")

    with pytest.raises(TaskError, match="'mystery', which is not registered"):
        run_metric(Unregistered)


def test_a_record_without_direction_tags_is_ranked_by_the_registry():
    """Older records have no direction tag: the best cell of a perplexity table is the lowest."""
    import pandas as pd

    from harness.report.render import sections

    rows = []
    for order, (unit, ppl) in enumerate([("gru", 120.0), ("lstm", 95.0)]):
        rows.append(
            {
                "order": order,
                "split_order": 0,
                "split": "valid",
                "task": "lm",
                "task_label": "lm",
                "label": f"lm/lm/d8/{unit}",
                "cell_id": f"c{order}",
                "arch": "lm",
                "dim": 8,
                "input_dim": 8,
                "unit": unit,
                "unit_short": unit,
                "unit_name": unit,
                "roles": None,
                "slices": None,
                "metric": "ppl",
                "direction": None,
                "mean": ppl,
                "std": float("nan"),
                "n": 1,
                "seeds_wanted": 1,
                "seeds_finished": 1,
                "seeds_failed": 0,
                "seeds_missing": 0,
                "seeds_errored": 0,
                "failed_seeds": "",
                "missing_seeds": "",
                "errored_seeds": "",
                "failure_reasons": "",
                "errored_reasons": "",
                "params_formula": 1,
                "params_total": 1,
                "final_params": None,
                "final_params_hash": "h",
                "trials": 0,
                "trials_pruned": 0,
                "trials_failed": 0,
                "best_search": float("nan"),
                "best_trial": None,
            }
        )
    (sec,) = sections(pd.DataFrame(rows))
    assert sec.layout == "lm" and "valid ppl" in sec.columns
    assert sec.title.startswith("lm: perplexity (lower is better)")
    col = sec.columns.index("valid ppl")
    assert sec.best == {(1, col)}  # lstm's 95.0, not gru's 120.0
