"""Logical entailment data: formulas, exact oracle, generator, reading, vocabulary, SVP, CLI.

Fast (a few seconds) and without real data; tests/test_logic_oracle_realdata.py covers the
real DeepMind files.
"""

from __future__ import annotations

import collections
import itertools
import json
import random
import string

import pytest

from tasks.errors import DataError
from tasks.logic import data as D
from tasks.logic import formulas as F
from tasks.logic import generator as G


def brute_entails(a: str, b: str) -> bool:
    """Reference: enumerate every assignment of the pair's variables with plain recursion."""
    fa, fb = F.parse(a), F.parse(b)
    names = sorted(F.variables(a) | F.variables(b))
    for values in itertools.product((False, True), repeat=len(names)):
        env = dict(zip(names, values))
        if F.evaluate(fa, env) and not F.evaluate(fb, env):
            return False
    return True


def lines_to_examples(lines: list[str]) -> list[D.LogicExample]:
    out = []
    for line in lines:
        a, b, e, h1, h2, h3 = line.split(",")
        out.append(D.LogicExample(a, b, int(e), (int(h1), int(h2), int(h3))))
    return out


@pytest.fixture(scope="module")
def small_splits() -> dict[str, list[str]]:
    """A few lines of every preset (massive is slow per group, so only one four-tuple)."""
    seen: set[str] = set()
    sizes = {"exam": 40, "easy": 400, "hard": 80, "big": 80, "massive": 8}
    return {name: G.generate_split(n, name, seed=3, split=name, seen=seen) for name, n in sizes.items()}


# ----------------------------------------------------------------------------- formulas


def test_parse_print_round_trip_and_measures():
    s = "((~(((r|o)&r))>~(((y|a)|m)))&(y>(r>j)))"
    f = F.parse(s)
    assert F.to_str(f) == s and str(f) == s
    assert F.ops(s) == F.ops(f) == 10
    assert F.depth(f) == 5
    assert F.variables(f) == set("romyaj")
    assert F.depth("p") == 0 and F.depth("~(p)") == 1 and F.depth("(p&~(q))") == 2
    assert isinstance(f, F.Bin) and f.op == "&" and isinstance(f.left.left, F.Not)
    rng = random.Random(0)
    for n in range(0, 25):
        g = G.random_formula(rng, n, "pqrs")
        assert F.to_str(F.parse(g)) == g and F.ops(g) == n


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("~p", "~(p)"),
        ("~~p", "~(~(p))"),
        ("(g)", "g"),
        ("((p&q))", "(p&q)"),
        ("~(p&q)", "~((p&q))"),
        ("~((p&q))", "~((p&q))"),
        ("(((a)))", "a"),
        ("((~(a))>(b))", "(~(a)>b)"),
    ],
)
def test_parser_accepts_redundant_parentheses_and_bare_negation(text, canonical):
    assert F.is_formula(text)
    assert F.to_str(F.parse(text)) == canonical


@pytest.mark.parametrize(
    "text, where",
    [
        ("", "empty"),
        ("(a&b", "column 5"),
        ("a&b", "column 2"),
        ("(a&b))", "column 6"),
        ("~", "column 2"),
        ("A", "column 1"),
        ("(a&b&c)", "column 5"),
        ("(a b)", "column 3"),
        ("(a,b)", "column 3"),
    ],
)
def test_parser_errors_say_where(text, where):
    assert not F.is_formula(text)
    with pytest.raises(F.FormulaError, match=where):
        F.parse(text)


def test_heuristics_definitions():
    # H1: variables + negations (binary nodes do not count); H2: vars(B) ⊆ vars(A);
    # H3: NNF literals, polarity flipped under ~ and in the antecedent of >.
    assert F.prop_length("(p&(q|r))") == 3 and F.prop_length("~(~(p))") == 3
    assert F.size("(p&(q|r))") == 5
    assert F.literals("(p>~(q))") == {("p", False), ("q", False)}
    assert F.literals("~((p>q))") == {("p", True), ("q", False)}
    assert F.heuristics("(p&~(q))", "~(q)") == (1, 1, 1)
    assert F.heuristics("(p>q)", "p") == (1, 1, 0)
    assert F.heuristics("p", "(p|r)") == (0, 0, 0)


