"""The CLI and reports read unit specs without importing torch (units/__init__ is lazy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE = """
import sys
import units
from harness.cli import build_parser
from harness.report import parse_unit, unit_columns
build_parser()
assert units.parse_spec("tpru[roles=32,slices=8]").option_dict == {"roles": "32", "slices": "8"}
assert parse_unit("tpru[roles=32]") == ("tpru", {"roles": "32"})
assert unit_columns("tpru[roles=32]", "tpru[roles=32,slices=1]")["slices"] == 1
assert "torch" not in sys.modules, "torch was imported"
units.build  # first use of the rest imports it
assert "torch" in sys.modules
"""


def test_spec_parsing_and_the_cli_parser_do_not_import_torch():
    proc = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# Reading a study file checks every unit spec and task against the units' and tasks' metadata
# (units/meta.py, tasks/<name>/meta.py), which must not import torch: `study show` and `report`
# would pay ~2 s for it (docs/benchmarks-record.md, "Where the seconds go").
STUDY_CODE = """
import sys
from pathlib import Path
from harness.study.cells import expand
from harness.study.load import load_study
from harness.study.schema import StudyError

read = 0
for path in sorted(Path("studies").glob("*.toml")):
    try:
        study = load_study(path)
    except StudyError as exc:  # e.g. a data path under an unset variable: checked elsewhere
        print(f"skipped {path}: {exc}", file=sys.stderr)
        continue
    assert expand(study), path
    read += 1
assert read >= 10, read
heavy = sorted(m for m in ("torch", "pandas", "pyarrow", "mlflow", "ray", "optuna", "sklearn", "numpy") if m in sys.modules)
assert not heavy, f"reading the studies imported {heavy}"
"""


def test_reading_every_study_file_imports_no_torch():
    env = {**os.environ, "TPRBENCH_DATA": os.environ.get("TPRBENCH_DATA", "/nonexistent/data")}
    proc = subprocess.run([sys.executable, "-c", STUDY_CODE], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


SHOW_CODE = """
import sys
from harness.cli import main

code = main(["study", "show", "studies/quickstart.toml", "--root", sys.argv[1], "--json"])
assert code == 0, code
heavy = sorted(m for m in ("torch", "pandas", "mlflow", "ray") if m in sys.modules)
assert not heavy, f"study show imported {heavy}"
"""


def test_study_show_imports_no_torch(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SHOW_CODE, str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"study": "quickstart"' in proc.stdout and proc.stdout.count('"label"') == 8
