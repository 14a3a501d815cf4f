"""Autoencode sentences: PTB/WikiText-2 sentences ≤ max_len, train vocabulary, encoder/decoder tensors."""

from __future__ import annotations

import pytest
import torch

from tasks.autoencode.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SentenceCorpus, collate, load_sentences
from tasks.errors import DataError

PTB_TRAIN = (
    " the cat sat \n"
    " a b c d e f \n"  # 6 words: dropped when max_len = 5
    " the <unk> dog \n"
    " \n"  # empty
    " the cat \n"
)
PTB_VALID = " the bird sat \n the cat \n"
PTB_TEST = " cat \n"


@pytest.fixture
def ptb_dir(tmp_path):
    d = tmp_path / "ptb"
    d.mkdir()
    for split, text in (("train", PTB_TRAIN), ("valid", PTB_VALID), ("test", PTB_TEST)):
        (d / f"ptb.{split}.txt").write_text(text, encoding="utf-8")
    return d


def test_ptb_sentences_vocabulary_and_counts(ptb_dir):
    c = load_sentences("ptb", data_dir=ptb_dir, max_len=5)
    assert isinstance(c, SentenceCorpus) and c.max_len == 5
    # specials first, then train words by count (the 3, cat 2, then first seen: sat, dog); <unk> is the special
    assert c.vocab == ["<pad>", "<bos>", "<eos>", "<unk>", "the", "cat", "sat", "dog"]
    assert [c.words(s.tolist()) for s in (c["train"][i] for i in range(len(c["train"])))] == [
        ["the", "cat", "sat"],
        ["the", "<unk>", "dog"],
        ["the", "cat"],
    ]
    assert c["train"][1].tolist() == [4, UNK_ID, 7]  # the corpus's own <unk> is our <unk>
    assert c.n_dropped == {"train": 1, "valid": 0, "test": 0}
    assert c.n_empty == {"train": 1, "valid": 0, "test": 0}
    # "bird" is not in train -> <unk>, counted; words of dropped train sentences are not in the vocabulary
    assert c.n_oov == {"train": 0, "valid": 1, "test": 0}
    assert c["valid"][0].tolist() == [4, UNK_ID, 6]
    assert "a" not in c.vocab
    assert c["train"].lengths.tolist() == [3, 3, 2]
    assert c["test"][-1].tolist() == [5]
    with pytest.raises(IndexError):
        c["test"][1]
    with pytest.raises(KeyError, match="no split"):
        c["dev"]


def test_default_max_len_is_30(tmp_path):
    d = tmp_path / "ptb"
    d.mkdir()
    for split in ("train", "valid", "test"):
        (d / f"ptb.{split}.txt").write_text(" " + " ".join(["w"] * 30) + " \n " + " ".join(["w"] * 31) + " \n")
    c = load_sentences("ptb", data_dir=d)
    assert len(c["train"]) == 1 and c["train"].lengths.tolist() == [30] and c.n_dropped["train"] == 1


def test_collate_encoder_and_decoder_tensors():
    s1, s2 = torch.tensor([7, 8, 9]), torch.tensor([5])
    b = collate([s1, s2])
    P, B, E = PAD_ID, BOS_ID, EOS_ID
    assert b.enc_input.tolist() == [[7, 8, 9], [5, P, P]]
    assert b.enc_mask.tolist() == [[True, True, True], [True, False, False]]
    assert b.dec_input.tolist() == [[B, 7, 8, 9], [B, 5, P, P]]
    assert b.dec_target.tolist() == [[7, 8, 9, E], [5, E, P, P]]
    assert b.dec_mask.tolist() == [[True, True, True, True], [True, True, False, False]]
    assert b.lengths.tolist() == [3, 1]
    # teacher forcing: the decoder's input at step t is the target of step t − 1
    assert torch.equal(b.dec_input[:, 1:][b.dec_mask[:, 1:]], b.dec_target[:, :-1][b.dec_mask[:, 1:]])
    with pytest.raises(ValueError, match="empty"):
        collate([s1, torch.tensor([], dtype=torch.long)])
    with pytest.raises(ValueError, match="at least one"):
        collate([])


def test_split_batch_and_words_round_trip(ptb_dir):
    c = load_sentences("ptb", data_dir=ptb_dir, max_len=5)
    b = c["train"].batch([2, 0])
    assert [c.words(row.tolist()) for row in b.dec_target] == [["the", "cat"], ["the", "cat", "sat"]]
    # words() stops at the first <eos> and skips <bos>/<pad>: what a greedy decode is scored on
    assert c.words([BOS_ID, 4, 5, EOS_ID, 6, 6]) == ["the", "cat"]
    assert c.words([PAD_ID]) == []


def test_wikitext_paragraphs_are_cut_into_sentences(tmp_path):
    d = tmp_path / "wikitext2"
    d.mkdir()
    text = " \n = Valkyria Chronicles = \n \n It was 3 @.@ 5 m long . Was it ? Yes ! and more \n = = Plot = = \n"
    for split in ("train", "valid", "test"):
        (d / f"wiki.{split}.tokens").write_text(text, encoding="utf-8")
    c = load_sentences("wikitext2", data_dir=d)
    got = [c.words(c["train"][i].tolist()) for i in range(len(c["train"]))]
    assert got == [["It", "was", "3", "@.@", "5", "m", "long", "."], ["Was", "it", "?"], ["Yes", "!"], ["and", "more"]]


def test_missing_file_names_it(tmp_path):
    d = tmp_path / "ptb"
    d.mkdir()
    (d / "ptb.train.txt").write_text(" a \n")
    (d / "ptb.valid.txt").write_text(" a \n")
    with pytest.raises(DataError, match="ptb.test.txt"):
        load_sentences("ptb", data_dir=d)
    with pytest.raises(DataError, match="not found"):
        load_sentences("ptb", data_dir=tmp_path / "nowhere")
    with pytest.raises(DataError, match="must include 'train'"):
        load_sentences("ptb", files={"valid": d / "ptb.valid.txt"})


def test_bad_options_and_empty_splits(ptb_dir, tmp_path):
    with pytest.raises(DataError, match="unknown autoencode corpus 'wikitext103'"):
        load_sentences("wikitext103", data_dir=ptb_dir)
    with pytest.raises(DataError, match="max_len"):
        load_sentences("ptb", data_dir=ptb_dir, max_len=0)
    long = tmp_path / "long.txt"
    long.write_text(" a b c \n")
    with pytest.raises(DataError, match=r"long\.txt: no sentence of 1\.\.2 words"):
        load_sentences("ptb", files={"train": long}, max_len=2)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b" a \n \xff \n")
    with pytest.raises(DataError, match=r"bad\.txt:\d+: not UTF-8"):
        load_sentences("ptb", files={"train": bad})


@pytest.mark.realdata
def test_real_ptb_sentences(data_root):
    c = load_sentences("ptb", data_dir=data_root / "ptb")
    kept = {s: len(c[s]) for s in ("train", "valid", "test")}
    # every line is a sentence: kept + longer than 30 = the files' line counts (42,068 / 3,370 / 3,761)
    assert {s: kept[s] + c.n_dropped[s] for s in kept} == {"train": 42_068, "valid": 3_370, "test": 3_761}
    assert kept == {"train": 34_998, "valid": 2_825, "test": 3_115}
    assert int(c["train"].lengths.max()) == 30 and int(c["train"].lengths.min()) >= 1
    assert c.vocab_size == 4 + 9_991  # PTB's 10,000 types less <eos>, <unk> (a special here) and 7 seen only in longer sentences
    assert c.words(c["valid"][0].tolist())[:3] == ["consumers", "may", "want"]
