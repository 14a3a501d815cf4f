"""NLI data: layouts (MNLI CSV/jsonl, SentEval SNLI, SNLI jsonl, QNLI tsv), vocab, batches, vectors."""

from __future__ import annotations

import collections
import json

import pytest
import torch

from tasks.errors import DataError
from tasks.nli.data import (
    PAD,
    UNK,
    Vocab,
    collate,
    encode,
    load_nli,
    load_word_vectors,
    tokenize,
)

# --------------------------------------------------------------------------- tiny fixtures


def write_mnli_csv(path, rows):
    import csv

    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["pairID", "sentence1", "sentence2", "label"])
        w.writerows(rows)
    return path


MNLI_ROWS = [
    ("1n", "The new rights are nice enough", "Everyone really likes the newest benefits ", "neutral"),
    ("2c", 'He said, "no", twice.', "He agreed.", "contradiction"),
    ("3e", "NA", "null", "entailment"),  # must stay text, not NaN
    ("4n", "Nobody agreed.", "Some did.", "-"),
    ("5e", "A cat sat.", "An animal sat.", "entailment"),
]


@pytest.fixture
def mnli_dir(tmp_path):
    d = tmp_path / "mnli"
    d.mkdir()
    write_mnli_csv(d / "dev_matched.csv", MNLI_ROWS)
    write_mnli_csv(d / "dev_mismatched.csv", MNLI_ROWS[:2] + [("9x", "a", "b", "-"), ("10x", "c", "d", "")])
    return d


def test_mnli_csv_layout(mnli_dir, tmp_path):
    data = load_nli("mnli", data_dir=mnli_dir, cache_dir=tmp_path / "cache")
    assert list(data.splits) == ["dev_matched", "dev_mismatched"]
    dm = data["dev_matched"]
    assert dm.column_names == ["premise", "hypothesis", "label"]
    assert len(dm) == 4 and data.dropped == {"dev_matched": 1, "dev_mismatched": 2}
    assert dm["label"] == [1, 2, 0, 0]
    assert dm[1]["premise"] == 'He said, "no", twice.'
    assert dm[2]["premise"] == "NA" and dm[2]["hypothesis"] == "null"
    assert dm[0]["hypothesis"].endswith("benefits ")  # text untouched
    assert data.num_labels == 3 and data.label_names == ("entailment", "neutral", "contradiction")
    assert any(p.suffix == ".arrow" for p in (tmp_path / "cache").rglob("*"))
    # Second load: served from the Arrow cache, same content.
    again = load_nli("mnli", data_dir=mnli_dir, cache_dir=tmp_path / "cache")
    assert again["dev_matched"]["premise"] == dm["premise"]


def test_mnli_jsonl_and_train_and_explicit_files(tmp_path):
    rows = [
        {"gold_label": "entailment", "sentence1": "A b.", "sentence2": "A.", "annotator_labels": ["entailment"], "genre": "fiction", "pairID": "1e"},
        {
            "gold_label": "-",
            "sentence1": "C d.",
            "sentence2": "D.",
            "annotator_labels": ["neutral", "entailment"],
            "genre": "fiction",
            "pairID": "2n",
        },
        {
            "gold_label": "contradiction",
            "sentence1": "E f.",
            "sentence2": "G.",
            "annotator_labels": ["contradiction"],
            "genre": "slate",
            "pairID": "3c",
        },
    ]
    for name in ("multinli_1.0_dev_matched.jsonl", "multinli_1.0_dev_mismatched.jsonl", "multinli_1.0_train.jsonl"):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = load_nli("mnli", data_dir=tmp_path, cache_dir=tmp_path / "c")
    assert list(data.splits) == ["train", "dev_matched", "dev_mismatched"]
    assert data["train"]["label"] == [0, 2] and data.dropped["train"] == 1
    only = load_nli("mnli", files={"dev_matched": tmp_path / "multinli_1.0_dev_matched.jsonl"}, cache_dir=tmp_path / "c")
    assert list(only.splits) == ["dev_matched"]


