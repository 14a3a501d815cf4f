"""Sentences for the `autoencode` task: a sentence is encoded, then regenerated (TPGN's generation from a plan,
Huang et al., NAACL 2018, with an encoded sentence in place of the image).

Public API (the adapter builds on these names):

    load_sentences(corpus="ptb", data_dir=None, files=None, max_len=30) -> SentenceCorpus
    collate(sentences) -> SentenceBatch      # encoder input, decoder input/target, masks
    SentenceCorpus.words(ids) -> list[str]   # generated ids → words for BLEU (stops at <eos>)

Sentences. PTB (Mikolov's files) has one sentence per line, already lower-cased and word-tokenised,
with rare words as `<unk>`: a sentence is `line.split()`. WikiText-2 lines are paragraphs (and
` = Heading = ` lines): headings are skipped and a paragraph is cut after every `.`, `?` or `!`
token (WikiText writes a decimal point as `@.@`, so a lone `.` ends a sentence), the punctuation
staying with its sentence. Sentences longer than `max_len` words (default 30, the issue's limit)
or empty are dropped, in every split, and counted.

Vocabulary: from the kept train sentences only (every word the model can emit has been trained
on): `<pad>`=0, `<bos>`=1, `<eos>`=2, `<unk>`=3, then words by descending train count (ties: first
seen). The corpora's own `<unk>` is our `<unk>`; words of valid/test outside the vocabulary become
`<unk>` and are counted in `n_oov`.

BOS/EOS (teacher forcing, as the TPGN reads the previous word W_e x_{t−1} at step t): for the words
w_1 … w_n of a sentence,

    encoder input   w_1 … w_n                       (no specials; enc_mask marks the n real tokens)
    decoder input   <bos> w_1 … w_n                 (n + 1 steps)
    decoder target  w_1 … w_n <eos>                 (n + 1 steps; dec_mask marks them)

All right-padded with `<pad>` (0). Free generation starts from `<bos>`, feeds back its own words and
stops at `<eos>` (or after max_len + 1 steps); `words()` turns its ids into the word list that BLEU
compares with the sentence.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import DataError

# One file layout and one set of "file not found" messages for PTB/WikiText across tasks.
from ..lm.data import _lines, _resolve_files

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIALS = (PAD, BOS, EOS, UNK)
CORPORA = ("ptb", "wikitext2")
SENTENCE_END = frozenset({".", "?", "!"})


@dataclass
class SentenceSplit:
    """Word ids of one split's sentences, concatenated: sentence i is ids[offsets[i]:offsets[i + 1]]."""

    ids: torch.Tensor
    offsets: torch.Tensor

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    def __getitem__(self, i: int) -> torch.Tensor:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sentence {i} out of range ({len(self)} sentences)")
        i %= len(self)
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]

    def batch(self, indices: Iterable[int]) -> SentenceBatch:
        return collate([self[int(i)] for i in indices])


