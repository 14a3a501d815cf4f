"""`[[tasks]] units`: a task entry that runs only some of the matrix's units (TPRN_1 is
BiDAF with `modelling_unit` set, which only the TPRN cells need), and the TPRN NLI study file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import units
from harness.study.cells import expand
from harness.study.load import load_study, parse_study
from harness.study.schema import StudyError

ROOT = Path(__file__).resolve().parents[1]

TEXT = """
[study]
name = "t"
trials = 0
seeds = 1
epochs = 1

[[tasks]]
name = "logic"

[[tasks]]
name = "logic"
label = "logic-bidaf-lstm"
units = {units}
[tasks.options]
modelling_unit = "lstm"

[matrix]
arch = ["bidaf"]
dim = [8]
units = ["lstm", "gru", "tprn[symbols=3,roles=2,role_dim=2]"]
"""


def test_a_task_entry_runs_only_the_units_its_globs_match():
    study = parse_study(TEXT.format(units='["tprn*", "gru"]'))
    labels = [c.label for c in expand(study)]
    tprn = str(units.parse_spec("tprn[symbols=3,roles=2,role_dim=2]"))
    assert labels == [
        "logic/bidaf/d8/lstm",
        "logic/bidaf/d8/gru",
        f"logic/bidaf/d8/{tprn}",
        "logic-bidaf-lstm/bidaf/d8/gru",
        f"logic-bidaf-lstm/bidaf/d8/{tprn}",
    ]
    second = [c for c in expand(study) if c.task_label == "logic-bidaf-lstm"]
    assert all(c.task_options["modelling_unit"] == "lstm" for c in second)
    # the filter selects cells, it does not change them: the same cell id as without it
    everything = parse_study(TEXT.format(units='["*"]'))
    ids = {c.label: c.id for c in expand(everything)}
    assert all(ids[c.label] == c.id for c in second)
    assert len(ids) == 6


def test_a_glob_that_matches_no_unit_is_an_error():
    with pytest.raises(StudyError, match=r"tasks\[1\]\.units\[0\]: 'tpr-n\*' matches no unit of the matrix"):
        parse_study(TEXT.format(units='["tpr-n*"]'))
    with pytest.raises(StudyError, match=r"tasks\[1\]\.units: must not be empty"):
        parse_study(TEXT.format(units="[]"))


@pytest.mark.skipif(not os.environ.get("TPRBENCH_DATA"), reason="TPRBENCH_DATA not set (the study file expands it)")
def test_the_tprn_nli_study_has_the_four_models_of_issue_13():
    study = load_study(ROOT / "studies" / "tprn-nli-cpu.toml")
    cells = {c.label: c for c in expand(study)}
    assert study.seeds == 3 and len(cells) == 4
    tprn, lstm, tpru = (
        str(units.parse_spec(s))
        for s in ("tprn[symbols=100,roles=20,role_dim=4,bidirectional=true]", "lstm[bidirectional=true]", "tpru[roles=32,bidirectional=true]")
    )
    assert set(cells) == {f"nli/bidaf/d32/{lstm}", f"nli/bidaf/d32/{tprn}", f"nli/bidaf/d32/{tpru}", f"nli-tprn1/bidaf/d32/{tprn}"}
    tprn1 = cells[f"nli-tprn1/bidaf/d32/{tprn}"]
    assert tprn1.task_options["modelling_unit"] == lstm  # TPRN_1: TPRN phrase layer + LSTM modelling layer
    assert cells[f"nli/bidaf/d32/{tprn}"].task_options["modelling_unit"] is None  # TPRN_all
    for cell in cells.values():  # the substitute protocol: train SNLI test, select SNLI dev, test MNLI dev m/mm
        opts = cell.task_options
        assert (opts["train"], opts["valid"]) == (["snli:test"], ["snli:dev"])
        assert opts["test"] == ["mnli:dev_matched", "mnli:dev_mismatched"]
        assert cell.dim == 32 and cell.arch == "bidaf"


def test_one_unit_pattern_rule_for_every_selector() -> None:
    """`--only unit=`, a task's `units` and a paper claim's `unit` share `units.spec.spec_pattern`."""
    from units.spec import glob_regex, spec_pattern

    assert spec_pattern("lstm[layers=1,bidirectional=true]").match("lstm[bidirectional=true,layers=1]")
    assert spec_pattern(" gru ").match("gru")
    assert not spec_pattern("gru").match("gru[layers=2]")  # whole string
    assert spec_pattern("tpru*").match("tpru-mod1[roles=8]")
    assert spec_pattern("tpru[roles=?]").match("tpru[roles=8]") and not spec_pattern("tpru[roles=?]").match("tpru[roles=32]")
    assert spec_pattern("not a [spec").match("not a [spec")  # no spec: literal
    assert glob_regex("a[b]").match("a[b]") and not glob_regex("a[b]").match("ab")
