"""LM corpora: word ids, BPE ids with word counts, caching, batchify, truncated BPTT."""

from __future__ import annotations

import os
import time

import pytest
import torch

from tasks.errors import DataError
from tasks.lm.data import EOS_ID, UNK_ID, batchify, bptt_batches, load_lm_corpus

WIKI_TRAIN = " \n = Valkyria Chronicles = \n \n the game is a game of the <unk> . \n the game began in 2010 . \n \n"
WIKI_VALID = " \n = Valkyria = \n the game of the year . \n"
WIKI_TEST = " the game . \n"


@pytest.fixture
def wiki_dir(tmp_path):
    d = tmp_path / "wikitext2"
    d.mkdir()
    for name, text in (("wiki.train.tokens", WIKI_TRAIN), ("wiki.valid.tokens", WIKI_VALID), ("wiki.test.tokens", WIKI_TEST)):
        (d / name).write_text(text, encoding="utf-8")
    return d


def expected_tokens(text: str) -> list[str]:
    return [t for line in text.splitlines() for t in line.split() + ["<eos>"]]


def test_word_level_every_line_gets_eos(wiki_dir, tmp_path):
    c = load_lm_corpus("wikitext2", data_dir=wiki_dir)
    assert c.tokenizer == "word" and c.vocab[:2] == ["<eos>", "<unk>"]
    for split, text in (("train", WIKI_TRAIN), ("valid", WIKI_VALID), ("test", WIKI_TEST)):
        toks = expected_tokens(text)
        assert [c.vocab[i] for i in c[split].tolist()] == [t if t in c.vocab else "<unk>" for t in toks]
        assert c.n_words[split] == c.n_tokens[split] == len(toks)
        assert c[split].dtype == torch.long and c[split].dim() == 1
    # Blank lines are kept: train has 6 lines, 3 of them blank (a single space).
    assert c["train"].tolist().count(EOS_ID) == 6
    # "year" is not in train -> <unk>, counted.
    assert c.n_oov == {"train": 0, "valid": 1, "test": 0}
    # Frequency order after the specials.
    assert c.vocab[2] in ("the", "game")
    assert c.word_perplexity("valid", 2.0) == pytest.approx(torch.e**2)