def test_snli_senteval_layout_and_jsonl(tmp_path):
    d = tmp_path / "SNLI"
    d.mkdir()
    for split, n in (("dev", 3), ("test", 2)):
        (d / f"s1.{split}").write_text("".join(f"Two women are embracing {i} . \n" for i in range(n)))
        (d / f"s2.{split}").write_text("".join(f"The sisters are hugging {i} . \n" for i in range(n)))
        (d / f"labels.{split}").write_text("".join(["neutral\n", "entailment\n", "contradiction\n"][:n]))
    data = load_nli("snli", data_dir=d, cache_dir=tmp_path / "c")
    assert {k: len(v) for k, v in data.splits.items()} == {"dev": 3, "test": 2}
    assert data["dev"]["label"] == [1, 0, 2]
    assert data["dev"][0]["premise"] == "Two women are embracing 0 . "

    rows = [{"gold_label": "neutral", "sentence1": "A man.", "sentence2": "A person."}, {"gold_label": "", "sentence1": "x", "sentence2": "y"}]
    for split in ("dev", "test", "train"):
        (tmp_path / f"snli_1.0_{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_nli("snli", data_dir=tmp_path, cache_dir=tmp_path / "c")
    assert set(data.splits) == {"train", "dev", "test"} and data.dropped == {"train": 1, "dev": 1, "test": 1}


def test_qnli_tsv_quotes_are_text(tmp_path):
    p = tmp_path / "dev.tsv"
    p.write_text(
        'index\tquestion\tsentence\tlabel\n0\tWhat is "X?\tIt is "the" thing.\tentailment\n1\tWho?\tNobody "knows\tnot_entailment\n', encoding="utf-8"
    )
    data = load_nli("qnli", data_dir=tmp_path, cache_dir=tmp_path / "c")
    assert data.num_labels == 2 and data["dev"]["label"] == [0, 1]
    assert data["dev"][0]["premise"] == 'What is "X?' and data["dev"][1]["hypothesis"] == 'Nobody "knows'


# --------------------------------------------------------------------------- bad input


def test_unknown_label_names_file_and_line(tmp_path):
    p = write_mnli_csv(tmp_path / "x.csv", MNLI_ROWS[:2] + [("3", "a", "b", "maybe")])
    with pytest.raises(DataError, match=r"x\.csv:4: unknown label 'maybe'"):
        load_nli("mnli", files={"dev_matched": p}, cache_dir=tmp_path / "c")


def test_tsv_with_extra_field_names_line(tmp_path):
    p = tmp_path / "dev.tsv"
    p.write_text("index\tquestion\tsentence\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tentailment\textra\n")
    with pytest.raises(DataError, match=r"dev\.tsv:3: expected 4 fields, saw 5"):
        load_nli("qnli", files={"dev": p}, cache_dir=tmp_path / "c")


def test_tsv_with_missing_field_names_line(tmp_path):
    p = tmp_path / "dev.tsv"
    p.write_text("index\tquestion\tsentence\tlabel\n0\ta\tb\tentailment\n1\ta\n")
    with pytest.raises(DataError, match=r"dev\.tsv:3: missing sentence"):
        load_nli("qnli", files={"dev": p}, cache_dir=tmp_path / "c")


def test_malformed_jsonl_names_line(tmp_path):
    p = tmp_path / "snli_1.0_dev.jsonl"
    p.write_text('{"gold_label": "neutral", "sentence1": "a", "sentence2": "b"}\n{"gold_label": "neutral", "sentence1": "a"\n')
    with pytest.raises(DataError, match=r"snli_1\.0_dev\.jsonl:2: cannot parse"):
        load_nli("snli", files={"dev": p}, cache_dir=tmp_path / "c")


def test_missing_columns(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(DataError, match=r"d\.csv: no premise column"):
        load_nli("mnli", files={"dev_matched": p}, cache_dir=tmp_path / "c")


def test_misaligned_senteval_snli(tmp_path):
    (tmp_path / "s1.dev").write_text("a\nb\n")
    (tmp_path / "s2.dev").write_text("a\n")
    (tmp_path / "labels.dev").write_text("neutral\nneutral\n")
    with pytest.raises(DataError, match=r"s2\.dev:2: file ends early"):
        load_nli("snli", files={"dev": tmp_path / "s1.dev"}, cache_dir=tmp_path / "c")


def test_missing_files_name_the_path(tmp_path):
    with pytest.raises(DataError, match=r"dev_mismatched.*mnli[/\\]dev_mismatched\.csv.*dev_mismatched"):
        (tmp_path / "mnli").mkdir()
        write_mnli_csv(tmp_path / "mnli" / "dev_matched.csv", MNLI_ROWS)
        load_nli("mnli", data_dir=tmp_path / "mnli", cache_dir=tmp_path / "c")
    with pytest.raises(DataError, match=r"nowhere\.tsv not found"):
        load_nli("qnli", files={"dev": tmp_path / "nowhere.tsv"})
    with pytest.raises(DataError, match=r"s2\.dev not found"):
        (tmp_path / "s1.dev").write_text("a\n")
        load_nli("snli", files={"dev": tmp_path / "s1.dev"})
    with pytest.raises(DataError, match="unknown NLI source"):
        load_nli("rte")


def test_no_data_root(monkeypatch):
    monkeypatch.delenv("TPRBENCH_DATA", raising=False)
    with pytest.raises(DataError, match="TPRBENCH_DATA"):
        load_nli("snli")


# --------------------------------------------------------------------------- tokens, vocab, batches


def test_tokenize():
    assert tokenize("He said, \"I don't know\" -- it's well-known: 3.5 end.") == [
        "he",
        "said",
        ",",
        '"',
        "i",
        "do",
        "n't",
        "know",
        '"',
        "-",
        "-",
        "it",
        "'s",
        "well-known",
        ":",
        "3.5",
        "end",
        ".",
    ]
    # Already tokenised SentEval text is unchanged apart from case.
    text = "Watching ABC 's football , he ca n't vote . "
    assert tokenize(text) == text.lower().split()


def test_vocab_encode_collate(mnli_dir, tmp_path):
    data = load_nli("mnli", data_dir=mnli_dir, cache_dir=tmp_path / "c")
    vocab = Vocab.from_dataset(data["dev_matched"])
    assert vocab.itos[:2] == ["<pad>", "<unk>"] and vocab.stoi["<pad>"] == PAD
    small = Vocab.build([["a", "a", "b", "c"], ["a", "b"]], min_count=2)
    assert small.itos == ["<pad>", "<unk>", "a", "b"]
    assert Vocab.build([["a", "a", "b", "c"]], max_size=3).itos == ["<pad>", "<unk>", "a"]
    assert small.lookup(["b", "zzz"]) == [3, UNK]
    vocab.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json").itos == vocab.itos

    enc = encode(data["dev_matched"], vocab)
    assert set(enc.column_names) == {"premise", "hypothesis", "label", "premise_ids", "hypothesis_ids"}
    assert enc[0]["premise_ids"] == vocab.lookup(tokenize(enc[0]["premise"]))
    short = encode(data["dev_matched"], small, max_len=2)
    assert all(1 <= len(x) <= 2 for x in short["premise_ids"])

    rows = [enc[i] for i in range(len(enc))]
    b = collate(rows)
    lengths = [len(r["premise_ids"]) for r in rows]
    assert b["premise"].shape == (len(rows), max(lengths)) and b["premise"].dtype == torch.long
    assert b["premise_mask"].dtype == torch.bool
    assert b["premise_mask"].sum(1).tolist() == lengths
    assert (b["premise"][~b["premise_mask"]] == PAD).all()
    assert b["label"].tolist() == enc["label"]
    # Column-dict input (ds[i:j]) and a DataLoader give the same thing.
    b2 = collate(enc[0 : len(enc)])
    assert torch.equal(b2["hypothesis"], b["hypothesis"])
    loader = torch.utils.data.DataLoader(enc, batch_size=2, collate_fn=collate)
    first = next(iter(loader))
    assert first["hypothesis"].shape[0] == 2 and first["hypothesis_mask"].shape == first["hypothesis"].shape


def test_empty_sentence_gets_one_unk(tmp_path):
    p = write_mnli_csv(tmp_path / "e.csv", [("1", "...", "", "neutral")])
    data = load_nli("mnli", files={"dev_matched": p}, cache_dir=tmp_path / "c")
    enc = encode(data["dev_matched"], Vocab.build([["x"]]))
    assert enc[0]["hypothesis_ids"] == [UNK]


# --------------------------------------------------------------------------- word vectors


def test_word_vectors_glove_and_fasttext(tmp_path):
    vocab = Vocab.build([["the", "cat", "zebra", "new york"]])
    glove = tmp_path / "glove.txt"
    glove.write_text("the 0.1 0.2 0.3\nThe 9 9 9\nCat 1 2 3\nnew york 4 5 6\nother 7 8 9\n")
    m, hits = load_word_vectors(glove, vocab)
    assert m.shape == (len(vocab), 3) and hits == 3
    assert torch.allclose(m[vocab.stoi["the"]], torch.tensor([0.1, 0.2, 0.3]))  # exact match wins
    assert torch.allclose(m[vocab.stoi["cat"]], torch.tensor([1.0, 2.0, 3.0]))  # lower-case fallback
    assert torch.allclose(m[vocab.stoi["new york"]], torch.tensor([4.0, 5.0, 6.0]))
    assert (m[PAD] == 0).all() and m[vocab.stoi["zebra"]].abs().sum() > 0
    m2, _ = load_word_vectors(glove, vocab, seed=0)
    assert torch.equal(m, m2)

    ft = tmp_path / "wiki.vec"
    ft.write_text("3 2\nthe 1 2 \ncat 3 4 \nfoo 5 6 \n")
    m, hits = load_word_vectors(ft, vocab)
    assert m.shape == (len(vocab), 2) and hits == 2
    with pytest.raises(DataError, match=r"wiki\.vec:1: header says dim 2, expected 5"):
        load_word_vectors(ft, vocab, dim=5)


def test_word_vectors_malformed(tmp_path):
    vocab = Vocab.build([["the", "cat"]])
    bad = tmp_path / "bad.txt"
    bad.write_text("the 1 2 3\nxyz 1 2\ncat 1 2 3\n")
    with pytest.raises(DataError, match=r"bad\.txt:2: expected a word and 3 numbers"):
        load_word_vectors(bad, vocab)
    bad.write_text("the 1 2 3\ncat 1 x 3\n")
    with pytest.raises(DataError, match=r"bad\.txt:2: not a number"):
        load_word_vectors(bad, vocab)
    with pytest.raises(DataError, match=r"nope\.txt not found"):
        load_word_vectors(tmp_path / "nope.txt", vocab)


# --------------------------------------------------------------------------- real data


@pytest.mark.realdata
def test_real_mnli(data_root, tmp_path):
    data = load_nli("mnli", cache_dir=tmp_path)
    assert {k: len(v) for k, v in data.splits.items()} == {"dev_matched": 9815, "dev_mismatched": 9832}
    assert data.dropped == {"dev_matched": 185, "dev_mismatched": 168}
    assert collections.Counter(data["dev_matched"]["label"]) == {0: 3479, 1: 3123, 2: 3213}
    assert collections.Counter(data["dev_mismatched"]["label"]) == {0: 3463, 1: 3129, 2: 3240}
    first = data["dev_matched"][0]
    assert first == {"premise": "The new rights are nice enough", "hypothesis": "Everyone really likes the newest benefits ", "label": 1}
    assert data["dev_mismatched"][0]["label"] == 2


@pytest.mark.realdata
def test_real_snli_and_qnli(data_root, tmp_path):
    snli = load_nli("snli", cache_dir=tmp_path)  # discovered under senteval/SNLI
    assert {k: len(v) for k, v in snli.splits.items()} == {"dev": 9842, "test": 9824}
    assert snli.dropped == {"dev": 0, "test": 0}
    assert collections.Counter(snli["dev"]["label"]) == {0: 3329, 1: 3235, 2: 3278}
    assert collections.Counter(snli["test"]["label"]) == {0: 3368, 1: 3219, 2: 3237}
    qnli = load_nli("qnli", cache_dir=tmp_path)
    assert len(qnli["dev"]) == 5463 and collections.Counter(qnli["dev"]["label"]) == {0: 2702, 1: 2761}
    vocab = Vocab.from_dataset(snli["dev"], min_count=2)
    enc = encode(snli["test"], vocab)
    batch = collate(enc[:64])
    assert batch["premise"].shape[0] == 64 and (batch["premise_mask"].sum(1) > 0).all()
