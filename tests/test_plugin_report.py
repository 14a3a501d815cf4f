"""A plug-in task and a plug-in unit state their own report facts, and a study shows them.

Nothing of the plug-in is inside the repository (as in tests/test_adding_a_task.py): its module,
written to a temporary folder, registers a lower-is-better metric of its own (`miss`, the miss
rate) with its display scale, a task scored by it (docs/adding-a-task.md's contains7, subclassed)
that names a report layout of its own, and a unit (tests/plugin_units.py's Elman RNN with a
`blocks` option) that declares `blocks` a table column and says how to size itself against GRU.
The study is run by `tprbench run` (driver and Ray workers import the plug-in from PYTHONPATH)
and reported by `tprbench report`; the tables must show what the plug-in declared — and only
because it declared it: the harness names none of it.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_adding_a_task import MODULE as CONTAINS7
from tests.test_adding_a_task import example_code

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "tprb_missrate"

PLUGIN_CODE = f'''"""contains7 scored by its miss rate, in a report layout of its own; an Elman RNN with a table column."""

from tasks.meta import ReportLayout
from tasks.metrics import register_metric
from tests.plugin_units import ElmanUnit
from {CONTAINS7} import Contains7

# Lower is better, shown as a percentage with two decimals; "miss" names it in the split columns.
register_metric("miss", higher_is_better=False, scale=100, decimals=2, label="miss rate (%)", abbrev="miss")


class MissRate(Contains7):
    """contains7, the best epoch chosen by the lowest miss rate (1 - accuracy)."""

    metric = "miss"
    metrics = ("loss", "acc", "miss")
    # A blocks column even for units without the option; split columns titled "valid miss", "test miss".
    report_layout = ReportLayout("missrate", unit_columns=("blocks",), metric_in_split_columns=True)

    def metrics_from_counts(self, loss_sum, counts):
        out = super().metrics_from_counts(loss_sum, counts)
        return {{**out, "miss": 1.0 - out["acc"]}}


class BlockElman(ElmanUnit):
    """An Elman RNN with a `blocks` option (unused by the recurrence) that reports show as a column."""

    REPORT_COLUMNS = TABLE_COLUMNS = ("blocks",)

    def __init__(self, input_size: int, hidden_size: int, blocks: int = 1) -> None:
        super().__init__(input_size, hidden_size)
        self.blocks = blocks

    @classmethod
    def size_against_gru(cls, dim):
        return {{"blocks": 2}}, dim
'''

STUDY = f"""
[study]
name = "missrate"
trials = 0
seeds = 2
epochs = 2

[[tasks]]
name = "{PLUGIN}:MissRate"
label = "missrate"
data = "generated"
[tasks.options]
train_size = 128
eval_size = 32

[matrix]
dim = [8]
units = ["gru", "{PLUGIN}:BlockElman[blocks=3]"]

[search]
lr = 0.01