def test_alpha_key_is_renaming_invariant():
    assert F.alpha_key("(x&y)", "y") == F.alpha_key("(b&a)", "a") == "(a&b),b"
    assert F.alpha_key("(x&y)", "y") != F.alpha_key("(x&y)", "x")


def test_oracle_small_cases():
    assert F.entails("(p&q)", "p") and not F.entails("p", "(p&q)")
    assert F.entails("(p&~(p))", "z")  # ex falso
    assert F.entails("q", "(p|~(p))")
    assert F.entails("(p&(p>q))", "q") and not F.entails("(q&(p>q))", "p")
    assert F.satisfiable("(p|q)") and not F.satisfiable("(p&~(p))")
    assert F.valid("((p>q)|(q>p))") and not F.valid("(p>q)")


def test_oracle_matches_brute_force_on_random_pairs():
    rng = random.Random(11)
    for _ in range(300):
        pool = rng.sample(F.ALPHABET, rng.randint(1, 6))
        a = G.random_formula(rng, rng.randint(0, 8), pool)
        b = G.random_formula(rng, rng.randint(0, 8), pool)
        assert F.entails(a, b) == brute_entails(a, b), (a, b)


def test_blocked_truth_tables_agree_with_single_block():
    # 21 variables: the oracle splits the table into 8 blocks; the assembled table must equal
    # the table computed directly over full 2^21-bit columns.
    names = list(F.ALPHABET[:21])
    f = "(((a&u)|~((t>b)))&(c|(s>~(e))))"
    cols = F.columns(21)
    env = dict(zip(names, cols))
    mask = (1 << (1 << 21)) - 1
    assert F.truth_table(f, names) == F._table(F.parse(f), env, mask)
    assert F.entails("((a&u)&(t&s))", "(u|(b&c))") and not F.entails("(u|(t&s))", "(u&t)")


# ----------------------------------------------------------------------------- generator


def test_generator_labels_are_exact(small_splits):
    for name, lines in small_splits.items():
        for ex in lines_to_examples(lines):
            if name == "massive":  # 19-25 variables: too many for the brute force
                assert F.entails(ex.a, ex.b) == bool(ex.label)
            else:
                assert brute_entails(ex.a, ex.b) == bool(ex.label), (name, ex)


def test_generator_massive_labels_agree_with_sympy(small_splits):
    sympy = pytest.importorskip("sympy")
    from sympy.logic.boolalg import And, Implies, Not, Or
    from sympy.logic.inference import satisfiable

    sym = {c: sympy.Symbol(c) for c in F.ALPHABET}

    def conv(g):
        if isinstance(g, F.Var):
            return sym[g.name]
        if isinstance(g, F.Not):
            return Not(conv(g.arg))
        return {"&": And, "|": Or, ">": Implies}[g.op](conv(g.left), conv(g.right))

    for ex in lines_to_examples(small_splits["massive"]):
        entailed = not satisfiable(And(conv(F.parse(ex.a)), Not(conv(F.parse(ex.b)))))
        assert entailed == bool(ex.label)


def test_generator_four_tuples_balance_and_heuristic_columns(small_splits):
    for name, lines in small_splits.items():
        examples = lines_to_examples(lines)
        assert len(examples) % 4 == 0
        assert sum(ex.label for ex in examples) * 2 == len(examples), name
        # every premise and every hypothesis occurs as often with E=1 as with E=0
        for side in ("a", "b"):
            count = collections.Counter()
            for ex in examples:
                count[getattr(ex, side)] += 1 if ex.label else -1
            assert set(count.values()) == {0}, (name, side)
        for ex in examples:
            assert ex.heuristics == F.heuristics(ex.a, ex.b)
            assert ex.a == F.to_str(F.parse(ex.a)) and ex.b == F.to_str(F.parse(ex.b))


