"""`tprbench bench units` and `bench train` at toy sizes: what they report, not how fast anything is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import units
from harness.bench import units as bench_units
from harness.cli import main
from units.meta import TPR3Meta, TPRNMeta


def test_default_specs_cover_every_registered_unit():
    specs = bench_units.default_specs()
    assert specs[0] == "gru" and specs[1] == "lstm"
    assert set(units.available()) <= set(specs)
    assert "tpru[slices=8]" in specs


def test_size_rules():
    assert bench_units.sized_spec("tpru", 32) == ("tpru[roles=32]", 32)
    assert bench_units.sized_spec("tpru[roles=5,slices=4]", 32) == ("tpru[roles=5,slices=4]", 32)  # the spec wins
    assert bench_units.sized_spec("gru", 32) == ("gru", 32)
    # TPR-RNN: state E·R·E nearest d; TPRN: role_dim | d and GRU's parameter count (units/meta.py)
    assert bench_units.sized_spec("tpr3", 64) == ("tpr3[entity=4,relation=4]", 64)
    assert TPR3Meta.size_against_gru(256) == ({"entity": 8, "relation": 4}, 256)
    assert TPR3Meta.size_against_gru(512) == ({"entity": 8, "relation": 8}, 512)
    if "tpgn" in units.available():  # hidden p², the square whose count is nearest GRU's
        assert bench_units.sized_spec("tpgn", 64) == ("tpgn", 49)
    options, hidden = TPRNMeta.size_against_gru(64)
    assert hidden == 64 and 64 % options["role_dim"] == 0 and options["symbols"] + options["roles"] == 3 * 64


def test_bench_rows_interleaved_with_spread(tmp_path: Path):
    rows = bench_units.bench(
        ["gru", "lstm", "tpru", "tpru[slices=2]", "tpru[slices=3]"], [8], seq=5, batch=3, repeats=3, warmup=1, threads=[1], padded=True
    )
    by_unit = {r.unit: r for r in rows}
    assert by_unit["gru"].ratio_to_gru == 1.0 and by_unit["gru"].params_to_gru == 1.0
    for name in ("lstm", "tpru", "tpru[slices=2]"):
        row = by_unit[name]
        assert row.skipped is None and row.threads == 1 and row.padded and row.mode == "train"
        assert 0 < row.min_ms <= row.total_ms and row.iqr_ms >= 0 and row.ratio_to_gru > 0
        assert row.forward_ms > 0 and row.backward_ms > 0
    assert by_unit["tpru"].spec == "tpru[roles=8]" and by_unit["tpru"].params_total == units.param_counts("tpru[roles=8]", 8, 8).total
    assert "must divide the hidden size" in by_unit["tpru[slices=3]"].skipped  # cannot be built at d = 8: listed
    with pytest.raises(units.UnitSpecError, match="unknown unit"):  # a wrong spec is the user's error
        bench_units.bench(["gru", "no-such-unit"], [8], seq=5, batch=3, repeats=1, warmup=0)


def test_forward_only_mode():
    rows = bench_units.bench(["gru", "tpru"], [8], seq=4, batch=2, repeats=2, warmup=0, forward_only=True)
    assert all(r.mode == "forward" and r.backward_ms is None and r.forward_ms > 0 for r in rows)


def test_cli_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "bench.json"
    rc = main(
        [
            "bench",
            "units",
            "--dims",
            "8",
            "--seq",
            "4",
            "--batch",
            "2",
            "--repeats",
            "2",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--units",
            "gru;tpru-mod1",
            "--json",
            str(out),
            "--clock",
            "cpu",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "× gru" in text and "IQR ms" in text and "tpru-mod1[roles=8]" in text
    record = json.loads(out.read_text())
    assert record["meta"]["clock"] == "cpu" and record["meta"]["tpru_recurrence"] in ("cpp", "python")
    assert [r["unit"] for r in record["rows"]] == ["gru", "tpru-mod1"]


def test_cli_rejects_bad_dims(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "units", "--dims", "64,x"])
    assert exc.value.code == 2
    assert "comma-separated integers" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_train_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "train.json"
    rc = main(
        [
            "bench",
            "train",
            "--dim",
            "8",
            "--train-size",
            "64",
            "--batch-size",
            "32",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--units",
            "gru;tpru",
            "--cache",
            str(tmp_path / "cache"),
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["unit"] for r in rows] == ["gru", "tpru"]
    for row in rows:
        assert row["skipped"] is None and row["examples"] == 64 and row["examples_per_s"] > 0
    assert rows[0]["speed_to_gru"] == 1.0 and rows[1]["spec"] == "tpru[roles=8]"
