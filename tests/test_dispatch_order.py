"""The driver's dispatch order: partly trained runs first (harness.driver.cells.partly_trained_first).

A restarted study must give its slots to runs whose checkpoints already hold epochs before it starts
fresh cells; the order is otherwise the plan's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from harness.driver.cells import partly_trained_first
from harness.record.contract import RunKey
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