[resources]
cpus = 1
"""


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("plugin")
    (root / f"{CONTAINS7}.py").write_text(example_code())
    (root / f"{PLUGIN}.py").write_text(PLUGIN_CODE)
    return root


@pytest.fixture
def importable(plugin_dir, monkeypatch):
    """The plug-in importable in this process; what it registered is forgotten afterwards."""
    from tasks.metrics import METRICS
    from tasks.registry import TASKS
    from units.registry import UNITS

    monkeypatch.syspath_prepend(str(plugin_dir))
    TASKS.load_builtins()
    UNITS.load_builtins()
    before = dict(TASKS.entries), dict(UNITS.entries), dict(METRICS)
    yield plugin_dir
    for registry, entries in ((TASKS, before[0]), (UNITS, before[1])):
        for name in set(registry.entries) - set(entries):
            registry.remove(name)
    for name in set(METRICS) - set(before[2]):
        del METRICS[name]
    for name in (PLUGIN, CONTAINS7):
        sys.modules.pop(name, None)


def test_the_plugin_declares_its_facts_and_the_harness_reads_them(importable):
    """Without training: the metric's direction reaches the study, the unit's size the bench."""
    from harness.bench import units as bench_units
    from harness.study.cells import expand
    from harness.study.load import load_study
    from tasks.metrics import metric_direction, metric_scale

    path = importable / "missrate.toml"
    path.write_text(STUDY)
    cells = expand(load_study(path))
    assert {(c.metric, c.direction) for c in cells} == {("valid_miss", "minimize")}
    assert metric_direction("miss") == "minimize" and metric_scale("miss") == (100.0, 2, "miss rate (%)")
    assert bench_units.sized_spec(f"{PLUGIN}:BlockElman", 16) == (f"{PLUGIN}:BlockElman[blocks=2]", 16)
    assert bench_units.sized_spec(f"{PLUGIN}:BlockElman[blocks=5]", 16)[0].endswith("[blocks=5]")  # the spec wins


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_plugin_study_is_run_and_reported_as_declared(plugin_dir, importable, tmp_path):
    study = tmp_path / "missrate.toml"
    study.write_text(STUDY)
    ray_tmp = _short_tmp()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin_dir), str(ROOT)]), RAY_TMPDIR=ray_tmp)
    for argv in (
        ["run", str(study), "--root", str(tmp_path / "runs"), "--quiet", "--num-cpus", "2"],
        ["report", str(study), "--root", str(tmp_path / "runs"), "--out", str(tmp_path / "report"), "--no-figures"],
    ):
        proc = subprocess.run([sys.executable, "-m", "harness.cli", *argv], env=env, capture_output=True, text=True, timeout=360, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    md = (tmp_path / "report" / "table.md").read_text()
    assert "missrate: miss rate (%), mean ± std over seeds" in md  # the metric's label
    header = next(line for line in md.splitlines() if line.startswith("| arch"))
    # the layout's unit column (beside GRU too) and its metric-named split columns
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "arch",
        "d",
        "unit",
        "blocks",
        "valid miss",
        "test miss",
        "# params",
        "# params (total)",
        "seeds",
    ]
    rows = {r.split("|")[3].strip(): [c.strip() for c in r.strip("|").split("|")] for r in md.splitlines() if r.startswith("| plain")}
    assert rows["gru"][3] == "–" and rows[f"{PLUGIN}:BlockElman"][3] == "3"  # the option left the unit's spec
    assert all(
        cell.split(" ± ")[0].count(".") == 1 and len(cell.split(" ± ")[0].split(".")[1]) == 2 for row in rows.values() for cell in row[4:6]
    )  # two decimals, as registered

    with open(tmp_path / "report" / "table.csv") as fh:
        table = list(csv.DictReader(fh))
    assert {r["unit"]: r["blocks"] for r in table} == {"gru": "", f"{PLUGIN}:BlockElman[blocks=3]": "3"}
    assert {r["metric"] for r in table} == {"miss"}

    # The best value per column is the lowest miss rate (lower is better: the registered direction).
    from harness.report import aggregate, load_record, sections

    runs, cells = load_record(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}", "missrate", root=tmp_path / "runs")
    (sec,) = sections(aggregate(runs, cells, seeds_wanted=2))
    assert sec.layout == "missrate"
    col = sec.columns.index("test miss")
    means = [float(row[col].split(" ± ")[0]) for row in sec.rows]
    assert {(i, col) for i, v in enumerate(means) if v == min(means)} <= sec.best
    assert not any((i, col) in sec.best for i, v in enumerate(means) if v != min(means))


def _short_tmp() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="tprt", dir="/tmp")


def test_the_docs_tell_plugin_authors_how_to_declare_it():
    task_doc = (ROOT / "docs" / "adding-a-task.md").read_text()
    unit_doc = (ROOT / "docs" / "adding-a-unit.md").read_text()
    for name in (
        "register_metric",
        "higher_is_better",
        "scale=",
        "decimals=",
        "report_layout",
        "ReportLayout",
        "unit_columns",
        "metric_in_split_columns",
    ):
        assert name in task_doc, name
    for name in ("REPORT_COLUMNS", "TABLE_COLUMNS", "size_against_gru"):
        assert name in unit_doc, name