def test_generator_presets_respect_their_knobs(small_splits):
    for name, lines in small_splits.items():
        preset = G.PRESETS[name]
        for ex in lines_to_examples(lines):
            assert preset.ops_a[0] <= F.ops(ex.a) <= preset.ops_a[1]
            assert preset.ops_b[0] <= F.ops(ex.b) <= preset.ops_b[1]
            assert len(F.variables(ex.a) | F.variables(ex.b)) <= preset.vars[1]
            if preset.max_depth is not None:
                assert max(F.depth(ex.a), F.depth(ex.b)) <= preset.max_depth


def test_generator_no_duplicates_up_to_renaming(small_splits):
    keys = [F.alpha_key(*line.split(",")[:2]) for lines in small_splits.values() for line in lines]
    assert len(keys) == len(set(keys))


def test_generator_is_deterministic_by_seed():
    a = G.generate_split(200, "easy", seed=5)
    assert a == G.generate_split(200, "easy", seed=5)
    assert a != G.generate_split(200, "easy", seed=6)
    assert a != G.generate_split(200, "easy", seed=5, split="validate")  # splits get their own streams


def test_generator_excludes_given_pairs():
    first = G.generate_split(200, "exam", seed=1)
    seen = {F.alpha_key(*line.split(",")[:2]) for line in first}
    again = G.generate_split(200, "exam", seed=1, seen=set(seen))
    assert not seen & {F.alpha_key(*line.split(",")[:2]) for line in again}


def test_generator_rounds_up_to_whole_four_tuples_and_reports_exhaustion():
    assert len(G.generate_split(6, "easy", seed=0)) == 8
    assert G.generate_split(0, "easy") == []
    tiny = G.Preset("tiny", vars=(1, 1), ops_a=(0, 1), ops_b=(0, 1))
    with pytest.raises(ValueError, match="distinct four-tuples"):
        G.generate_split(400, tiny, seed=0, max_groups=50)
    with pytest.raises(ValueError, match="unknown preset"):
        G.generate_split(4, "nope")


STATS_VALIDATE = {"vars_mean": 5.2, "ops_mean": 6.9, "chars_mean": 26.8, "depth_mean": 4.9}


def test_validate_preset_statistics_match_stats_md():
    """The `validate` preset against the validate row of $TPRBENCH_DATA/logical_entailment/STATS.md (the train distribution)."""
    s = G.split_stats(lines_to_examples(G.generate_split(4000, "validate", seed=0)))
    assert abs(s["vars_mean"] - STATS_VALIDATE["vars_mean"]) < 0.4
    assert abs(s["ops_mean"] - STATS_VALIDATE["ops_mean"]) < 0.3
    assert abs(s["chars_mean"] - STATS_VALIDATE["chars_mean"]) < 1.0
    assert abs(s["depth_mean"] - STATS_VALIDATE["depth_mean"]) < 0.3
    assert s["vars_max"] <= 10 and s["ops_max"] == 10 and s["chars_max"] <= 41
    assert s["p_pos"] == 0.5
    for h in ("h1_acc", "h2_acc", "h3_acc"):
        assert abs(s[h] - 0.5) < 0.06, (h, s[h])


