"""Runs the driver deletes without their ending (a live run given up when the driver stops, a live
run a dead driver left RUNNING) are ended KILLED first: MLflow keeps deleted runs in the store, and
a committed record read with SQL, or by a tool without MLflow's lifecycle filter, should not show
runs that say RUNNING forever."""

from __future__ import annotations

from pathlib import Path

from harness.record.sources import default_tracking_uri
from harness.record.writer import Tracker


def _tracker(tmp_path: Path) -> tuple[Tracker, str]:
    tracker = Tracker(default_tracking_uri(tmp_path), "retired", tmp_path / "mlartifacts")
    cell = tracker.client.create_run(tracker.experiment_id, run_name="cell").info.run_id
    return tracker, cell


def test_a_dropped_live_run_is_ended_killed_then_deleted(tmp_path: Path) -> None:
    tracker, cell = _tracker(tmp_path)
    live = tracker.start_live(cell, "seed/0/abc", {}, "cell", None)
    assert live and tracker.client.get_run(live).info.status == "RUNNING"
    tracker.drop_live(live)
    info = tracker.client.get_run(live).info
    assert (info.status, info.lifecycle_stage) == ("KILLED", "deleted")
    assert info.end_time is not None


def test_a_dead_drivers_live_run_is_ended_killed_when_its_key_starts_again(tmp_path: Path) -> None:
    tracker, cell = _tracker(tmp_path)
    left = tracker.start_live(cell, "seed/0/abc", {}, "cell", None)  # its driver died: never ended
    again = tracker.start_live(cell, "seed/0/abc", {}, "cell", None)
    assert again and again != left
    info = tracker.client.get_run(left).info
    assert (info.status, info.lifecycle_stage) == ("KILLED", "deleted")
    assert tracker.client.get_run(again).info.status == "RUNNING"
