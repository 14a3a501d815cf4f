"""Ending many cell runs in one transaction (`Tracker.end_many`) writes what MLflow's
client writes run by run (`log_summary`, then `end`): status, end time, every summary metric in
the history, and the latest value by MLflow's own rule — a newer summary replaces the old one,
NaN and ±inf stored as MLflow stores them."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

from harness.record.sources import default_tracking_uri
from harness.record.writer import Tracker

SUMMARIES = [
    {"valid_acc_mean": 61.25, "valid_acc_std": 1.5, "seeds_finished": 3, "params_total": 1234},
    {"valid_acc_mean": float("nan"), "seeds_finished": 0},
    {"valid_ppl_mean": float("inf"), "best_search_valid_ppl": -float("inf")},
    {},
]
STATUSES = ["FINISHED", "FAILED", "KILLED", "FINISHED"]


def _runs(tracker: Tracker, prefix: str) -> list[str]:
    ids = []
    for i in range(len(SUMMARIES)):
        run_id = tracker.client.create_run(tracker.experiment_id, run_name=f"{prefix}{i}").info.run_id
        tracker.log_summary(run_id, {"valid_acc_mean": 10.0 + i, "old_only": 1.0})  # an earlier driver's summary
        ids.append(run_id)
    return ids


def _seen(tracker: Tracker, run_id: str) -> dict:
    run = tracker.client.get_run(run_id)
    history = {
        key: [
            (m.step, "nan" if math.isnan(m.value) else m.value)
            for m in sorted(tracker.client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        ]
        for key in run.data.metrics
    }
    latest = {k: ("nan" if math.isnan(v) else v) for k, v in run.data.metrics.items()}
    return {
        "status": run.info.status,
        "ended": run.info.end_time is not None and run.info.end_time >= run.info.start_time,
        "latest": latest,
        "history": history,
    }


def test_end_many_writes_what_the_client_writes_run_by_run(tmp_path: Path) -> None:
    tracker = Tracker(default_tracking_uri(tmp_path), "endmany", tmp_path / "mlartifacts")
    bulk, one_by_one = _runs(tracker, "bulk"), _runs(tracker, "client")
    tracker.end_many([(r, s, m) for r, s, m in zip(bulk, STATUSES, SUMMARIES)])  # one transaction
    for run_id, status, metrics in zip(one_by_one, STATUSES, SUMMARIES):
        if metrics:
            tracker.log_summary(run_id, metrics)
        tracker.end(run_id, status)
    for a, b in zip(bulk, one_by_one):
        assert _seen(tracker, a) == _seen(tracker, b)
    first = _seen(tracker, bulk[0])
    assert first["status"] == "FINISHED" and first["latest"]["valid_acc_mean"] == 61.25
    assert first["latest"]["old_only"] == 1.0  # a key the new summary lacks keeps its value
    assert first["history"]["valid_acc_mean"] == [(0, 10.0), (0, 61.25)]
    assert _seen(tracker, bulk[1])["latest"]["valid_acc_mean"] == "nan"
    assert _seen(tracker, bulk[2])["latest"]["valid_ppl_mean"] == 1.7976931348623157e308


def test_end_many_through_the_client_when_there_is_no_sql_store(tmp_path: Path, monkeypatch) -> None:
    """Without MLflow's SQL store (a tracking server), the same writes go run by run."""
    tracker = Tracker(default_tracking_uri(tmp_path), "endmany", tmp_path / "mlartifacts")
    ids = _runs(tracker, "srv")
    calls = []
    monkeypatch.setattr(tracker, "log_summary", lambda run_id, m: calls.append(("summary", run_id, dict(m))))
    monkeypatch.setattr(tracker, "end", lambda run_id, s: calls.append(("end", run_id, s)))
    # A client whose store is not MLflow's SQL store (as through `mlflow server`: a REST store).
    monkeypatch.setattr(tracker, "_client", SimpleNamespace(_tracking_client=SimpleNamespace(store=object())))
    tracker.end_many([(r, s, m) for r, s, m in zip(ids, STATUSES, SUMMARIES)])
    want = []
    for r, s, m in zip(ids, STATUSES, SUMMARIES):
        want += ([("summary", r, m)] if m else []) + [("end", r, s)]
    assert calls == want
