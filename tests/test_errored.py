"""Errored is not diverged, by fault injection: a unit that cannot be built
on the workers (ModuleNotFoundError, as a missing optional dependency) while a flag file exists.

- its runs end `errored` with the reason; `study show` says `errored` with the reason and that
  the next run retries them; the report never marks them † (errored seeds show as missing ‡);
- the next `tprbench run` retries them — the same trial numbers and parameters — and, with the
  environment fixed, the cell completes as if nothing had happened;
- past the cap ($TPRBENCH_ERRORED_ATTEMPTS) a run is not retried again: the trial is failed in
  Optuna, the search completes without it, the cell stays `errored`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ray_helpers import cells_of, local_ray, optuna_trials, records, run_study, seed_root, status_rows, write_study

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def ray_up():
    with local_ray(num_cpus=2):
        yield


def flaky(flag: Path) -> str:
    return f"tests.plugin_units:MissingDepUnit[flag={flag}]"


def test_errored_trials_are_shown_as_errored_then_retried_by_the_next_run(ray_up, tmp_path: Path, capsys) -> None:
    from harness.cli import main
    from harness.record.sources import default_tracking_uri
    from harness.report import write_report

    flag = tmp_path / "broken"
    flag.write_text("the environment is broken while this file exists")
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "err", ["gru", flaky(flag)], trials=2, seeds=1, epochs=1)
    cell = next(c for c in cells_of(path) if c.unit.startswith("tests."))

    runner, summary = run_study(path, root)
    assert summary["states"][cell.id] == "errored"
    recs = {k: r for k, r in records(root, "err").items() if k.startswith(cell.id)}
    assert sorted(recs) == [f"{cell.id}/trial/0", f"{cell.id}/trial/1"]
    for rec in recs.values():
        assert rec.status == "errored" and rec.tags["tprbench.attempt"] == "1"
        assert "No module named 'tprbench_missing_dep'" in rec.tags["tprbench.reason"]
    # Not a result: Optuna has not been told, so the trials wait for the next run.
    assert [t.state.name for t in optuna_trials(root, "err", cell.id)] == ["RUNNING", "RUNNING"]
    assert any("errored (attempt 1 of 3: the next `tprbench run` retries it)" in e for e in runner.events)

    row = status_rows(path, root)[cell.id]
    assert row["status"] == "errored" and row["runs_errored"] == row["errored_retried"] == 2
    assert row["trials_running"] == 0 and "tprbench_missing_dep" in row["errored_reason"]
    capsys.readouterr()
    assert main(["study", "show", str(path), "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "errored" in out and "the next `tprbench run` retries them" in out and "tprbench_missing_dep" in out

    report = write_report(default_tracking_uri(root), "err", tmp_path / "rep", seeds_wanted=1, figures=False)
    md = (tmp_path / "rep" / "table.md").read_text()
    assert "†" not in md and "diverged" not in md, md
    assert report.agg[report.agg["cell_id"] == cell.id]["seeds_failed"].max() == 0

    # The environment is fixed: the next run retries the same trials (numbers, parameters) and completes the cell.
    params_before = {t.number: t.params for t in optuna_trials(root, "err", cell.id)}
    flag.unlink()
    runner, summary = run_study(path, root)
    assert summary["states"][cell.id] == "done", summary
    assert any(e.startswith("resuming:") and "2 errored run(s) retried" in e for e in runner.events), runner.events
    trials = optuna_trials(root, "err", cell.id)
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert {t.number: t.params for t in trials} == params_before
    recs = {k: r for k, r in records(root, "err").items() if k.startswith(cell.id)}
    assert len(recs) == 3 and all(r.status == "finished" for r in recs.values())
    assert {recs[f"{cell.id}/trial/{n}"].tags["tprbench.attempt"] for n in (0, 1)} == {"2"}
    row = status_rows(path, root)[cell.id]
    assert row["status"] == "done" and row["runs_errored"] == 0


def test_errored_seed_runs_are_missing_not_diverged_and_rerun(ray_up, tmp_path: Path) -> None:
    """trials = 0: the final seeds run straight away with the defaults; they error, then rerun."""
    from harness.record.sources import default_tracking_uri
    from harness.report import make_table, write_report

    flag = tmp_path / "broken"
    flag.write_text("x")
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "errseed", [flaky(flag)], trials=0, seeds=2, epochs=1)
    cell = cells_of(path)[0]
    _, summary = run_study(path, root)
    assert summary["states"][cell.id] == "errored"
    report = write_report(default_tracking_uri(root), "errseed", tmp_path / "rep", seeds_wanted=2, figures=False)
    md = make_table(report.agg, "markdown")
    assert "†" not in md and "‡" in md
    assert "2 of 2 seeds errored, not a result (seeds 0, 1; seed 0: ModuleNotFoundError" in md
    assert "`tprbench run` retries them" in md
    flag.unlink()
    _, summary = run_study(path, root)
    assert summary["states"][cell.id] == "done"
    recs = records(root, "errseed")
    assert len(recs) == 2 and {r.status for r in recs.values()} == {"finished"}
    assert {r.tags["tprbench.attempt"] for r in recs.values()} == {"2"}


def test_past_the_cap_an_errored_trial_is_failed_and_not_retried(ray_up, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TPRBENCH_ERRORED_ATTEMPTS", "2")
    flag = tmp_path / "broken"
    flag.write_text("x")
    root = seed_root(tmp_path / "root")
    path = write_study(tmp_path, "errcap", [flaky(flag)], trials=1, seeds=1, epochs=1)
    cell = cells_of(path)[0]
    run_study(path, root)
    runner, summary = run_study(path, root)  # attempt 2 of 2: the last
    assert any("attempt 2 of 2: not retried again" in e for e in runner.events), runner.events
    assert [t.state.name for t in optuna_trials(root, "errcap", cell.id)] == ["FAIL"]
    assert summary["states"][cell.id] == "errored"
    runner, summary = run_study(path, root)  # nothing left to retry
    assert any("nothing to do" in e and "errored past the retry cap" in e for e in runner.events), runner.events
    rec = records(root, "errcap")[f"{cell.id}/trial/0"]
    assert rec.status == "errored" and rec.tags["tprbench.attempt"] == "2"
    row = status_rows(path, root)[cell.id]
    assert row["status"] == "errored" and row["runs_errored"] == 1 and row["errored_retried"] == 0
    assert json.dumps(row)  # plain data for `study show --json`
