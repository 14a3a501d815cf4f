"""Reports are byte-identical on the same record across refactors of the reader/aggregator/renderer.

tests/fixtures/record-v1 holds a real record (a 3-cell study run by the code before the record schema:
gru, tpru and a unit whose loss is NaN, 2 trials and 2 seeds each) and the files that code made
from it: tables, the search table, the speed figure (SVG), a study compared with itself, and
`study show --json`'s rows. The current code must make the same bytes from that record — which
also proves that records written before the record schema (no metric/direction/splits tags on
the cell runs) still read as they did.

Deliberate changes of the expected bytes (the code changed what it writes, not how it reads):
table.csv and search.csv have no `#` provenance lines (they load with a plain
`pandas.read_csv`; provenance.txt beside them says where they come from); table.tex's
label names the study and the task (`tab:golden-logic`) and the best value per column is bold;
table.csv has a `seeds_errored` column and `study show`'s rows `runs_errored`, `errored_retried`
and `errored_reason` (errored runs are not results: counted apart from diverged ones); compare.csv has
`params_a`/`params_b` (parameter counts) and rows for cells present in one study only.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "record-v1"
EXPECTED = FIXTURE / "expected"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("golden")
    with gzip.open(FIXTURE / "mlflow.db.gz", "rb") as src, open(root / "mlflow.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(FIXTURE / "optuna.journal", root / "optuna.journal")
    return root


def uri(root: Path) -> str:
    return f"sqlite:///{root / 'mlflow.db'}"


def test_tables_and_figure_are_byte_identical(root, tmp_path):
    from harness.report import write_report

    write_report(uri(root), "golden", tmp_path, seeds_wanted=2, command="tprbench report golden", figures=True)
    for name in ("table.md", "table.tex", "table.csv", "search.csv", "speed.svg"):
        assert (tmp_path / name).read_bytes() == (EXPECTED / name).read_bytes(), name


def test_comparison_is_identical(root, tmp_path):
    from harness.report import compare_studies

    side = {"study": "golden", "uri": uri(root)}
    result = compare_studies(side, dict(side), seeds_wanted=2)
    out = tmp_path / "compare.csv"
    result.frame.to_csv(out, index=False, float_format="%.10g", lineterminator="\n")
    assert out.read_bytes() == (EXPECTED / "compare.csv").read_bytes()


def test_study_show_rows_are_identical(root, monkeypatch):
    from harness.driver.status import study_status
    from harness.study.cells import expand
    from harness.study.load import load_study

    monkeypatch.syspath_prepend(str(FIXTURE.parents[2]))  # tests.plugin_units (the NaN unit)
    # The record was made under cell-id scheme v2; the fidelity defaults (two-layer encoders, ...) moved every id to v3
    # on purpose, so the plan is expanded with the scheme the record was written with.
    monkeypatch.setattr("harness.study.cells.ID_VERSION", 2)
    study = load_study(FIXTURE / "study.toml")
    rows = study_status(study, expand(study), root)
    assert json.dumps(rows, indent=1, sort_keys=True) + "\n" == (EXPECTED / "status.json").read_text()
