"""The driver's dispatch order: the most training seconds left first (harness.driver.progress.EpochEta.longest_first),
partly trained runs first among equals (harness.driver.cells.partly_trained_first), then the plan's order.

A restarted study must give its slots to runs whose checkpoints already hold epochs before it starts
fresh cells; a long cell started last would finish alone while the other slots idle."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from harness.driver.cells import CellState, partly_trained_first
from harness.driver.progress import EpochEta
from harness.record.contract import RunKey, Tag
from tasks.result import BEST_WEIGHTS, CHECKPOINT, RESULT


def _state(cell_id: str) -> SimpleNamespace:
    return SimpleNamespace(cell=SimpleNamespace(id=cell_id))


def _run(work_dir: Path, key: RunKey, *files: str) -> None:
    run_dir = key.run_dir(work_dir)
    run_dir.mkdir(parents=True)
    for name in files:
        (run_dir / name).write_bytes(b"x")


def test_partly_trained_cells_go_first_in_plan_order(tmp_path: Path) -> None:
    states = [_state(c) for c in ("a1", "b2", "c3", "d4", "e5", "f6")]
    _run(tmp_path, RunKey.seed("b2", 0, "00aa11bb"), CHECKPOINT, BEST_WEIGHTS, RESULT)  # finished
    _run(tmp_path, RunKey.seed("d4", 0, "00aa11bb"), CHECKPOINT, BEST_WEIGHTS)  # killed or paused mid-run
    _run(tmp_path, RunKey.trial("f6", 3), CHECKPOINT)  # a search trial killed mid-run
    _run(tmp_path, RunKey.seed("c3", 0, "00aa11bb"))  # started, no epoch saved yet: nothing to keep
    _run(tmp_path, RunKey.seed("e5", 0, "00aa11bb"), CHECKPOINT, RESULT)
    _run(tmp_path, RunKey.seed("e5", 1, "00aa11bb"), CHECKPOINT)  # its second seed is partly trained
    order = [st.cell.id for st in partly_trained_first(states, tmp_path)]
    assert order == ["d4", "e5", "f6", "a1", "b2", "c3"]


def test_order_is_the_plans_when_nothing_is_partly_trained(tmp_path: Path) -> None:
    states = [_state(c) for c in ("z", "y", "x")]
    assert [st.cell.id for st in partly_trained_first(states, tmp_path / "absent")] == ["z", "y", "x"]
    _run(tmp_path, RunKey.seed("y", 0, "00aa11bb"), CHECKPOINT, RESULT)
    assert [st.cell.id for st in partly_trained_first(states, tmp_path)] == ["z", "y", "x"]


def _cell(cell_id: str, epochs: int, seeds_left: int, recorded_seconds: float | None = None, paused_at: int | None = None) -> CellState:
    """A planned cell with `seeds_left` seed runs to go; one earlier run recorded with its last epoch's seconds."""
    st = CellState(SimpleNamespace(id=cell_id, epochs=epochs), None, trials_wanted=0, seeds_wanted=seeds_left)
    st.final_params, st.final_todo = {}, list(range(seeds_left))
    st.tags = {Tag.FINAL_PARAMS_HASH: "00aa11bb"}
    if recorded_seconds is not None:
        status, reason = ("paused", f"paused after epoch {paused_at} of {epochs} (until epoch {paused_at})") if paused_at else ("finished", "")
        rec = SimpleNamespace(status=status, tags={Tag.REASON: reason}, metrics={"epoch_seconds": recorded_seconds})
        st.records = {str(RunKey.seed(cell_id, 0, "00aa11bb")): rec}
    return st


def test_longest_first_by_epochs_left_times_the_cells_recorded_epoch_seconds() -> None:
    states = [
        _cell("lstm", 90, 1, recorded_seconds=110.0),  # 90 × 110 s
        _cell("tpru512", 90, 1, recorded_seconds=260.0, paused_at=30),  # 60 left × 260 s: the longest
        _cell("gru", 90, 1, recorded_seconds=128.0),  # 90 × 128 s
        _cell("new", 90, 1),  # never measured: the median cell's price (128 s)
        _cell("short", 10, 1),  # never measured, few epochs
    ]
    eta = EpochEta()
    eta.start(states)
    assert [st.cell.id for st in eta.longest_first(states)] == ["tpru512", "gru", "new", "lstm", "short"]


def test_a_study_never_measured_keeps_the_order_it_was_given() -> None:
    states = [_cell(c, 5, 1) for c in ("b", "a", "c")]
    eta = EpochEta()
    eta.start(states)
    assert [st.cell.id for st in eta.longest_first(states)] == ["b", "a", "c"]
