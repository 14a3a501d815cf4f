"""Corpus BLEU-1…4 through sacrebleu, against cases counted by hand."""

from __future__ import annotations

import math

import pytest

from tasks.autoencode.metrics import corpus_bleu

HYP1, REF1 = "the cat sat on the mat".split(), "the cat is on the mat".split()


def test_one_sentence_counted_by_hand():
    # clipped matches / n-grams: 1-grams the,the,cat,on,mat = 5/6; 2-grams "the cat","on the","the mat" = 3/5;
    # 3-grams "on the mat" = 1/4; 4-grams 0/3; equal lengths → BP = 1.
    b = corpus_bleu([HYP1], [REF1])
    assert b["bleu1"] == pytest.approx(5 / 6)
    assert b["bleu2"] == pytest.approx(math.sqrt(5 / 6 * 3 / 5))  # = √0.5
    assert b["bleu3"] == pytest.approx((5 / 6 * 3 / 5 * 1 / 4) ** (1 / 3))  # = 0.5
    assert b["bleu4"] == 0.0  # no 4-gram matches, no smoothing


def test_corpus_level_pools_counts_before_dividing():
    b = corpus_bleu([HYP1, "a dog runs".split()], [REF1, "a dog runs".split()])
    # pooled: 1-grams (5+3)/(6+3), 2-grams (3+2)/(5+2), 3-grams (1+1)/(4+1), 4-grams 0/(3+0); 9 vs 9 words
    p = [8 / 9, 5 / 7, 2 / 5]
    assert b["bleu1"] == pytest.approx(p[0])
    assert b["bleu2"] == pytest.approx((p[0] * p[1]) ** (1 / 2))
    assert b["bleu3"] == pytest.approx((p[0] * p[1] * p[2]) ** (1 / 3))
    assert b["bleu4"] == 0.0


def test_brevity_penalty():
    b = corpus_bleu(["the cat".split()], ["the cat sat down".split()], max_order=2)
    assert set(b) == {"bleu1", "bleu2"}
    # precisions 2/2 and 1/1; BP = exp(1 − 4/2)
    assert b["bleu1"] == pytest.approx(math.exp(-1)) and b["bleu2"] == pytest.approx(math.exp(-1))


def test_perfect_reconstruction_and_empty_hypothesis():
    sents = ["no it was n't black monday".split(), "the N stock @.@ index".split()]
    assert corpus_bleu(sents, sents) == pytest.approx({f"bleu{n}": 1.0 for n in range(1, 5)})
    assert corpus_bleu([[]], [REF1])["bleu1"] == 0.0


def test_tokens_are_not_re_tokenised():
    # sacrebleu's default 13a tokeniser would split "a.b" into "a . b" and score 1.0 here; tokenize="none" keeps
    # the word whole, so nothing matches
    b = corpus_bleu([["a.b"]], [["a", ".", "b"]], max_order=1)
    assert b["bleu1"] == 0.0
    assert corpus_bleu([["a", ".", "b"]], [["a", ".", "b"]], max_order=1)["bleu1"] == pytest.approx(1.0)


def test_bad_input():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu([HYP1, HYP1], [REF1])
    with pytest.raises(ValueError, match="at least one"):
        corpus_bleu([], [])
    with pytest.raises(ValueError, match="list of non-empty tokens"):
        corpus_bleu(["the cat sat"], [REF1])
    with pytest.raises(ValueError, match="list of non-empty tokens"):
        corpus_bleu([["the cat"]], [REF1])
    with pytest.raises(ValueError, match="max_order"):
        corpus_bleu([HYP1], [REF1], max_order=0)
