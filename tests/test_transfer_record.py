"""`tprbench transfer`'s way into and out of the record: a tracked run read by id
(harness.record.reader.TrackedRuns: tags, params, its cell's params, its best.pt) and the transfer
run written through the writer (harness.record.writer.Tracker.log_transfer); and the worker's
info (`WorkerInfo`) as results carry it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from harness.record.contract import (  # noqa: E402
    MLFLOW_PARENT,
    Kind,
    MlflowStatus,
    Tag,
    WorkerInfo,
    WorkerResult,
    transfer_metric,
    transfer_run_name,
)
from harness.record.layout import RunRoot  # noqa: E402
from harness.record.reader import RunNotFound, TrackedRuns  # noqa: E402
from harness.record.writer import Tracker  # noqa: E402
from tasks.result import BEST_WEIGHTS, RunStatus  # noqa: E402


class Cell:
    id, study, label, task, arch, unit, unit_canonical = "c0ffee000001", "xfer", "gru d16", "nli", "plain", "gru", "gru"
    dim, input_dim, epochs, data, task_options, metric, direction = 16, 16, 2, "/data/nli", {"max_len": 12}, None, None


def _record(tmp_path: Path) -> tuple[str, str, str]:
    root = RunRoot(tmp_path / "runs")
    root.path.mkdir()
    tracker = Tracker(root.tracking_uri, "xfer", root.artifacts, root=root.path)
    study_run = tracker.study_run("abc123")
    cell_run = tracker.create_cell_run(Cell(), study_run)
    weights = tmp_path / BEST_WEIGHTS
    weights.write_bytes(b"weights")
    result = WorkerResult(
        status=RunStatus.FINISHED, metric="valid_acc", best_valid=0.9, best_epoch=1, worker=WorkerInfo(host="h", start=1.0, end=2.0)
    )
    tags = {
        Tag.PHASE: "final",
        Tag.SEED: 0,
        Tag.UNIT: "gru",
        Tag.TASK: "nli",
        Tag.ARCH: "plain",
        Tag.DIM: 16,
        Tag.INPUT_DIM: 16,
        Tag.LABEL: "gru d16",
    }
    run_id = tracker.log_run(cell_run, "c0ffee000001/seed/0/abcd", tags, {"lr": 0.01, "seed": 0}, result, artifact=weights, new=True)
    return root.tracking_uri, cell_run, run_id


def test_a_tracked_run_is_read_by_id_and_a_transfer_run_written_under_it(tmp_path: Path) -> None:
    uri, cell_run, run_id = _record(tmp_path)
    runs = TrackedRuns(uri)
    run = runs.run(run_id)
    assert run.tags[Tag.KIND] == Kind.RUN and run.tags[Tag.STATUS] == RunStatus.FINISHED and run.parent == cell_run
    assert run.params["lr"] == "0.01" and run.metrics["best_valid_acc"] == 0.9 and run.experiment_id
    cell = runs.cell_params(run)
    assert json.loads(cell["task_options"]) == {"max_len": 12} and cell["data"] == "/data/nli"
    assert runs.artifact(run_id, BEST_WEIGHTS, tmp_path / "dl").read_bytes() == b"weights"
    with pytest.raises(RunNotFound, match="not found"):
        runs.run("0" * 32)
    with pytest.raises(RunNotFound, match="no nothing.pt artifact"):
        runs.artifact(run_id, "nothing.pt", tmp_path / "dl2")

    child = Tracker(uri, "xfer", create=False).log_transfer(run, {"MR": {"acc": 71.5, "ndev": 10, "flag": True}, "STS14": {"pearson": 0.6}})
    written = TrackedRuns(uri).run(child)
    assert written.tags[Tag.KIND] == Kind.TRANSFER and written.tags[Tag.SOURCE_RUN] == run_id and written.tags[MLFLOW_PARENT] == run_id
    assert written.tags[Tag.UNIT] == "gru" and written.tags[Tag.STUDY] == "xfer" and written.experiment_id == run.experiment_id
    assert written.metrics == {transfer_metric("MR", "acc"): 71.5, transfer_metric("MR", "ndev"): 10.0, transfer_metric("STS14", "pearson"): 0.6}
    info = runs.client.get_run(child).info
    assert info.status == MlflowStatus.FINISHED and info.run_name == transfer_run_name(run_id) == f"transfer/{run_id[:8]}"


def test_worker_info_is_typed_and_its_attempt_line_leaves_the_driver_fields_out() -> None:
    info = WorkerInfo(host="h", pid=7, start=1.0)
    info.ready_at, info.get_seconds = 3.0, 0.5
    assert info.attempt_line() == {"host": "h", "pid": 7, "start": 1.0}
    result = WorkerResult.from_dict({"status": "finished", "worker": {"host": "h", "end": 2.0, "unknown": 1}})
    assert result.worker == WorkerInfo(host="h", end=2.0)
    assert WorkerResult.errored("x").worker == WorkerInfo()
