"""`tprbench gradients` and `tprbench interpret` from the command line: a fresh-unit run on generated
logic data writes its table and figures; bad input is one line and exit 2."""

from __future__ import annotations

import csv

import pytest

from harness.cli import main


def test_gradients_for_fresh_units_writes_table_and_figures(tmp_path, capsys):
    out = tmp_path / "g"
    rc = main(
        [
            "gradients",
            "--unit",
            "gru",
            "--unit",
            "tpru-mod1[roles=4]",
            "--task",
            "logic",
            "--option",
            "train_size=8",
            "--option",
            "eval_size=12",
            "--dim",
            "8",
            "--batches",
            "1",
            "--batch-size",
            "6",
            "--max-pairs",
            "40",
            "--root",
            str(tmp_path / "runs"),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    names = {p.name for p in out.iterdir()}
    assert {"gradients.md", "gradients.csv", "gradients_curves.csv", "gradients.png", "gradients.svg", "spectrum.png", "spectrum.svg"} <= names
    rows = list(csv.DictReader(line for line in (out / "gradients.csv").open() if not line.startswith("#")))
    assert [r["unit"] for r in rows] == ["gru (untrained)", "tpru-mod1[roles=4] (untrained)"]
    assert rows[0]["candidate_proj_mean"] == "" and float(rows[1]["frac_candidate_positive"]) >= 0
    assert 0 < int(rows[0]["steps"]) <= 40
    text = (out / "gradients.md").read_text()
    assert "Regenerate with: tprbench gradients" in text and "| logic | gru (untrained) |" in text


@pytest.mark.parametrize(
    "argv,message",
    [
        (["gradients"], "name what to analyse"),
        (["gradients", "--unit", "gru"], "--unit needs --task"),
        (["gradients", "--unit", "tpru[roles=0]", "--task", "logic"], "--unit 'tpru[roles=0]'"),
        (["gradients", "--unit", "gru", "--task", "logic", "--option", "nokey"], "expected KEY=VALUE"),
        (
            ["gradients", "--unit", "gru", "--task", "logic", "--layer", "3", "--option", "train_size=8", "--option", "eval_size=8", "--dim", "8"],
            "--layer 3: the encoder has 2 layer(s)",
        ),
        (["interpret", "0123456789abcdef"], "not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, capsys):
    rc = main([*argv, "--root", str(tmp_path / "runs")] + (["--out", str(tmp_path / "o")] if argv[0] == "gradients" else []))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err and "Traceback" not in err
