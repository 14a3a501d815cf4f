"""The real DeepMind logical-entailment files: every line parses back byte-exactly and the
oracle agrees with the label E on every line of all six splits (about 3-5 s in total).

Needs $TPRBENCH_DATA (the `data_root` fixture skips without it).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tasks.logic import data as D
from tasks.logic import formulas as F
from tasks.logic import generator as G

pytestmark = pytest.mark.realdata

# $TPRBENCH_DATA/logical_entailment/PROVENANCE.md: records and positives per split.
EXPECTED = {
    "validate": (5000, 2416),
    "test_easy": (5000, 2462),
    "test_hard": (5000, 2501),
    "test_big": (1696, 848),
    "test_massive": (2230, 1115),
    "test_exam": (100, 53),
}

# $TPRBENCH_DATA/logical_entailment/STATS.md: vars per pair, operators, characters and depth per formula (mean, max), P(E=1).
STATS = {
    "validate": ((5.2, 10), (6.9, 10), (26.8, 41), (4.9, 10), 0.48),
    "test_easy": ((5.3, 10), (6.9, 10), (27.0, 41), (4.9, 10), 0.49),
    "test_hard": ((5.8, 10), (17.5, 20), (66.6, 81), (8.4, 16), 0.50),
    "test_big": ((5.2, 16), (19.8, 30), (75.2, 118), (8.7, 19), 0.50),
    "test_massive": ((18.5, 24), (24.7, 30), (93.5, 118), (9.9, 18), 0.50),
    "test_exam": ((2.4, 4), (2.0, 5), (8.3, 19), (1.7, 3), 0.53),
}


@pytest.fixture(scope="module")
def real(data_root: Path) -> dict[str, list[D.LogicExample]]:
    folder = data_root / "logical_entailment"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    splits = D.find_splits(folder)
    assert set(EXPECTED) <= set(splits), sorted(splits)
    return {name: D.read_split(splits[name]) for name in EXPECTED}


def test_read_every_split_with_expected_counts(real):
    for name, (n, pos) in EXPECTED.items():
        assert len(real[name]) == n, name  # test_exam has no final newline and still 100 records
        assert sum(ex.label for ex in real[name]) == pos, name


def test_parser_round_trips_every_real_line_byte_exactly(real, data_root):
    for name in EXPECTED:
        path = data_root / "logical_entailment" / f"{name}.txt"
        raw = path.read_text(encoding="ascii").splitlines()
        assert len(raw) == len(real[name])
        for line, ex in zip(raw, real[name]):
            a, b = line.split(",")[:2]
            assert F.to_str(F.parse(a)) == a and F.to_str(F.parse(b)) == b
            assert G.format_line(ex.a, ex.b, ex.label, ex.heuristics) == line


def test_oracle_agrees_with_every_label_of_all_six_files(real):
    t0 = time.perf_counter()
    n = 0
    for name, examples in real.items():
        wrong = [(i + 1, ex) for i, ex in enumerate(examples) if F.entails(ex.a, ex.b) != bool(ex.label)]
        assert not wrong, f"{name}: oracle disagrees with E on lines {[i for i, _ in wrong[:10]]}"
        n += len(examples)
    seconds = time.perf_counter() - t0
    print(f"oracle checked {n} real pairs in {seconds:.2f} s")
    assert n == 19026


def test_heuristic_columns_match_their_definitions(real):
    # validate/test_easy/test_hard (the train distribution): all three columns exactly.
    for name in ("validate", "test_easy", "test_hard"):
        for ex in real[name]:
            assert F.heuristics(ex.a, ex.b) == ex.heuristics, (name, ex)
    # test_big/test_massive were made by a generator version whose H1 counted every node.
    for name in ("test_big", "test_massive"):
        for ex in real[name]:
            h1, h2, h3 = ex.heuristics
            assert (int(F.size(ex.a) >= F.size(ex.b)), h2, h3) == (h1, *F.heuristics(ex.a, ex.b)[1:]), (name, ex)


def test_statistics_reproduce_stats_md(real):
    for name, (nv, n_ops, chars, depth, p_pos) in STATS.items():
        s = G.split_stats(real[name])
        assert (round(s["vars_mean"], 1), s["vars_max"]) == nv, name
        assert (round(s["ops_mean"], 1), s["ops_max"]) == n_ops, name
        assert (round(s["chars_mean"], 1), s["chars_max"]) == chars, name
        assert (round(s["depth_mean"], 1), s["depth_max"]) == depth, name
        assert round(s["p_pos"], 2) == p_pos, name


def test_generated_train_excludes_real_pairs(real, data_root, tmp_path):
    real_keys = {F.alpha_key(ex.a, ex.b) for exs in real.values() for ex in exs}
    info = G.write_dataset(tmp_path / "gen", train=2000, seed=0, eval_size=0, exclude=[data_root / "logical_entailment"])
    assert len(info.params["exclude"]) == 6
    generated = {F.alpha_key(ex.a, ex.b) for ex in D.read_split(info.files["train"])}
    assert len(generated) == 2000
    assert not generated & real_keys


def test_svp_keeps_real_labels(real):
    import random

    rng = random.Random(0)
    for ex in real["test_hard"][:500] + real["test_exam"]:
        new = D.svp(ex, rng)
        assert F.entails(new.a, new.b) == bool(ex.label)


def test_cli_prints_comparison_with_real_splits(tmp_path, capsys, data_root, monkeypatch):
    from harness.cli import main

    monkeypatch.setenv("TPRBENCH_DATA", str(data_root))
    assert main(["data", "logic", "--out", str(tmp_path / "d"), "--train", "40", "--eval-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "validate (real)" in out and "test_massive (real)" in out
