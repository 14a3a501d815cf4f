"""A long study survives a fresh machine (harness/record/carry.py): `tprbench record save` copies
the record and the checkpoints of every paused or interrupted run; `tprbench record load` puts
them into a fresh root on another path, whose next `run` continues each run from its epoch and
ends where an uninterrupted study ends. Checked with a real paused study, its first root deleted.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from harness.record.carry import MANIFEST, STATE, CarryError, load, save, unfinished_runs
from tasks.result import BEST_WEIGHTS, CHECKPOINT, RESULT
from tests.ray_helpers import local_ray, run_study, seed_root, write_study
from tests.test_until_epoch import _same_as_straight


@pytest.fixture(scope="module")
def ray_up():
    with local_ray(num_cpus=2):
        yield


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_paused_study_saved_and_loaded_on_another_path_ends_as_an_uninterrupted_one(ray_up, tmp_path: Path, capsys) -> None:
    from harness.cli import main

    path = write_study(tmp_path, "carry", ["gru"], trials=0, seeds=1, epochs=3)
    straight = seed_root(tmp_path / "straight")
    run_study(path, straight)
    first = seed_root(tmp_path / "machine-1" / "root")
    _, summary = run_study(path, first, until_epoch=1)
    assert set(summary["states"].values()) == {"paused"}

    saved = tmp_path / "repo" / "records" / "carry"
    assert main(["record", "save", "--root", str(first), "--to", str(saved)]) == 0
    assert "1 unfinished run(s)" in capsys.readouterr().out
    (entry,) = json.loads((saved / STATE / MANIFEST).read_text())
    # epoch 1 is its best so far: best.pt is not saved, `load` writes it back from the checkpoint
    assert entry["epoch"] == 1 and set(entry["files"]) == {CHECKPOINT} and entry["best_from_checkpoint"]
    shutil.rmtree(tmp_path / "machine-1")  # the first machine is gone

    fresh = tmp_path / "machine-2" / "elsewhere"
    assert main(["record", "load", "--from", str(saved), "--root", str(fresh)]) == 0
    with sqlite3.connect(fresh / "mlflow.db") as con:
        (location,) = con.execute("SELECT artifact_location FROM experiments WHERE name LIKE '%carry%'").fetchone()
    assert location == (fresh / "mlartifacts").resolve().as_uri()

    runner, summary = run_study(path, fresh)
    assert set(summary["states"].values()) == {"done"}, summary
    assert any("1 paused run(s) continue from their checkpoints" in e for e in runner.events), runner.events
    (result,) = fresh.glob(f"work/carry/*/*/{RESULT}")
    assert json.loads(result.read_text())["resumed_from_epoch"] == 1  # continued, not started over
    _same_as_straight(fresh, straight, "carry")
    assert not (tmp_path / "machine-1").exists()  # nothing written to the old machine's path
    assert list((fresh / "mlartifacts").rglob(BEST_WEIGHTS))


def _fake_root(root: Path) -> Path:
    """A root with a record, one unfinished run (checkpoint) and one finished run (result)."""
    import torch

    seed_root(root)
    unfinished = root / "work" / "s" / "cell1" / "seed-0-ab"
    finished = root / "work" / "s" / "cell2" / "seed-0-ab"
    for run in (unfinished, finished):
        run.mkdir(parents=True)
        torch.save({"epoch": 4, "fingerprint": "f"}, run / CHECKPOINT)
        torch.save({"w": torch.zeros(2)}, run / BEST_WEIGHTS)
    (finished / RESULT).write_text("{}")
    return unfinished


def test_save_carries_unfinished_runs_only_and_drops_those_that_have_finished(tmp_path: Path) -> None:
    unfinished = _fake_root(tmp_path / "root")
    assert unfinished_runs(tmp_path / "root" / "work") == [unfinished]
    save(tmp_path / "root", tmp_path / "saved")
    assert sorted(p.relative_to(tmp_path / "saved" / STATE).as_posix() for p in (tmp_path / "saved" / STATE).rglob("*.pt")) == [
        "s/cell1/seed-0-ab/best.pt",
        "s/cell1/seed-0-ab/checkpoint.pt",
    ]
    (unfinished / RESULT).write_text("{}")  # it finished since: the next save drops it
    save(tmp_path / "root", tmp_path / "saved")
    assert not list((tmp_path / "saved" / STATE).rglob("*.pt"))
    assert json.loads((tmp_path / "saved" / STATE / MANIFEST).read_text()) == []


def test_a_run_whose_last_epoch_is_its_best_saves_one_copy_of_its_weights(tmp_path: Path) -> None:
    """best.pt equals the checkpoint's model when the checkpoint's epoch is the best one: saved once,
    written back by `load` as the worker writes it (a plain dict, each weight its own storage)."""
    import torch

    from tasks.checkpoint import load_checkpoint

    run = _fake_root(tmp_path / "root")
    w = torch.arange(6.0)
    model = {"embed.weight": w, "decoder.weight": w}  # tied: one storage in the checkpoint
    torch.save({"epoch": 4, "best_epoch": 4, "fingerprint": "f", "model": model}, run / CHECKPOINT)
    torch.save({k: v.clone() for k, v in model.items()}, run / BEST_WEIGHTS)
    save(tmp_path / "root", tmp_path / "saved")
    (entry,) = json.loads((tmp_path / "saved" / STATE / MANIFEST).read_text())
    assert set(entry["files"]) == {CHECKPOINT} and entry["best_from_checkpoint"]
    assert not list((tmp_path / "saved" / STATE).rglob(BEST_WEIGHTS))

    load(tmp_path / "saved", tmp_path / "fresh")
    best = load_checkpoint(tmp_path / "fresh" / "work" / "s" / "cell1" / "seed-0-ab" / BEST_WEIGHTS)
    assert set(best) == set(model) and all(torch.equal(best[k], model[k]) for k in model)
    assert best["embed.weight"].data_ptr() != best["decoder.weight"].data_ptr()

    torch.save({"epoch": 5, "best_epoch": 4, "fingerprint": "f", "model": model}, run / CHECKPOINT)
    save(tmp_path / "root", tmp_path / "saved")  # epoch 5 is not the best: best.pt is carried
    (entry,) = json.loads((tmp_path / "saved" / STATE / MANIFEST).read_text())
    assert set(entry["files"]) == {CHECKPOINT, BEST_WEIGHTS} and not entry["best_from_checkpoint"]


def test_load_refuses_a_root_that_has_a_record_and_a_state_that_differs_from_its_manifest(tmp_path: Path) -> None:
    _fake_root(tmp_path / "root")
    save(tmp_path / "root", tmp_path / "saved")
    before = (tmp_path / "root" / "mlflow.db").read_bytes()
    with pytest.raises(CarryError, match="exists; load into a fresh --root"):
        load(tmp_path / "saved", tmp_path / "root")
    assert (tmp_path / "root" / "mlflow.db").read_bytes() == before

    (tmp_path / "saved" / STATE / "s" / "cell1" / "seed-0-ab" / CHECKPOINT).write_bytes(b"edited")
    with pytest.raises(CarryError, match="differs from its manifest"):
        load(tmp_path / "saved", tmp_path / "fresh")
    assert not (tmp_path / "fresh" / "mlflow.db").exists()  # no record: the root is still fresh
