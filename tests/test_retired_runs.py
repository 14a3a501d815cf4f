"""Runs the driver deletes without their ending (a live run given up when the driver stops, a live
run a dead driver left RUNNING) are ended KILLED first: MLflow keeps deleted runs in the store, and
a committed record read with SQL, or by a tool without MLflow's lifecycle filter, should not show
runs that say RUNNING forever."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.record.contract import Kind, Tag
from harness.record.sources import ClientSource, default_tracking_uri
from harness.record.writer import Tracker


def _tracker(tmp_path: Path) -> tuple[Tracker, str]:
    tracker = Tracker(default_tracking_uri(tmp_path), "retired", tmp_path / "mlartifacts")
    cell = tracker.client.create_run(tracker.experiment_id, run_name="cell").info.run_id
    return tracker, cell


def test_a_stopped_drivers_live_runs_are_ended_killed_then_deleted(tmp_path: Path) -> None:
    """The close's sweep (`_retire_half_written`: `delete_pending`) takes the live runs of the jobs a
    stop left in flight; the ended and the cell runs stay as they are."""
    tracker, cell = _tracker(tmp_path)
    live = [tracker.start_live(cell, f"seed/{i}/abc", {}, "cell", None) for i in range(2)]
    ended = tracker.start_live(cell, "seed/2/abc", {}, "cell", None)
    tracker.client.set_terminated(ended, "FINISHED")
    assert all(live) and {tracker.client.get_run(r).info.status for r in live} == {"RUNNING"}
    assert tracker.delete_pending() == 2
    for run_id in live:
        info = tracker.client.get_run(run_id).info
        assert (info.status, info.lifecycle_stage) == ("KILLED", "deleted")
        assert info.end_time is not None
    assert [tracker.client.get_run(r).info.lifecycle_stage for r in (ended, cell)] == ["active", "active"]


def test_a_dead_drivers_live_run_is_ended_killed_when_its_key_starts_again(tmp_path: Path) -> None:
    tracker, cell = _tracker(tmp_path)
    left = tracker.start_live(cell, "seed/0/abc", {}, "cell", None)  # its driver died: never ended
    again = tracker.start_live(cell, "seed/0/abc", {}, "cell", None)
    assert again and again != left
    info = tracker.client.get_run(left).info
    assert (info.status, info.lifecycle_stage) == ("KILLED", "deleted")
    assert tracker.client.get_run(again).info.status == "RUNNING"


@pytest.mark.parametrize("source", ["sql", "client"])
def test_a_run_an_older_driver_deleted_while_running_is_ended_killed_at_open(tmp_path: Path, source: str) -> None:
    """Drivers before 2026-11-26 deleted live runs without ending them (19 such runs were in the
    committed records/logic-paper): the next driver's open pass ends them KILLED and leaves them
    deleted, through plain SQL and through the MLflow client alike; ended and active runs are untouched."""
    tracker, cell = _tracker(tmp_path)
    if source == "client":
        tracker.reader.source = ClientSource(tracker.reader.source.uri, tracker.client)
    old = tracker.start_live(cell, "seed/0/abc", {}, "cell", None)
    tracker.client.delete_run(old)  # as an older driver did: deleted, still RUNNING
    ended = tracker.start_live(cell, "seed/1/abc", {}, "cell", None)
    tracker.client.set_terminated(ended, "FINISHED")
    tracker.client.delete_run(ended)  # a run --force replaced: ended, then deleted
    assert tracker.reader.source.deleted_unended(tracker.experiment_id) == [old]

    tracker.delete_pending()

    info = tracker.client.get_run(old).info
    assert (info.status, info.lifecycle_stage) == ("KILLED", "deleted")
    assert tracker.client.get_run(ended).info.status == "FINISHED"
    assert tracker.client.get_run(cell).info.lifecycle_stage == "active"
    assert tracker.reader.source.deleted_unended(tracker.experiment_id) == []


@pytest.mark.parametrize("source", ["sql", "client"])
def test_half_written_runs_are_found_alike_through_sql_and_the_client(tmp_path: Path, source: str) -> None:
    """What `delete_pending` deletes: unended trial/seed runs (RUNNING or SCHEDULED) and runs of kind
    `pending`; never an ended run, a cell run, or a deleted one. The client asks the server for the
    unended statuses only (a full read of the record otherwise, at every driver's open and stop)."""
    tracker, cell = _tracker(tmp_path)
    if source == "client":
        tracker.reader.source = ClientSource(tracker.reader.source.uri, tracker.client)
    running = tracker.start_live(cell, "seed/0/abc", {}, "cell", None)
    scheduled = tracker.start_live(cell, "seed/1/abc", {}, "cell", None)
    tracker.client.update_run(scheduled, status="SCHEDULED")
    ended = {}
    for i, status in enumerate(("FINISHED", "FAILED", "KILLED")):
        ended[status] = tracker.start_live(cell, f"seed/{2 + i}/abc", {}, "cell", None)
        tracker.client.set_terminated(ended[status], status)
    half = tracker.client.create_run(tracker.experiment_id, tags={Tag.KIND: Kind.PENDING}).info.run_id
    gone = tracker.start_live(cell, "seed/5/abc", {}, "cell", None)
    tracker.client.delete_run(gone)  # deleted while RUNNING: `deleted_unended`'s, not `pending`'s

    assert sorted(tracker.reader.source.pending(tracker.experiment_id)) == sorted([running, scheduled, half])
    assert tracker.reader.source.deleted_unended(tracker.experiment_id) == [gone]
    assert tracker.delete_pending() == 3
    assert tracker.reader.source.pending(tracker.experiment_id) == []
    assert all(tracker.client.get_run(r).info.status == s for s, r in ended.items())
    assert tracker.client.get_run(cell).info.lifecycle_stage == "active"