def test_write_dataset_files_determinism_and_cache(tmp_path):
    kw = dict(train=40, seed=2, eval_size=8, eval_sizes={"test_massive": 4, "test_big": 0})
    info = G.write_dataset(tmp_path / "x", **kw)
    assert not info.cached
    names = sorted(p.name for p in (tmp_path / "x").iterdir())
    assert names == ["generator.json", "test_easy.txt", "test_exam.txt", "test_hard.txt", "test_massive.txt", "train.txt", "validate.txt"]
    assert info.counts == {"test_exam": 8, "test_massive": 4, "test_hard": 8, "test_easy": 8, "validate": 8, "train": 40}
    meta = json.loads((tmp_path / "x" / "generator.json").read_text())
    assert meta["params"]["seed"] == 2 and meta["params"]["splits"]["train"]["preset"]["name"] == "easy"
    # same parameters elsewhere: byte-identical files
    G.write_dataset(tmp_path / "y", **kw)
    for name in names[1:]:
        assert (tmp_path / "x" / name).read_bytes() == (tmp_path / "y" / name).read_bytes(), name
    # cache: same parameters → nothing rewritten
    mtime = (tmp_path / "x" / "train.txt").stat().st_mtime_ns
    again = G.write_dataset(tmp_path / "x", **kw)
    assert again.cached and again.counts == info.counts
    assert (tmp_path / "x" / "train.txt").stat().st_mtime_ns == mtime
    # different parameters → regenerated
    changed = G.write_dataset(tmp_path / "x", **{**kw, "seed": 3})
    assert not changed.cached
    assert (tmp_path / "x" / "train.txt").read_bytes() != (tmp_path / "y" / "train.txt").read_bytes()
    # a split left out by a later run does not linger
    assert (tmp_path / "x" / "test_hard.txt").is_file()
    G.write_dataset(tmp_path / "x", **{**kw, "eval_sizes": {"test_massive": 4, "test_big": 0, "test_hard": 0}})
    assert not (tmp_path / "x" / "test_hard.txt").exists()
    assert "test_hard" not in D.find_splits(tmp_path / "x")
    # splits are disjoint up to renaming
    keys = [F.alpha_key(ex.a, ex.b) for p in D.find_splits(tmp_path / "y").values() for ex in D.read_split(p)]
    assert len(keys) == len(set(keys))


def test_write_dataset_excludes_files(tmp_path):
    G.write_dataset(tmp_path / "ref", train=0, seed=0, eval_size=40, eval_sizes={"test_massive": 0})
    excluded = G.alpha_keys([tmp_path / "ref"])
    assert len(excluded) == 4 * 40 + 40  # four easy/hard/big-like splits of 40 and test_exam
    G.write_dataset(tmp_path / "new", train=400, seed=0, eval_size=40, eval_sizes={"test_massive": 0}, exclude=[tmp_path / "ref"])
    new = G.alpha_keys([tmp_path / "new"])
    assert not new & excluded
    meta = json.loads((tmp_path / "new" / "generator.json").read_text())
    assert len(meta["params"]["exclude"]) == 5
    with pytest.raises(DataError, match="neither a file nor a directory"):
        G.write_dataset(tmp_path / "bad", train=4, eval_size=0, exclude=[tmp_path / "missing"])


# ----------------------------------------------------------------------------- reading

GOOD = "(p&q),p,1,1,1,1\n(p|q),(p&q),0,1,1,1\n"


def test_read_split_reads_lines_and_tolerates_missing_final_newline(tmp_path):
    p = tmp_path / "validate.txt"
    p.write_text(GOOD.rstrip("\n"))
    examples = D.read_split(p)
    assert examples == [D.LogicExample("(p&q)", "p", 1, (1, 1, 1)), D.LogicExample("(p|q)", "(p&q)", 0, (1, 1, 1))]
    p.write_text(GOOD + "\n\n")  # trailing blank lines are fine too
    assert len(D.read_split(p)) == 2


