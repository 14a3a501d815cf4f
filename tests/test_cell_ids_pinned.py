"""Cell ids of the shipped studies, pinned: a refactor that changes one orphans its recorded runs.

tests/fixtures/cell_ids.json was computed with id scheme v3 (v3 changed every cell's defaults: E ~ N(0,1), two-layer encoders, ...).
Data paths are hashed as written, so the value of $TPRBENCH_DATA does not matter here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.study.cells import expand
from harness.study.load import load_study

ROOT = Path(__file__).resolve().parents[1]
PINNED = json.loads((ROOT / "tests" / "fixtures" / "cell_ids.json").read_text())


@pytest.mark.parametrize("path", sorted(PINNED))
def test_cell_ids_unchanged(path, monkeypatch):
    monkeypatch.setenv("TPRBENCH_DATA", "/nonexistent")
    study = load_study(ROOT / path)
    assert {c.label: c.id for c in expand(study)} == PINNED[path]


def test_quickstart_ids_spelled_out():
    # The quickstart's ids are also in README-facing reports: the same values as in the fixture.
    assert PINNED["studies/quickstart.toml"]["logic/plain/d16/lstm"] == "2e7c18fdca88"
    assert PINNED["studies/quickstart.toml"]["logic/plain/d16/tpru[roles=16]"] == "ae416ac654c3"
