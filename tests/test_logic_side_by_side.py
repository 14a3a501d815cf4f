"""scripts/logic_side_by_side.py: the authors' logic logs read epoch by epoch, and the committed
reports/logic-authors-code/side_by_side.md regenerated from the committed logs and record."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "logic_side_by_side.py"


def _script():
    spec = importlib.util.spec_from_file_location("logic_side_by_side", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_their_logs_give_one_value_an_epoch_and_a_cut_run_fewer(tmp_path):
    """Their loop prints `Train Acc …, Dev Acc …` after each epoch (and test splits at a better one);
    a run stopped mid-epoch has only its finished epochs."""
    (tmp_path / "seed1.log").write_text(
        "Finished loading training corpus\nT   1.35, D   0.06, E  0, I      0/  1563, L 0.70, acc 51.56\n"
        "Train Acc 57.20, Dev Acc 60.04\ntest_hard : 51.72\nTrain Acc 61.30, Dev Acc 61.36\ntest_hard : 52.00\n"
        "T  10.37, D   0.56, E  2, I    100/  1563, L 0.66, acc 59.38\n"
    )
    (tmp_path / "seed7.log").write_text("Train Acc 56.63, Dev Acc 56.96\n")
    (tmp_path / "notes.txt").write_text("Train Acc 1.0, Dev Acc 1.0\n")  # not a seed log
    module = _script()
    curves = module.authors_curves(tmp_path)
    assert curves == {1: [60.04, 61.36], 7: [56.96]}
    text = module.table(curves, {0: [60.08, 61.3, 62.62]}, "tpru")
    lines = text.splitlines()
    assert lines[2] == "| 1 | 60.04 / 56.96 | 58.5 | 60.1 |"
    assert lines[3] == "| 2 | 61.36 / – | 61.4 (1) | 61.3 |"  # seed 7 has no second epoch
    assert "62.6 (epoch 3 of 3)" in text


def test_no_seed_log_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no seed"):
        _script().authors_curves(tmp_path)


def test_committed_side_by_side_regenerates(data_root):
    committed = REPO / "reports" / "logic-authors-code" / "side_by_side.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "studies/logic-paper.toml", "--root", "records/logic-paper",
         "--unit", "tpru-v1[roles=512,layers=1,bidirectional=true]", "--authors", "reports/logic-authors-code/logs"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == committed.read_text()
