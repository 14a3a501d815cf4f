"""Learning curves in `tprbench report` have the papers' panels: training loss, training accuracy
and validation accuracy per epoch (workshop Fig. 1, ICLR Fig. 2)."""

from __future__ import annotations

import pandas as pd

from harness.report import figures


def _history(keys):
    rows = [{"run_id": "r1", "key": k, "step": e, "value": 0.5 + 0.1 * e} for k in keys for e in (1, 2, 3)]
    return pd.DataFrame(rows)


def test_panels_are_train_loss_train_acc_valid_acc():
    h = _history(["train_loss", "train_acc", "valid_acc"])
    assert [k for k, _, _ in figures._panel_keys("acc", h)] == ["train_loss", "train_acc", "valid_acc"]
    fig = figures._draw([("logic / plain / d=64: tpru", "acc", [("8 roles", ["r1"], "-")])], h)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_ylabel() for ax in axes] == ["training loss", "training accuracy (%)", "validation accuracy (%)"]
    assert all(len(ax.lines) == 1 for ax in axes)


def test_train_score_panel_only_when_logged():
    h = _history(["train_loss", "valid_acc"])
    assert [k for k, _, _ in figures._panel_keys("acc", h)] == ["train_loss", "valid_acc"]


def test_gradient_panels_beside_the_learning_curves_when_logged():
    h = _history(["train_loss", "train_acc", "valid_acc", "grad_ratio_first_last", "grad_frac_sigma_gt_1", "grad_sigma_max_mean"])
    keys = [k for k, _, _ in figures._panel_keys("acc", h)]
    assert keys == ["train_loss", "train_acc", "valid_acc", "grad_ratio_first_last", "grad_frac_sigma_gt_1", "grad_sigma_max_mean"]
    fig = figures._draw([("logic / plain / d=64: tpru", "acc", [("8 roles", ["r1"], "-")])], h)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert axes[3].get_yscale() == "log" and axes[4].get_yscale() == "linear"
    assert all(len(ax.lines) >= 1 for ax in axes)


def test_report_reads_the_gradient_keys():
    from harness.report.write import _history_keys

    runs = pd.DataFrame(columns=["metric.train_loss", "metric.grad_ratio_first_last", "metric.test_acc"])
    assert "grad_ratio_first_last" in _history_keys(runs) and "train_loss" in _history_keys(runs)
