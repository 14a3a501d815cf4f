"""`tprbench bench harness`, tiny: a simulated cluster of 2 nodes, 4 sleeping trials of 0.5 s."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def test_bench_harness_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main
    from tasks.registry import available_tasks
    from tests.ray_helpers import environ, ray_environ

    with environ(ray_environ()):
        rc = main(["bench", "harness", "--nodes", "2", "--trial-seconds", "0.5", "--trials-per-node", "2", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0
    assert "parallel efficiency" in out and "MLflow record" in out
    rows = list(csv.DictReader(open(tmp_path / "bench-harness.csv")))
    assert len(rows) == 4 and all(r["status"] == "finished" for r in rows)
    assert all(float(r["trial_wall_s"]) >= 0.5 for r in rows)
    (summary,) = list(csv.DictReader(open(tmp_path / "bench-harness-summary.csv")))
    assert summary["trials"] == "4" and summary["slots"] == "2"
    assert 0 < float(summary["efficiency"]) <= 1.0
    assert float(summary["mlflow_s"]) > 0 and float(summary["optuna_s"]) > 0
    assert "bench-sleep" not in available_tasks()  # benchmark-only: not left in the task list
