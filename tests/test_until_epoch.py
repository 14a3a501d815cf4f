"""`run --until-epoch N`: every run of a study stops after epoch N, recorded `paused` with its best
model so far tested, and the next `run` continues it from its checkpoint to where an
uninterrupted run ends (a long study's "every row through the first lr phase before any row goes
further"). Checked against uninterrupted runs: the same history, best epoch and test numbers; one
record per run key; the report marks paused seeds § and the claims count them as in progress.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness.record.contract import LIVE_STATUS, Tag
from tasks.registry import get_task
from tasks.training import CHECKPOINT, RESULT, TrainConfig, train
from tests.ray_helpers import (
    TIMING_METRICS,
    assert_no_duplicates,
    cells_of,
    local_ray,
    optuna_trials,
    records,
    run_rows,
    run_study,
    seed_root,
    status_rows,
    write_study,
)

OPTIONS = {"train_size": 400, "eval_size": 60, "preset": "exam", "layers": 1}


def _strip(history):
    return [{k: v for k, v in row.items() if k not in TIMING_METRICS} for row in history]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    task = get_task("logic")(OPTIONS, "generated", tmp_path_factory.mktemp("cache"))
    task.prepare()
    return task


def _config(epochs: int = 4, **hp) -> TrainConfig:
    return TrainConfig(unit="gru", arch="plain", dim=8, input_dim=8, epochs=epochs, seed=3, hparams={"lr": 1e-2, "batch_size": 32, **hp})


def test_a_paused_run_continues_to_the_uninterrupted_end(adapter, tmp_path: Path) -> None:
    straight = train(adapter, _config(), tmp_path / "straight")
    paused = train(adapter, _config(), tmp_path / "run", until_epoch=2)
    assert paused.status == "paused" and paused.reason == "paused after epoch 2 of 4 (until epoch 2)"
    assert [int(r["epoch"]) for r in paused.history] == [1, 2]
    assert _strip(paused.history) == _strip(straight.history[:2])
    # Its best model so far is tested, as a finished run's best model is.
    assert set(paused.test) == set(straight.test) and all(paused.test.values())
    # No result.json: the next call is not handed a finished result; the checkpoint stays.
    assert not (tmp_path / "run" / RESULT).exists() and (tmp_path / "run" / CHECKPOINT).exists()

    again = train(adapter, _config(), tmp_path / "run", until_epoch=2)  # already there: nothing trained
    assert again.status == "paused" and again.resumed_from_epoch == 2 and len(again.history) == 2
    assert again.test == paused.test

    done = train(adapter, _config(), tmp_path / "run")
    assert done.status == "finished" and done.resumed_from_epoch == 2
    assert _strip(done.history) == _strip(straight.history)
    assert done.test == straight.test and done.best_epoch == straight.best_epoch
    assert (tmp_path / "run" / RESULT).exists()


def test_until_epoch_at_or_past_the_end_finishes(adapter, tmp_path: Path) -> None:
    assert train(adapter, _config(epochs=2), tmp_path / "a", until_epoch=2).status == "finished"
    assert train(adapter, _config(epochs=2), tmp_path / "b", until_epoch=9).status == "finished"


def test_a_run_its_stop_rule_ends_at_the_pause_is_finished(adapter, tmp_path: Path) -> None:
    """stop_value reached by epoch 1 (any accuracy >= 0): the run has ended, not paused."""
    result = train(adapter, _config(stop_value=0.0), tmp_path / "r", until_epoch=1)
    assert result.status == "finished" and "stop_value" in " ".join(result.notes)


# -- through a study: the driver, the record, `study show`, the report, the claims --------------


@pytest.fixture(scope="module")
def ray_up():
    with local_ray(num_cpus=2):
        yield


def _same_as_straight(root: Path, straight_root: Path, study: str) -> None:
    """One finished record per run key, the pause not counted as an attempt, the numbers and the
    epoch history of the uninterrupted study."""
    from mlflow import MlflowClient

    from harness.record.sources import default_tracking_uri

    got, straight = records(root, study), records(straight_root, study)
    assert set(got) == set(straight)
    client = MlflowClient(default_tracking_uri(root))
    for key, rec in got.items():
        assert rec.status == "finished" and rec.tags["tprbench.attempt"] == "1", (key, rec.tags)
        assert _metrics(rec) == _metrics(straight[key]), key
        assert [m.step for m in client.get_metric_history(rec.run_id, "valid_acc")] == [1, 2, 3]
    keys = [row.data.tags["tprbench.run_key"] for row in run_rows(root, study)]
    assert len(keys) == len(set(keys)), keys


def _attempts(root: Path) -> int:
    """Workers started on the study's runs so far (each appends a line to its run's attempts.jsonl)."""
    from harness.driver.worker import ATTEMPTS

    return sum(len(f.read_text().splitlines()) for f in root.glob(f"work/*/*/*/{ATTEMPTS}"))


def _metrics(rec) -> dict[str, float]:
    return {k: v for k, v in rec.metrics.items() if k not in TIMING_METRICS and not k.endswith("_seconds")}


def _paused(tmp_path: Path, name: str, until: int, **kw):
    """A 3-epoch gru study run straight through in one root and paused at `until` in another:
    (study file, cell, straight root, paused root, the pausing driver)."""
    path = write_study(tmp_path, name, ["gru"], epochs=3, **kw)
    (cell,) = cells_of(path)
    straight_root, root = seed_root(tmp_path / "straight"), seed_root(tmp_path / "root")
    run_study(path, straight_root)
    runner, summary = run_study(path, root, until_epoch=until)
    assert summary["states"][cell.id] == "paused", summary
    return path, cell, straight_root, root, runner


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_paused_seed_runs_are_reported_then_continued(ray_up, tmp_path: Path, capsys) -> None:
    from harness.cli import main
    from harness.record.sources import default_tracking_uri
    from harness.report import make_table, write_report

    path, cell, straight_root, root, runner = _paused(tmp_path, "pause", 2, trials=0, seeds=2)
    recs = records(root, "pause")
    assert len(recs) == 2 and {r.status for r in recs.values()} == {"paused"}
    assert any("paused after epoch 2 of 3 (until epoch 2)" in e for e in runner.events), runner.events
    row = status_rows(path, root)[cell.id]
    assert row["status"] == "paused" and row["runs_paused"] == 2 and row["seeds_done"] == 0
    capsys.readouterr()
    assert main(["study", "show", str(path), "--root", str(root)]) == 0
    assert "paused" in capsys.readouterr().out

    report = write_report(default_tracking_uri(root), "pause", tmp_path / "rep", seeds_wanted=2, figures=False)
    md = make_table(report.agg, "markdown")
    assert "gru§" in md and "2 of 2 seeds paused, their numbers the best so far" in md, md
    assert "paused after epoch 2 of 3" in md and "| 2/2 |" in md, md

    before = _attempts(root)
    _, summary = run_study(path, root, until_epoch=2)  # already at the stage's epoch: not dispatched again
    assert summary["states"][cell.id] == "paused" and _attempts(root) == before == 2

    # Seed 1 as a driver SIGKILLed while it trained leaves it: RUNNING, status tag "running", skipped
    # by readers, its checkpoint in the work dir. The resume line counts it (it once said nothing).
    with sqlite3.connect(root / "mlflow.db") as con:
        (run_id,) = con.execute("SELECT run_uuid FROM tags WHERE key = ? AND value LIKE '%/seed/1/%'", (str(Tag.RUN_KEY),)).fetchone()
        con.execute("UPDATE runs SET status = 'RUNNING', end_time = NULL WHERE run_uuid = ?", (run_id,))
        con.execute("UPDATE tags SET value = ? WHERE run_uuid = ? AND key = ?", (LIVE_STATUS, run_id, str(Tag.STATUS)))
    assert len(records(root, "pause")) == 1

    runner, summary = run_study(path, root)  # the paused seed and the one in flight continue from their checkpoints
    assert summary["states"][cell.id] == "done", summary
    resume = next(e for e in runner.events if e.startswith("resuming:"))
    assert "1 run(s) in flight at the last stop continue from their checkpoints" in resume, resume
    assert "1 paused run(s) continue from their checkpoints" in resume, resume
    _same_as_straight(root, straight_root, "pause")
    assert_no_duplicates(root, "pause")


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_the_resume_line_counts_the_paused_runs_of_every_cell(ray_up, tmp_path: Path) -> None:
    """Two cells paused, one checkpoint gone (a root moved without `record load`): the resume line
    names both, not only the first cell's (the logic study's rerun once said "1 paused run(s)
    start over" of 14 paused rows, two of them continuing from checkpoints)."""
    path = write_study(tmp_path, "resumeall", ["gru", "lstm"], trials=0, seeds=1, epochs=2)
    root = seed_root(tmp_path / "root")
    _, summary = run_study(path, root, until_epoch=1)
    assert set(summary["states"].values()) == {"paused"}, summary
    checkpoints = sorted(root.glob(f"work/*/*/*/{CHECKPOINT}"))
    assert len(checkpoints) == 2, checkpoints
    checkpoints[0].unlink()
    runner, summary = run_study(path, root)
    assert set(summary["states"].values()) == {"done"}, summary
    resume = next(e for e in runner.events if e.startswith("resuming:"))
    assert "1 paused run(s) continue from their checkpoints" in resume, resume
    assert "1 paused run(s) start over" in resume, resume


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_paused_search_trial_is_not_told_until_it_ends(ray_up, tmp_path: Path) -> None:
    path, cell, straight_root, root, _ = _paused(tmp_path, "pausetrial", 1, trials=1, seeds=1)
    (trial,) = optuna_trials(root, "pausetrial", cell.id)
    assert trial.state.name == "RUNNING"  # not told: the search is not over, no final seed starts
    assert [r.status for r in records(root, "pausetrial").values()] == ["paused"]
    before = _attempts(root)
    _, summary = run_study(path, root, until_epoch=1)  # a second pass at the same epoch dispatches nothing
    assert summary["states"][cell.id] == "paused" and _attempts(root) == before

    runner, summary = run_study(path, root)
    assert summary["states"][cell.id] == "done", summary
    assert any("1 trial(s) continue from their checkpoints" in e for e in runner.events), runner.events
    (trial,) = optuna_trials(root, "pausetrial", cell.id)
    (straight_trial,) = optuna_trials(straight_root, "pausetrial", cell.id)
    assert trial.state.name == "COMPLETE" and trial.params == straight_trial.params and trial.value == straight_trial.value
    _same_as_straight(root, straight_root, "pausetrial")