@pytest.mark.parametrize(
    "bad, message",
    [
        ("(p&q),p,1,1,1", "expected 6 comma-separated fields"),
        ("(p&q),p,1,1,1,1,0", "expected 6 comma-separated fields"),
        ("(p&q),p,2,1,1,1", "label E must be 0 or 1, got '2'"),
        ("(p&q),p,,1,1,1", "label E must be 0 or 1"),
        ("(p&q),p,1,1,x,1", "H2 must be 0 or 1"),
        ("(p&q,p,1,1,1,1", "field A is not a formula: expected ')' at column 5"),
        ("(p&q),P,1,1,1,1", "field B is not a formula"),
        ("", "expected 6 comma-separated fields"),
    ],
)
def test_read_split_errors_name_file_and_line(tmp_path, bad, message):
    p = tmp_path / "test_easy.txt"
    p.write_text(GOOD + bad + "\n" + GOOD)
    with pytest.raises(DataError) as info:
        D.read_split(p)
    assert f"{p}:3:" in str(info.value)
    assert message in str(info.value)


def test_read_split_missing_empty_and_binary_files(tmp_path):
    with pytest.raises(DataError, match="not found"):
        D.read_split(tmp_path / "nope.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="no examples"):
        D.read_split(tmp_path / "empty.txt")
    (tmp_path / "bin.txt").write_bytes(GOOD.encode() + "(p&q),é,1,1,1,1\n".encode())
    with pytest.raises(DataError, match=r"bin.txt:3: non-ASCII"):
        D.read_split(tmp_path / "bin.txt")


def test_find_splits(tmp_path):
    for name in ("validate", "test_easy", "test_exam"):
        (tmp_path / f"{name}.txt").write_text(GOOD)
    (tmp_path / "other.txt").write_text(GOOD)
    found = D.find_splits(tmp_path)
    assert found == {n: tmp_path / f"{n}.txt" for n in ("validate", "test_easy", "test_exam")}
    assert "train" not in found  # optional
    (tmp_path / "root" / "logical_entailment").mkdir(parents=True)
    (tmp_path / "root" / "logical_entailment" / "train.txt").write_text(GOOD)
    # A data root is not the dataset folder: one error naming the sub-folder that is.
    with pytest.raises(
        DataError,
        match=r"has none of the files the task reads \(train.txt, validate.txt, .*\); "
        r"did you mean .*root/logical_entailment\?$",
    ):
        D.find_splits(tmp_path / "root")
    assert list(D.find_splits(tmp_path / "root" / "logical_entailment")) == ["train"]
    with pytest.raises(DataError, match="not found"):
        D.find_splits(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"has none of the files .*; generate one with `tprbench data logic"):
        D.find_splits(tmp_path / "empty")


# ----------------------------------------------------------------------------- vocabulary, SVP, batches


def test_vocabulary_ids():
    assert D.PAD == 0 and D.VOCAB_SIZE == 33
    assert D.encode("a") == [1] and D.encode("z") == [26]
    assert D.encode("~&|>()") == [27, 28, 29, 30, 31, 32]
    s = "((~(a)&(f>f))>((g|e)>w))"
    assert D.decode(D.encode(s)) == s
    assert D.decode([1, 2, 0, 0]) == "ab"
    with pytest.raises(ValueError, match="not in the logic vocabulary"):
        D.encode("(a,b)")


def _mapping(src: str, dst: str) -> dict[str, str]:
    assert len(src) == len(dst)
    m: dict[str, str] = {}
    for x, y in zip(src, dst):
        if x in string.ascii_lowercase:
            assert m.setdefault(x, y) == y  # one letter always goes to the same letter
        else:
            assert x == y  # structure untouched
    return m


def test_svp_one_permutation_for_both_sides_and_labels_kept(small_splits):
    rng = random.Random(0)
    examples = lines_to_examples(small_splits["easy"][:120] + small_splits["hard"][:40])
    changed = 0
    for ex in examples:
        new = D.svp(ex, rng)
        m = _mapping(ex.a + "," + ex.b, new.a + "," + new.b)
        assert len(set(m.values())) == len(m)  # injective
        assert new.label == ex.label and new.heuristics == ex.heuristics
        assert F.entails(new.a, new.b) == bool(ex.label)
        assert F.heuristics(new.a, new.b) == ex.heuristics
        changed += (new.a, new.b) != (ex.a, ex.b)
    assert changed > len(examples) * 0.9
    # numpy generators work as well
    np = pytest.importorskip("numpy")
    ex = examples[0]
    new = D.svp(ex, np.random.default_rng(0))
    _mapping(ex.a + "," + ex.b, new.a + "," + new.b)
    assert sorted(D.random_permutation(np.random.default_rng(1))) == list(F.ALPHABET)


def test_collate_shapes_and_masks():
    torch = pytest.importorskip("torch")
    exs = [D.LogicExample("(p&q)", "p", 1), D.LogicExample("~(r)", "(r|(s>t))", 0)]
    batch = D.collate(exs)
    assert batch["a"].shape == (2, 5) and batch["b"].shape == (2, 9)
    assert batch["a"].dtype == torch.long and batch["a_mask"].dtype == torch.bool
    assert batch["label"].tolist() == [1, 0] and batch["label"].dtype == torch.long
    assert batch["a_mask"].tolist() == [[True] * 5, [True] * 4 + [False]]
    assert batch["b_mask"][0].tolist() == [True] + [False] * 8
    assert batch["a"][1].tolist() == D.encode("~(r)") + [0]
    assert batch["a_len"].tolist() == [5, 4] and batch["b_len"].tolist() == [1, 9]


def test_iterate_batches_deterministic_with_fresh_svp_per_batch(small_splits):
    exs = lines_to_examples(small_splits["easy"][:50])
    run1 = list(D.iterate_batches(exs, 16, shuffle=True, seed=4, svp=True))
    run2 = list(D.iterate_batches(exs, 16, shuffle=True, seed=4, svp=True))
    assert [b["a"].shape[0] for b in run1] == [16, 16, 16, 2]
    for x, y in zip(run1, run2):
        assert all((x[k] == y[k]).all() for k in x)
    plain = list(D.iterate_batches(exs, 16, shuffle=False, seed=4, svp=False))
    assert D.decode(plain[0]["a"][0].tolist()) == exs[0].a
    assert sorted(sum((b["label"].tolist() for b in run1), [])) == sorted(ex.label for ex in exs)
    # with svp, decoded pairs are renamings of the originals and keep their labels
    by_key = {F.alpha_key(ex.a, ex.b): ex.label for ex in exs}
    for batch in run1:
        for i in range(batch["a"].shape[0]):
            a, b = D.decode(batch["a"][i].tolist()), D.decode(batch["b"][i].tolist())
            assert by_key[F.alpha_key(a, b)] == batch["label"][i].item()
    # two epochs with different seeds see different renamings
    other = list(D.iterate_batches(exs, 16, shuffle=True, seed=5, svp=True))
    assert any(x["a"].shape != y["a"].shape or not (x["a"] == y["a"]).all() for x, y in zip(run1, other))
    assert len(list(D.iterate_batches(exs, 16, drop_last=True))) == 3


# ----------------------------------------------------------------------------- CLI


def test_cli_data_logic_writes_files(tmp_path, capsys, monkeypatch):
    from harness.cli import main

    monkeypatch.delenv("TPRBENCH_DATA", raising=False)
    out = tmp_path / "logic"
    args = ["data", "logic", "--out", str(out), "--train", "40", "--seed", "1", "--eval-size", "8"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "written in" in text and "train.txt" in text and "statistics" in text
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{s}.txt" for s in D.SPLITS] + ["generator.json"])
    assert len(D.read_split(out / "train.txt")) == 40
    assert main(args + ["--no-stats"]) == 0
    assert "nothing regenerated" in capsys.readouterr().out
    # bad input: one line, exit 2
    assert main(["data", "logic", "--out", str(tmp_path / "z"), "--train", "4", "--exclude", str(tmp_path / "nope")]) == 2
    assert "neither a file nor a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # a bound argparse checks (harness/commands/support/bounds.py): its one-line exit 2
        main(["data", "logic", "--out", str(tmp_path / "z"), "--train", "-4"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "expected an integer" in err
