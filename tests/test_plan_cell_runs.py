"""Planning a fresh study creates no cell runs: a driver with work plans every cell as it starts (to
count the resume line), and a new cell's MLflow run is created at its first dispatch, carrying the
tags planning chose for it (harness/driver/results.py `_set_cell_tags`). No Ray: the driver's
record-opening and planning steps are called as `StudyRunner._drive` calls them."""

from __future__ import annotations

from pathlib import Path

from harness.record.contract import Tag, bare
from tests.ray_helpers import cells_of, seed_root, tracker, write_study


def test_planning_every_cell_of_a_fresh_study_creates_no_cell_run_until_its_dispatch(tmp_path: Path) -> None:
    from harness.driver.runner import StudyRunner
    from harness.study.load import load_study

    path = write_study(tmp_path, "plan", ["gru", "lstm", "tpru"], trials=0, seeds=2)
    study, cells = load_study(path), cells_of(path)
    root = seed_root(tmp_path / "root")
    runner = StudyRunner(study, cells, root)
    states = runner._open_record()
    with runner.lease:
        assert all(runner._has_work(st) for st in states)  # every cell planned: two seeds to run each
        assert [st.final_todo for st in states] == [[0, 1]] * 3
        reader = tracker(root, study.name).reader
        assert reader.cell_runs([c.id for c in cells]) == []  # planning wrote nothing
        assert all(st.unwritten_tags.get(Tag.FINAL_PARAMS_HASH) for st in states)

        first = states[0]
        planned = dict(first.unwritten_tags)
        run_id = runner._cell_run(first)  # what the first dispatch does (`_submit`)
        runs = reader.cell_runs([c.id for c in cells])
        assert [r["run_id"] for r in runs] == [run_id]  # only the dispatched cell has a run
        recorded = runs[0]["tags"]
        for key, value in planned.items():  # created with the tags planning chose for it
            assert recorded[bare(key)] == value
        assert first.unwritten_tags == {} and first.tags[Tag.FINAL_PARAMS_HASH] == planned[Tag.FINAL_PARAMS_HASH]
        runner._close_record(states, "FINISHED")
