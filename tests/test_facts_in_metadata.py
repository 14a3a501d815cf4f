"""Task and unit facts live in their metadata, not in the harness (issue 45, ask 3).

The baselines (LSTM, GRU) come from units/meta.py `BASELINE_RANK`, the speed reference from
`SPEED_REFERENCE`, the figures' swept columns from `FIGURE_SWEEP`, and the logic papers' split
order from tasks/logic/meta.py `ReportLayout.split_order`. The packages that turn any study into
tables and records — record/, report/, driver/, study/ — name no unit and no task's split: a
string constant that is a registered unit's name or a built-in task's split fails here. (bench/
builds named benchmark scenarios and analysis/ reads particular trained models: data, not rules.)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERIC = ("record", "report", "driver", "study")


def _constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def _named_facts() -> set[str]:
    from tasks.registry import available_tasks, task_meta
    from units.registry import available

    splits = {s for name in available_tasks() for s in task_meta(name).report_layout.split_order}
    return set(available()) | splits


def test_the_generic_packages_name_no_unit_and_no_task_split():
    facts = _named_facts()
    assert {"lstm", "gru", "tpru", "easy", "exam"} <= facts  # what the rule is about exists
    found = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for pkg in GENERIC
        for path in sorted((ROOT / "harness" / pkg).rglob("*.py"))
        for line, value in _constants(path)
        if value in facts
    ]
    assert not found, "unit or task facts named in the harness (declare them in units/meta.py or the task's meta):\n" + "\n".join(found)


def test_baselines_speed_reference_and_sweeps_come_from_the_units():
    from harness.bench.units import baseline, default_specs
    from harness.report.aggregate import baseline_order, papers_split_order
    from harness.report.figures import sweeps
    from units.registry import baselines

    assert baselines() == ["lstm", "gru"]
    assert baseline() == "gru" and default_specs()[:2] == ["gru", "lstm"]
    assert baseline_order("lstm") < baseline_order("gru") < baseline_order("tpru") == float("inf")
    assert papers_split_order()[:5] == ("easy", "hard", "big", "massive", "exam")
    assert sweeps() == (("roles", None), ("roles", "slices"))


def test_the_rule_catches_a_literal(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""Docstrings may say gru."""\nBASELINES = {"lstm": 0, "gru": 1}\n')
    assert [v for _, v in _constants(bad) if v in _named_facts()] == ["lstm", "gru"]