@dataclass
class SentenceCorpus:
    """Sentences of ≤ max_len words per split, as word ids (no specials) over one train vocabulary.

    n_dropped: sentences longer than max_len; n_empty: lines/segments with no word; n_oov: words
    mapped to <unk> because the (kept) train sentences never had them — all per split.
    """

    name: str
    vocab: list[str]
    splits: dict[str, SentenceSplit]
    max_len: int
    n_dropped: dict[str, int] = field(default_factory=dict)
    n_empty: dict[str, int] = field(default_factory=dict)
    n_oov: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __getitem__(self, split: str) -> SentenceSplit:
        try:
            return self.splits[split]
        except KeyError:
            raise KeyError(f"{self.name} has no split {split!r} (have: {', '.join(self.splits)})") from None

    def words(self, ids: Iterable[int]) -> list[str]:
        """Word strings of a decoded sequence: up to (without) the first <eos>, skipping <pad>/<bos>."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(self.vocab[i])
        return out


@dataclass
class SentenceBatch:
    """One padded batch (B sentences, L = longest sentence's word count)."""

    enc_input: torch.Tensor  # [B, L]      w_1 … w_n, <pad>
    enc_mask: torch.Tensor  # [B, L]      True at the n real words
    dec_input: torch.Tensor  # [B, L + 1]  <bos> w_1 … w_n, <pad>
    dec_target: torch.Tensor  # [B, L + 1]  w_1 … w_n <eos>, <pad>
    dec_mask: torch.Tensor  # [B, L + 1]  True at the n + 1 real steps
    lengths: torch.Tensor  # [B]         n (words, no specials)


def collate(sentences: Sequence[torch.Tensor]) -> SentenceBatch:
    """Pad sentences (1-D word-id tensors without specials) into encoder and decoder tensors."""
    if not sentences:
        raise ValueError("collate needs at least one sentence")
    lengths = torch.tensor([s.numel() for s in sentences], dtype=torch.long)
    if int(lengths.min()) < 1:
        raise ValueError("collate got an empty sentence")
    B, L = len(sentences), int(lengths.max())
    enc = torch.full((B, L), PAD_ID, dtype=torch.long)
    dec_in = torch.full((B, L + 1), PAD_ID, dtype=torch.long)
    dec_out = torch.full((B, L + 1), PAD_ID, dtype=torch.long)
    dec_in[:, 0] = BOS_ID
    for b, s in enumerate(sentences):
        n = s.numel()
        enc[b, :n] = s
        dec_in[b, 1 : n + 1] = s
        dec_out[b, :n] = s
        dec_out[b, n] = EOS_ID
    steps = torch.arange(L + 1).unsqueeze(0)
    return SentenceBatch(enc, steps[:, :L] < lengths.unsqueeze(1), dec_in, dec_out, steps < (lengths + 1).unsqueeze(1), lengths)


def load_sentences(
    corpus: str = "ptb", data_dir: str | Path | None = None, files: dict[str, str | Path] | None = None, max_len: int = 30
) -> SentenceCorpus:
    """Load a corpus as sentences of 1 … max_len words.

    corpus: ``ptb`` (one sentence per line) | ``wikitext2`` (paragraphs cut into sentences).
    data_dir: the corpus folder (PTB: ptb.{train,valid,test}.txt; WikiText-2: train.txt or
        wiki.train.tokens, …); default ``$TPRBENCH_DATA/<corpus>``. files: explicit {split: path}
        (must include ``train``, the vocabulary's source).
    """
    if corpus not in CORPORA:
        raise DataError(f"unknown autoencode corpus {corpus!r}; expected one of {', '.join(CORPORA)}")
    if max_len < 1:
        raise DataError(f"autoencode: max_len must be >= 1, got {max_len}")
    paths = _resolve_files(corpus, data_dir, files)
    texts: dict[str, list[list[str]]] = {}
    n_dropped, n_empty = {}, {}
    for split, path in paths.items():
        kept, dropped, empty = [], 0, 0
        for words in _sentences(corpus, path):
            if not words:
                empty += 1
            elif len(words) > max_len:
                dropped += 1
            else:
                kept.append(words)
        if not kept:
            raise DataError(f"{path}: no sentence of 1..{max_len} words in split {split!r} ({dropped} longer, {empty} empty)")
        texts[split], n_dropped[split], n_empty[split] = kept, dropped, empty

    counts: collections.Counter = collections.Counter(w for words in texts["train"] for w in words)
    vocab = [*SPECIALS, *(w for w, _ in counts.most_common() if w not in SPECIALS)]
    stoi = {w: i for i, w in enumerate(vocab)}
    splits, n_oov = {}, {}
    for split, sentences in texts.items():
        ids = [stoi.get(w, UNK_ID) for words in sentences for w in words]
        n_oov[split] = sum(1 for words in sentences for w in words if w not in stoi)
        lengths = torch.tensor([0] + [len(words) for words in sentences], dtype=torch.long)
        splits[split] = SentenceSplit(torch.tensor(ids, dtype=torch.long), lengths.cumsum(0))
    return SentenceCorpus(corpus, vocab, splits, max_len, n_dropped, n_empty, n_oov, {s: str(p) for s, p in paths.items()})


def _sentences(corpus: str, path: Path) -> Iterator[list[str]]:
    """The word lists of one file (PTB: lines; WikiText: sentences of non-heading lines)."""
    for line in _lines(path):
        words = line.split()
        if corpus == "ptb":
            yield words
            continue
        if not words or (words[0] == "=" and words[-1] == "="):  # blank line or ` = Heading = `
            continue
        start = 0
        for i, w in enumerate(words):
            if w in SENTENCE_END:
                yield words[start : i + 1]
                start = i + 1
        if start < len(words):
            yield words[start:]