def test_alternative_names_and_ptb_layout(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    for s in ("train", "valid", "test"):
        (d / f"{s}.txt").write_text(" a b c \n b c \n")
    assert load_lm_corpus("wikitext103", data_dir=d).n_tokens["train"] == 7
    p = tmp_path / "ptb"
    p.mkdir()
    for s in ("train", "valid", "test"):
        (p / f"ptb.{s}.txt").write_text(" no it was n't black monday \n but while the new york stock exchange \n")
    c = load_lm_corpus("ptb", data_dir=p)
    assert c.n_tokens == {"train": 15, "valid": 15, "test": 15} and c.vocab_size == 15


def test_cache_reused_and_invalidated(wiki_dir, tmp_path):
    cache = tmp_path / "cache"
    a = load_lm_corpus("wikitext2", data_dir=wiki_dir, cache_dir=cache)
    files = list(cache.glob("lm-wikitext2-word-*.pt"))
    assert len(files) == 1
    b = load_lm_corpus("wikitext2", data_dir=wiki_dir, cache_dir=cache)
    assert torch.equal(a["train"], b["train"]) and b.vocab == a.vocab and b["train"].dtype == torch.long
    # Changing a file changes the key (size + mtime): a second cache file, new content.
    train = wiki_dir / "wiki.train.tokens"
    train.write_text(WIKI_TRAIN + " more words here \n")
    os.utime(train, ns=(time.time_ns(), time.time_ns() + 10**9))
    c = load_lm_corpus("wikitext2", data_dir=wiki_dir, cache_dir=cache)
    assert c.n_tokens["train"] == a.n_tokens["train"] + 4
    assert len(list(cache.glob("lm-wikitext2-word-*.pt"))) == 2


def test_bpe(wiki_dir, tmp_path):
    cache = tmp_path / "cache"
    words = load_lm_corpus("wikitext2", data_dir=wiki_dir)
    c = load_lm_corpus("wikitext2", data_dir=wiki_dir, cache_dir=cache, bpe_vocab_size=60, bpe_min_frequency=1)
    assert c.tokenizer == "bpe" and c.vocab[:2] == ["<eos>", "<unk>"] and c.vocab_size <= 60
    assert len(list(cache.glob("bpe-wikitext2-60-*.json"))) == 1
    # Word counts are the word-level ones; BPE has at least as many tokens.
    assert c.n_words == words.n_words
    for s in ("train", "valid", "test"):
        assert c.n_tokens[s] >= c.n_words[s]
        assert c[s].tolist().count(EOS_ID) == words[s].tolist().count(EOS_ID)
    # <unk> in the text stays one special token; decoding restores the words.
    assert UNK_ID in c["train"].tolist()
    first_line_end = c["test"].tolist().index(EOS_ID)
    assert c.decode(c["test"][:first_line_end]).strip() == "the game ."
    again = load_lm_corpus("wikitext2", data_dir=wiki_dir, cache_dir=cache, bpe_vocab_size=60, bpe_min_frequency=1)
    assert torch.equal(again["valid"], c["valid"]) and again.n_words == c.n_words and again.bpe_file == c.bpe_file
    # Word-perplexity conversion uses tokens/words.
    nll = 1.5
    assert c.word_perplexity("valid", nll) == pytest.approx(torch.e ** (nll * c.n_tokens["valid"] / c.n_words["valid"]))


def test_batchify_and_bptt():
    ids = torch.arange(23)
    data = batchify(ids, 4)
    assert data.shape == (4, 5) and data[1].tolist() == [5, 6, 7, 8, 9]
    windows = list(bptt_batches(data, 3))
    assert [tuple(x.shape) for x, _ in windows] == [(4, 3), (4, 1)]
    for x, y in windows:
        assert torch.equal(y, x + 1)  # target = next token of the same row
    seen = torch.cat([x for x, _ in windows], 1)
    assert torch.equal(seen, data[:, :-1])
    with pytest.raises(ValueError):
        batchify(torch.arange(3), 4)


def test_errors(tmp_path, wiki_dir, monkeypatch):
    with pytest.raises(DataError, match=r"wiki\.test\.tokens"):
        (wiki_dir / "wiki.test.tokens").unlink()
        load_lm_corpus("wikitext2", data_dir=wiki_dir)
    with pytest.raises(DataError, match=r"nothere not found"):
        load_lm_corpus("ptb", data_dir=tmp_path / "nothere")
    with pytest.raises(DataError, match="must include 'train'"):
        load_lm_corpus("ptb", files={"valid": wiki_dir / "wiki.valid.tokens"})
    with pytest.raises(DataError, match="unknown LM corpus"):
        load_lm_corpus("enwik8")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b" fine line \n another \n caf\xe9 \n")
    with pytest.raises(DataError, match=r"bad\.txt:\d+: not UTF-8"):
        load_lm_corpus("ptb", files={"train": bad})
    monkeypatch.delenv("TPRBENCH_DATA", raising=False)
    with pytest.raises(DataError, match="TPRBENCH_DATA"):
        load_lm_corpus("ptb")


@pytest.mark.realdata
def test_real_ptb_and_wikitext2(data_root, tmp_path):
    ptb = load_lm_corpus("ptb", cache_dir=tmp_path)
    assert ptb.n_tokens == {"train": 929_589, "valid": 73_760, "test": 82_430}
    assert ptb.vocab_size == 10_000 and ptb.n_oov == {"train": 0, "valid": 0, "test": 0}
    wt2 = load_lm_corpus("wikitext2", cache_dir=tmp_path)
    assert wt2.n_tokens == {"train": 2_088_628, "valid": 217_646, "test": 245_569}
    assert wt2.vocab_size == 33_278 and sum(wt2.n_oov.values()) == 0
    data = batchify(wt2["valid"], 20)
    x, y = next(bptt_batches(data, 35))
    assert x.shape == (20, 35) and torch.equal(x[:, 1:], y[:, :-1])


@pytest.mark.realdata
def test_real_ptb_bpe(data_root, tmp_path):
    c = load_lm_corpus("ptb", cache_dir=tmp_path, bpe_vocab_size=2000)
    assert c.vocab_size == 2000
    assert c.n_words == {"train": 929_589, "valid": 73_760, "test": 82_430}
    assert all(c.n_tokens[s] > c.n_words[s] for s in c.splits)
    first = c["valid"][: c["valid"].tolist().index(EOS_ID)]
    assert c.decode(first).strip() == "consumers may want to move their telephones a little closer to the tv set"
