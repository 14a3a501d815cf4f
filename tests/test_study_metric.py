"""Correctness of the search, end to end on Ray: the study's metric is what is optimised, and
every run's resolved hyperparameters are in the record.

Before: `metric = "valid_loss"` set the Optuna direction to minimise, but workers reported
validation accuracy to the pruner and the driver told Optuna the accuracy — the search looked
for the lowest accuracy. Now the trainer's best epoch, the pruner's reports and `tell` all use
the cell's metric.
"""

from __future__ import annotations

import json

import pytest

from tests.ray_helpers import cells_of, local_ray, optuna_trials, records, run_study, seed_root, write_study

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    base = tmp_path_factory.mktemp("metric")
    root = seed_root(base / "root")
    path = write_study(base, "byloss", ["gru"], trials=3, seeds=1, epochs=3, pruner="median")
    path.write_text(
        path.read_text().replace("epochs = 3", 'epochs = 3\nmetric = "valid_loss"').replace('kind = "median"', 'kind = "median"\nstartup_trials = 10')
    )
    with local_ray(2):
        runner, summary = run_study(path, root)
    return path, root, summary


def test_optuna_is_told_each_trials_best_validation_loss_and_minimises(done):
    path, root, summary = done
    cell = cells_of(path)[0]
    assert (cell.metric, cell.direction) == ("valid_loss", "minimize")
    trials = optuna_trials(root, "byloss", cell.id)
    recs = records(root, "byloss")
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for trial in trials:
        rec = recs[f"{cell.id}/trial/{trial.number}"]
        history = _history(root, rec.run_id, "valid_loss")
        assert trial.value == pytest.approx(min(history.values()))  # the best epoch by loss, not accuracy
        assert trial.value == pytest.approx(rec.metrics["best_valid_loss"])
        # the pruner heard the loss of every epoch
        assert {int(k): v for k, v in trial.intermediate_values.items()} == pytest.approx(history)
    import optuna

    study = optuna.load_study(study_name=f"byloss/{cell.id}", storage=_storage(root))
    assert study.direction.name == "MINIMIZE"
    assert study.best_trial.value == min(t.value for t in trials)
    assert summary["states"][cell.id] == "done"


def test_every_run_logs_its_resolved_hyperparameters(done):
    path, root, _ = done
    cell = cells_of(path)[0]
    for rec in records(root, "byloss").values():
        params = rec.params
        # study values, the task's defaults and the trainer's own, as the run used them
        assert {"lr", "batch_size", "optimizer", "schedule", "lr_step", "lr_gamma", "clip", "dropout", "seed"} <= set(params)
        assert params["batch_size"] == "32" and params["optimizer"] == "adam" and params["clip"] == "5.0"
        assert params["mlp_hidden"] == "null" and json.loads(params["betas"]) == [0.9, 0.999]
        assert rec.tags["tprbench.metric"] == "valid_loss" and rec.tags["tprbench.reproducible"] == "true"
    from harness.record.reader import RecordReader

    cells = RecordReader(f"sqlite:///{root / 'mlflow.db'}", "byloss").cells()
    row = cells[cells["cell_id"] == cell.id].iloc[0]
    assert (row["metric"], row["direction"], row["valid_split"]) == ("valid_loss", "minimize", "validate")
    assert json.loads(row["test_splits"]) == ["test_easy", "test_hard", "test_big", "test_massive", "test_exam"]


def test_the_report_tables_the_recorded_metric(done, tmp_path):
    from harness.report import write_report

    path, root, _ = done
    report = write_report(f"sqlite:///{root / 'mlflow.db'}", "byloss", tmp_path, seeds_wanted=1, figures=False)
    assert set(report.agg["metric"]) == {"loss"} and set(report.agg["direction"]) == {"minimize"}
    assert list(report.agg["split"]) == ["valid", "easy", "hard", "big", "massive", "exam"]
    text = (tmp_path / "table.md").read_text()
    assert "loss (lower is better)" in text


def _storage(root):
    from harness.record.storage import default_storage_url, open_storage

    return open_storage(default_storage_url(root))


def _history(root, run_id: str, key: str) -> dict[int, float]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    return {int(m.step): m.value for m in client.get_metric_history(run_id, key)}
