"""SentEval transfer: task loaders (layout quirks), the built-in protocol, and a bag-of-words baseline on real data."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from tasks.errors import DataError
from tasks.transfer.senteval import embed, encode_scores, evaluate, relatedness_regression
from tasks.transfer.senteval_data import TASKS, load_task


def hashing_encoder(dim: int = 512):
    """Deterministic bag-of-words encoder: hashed unigram counts, L2-normalised (sklearn's murmurhash)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    hv = HashingVectorizer(n_features=dim, analyzer=lambda toks: [t.lower() for t in toks], alternate_sign=False, norm="l2")

    def encode(batch):
        batch = [s.split() if isinstance(s, str) else s for s in batch]
        return hv.transform(batch).toarray().astype(np.float32)

    return encode


# --------------------------------------------------------------------------- a tiny SentEval tree

FILLER = "the a movie film plot story actor scene it this that was is very quite rather".split()
POS, NEG = ["good", "great", "fine", "lovely"], ["bad", "awful", "poor", "dull"]
TREC_KEYS = {"ABBR": "stand", "DESC": "why", "ENTY": "what", "HUM": "who", "LOC": "where", "NUM": "many"}


def sentence(rng, key_words, n=6):
    words = [rng.choice(FILLER) for _ in range(n)] + [rng.choice(key_words)]
    rng.shuffle(words)
    return " ".join(words)


def pair(rng, k):
    """(a, b, k): b is a with k of its 6 words replaced by fresh nouns."""
    nouns = "dog cat man woman car boat tree house ball guitar horse bird".split()
    a = [rng.choice(nouns) for _ in range(6)]
    b = list(a)
    for i in rng.sample(range(6), k):
        b[i] = rng.choice([w for w in nouns if w != a[i]]) + "x"
    return " ".join(a), " ".join(b)


def write(path, lines, encoding="utf-8", bom=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode(encoding)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)


def make_senteval_tree(root, n=40, seed=0):  # noqa: C901 (one block per SentEval layout, written out as the files are)
    rng = random.Random(seed)
    for folder, pos, neg in (
        ("MR", "rt-polarity.pos", "rt-polarity.neg"),
        ("CR", "custrev.pos", "custrev.neg"),
        ("SUBJ", "subj.objective", "subj.subjective"),
        ("MPQA", "mpqa.pos", "mpqa.neg"),
    ):
        write(root / folder / pos, [sentence(rng, POS) for _ in range(n)], "latin-1")
        write(root / folder / neg, [sentence(rng, NEG) for _ in range(n)], "latin-1")
    for fname, m in (("train_5500.label", 12), ("TREC_10.label", 4)):
        lines = [f"{c}:x {sentence(rng, [k])} ?" for c, k in TREC_KEYS.items() for _ in range(m)]
        lines[3] = lines[3].replace("movie", "sister\xf0city")  # the latin-1 byte of the real train file
        write(root / "TREC" / fname, lines, "latin-1")
    for split, m in (("train", n), ("dev", 10), ("test", 20)):
        write(
            root / "SST" / "binary" / f"sentiment-{split}",
            [f"{sentence(rng, POS)} \t1" for _ in range(m)] + [f"{sentence(rng, NEG)} \t0" for _ in range(m)],
        )
        fine = [f"{c} {sentence(rng, [['awful'], ['bad'], ['fine'], ['good'], ['great']][c][0:1])}" for c in range(5) for _ in range(m // 2)]
        write(root / "SST" / "fine" / f"sentiment-{split}", fine)
    for split, m in (("train", 60), ("test", 30)):
        rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(m):
            k = rng.choice([0, 1, 4, 5])
            a, b = pair(rng, k)
            rows.append(f"{int(k <= 1)}\t{i}\t{i + 1000}\t{a}\t{b}")
        write(root / "MRPC" / f"msr_paraphrase_{split}.txt", rows, bom=True)
    for fname, m in (("SICK_train.txt", 90), ("SICK_trial.txt", 30), ("SICK_test_annotated.txt", 60)):
        rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        for i in range(m):
            k = i % 5
            a, b = pair(rng, k)
            label = "ENTAILMENT" if k == 0 else "NEUTRAL" if k <= 2 else "CONTRADICTION"
            rows.append(f"{i}\t{a}\t{b}\t{5 - k * 0.9:.1f}\t{label}")
        write(root / "SICK" / fname, rows)
    from tasks.transfer.senteval_data import STS_DATASETS

    for folder, datasets in STS_DATASETS.values():
        for ds in datasets:
            inputs, gold = [], []
            for i in range(24):
                k = i % 6
                a, b = pair(rng, k)
                inputs.append(f"{a}\t{b}")
                gold.append("" if i % 8 == 7 else f"{5 - k:.3f}")  # empty gold = unscored pair
            write(root / "STS" / folder / f"STS.input.{ds}.txt", inputs)
            write(root / "STS" / folder / f"STS.gs.{ds}.txt", gold)
    for split, m in (("train", 90), ("dev", 30), ("test", 30)):
        rows = []
        for i in range(m):
            k = i % 6
            a, b = pair(rng, k)
            rows.append(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{5 - k:.3f}\t{a}\t{b}")
        write(root / "STS" / "STSBenchmark" / f"sts-{split}.csv", rows)
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_senteval_tree(tmp_path_factory.mktemp("senteval"))


# --------------------------------------------------------------------------- loaders on the tiny tree


def test_loaders_read_every_layout(tree):
    sizes = {t: load_task(t, tree).sizes() for t in TASKS}
    assert sizes["MR"] == {"all": 80} and sizes["SUBJ"] == {"all": 80}
    assert sizes["TREC"] == {"train": 72, "test": 24}
    assert sizes["SST2"] == {"train": 80, "dev": 20, "test": 40}
    assert sizes["SST5"] == {"train": 100, "dev": 25, "test": 50}
    assert sizes["MRPC"] == {"train": 60, "test": 30}  # header (after the BOM) skipped
    assert sizes["SICKEntailment"] == sizes["SICKRelatedness"] == {"train": 90, "dev": 30, "test": 60}
    assert all(n == 21 for n in sizes["STS12"].values())  # 24 pairs, 3 unscored dropped
    assert sizes["STSBenchmark"] == {"train": 90, "dev": 30, "test": 30}
    trec = load_task("TREC", tree)
    assert any("sister\xf0city" in s for s in trec["train"].a)
    assert sorted(set(trec["train"].y.tolist())) == [0, 1, 2, 3, 4, 5]
    mr = load_task("MR", tree)["all"]
    assert mr.y.tolist() == [1] * 40 + [0] * 40 and mr.b is None
    sst5 = load_task("SST5", tree)["train"]
    assert sst5.a[0][-1] in FILLER + ["awful"] and sst5.y[0] == 0
    sick = load_task("SICKRelatedness", tree)["train"]
    assert sick.y.dtype == np.float64 and sick.y[0] == 5.0 and len(sick.a[0]) == 6
    sts = load_task("STS12", tree)["MSRpar"]
    assert sts.y.tolist()[:7] == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 5.0]


def test_loader_errors(tmp_path):
    root = make_senteval_tree(tmp_path / "t", n=5)
    trec = root / "TREC" / "TREC_10.label"
    lines = trec.read_text(encoding="latin-1").splitlines()
    lines[2] = "no colon here"
    write(trec, lines, "latin-1")
    with pytest.raises(DataError, match=r"TREC_10\.label:3: expected 'COARSE:fine question'"):
        load_task("TREC", root)
    gs = root / "STS" / "STS14-en-test" / "STS.gs.images.txt"
    lines = gs.read_text().splitlines()
    lines[4] = "high"
    write(gs, lines)
    with pytest.raises(DataError, match=r"STS\.gs\.images\.txt:5: gold score 'high'"):
        load_task("STS14", root)
    write(gs, lines[:10])
    with pytest.raises(DataError, match=r"STS\.gs\.images\.txt: 10 lines but"):
        load_task("STS14", root)
    sst = root / "SST" / "binary" / "sentiment-dev"
    write(sst, ["a fine film \t1", "no label here"])
    with pytest.raises(DataError, match=r"sentiment-dev:2: expected 'sentence<TAB>label'"):
        load_task("SST2", root)
    sick = root / "SICK" / "SICK_trial.txt"
    write(sick, ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment", "1\ta\tb\t4.5\tMAYBE"])
    with pytest.raises(DataError, match=r"SICK_trial\.txt:2: entailment label 'MAYBE'"):
        load_task("SICKEntailment", root)
    write(sick, ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment", "1\ta\tb"])
    with pytest.raises(DataError, match=r"SICK_trial\.txt:2: expected 5 tab-separated fields, got 3"):
        load_task("SICKRelatedness", root)
    (root / "CR" / "custrev.neg").unlink()
    with pytest.raises(DataError, match=r"CR[/\\]custrev\.neg not found.*get_transfer_data"):
        load_task("CR", root)
    with pytest.raises(DataError, match=r"nowhere not found"):
        load_task("MR", tmp_path / "nowhere")
    with pytest.raises(DataError, match="unknown SentEval task"):
        load_task("SNLI", root)


# --------------------------------------------------------------------------- protocol pieces


def test_encode_scores_is_sentevals_soft_labels():
    Y = encode_scores(np.array([3.6, 1.0, 5.0, 4.0]), 1, 5)
    assert np.allclose(Y[0], [0, 0, 0.4, 0.6, 0])
    assert np.allclose(Y[1], [1, 0, 0, 0, 0]) and np.allclose(Y[2], [0, 0, 0, 0, 1])
    assert np.allclose(Y[3], [0, 0, 0, 1, 0])
    assert np.allclose(encode_scores(np.array([0.0, 0.5]), 0, 5)[:, :2], [[1, 0], [0.5, 0.5]])
    assert np.allclose(Y @ np.arange(1, 6), [3.6, 1.0, 5.0, 4.0])  # expected score recovers the gold
    # STS-B through SentEval's 1..5 rule: a score below 1 keeps only its fraction, on class 1
    assert np.allclose(encode_scores(np.array([0.4, 0.0]), 1, 5), [[0.4, 0, 0, 0, 0], [0, 0, 0, 0, 0]])


def test_embed_keeps_order_and_checks_shape():
    sents = [["a"] * n for n in (5, 1, 3, 2, 4)]
    out = embed(lambda b: np.array([[len(s)] for s in b], dtype=np.float32), sents, batch_size=2)
    assert out[:, 0].tolist() == [5, 1, 3, 2, 4]
    with pytest.raises(ValueError, match="expected"):
        embed(lambda b: np.zeros((1, 3)), sents, batch_size=2)


def test_relatedness_regression_learns_a_linear_signal():
    rng = np.random.RandomState(0)
    X = rng.rand(300, 8).astype(np.float32)
    y = 1 + 4 * X[:, 0]
    res = relatedness_regression(X[:200], y[:200], X[200:250], y[200:250], X[250:], y[250:], chunk=20, max_epoch=200)
    assert res["pearson"] > 0.7 and res["spearman"] > 0.7 and res["dev_pearson"] > 0.7 and res["epochs"] <= 220


def test_protocol_on_tiny_tree(tree):
    res = evaluate(hashing_encoder(256), tree, kfold=3, use_senteval=False)
    assert set(res) == set(TASKS)
    for t in ("MR", "CR", "SUBJ", "MPQA", "SST2"):
        assert res[t]["acc"] > 70, (t, res[t])  # chance 50
    assert res["TREC"]["acc"] > 70 and res["TREC"]["n_train"] == 72 and res["TREC"]["n_test"] == 24
    assert res["SST5"]["acc"] > 40  # chance 20
    assert res["MRPC"]["acc"] > 75 and 0 <= res["MRPC"]["f1"] <= 100
    assert res["SICKEntailment"]["acc"] > 55 and res["SICKEntailment"]["n_dev"] == 30  # chance 40
    assert res["SICKRelatedness"]["pearson"] > 0.6 and res["STSBenchmark"]["pearson"] > 0.6
    assert res["STSBenchmark"]["cosine_pearson"] > 0.5
    for t in ("STS12", "STS13", "STS14", "STS15", "STS16"):
        r = res[t]
        assert r["pearson"] > 0.5 and r["spearman"] > 0.5 and r["n_train"] == 0
        assert r["n_test"] == sum(d["n"] for d in r["datasets"].values())
        w = np.array([d["n"] for d in r["datasets"].values()])
        assert r["pearson"] == pytest.approx(np.average([d["pearson"] for d in r["datasets"].values()], weights=w))
    assert all("seconds" in r for r in res.values())
    # Deterministic: same numbers again (and with parallel folds).
    again = evaluate(hashing_encoder(256), tree, tasks=["MR", "TREC"], kfold=3, use_senteval=False, n_jobs=2)
    assert again["MR"]["acc"] == res["MR"]["acc"] and again["TREC"]["acc"] == res["TREC"]["acc"]


def test_prepare_and_string_encoders(tree):
    seen = []
    res = evaluate(hashing_encoder(64), tree, tasks=["STS13"], prepare=seen.append, use_senteval=False)
    assert len(seen) == 1 and len(seen[0]) == 2 * 63 and res["STS13"]["pearson"] > 0.3
    with pytest.raises(ValueError, match="unknown SentEval task"):
        evaluate(hashing_encoder(64), tree, tasks=["SNLI"])
    with pytest.raises(ImportError, match="senteval"):
        evaluate(hashing_encoder(64), tree, tasks=["STS13"], use_senteval=True)


FAKE_SENTEVAL = Path(__file__).resolve().parent / "fake_senteval"


@pytest.fixture
def fake_senteval(monkeypatch):
    """tests/fake_senteval as the `senteval` package (SentEval's entry point, paths and result layout),
    for this test only: afterwards `import senteval` is what it was before (not the fake)."""

    def ours():
        return [m for m in sys.modules if m == "senteval" or m.startswith("senteval.")]

    saved = {m: sys.modules.pop(m) for m in ours()}
    monkeypatch.syspath_prepend(str(FAKE_SENTEVAL))
    import senteval.engine

    yield senteval.engine
    for m in ours():
        del sys.modules[m]
    sys.modules.update(saved)


@pytest.mark.parametrize("folder_name", ["downstream", "senteval"])
def test_real_senteval_package_path_and_results(tmp_path, fake_senteval, folder_name):
    """With `senteval` importable its engine runs: it must find <task_path>/downstream/<Task> (we pass
    the parent of a `downstream` folder, or a scratch folder linking to ours), and its result
    layouts map to our schema (STS: all.{pearson,spearman}.{mean,wmean}; SICK-R: devpearson)."""
    tree = make_senteval_tree(tmp_path / "data" / folder_name, n=12)
    prepared = []
    names = ["MR", "MRPC", "SICKRelatedness", "STSBenchmark", "STS13"]
    res = evaluate(hashing_encoder(16), tree, tasks=names, kfold=10, prepare=prepared.append)
    raw, params = fake_senteval.LAST["results"], fake_senteval.LAST["params"]
    assert params["usepytorch"] is False and params["kfold"] == 10 and params["seed"] == 1111
    if folder_name == "downstream":
        assert params["task_path"] == str(tree.parent)
    else:  # a scratch folder, gone after the evaluation
        assert Path(params["task_path"]).name.startswith("tprbench-senteval-") and not Path(params["task_path"]).exists()
    assert len(prepared) == len(names)  # SentEval's do_prepare: once per task
    assert res["MR"] == {"acc": raw["MR"]["acc"], "devacc": raw["MR"]["devacc"], "n_dev": raw["MR"]["ndev"], "n_test": raw["MR"]["ntest"]}
    assert res["MRPC"]["f1"] == raw["MRPC"]["f1"]
    for name in ("SICKRelatedness", "STSBenchmark"):
        assert res[name] == {
            "pearson": raw[name]["pearson"],
            "spearman": raw[name]["spearman"],
            "mse": raw[name]["mse"],
            "dev_pearson": raw[name]["devpearson"],
            "n_dev": 500,
            "n_test": 4927,
        }
    sts = res["STS13"]
    assert sts["pearson"] == pytest.approx(raw["STS13"]["all"]["pearson"]["wmean"])
    assert sts["spearman_mean"] == pytest.approx(raw["STS13"]["all"]["spearman"]["mean"])
    assert set(sts["datasets"]) == {"FNWN", "headlines", "OnWN"} and sts["n_test"] == 3 * 21
    assert sts["datasets"]["FNWN"]["pearson"] == pytest.approx(raw["STS13"]["FNWN"]["pearson"][0])
    # the mapped numbers are what a table reads: floats, every one finite
    assert all(np.isfinite(v) for r in res.values() for k, v in r.items() if isinstance(v, float))


def test_the_fake_package_does_not_outlive_its_test():
    import importlib.util

    assert FAKE_SENTEVAL.as_posix() not in [Path(p).as_posix() for p in sys.path]
    spec = importlib.util.find_spec("senteval")
    assert spec is None or "fake_senteval" not in str(spec.origin)
    assert "senteval" not in sys.modules or "fake_senteval" not in str(getattr(sys.modules["senteval"], "__file__", ""))


def test_transfer_task_metrics_from_the_real_package_layout(tmp_path, fake_senteval):
    from tasks.transfer.adapter import senteval_metrics

    tree = make_senteval_tree(tmp_path / "senteval", n=12)
    res = evaluate(hashing_encoder(16), tree, tasks=["SICKRelatedness", "STS13", "MR"])
    assert senteval_metrics(res["SICKRelatedness"]) == {"pearson": res["SICKRelatedness"]["pearson"], "spearman": res["SICKRelatedness"]["spearman"]}
    assert senteval_metrics(res["STS13"])["pearson"] == res["STS13"]["pearson"]
    assert senteval_metrics(res["MR"])["acc"] == res["MR"]["acc"] / 100


# --------------------------------------------------------------------------- real data

# Task sizes SentEval reports for the data/downstream files (STS after dropping unscored pairs).
REAL_SIZES = {
    "MR": {"all": 10662},
    "CR": {"all": 3775},
    "SUBJ": {"all": 10000},
    "MPQA": {"all": 10606},
    "SST2": {"train": 67349, "dev": 872, "test": 1821},
    "SST5": {"train": 8544, "dev": 1101, "test": 2210},
    "TREC": {"train": 5452, "test": 500},
    "MRPC": {"train": 4076, "test": 1725},
    "SICKEntailment": {"train": 4500, "dev": 500, "test": 4927},
    "SICKRelatedness": {"train": 4500, "dev": 500, "test": 4927},
    "STS12": {"MSRpar": 750, "MSRvid": 750, "SMTeuroparl": 459, "surprise.OnWN": 750, "surprise.SMTnews": 399},
    "STS13": {"FNWN": 189, "headlines": 750, "OnWN": 561},
    "STS14": {"deft-forum": 450, "deft-news": 300, "headlines": 750, "images": 750, "OnWN": 750, "tweet-news": 750},
    "STS15": {"answers-forums": 375, "answers-students": 750, "belief": 375, "headlines": 750, "images": 750},
    "STS16": {"answer-answer": 254, "headlines": 249, "plagiarism": 230, "postediting": 244, "question-question": 209},
    "STSBenchmark": {"train": 5749, "dev": 1500, "test": 1379},
}


@pytest.mark.realdata
def test_real_task_sizes(data_root):
    base = data_root / "senteval"
    for task, sizes in REAL_SIZES.items():
        assert load_task(task, base).sizes() == sizes, task
    mrpc = load_task("MRPC", base)
    assert int(mrpc["train"].y.sum()) == 2753
    trec = load_task("TREC", base)
    assert any("sister\xf0city" in " ".join(s) for s in trec["train"].a)  # the latin-1 byte, decoded


@pytest.mark.realdata
@pytest.mark.slow
def test_real_bag_of_words_baseline(data_root):
    """SentEval's protocol with a hashed bag-of-words encoder: clearly above chance / majority."""
    tasks = ["MR", "CR", "TREC", "MRPC", "SICKEntailment", "STS12", "STS13", "STS14", "STS15", "STS16"]
    res = evaluate(hashing_encoder(512), data_root / "senteval", tasks=tasks, kfold=3, n_jobs=2, use_senteval=False)
    assert res["MR"]["acc"] > 58  # chance 50
    assert res["CR"]["acc"] > 68  # majority 63.8
    assert res["TREC"]["acc"] > 60  # six classes
    assert res["MRPC"]["acc"] > 67 and res["MRPC"]["n_test"] == 1725  # majority 66.5
    assert res["SICKEntailment"]["acc"] > 70  # majority 56.7
    for t in ("STS12", "STS13", "STS14", "STS15", "STS16"):
        assert res[t]["pearson"] > 0.3 and res[t]["spearman"] > 0.3, (t, res[t])
    assert res["STS16"]["n_test"] == 1186


@pytest.mark.realdata
@pytest.mark.slow
def test_real_sick_relatedness(data_root):
    res = evaluate(hashing_encoder(512), data_root / "senteval", tasks=["SICKRelatedness"], use_senteval=False)
    r = res["SICKRelatedness"]
    assert r["pearson"] > 0.6 and r["spearman"] > 0.55 and r["n_test"] == 4927
