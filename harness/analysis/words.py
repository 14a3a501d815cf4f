"""UD words → a run's own token ids, whatever its task's tokenizer (`tprbench interpret`).

Each analysed run reads text through its own vocabulary, so the treebank's words are mapped the
way its training data was:
- **NLI** (`adapter.vocab`): lower-cased words (the NLI tokenizer lower-cases); a word outside the
  vocabulary is run as `<unk>`.
- **LM, word level** (`adapter.corpus`, tokenizer "word"): the form as written, else lower-cased
  (PTB is lower-cased, WikiText is not), else `N` for a number when the vocabulary has PTB's `N`;
  otherwise `<unk>`. The sentence starts with `<eos>`, as the LM reads each sentence (per-sentence
  mode's input, and what precedes a sentence in the contiguous stream).
- **LM, BPE** (`corpus.bpe_file`): the sentence's words pre-tokenised, each split into pieces by the
  run's own BPE model; a word's readout is taken at its **last** piece (the unit has then read the
  whole word); a word is unknown when a piece is `<unk>`.

`WordMap.sentence(forms)` returns the ids to run, where each word's readout sits and which words
are in the vocabulary; `word_id(word)` the single id of a word for polysemy listings (word-level
vocabularies only).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .sources import AnalysisError

NUMBER = re.compile(r"^[+-]?(\d+([.,:/-]\d+)*|\d*\.\d+)(st|nd|rd|th|s)?$")


@dataclass
class WordMap:
    """How one run reads words: `sentence(forms)` → (ids, positions, known)."""

    name: str  # what the summary says the mapping is
    vocab_size: int
    key: tuple  # equal for runs with the same vocabulary
    sentence: Callable[[list[str]], tuple[list[int], list[int], list[bool]]]
    word_id: Callable[[str], int | None]
    itos: list[str]


def _word_level(stoi: dict[str, int], unk: int, lookup: Callable[[str], str | None], prefix: list[int], name: str, itos: list[str]) -> WordMap:
    def sentence(forms: list[str]) -> tuple[list[int], list[int], list[bool]]:
        keys = [lookup(w) for w in forms]
        ids = prefix + [stoi[k] if k is not None else unk for k in keys]
        return ids, [len(prefix) + i for i in range(len(forms))], [k is not None for k in keys]

    def word_id(word: str) -> int | None:
        k = lookup(word)
        return None if k is None else stoi[k]

    return WordMap(name, len(itos), ("words", tuple(itos)), sentence, word_id, itos)


def word_map(adapter: Any) -> WordMap:
    """The word mapping of a prepared task adapter; AnalysisError when its inputs are not words."""
    vocab = getattr(adapter, "vocab", None)
    stoi = getattr(vocab, "stoi", None)
    if isinstance(stoi, dict):  # NLI and other word-vocabulary tasks
        unk = stoi.get("<unk>", 1)
        return _word_level(
            stoi,
            unk,
            lambda w: w.lower() if w.lower() in stoi else None,
            [],
            "words, lower-cased (the NLI tokenizer's)",
            list(getattr(vocab, "itos", stoi)),
        )
    corpus = getattr(adapter, "corpus", None)
    if corpus is not None and getattr(corpus, "tokenizer", None) == "word":
        itos = list(corpus.vocab)
        stoi = {w: i for i, w in enumerate(itos)}

        def lookup(w: str) -> str | None:
            for cand in (w, w.lower()):
                if cand in stoi and cand not in ("<eos>", "<unk>"):
                    return cand
            if "N" in stoi and NUMBER.match(w):
                return "N"
            return None

        return _word_level(
            stoi,
            corpus.unk_id,
            lookup,
            [corpus.eos_id],
            "LM words (as written, else lower-cased, numbers as N when the vocabulary has it); each sentence read after <eos>",
            itos,
        )
    if corpus is not None and getattr(corpus, "tokenizer", None) == "bpe" and getattr(corpus, "bpe_file", None):
        return _bpe(corpus)
    name = getattr(adapter, "name", "?")
    if name == "babi":
        raise AnalysisError(
            "task 'babi': a TPR-RNN step reads a whole bAbI sentence, so tpr3 has no per-token "
            "interface to set against POS (its keys e1, e2, r1–r3 are per sentence; the paper's "
            "sentence clustering, Schlag & Schmidhuber 2018 §7, is not built)"
        )
    raise AnalysisError(
        f"task {name!r} has no word vocabulary: interpret maps UD words to a run's words (NLI "
        "vocabulary, LM words or LM BPE pieces); logic's symbols are not words"
    )


def _bpe(corpus: Any) -> WordMap:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(corpus.bpe_file))
    unk, eos = corpus.unk_id, corpus.eos_id

    def sentence(forms: list[str]) -> tuple[list[int], list[int], list[bool]]:
        enc = tok.encode(forms, is_pretokenized=True, add_special_tokens=False)
        last: dict[int, int] = {}
        pieces: dict[int, list[int]] = {}
        for pos, (piece, w) in enumerate(zip(enc.ids, enc.word_ids)):
            if w is not None:
                last[w] = pos
                pieces.setdefault(w, []).append(piece)
        missing = [forms[i] for i in range(len(forms)) if i not in last]
        if missing:
            raise AnalysisError(f"BPE gave no pieces for {missing[:3]}")
        return ([eos] + list(enc.ids), [1 + last[i] for i in range(len(forms))], [unk not in pieces[i] for i in range(len(forms))])

    def word_id(word: str) -> int | None:
        ids = tok.encode([word], is_pretokenized=True, add_special_tokens=False).ids
        return ids[0] if len(ids) == 1 and ids[0] != unk else None

    return WordMap(
        "LM BPE pieces of the run's own BPE model (a word read at its last piece); each sentence read after <eos>",
        corpus.vocab_size,
        ("bpe", str(corpus.bpe_file)),
        sentence,
        word_id,
        list(corpus.vocab),
    )
