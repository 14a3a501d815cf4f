"""`tprbench interpret` beyond NLI: UD words through an LM run's own vocabulary (words or BPE
pieces), HRR filler sets vs syntax and semantics, TPRN's thresholded role measure, `tprbench train`
run directories, and a clear line for runs without per-token words (bAbI's TPR-RNN)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.analysis import interpret as ip
from harness.analysis.sources import AnalysisError
from harness.analysis.words import word_map
from tasks.analysis import filler_sets as fs

VERBS = [
    ("gave", "give", "VBD"),
    ("give", "give", "VB"),
    ("giving", "give", "VBG"),
    ("gives", "give", "VBZ"),
    ("took", "take", "VBD"),
    ("take", "take", "VB"),
    ("taking", "take", "VBG"),
    ("takes", "take", "VBZ"),
    ("ran", "run", "VBD"),
    ("run", "run", "VB"),
    ("running", "run", "VBG"),
]
LINES = ["she {v} the bank a book .", "they {v} it to the bank .", "we {v} 2004 books ."]


def _conllu() -> str:
    out = []
    for n, (form, lemma, xpos) in enumerate(VERBS):
        words = [
            ("She", "she", "PRON", "PRP"),
            (form, lemma, "VERB", xpos),
            ("the", "the", "DET", "DT"),
            ("bank", "bank", "NOUN", "NN"),
            ("2004", "2004", "NUM", "CD"),
            ("Zyzzyva", "zyzzyva", "PROPN", "NNP"),
            (".", ".", "PUNCT", "."),
        ]
        out.append(f"# sent_id = s{n}")
        out += [f"{i}\t{f}\t{lem}\t{u}\t{x}\t_\t0\tdep\t_\t_" for i, (f, lem, u, x) in enumerate(words, 1)]
        out.append("")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    d = tmp_path_factory.mktemp("ud")
    for split in ip.SPLITS:
        (d / ip.TREEBANK_FILES[split]).write_text(_conllu() * 3, encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def ptb(tmp_path_factory):
    d = tmp_path_factory.mktemp("ptb")
    text = "\n".join(line.format(v=v[0]).replace("2004", "N") for _ in range(6) for v in VERBS for line in LINES) + "\n"
    for split in ("train", "valid", "test"):
        (d / f"ptb.{split}.txt").write_text(text, encoding="utf-8")
    return d


def _corpus(ptb, tmp_path, bpe=None):
    from tasks.lm.data import load_lm_corpus

    return load_lm_corpus("ptb", data_dir=ptb, cache_dir=tmp_path / "cache", bpe_vocab_size=bpe)


def test_lm_words_map_as_written_lower_cased_or_n_after_eos(ptb, tmp_path):
    corpus = _corpus(ptb, tmp_path)
    wm = word_map(SimpleNamespace(name="lm", corpus=corpus))
    ids, positions, known = wm.sentence(["She", "gave", "2004", "Zyzzyva"])
    stoi = {w: i for i, w in enumerate(corpus.vocab)}
    assert ids == [corpus.eos_id, stoi["she"], stoi["gave"], stoi["N"], corpus.unk_id]
    assert positions == [1, 2, 3, 4] and known == [True, True, True, False]
    assert wm.word_id("bank") == stoi["bank"] and wm.word_id("zyzzyva") is None


def test_bpe_words_are_read_at_their_last_piece(ptb, tmp_path):
    from tokenizers import Tokenizer

    corpus = _corpus(ptb, tmp_path, bpe=64)
    wm = word_map(SimpleNamespace(name="lm", corpus=corpus))
    forms = ["she", "giving", "the", "bank"]
    ids, positions, known = wm.sentence(forms)
    tok = Tokenizer.from_file(corpus.bpe_file)
    assert ids[0] == corpus.eos_id and positions[-1] == len(ids) - 1 and all(known)
    starts = [1] + [p + 1 for p in positions[:-1]]
    for form, a, b in zip(forms, starts, positions):  # each word's pieces end at its position
        assert tok.decode(ids[a : b + 1]).strip() == form


def test_a_task_without_words_says_why(tmp_path):
    with pytest.raises(AnalysisError, match="no per-token interface"):
        word_map(SimpleNamespace(name="babi"))
    with pytest.raises(AnalysisError, match="logic's symbols are not words"):
        word_map(SimpleNamespace(name="logic"))


def _types():
    return fs.VerbTypes(np.arange(len(VERBS)), np.array([v[1] for v in VERBS]), np.array([v[2] for v in VERBS]), np.array([v[0] for v in VERBS]))


def test_verb_types_take_each_ids_most_frequent_label():
    ids = np.array([5, 5, 5, 7, 9, 9])
    upos = np.array(["VERB", "VERB", "VERB", "VERB", "NOUN", "VERB"])
    xpos = np.array(["VBD", "VBN", "VBD", "VB", "NN", "VBZ"])
    lemmas = np.array(["Give", "give", "give", "take", "run", "run"])
    words = np.array(["gave", "given", "gave", "take", "runs", "runs"])
    known = np.array([True, True, True, True, True, False])
    t = fs.verb_types(ids, upos, xpos, lemmas, words, known)
    assert t.ids.tolist() == [5, 7] and t.lemma.tolist() == ["give", "take"] and t.xpos.tolist() == ["VBD", "VB"]


def test_pair_labels_by_hand():
    i, j, syn, sem = fs.pair_labels(_types())
    pairs = {(VERBS[a][0], VERBS[b][0]): (s, m) for a, b, s, m in zip(i, j, syn, sem)}
    assert pairs[("gave", "took")] == (1, -1)  # same XPOS, different lemma: syntactic positive only
    assert pairs[("gave", "give")] == (-1, 1)  # same lemma, different XPOS: semantic positive only
    assert pairs[("gave", "take")] == (0, 0)  # neither: a negative of both
    assert fs.pair_counts(_types())["semantic_pos"] == 6 + 6 + 3


def test_filler_set_aucs_on_synthetic_sets():
    """A set that encodes the XPOS separates syntactic pairs perfectly (AUC 1) and says nothing
    about lemmas (0.5); a lemma set the other way round; random vectors ≈ 0.5."""
    t = _types()
    rng = np.random.default_rng(0)
    onehot = lambda labels: np.eye(len(set(labels)))[[sorted(set(labels)).index(x) for x in labels]]  # noqa: E731
    syn_set = onehot(t.xpos.tolist()) + 1e-3 * rng.standard_normal((len(VERBS), 4))
    sem_set = onehot(t.lemma.tolist()) + 1e-3 * rng.standard_normal((len(VERBS), 3))
    a1, a2 = fs.syntax_semantics_auc(syn_set, t), fs.syntax_semantics_auc(sem_set, t)
    assert a1["syntactic"] == 1.0 and a2["semantic"] == 1.0
    assert abs(a1["semantic"] - 0.5) < 0.2 and abs(a2["syntactic"] - 0.5) < 0.2
    n = 150
    big = fs.VerbTypes(np.arange(n), rng.choice(list("abcdefghij"), n), rng.choice(["VB", "VBD", "VBZ"], n), np.array(["w"] * n))
    r = fs.syntax_semantics_auc(rng.standard_normal((n, 16)), big)
    assert abs(r["syntactic"] - 0.5) < 0.06 and abs(r["semantic"] - 0.5) < 0.06


def test_attention_thresholds_find_a_determiner_role(treebank):
    """TPRN's measure: when role 0's attention is 1 exactly on determiners, p(DET | role 0) = 1 at
    every θ; the base rate is the share of DET tokens."""
    vocab = ["<pad>", "<unk>", "she", "the", "bank", "2004", ".", *[v[0] for v in VERBS]]
    tokens = ip.map_treebank(
        SimpleNamespace(name="nli", vocab=SimpleNamespace(stoi={w: i for i, w in enumerate(vocab)}, itos=vocab)), treebank, "upos"
    )
    readings = {}
    for s in ip.SPLITS:
        det = tokens.upos[s] == "DET"
        a = np.where(det[:, None], [[1.0, 0.0, 0.0]], [[0.1, 0.6, 0.6]])
        readings[s] = ip.Readings(a, a, a, a.argmax(1)[:, None], "attention")
    rows = ip.attention_thresholds(readings["dev"], readings["test"], tokens, thresholds=(0.65,))
    (r,) = rows
    assert r["max_p_det"] == 1.0 and r["role_det"] == 0
    known = np.concatenate([tokens.known[s] for s in ip.SPLITS])
    upos = np.concatenate([tokens.upos[s] for s in ip.SPLITS])[known]
    assert r["p_det_all"] == pytest.approx(np.mean(upos == "DET"))
    assert "max p(DET" in ip.thresholds_md({"tprn": rows})


def _train(ptb, root, unit, *extra):
    from harness.cli import main

    run_dir = root / unit.replace("[", "_").replace("]", "").replace(",", "_").replace("=", "")
    rc = main(
        [
            "train",
            "--task",
            "lm",
            "--unit",
            unit,
            "--dim",
            "8",
            "--epochs",
            "1",
            "--data",
            str(ptb),
            "--set",
            "corpus=ptb",
            "--set",
            "bptt=8",
            "--batch-size",
            "4",
            "--threads",
            "1",
            "--root",
            str(root),
            "--run-dir",
            str(run_dir),
            *extra,
        ]
    )
    assert rc == 0
    return run_dir


@pytest.mark.parametrize(
    "unit,extra,interface",
    [
        ("tpru[roles=4]", ["--set", "embedding=hrr", "--set", "hrr_fillers=4", "--set", "hrr_anneal_steps=2"], "fillers"),
        ("tprn[symbols=4,roles=3,role_dim=2]", ["--set", "bpe_vocab_size=64"], "attention"),
        ("gru", [], "states"),
    ],
)
def test_interpret_a_train_run_directory_of_an_lm(ptb, treebank, tmp_path, capsys, unit, extra, interface):
    """Whole path: `tprbench train` (lm) → `tprbench interpret RUN_DIR`: roles through the unit's
    own interface, HRR filler sets when the run has the HRR embedding, a one-line note without an
    interface, the LM's own validation sentences for polysemy."""
    from harness.cli import main

    run_dir = _train(ptb, tmp_path / "runs", unit, *extra)
    assert (run_dir / "train.json").is_file()
    out = tmp_path / "out"
    argv = [
        "interpret",
        str(run_dir),
        "--treebank",
        str(treebank),
        "--root",
        str(tmp_path / "runs"),
        "--out",
        str(out),
        "--clusters",
        "3",
        "--word",
        "bank",
    ]
    rc = main(argv)
    text = capsys.readouterr().out
    assert rc == 0, text
    summary = (out / "interpret.md").read_text()
    assert f"| {interface} |" in summary and "(untrained)" in summary and "each sentence read after <eos>" in summary
    assert ("has no interpretation interface" in " ".join(text.split())) == (interface == "states")
    assert ("TPRN role attention above a threshold" in summary) == (interface == "attention")
    assert (out / "filler_sets.md").is_file() == ("embedding=hrr" in extra)
    if "embedding=hrr" in extra:
        sets = (out / "filler_sets.md").read_text()
        assert "| filler set 1 |" in sets and "| filler set 2 |" in sets and "Pass test" in sets
    poly = (out / "polysemy.md").read_text()
    if interface == "fillers":  # word level: the first 40 valid sentences with bank (one each), and the header
        assert poly.count("**bank**") == 40 + 1 and "40 occurrences" in poly
    elif interface == "states":
        assert "has no discrete roles" in poly
    else:  # BPE: listed when bank is one piece of the run's BPE model
        assert "**bank**" in poly or "as one token" in poly


def test_interpret_refuses_a_directory_without_train_json(tmp_path, capsys):
    from harness.cli import main

    (tmp_path / "empty").mkdir()
    rc = main(["interpret", str(tmp_path / "empty"), "--root", str(tmp_path / "runs")])
    assert rc == 2 and "no train.json" in capsys.readouterr().err


def test_lm_polysemy_sentences_are_the_runs_own(ptb, tmp_path):
    from harness.analysis.sources import Source
    from tasks.registry import get_task

    adapter = get_task("lm")({"corpus": "ptb"}, str(ptb), tmp_path / "cache")
    adapter.prepare()
    src = Source("x", "x", "lm", adapter, None, None, 0, True)
    sentences = ip.corpus_sentences(src, "valid", Path(tmp_path))
    assert sentences[0][0] == adapter.corpus.eos_id and len(sentences) == len(LINES) * len(VERBS) * 6
    with pytest.raises(AnalysisError, match="split is one of"):
        ip.corpus_sentences(src, "mnli:dev_matched", Path(tmp_path))
