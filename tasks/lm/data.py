"""Language-modelling corpora (WikiText-2/103, PTB): word or BPE token ids, batchify, truncated BPTT.

Public API (the LM adapter builds on these names):

    load_lm_corpus(corpus, data_dir=None, files=None, cache_dir=None,
                   bpe_vocab_size=None, bpe_min_frequency=2) -> LMCorpus
    batchify(ids, batch_size) -> Tensor [B, N]
    bptt_batches(data, bptt) -> Iterator[(input [B, T], target [B, T])]
    split_sentences(ids, eos_id) -> list[Tensor]          (the non-contiguous mode)
    sentence_batches(sentences, batch_size, generator) -> Iterator[(input, target, mask)]

Word tokens follow the PyTorch word_language_model example: ``line.split() + ['<eos>']`` for
every line, blank lines included (a blank WikiText line, a single space, becomes one ``<eos>``).
That gives the canonical counts: PTB train 929,589 tokens, WikiText-2 train 2,088,628, and the
canonical vocabularies (PTB 10,000, WikiText-2 33,278 types).

The vocabulary comes from the train split only: ``<eos>``=0, ``<unk>``=1, then words by descending
train count (ties: first seen). Words of valid/test not seen in train become ``<unk>`` and are
counted in ``LMCorpus.n_oov`` (zero for PTB and WikiText, whose splits share the train vocabulary).

With ``bpe_vocab_size`` a byte-pair-encoding model (HF `tokenizers`) is trained on the train
split's words and every split is encoded with it; ``<eos>`` (0) and ``<unk>`` (1) stay single
special tokens. Perplexity is then per BPE token; ``n_words`` keeps the word-level counts of each
split (incl. ``<eos>``) so `LMCorpus.word_perplexity` can report word-level perplexity too.

Caching (only with a cache_dir): the BPE model as ``bpe-{corpus}-{size}-{key}.json`` and the ids
as ``lm-{corpus}-{word|bpeN}-{key}.pt`` (torch.save, loaded with weights_only=True), keyed by
each file's path, size and mtime plus the options, so editing a file invalidates the cache.
"""

from __future__ import annotations

import array
import collections
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import DataError, where
from ..paths import dataset_dir, require_file

EOS, UNK = "<eos>", "<unk>"
EOS_ID, UNK_ID = 0, 1
SPLITS = ("train", "valid", "test")
_CACHE_VERSION = 1

CORPORA = ("wikitext2", "wikitext103", "ptb")
_DEFAULT_DIRS = {
    "wikitext2": ("wikitext2", "wikitext-2"),
    "wikitext103": ("wikitext103", "wikitext-103"),
    "ptb": ("ptb",),
}
_WIKI_NAMES = {s: (f"{s}.txt", f"wiki.{s}.tokens") for s in SPLITS}
_CANDIDATES = {
    "wikitext2": _WIKI_NAMES,
    "wikitext103": _WIKI_NAMES,
    "ptb": {s: (f"ptb.{s}.txt", f"{s}.txt") for s in SPLITS},
}


def corpus_files(corpus: str) -> tuple[str, ...]:
    """The training-file names a folder of `corpus` may hold (what a data path is checked for)."""
    return _CANDIDATES[corpus]["train"]


_HOW = {
    "wikitext2": "get wikitext-2-v1 (https://huggingface.co/datasets/Salesforce/wikitext, files "
    "wiki.{train,valid,test}.tokens or train/valid/test.txt) into that folder, or pass files={split: path}",
    "wikitext103": "get wikitext-103-v1 (https://huggingface.co/datasets/Salesforce/wikitext, files "
    "wiki.{train,valid,test}.tokens) into that folder, or pass files={split: path}",
    "ptb": "get the Mikolov PTB simple-examples files ptb.{train,valid,test}.txt "
    "(http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz) into that folder, or pass files={split: path}",
}


@dataclass
class LMCorpus:
    """Token ids of an LM corpus.

    splits: split -> 1-D LongTensor of token ids (the whole split as one stream)
    vocab: id -> token string (word-level words, or the BPE vocabulary)
    n_words: split -> word-level tokens incl. one <eos> per line (the word-perplexity denominator)
    n_tokens: split -> len(splits[split]) (== n_words for word-level)
    n_oov: split -> words mapped to <unk> because train never had them (word-level only)
    tokenizer: "word" or "bpe"; bpe_file: the trained `tokenizers` JSON when tokenizer == "bpe"
    """

    name: str
    tokenizer: str
    vocab: list[str]
    splits: dict[str, torch.Tensor]
    n_words: dict[str, int]
    n_tokens: dict[str, int]
    n_oov: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    bpe_file: str | None = None

    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __getitem__(self, split: str) -> torch.Tensor:
        try:
            return self.splits[split]
        except KeyError:
            raise KeyError(f"{self.name} has no split {split!r} (have: {', '.join(self.splits)})") from None

    def word_perplexity(self, split: str, mean_token_nll: float) -> float:
        """Word-level perplexity from the mean NLL per token (nats) over the whole split.

        exp(total NLL / words); for word-level corpora this is just exp(mean_token_nll).
        """
        return math.exp(mean_token_nll * self.n_tokens[split] / self.n_words[split])

    def decode(self, ids) -> str:
        """Text of a sequence of ids (BPE pieces joined back into words)."""
        ids = [int(i) for i in ids]
        if self.tokenizer == "bpe" and self.bpe_file:
            from tokenizers import Tokenizer

            return Tokenizer.from_file(self.bpe_file).decode(ids, skip_special_tokens=False)
        return " ".join(self.vocab[i] for i in ids)


def load_lm_corpus(
    corpus: str,
    data_dir: str | Path | None = None,
    files: dict[str, str | Path] | None = None,
    cache_dir: str | Path | None = None,
    bpe_vocab_size: int | None = None,
    bpe_min_frequency: int = 2,
) -> LMCorpus:
    """Load a corpus as token-id streams.

    corpus: ``wikitext2`` | ``wikitext103`` | ``ptb`` (names the layout and the cache files).
    data_dir: folder with train/valid/test (``train.txt`` or ``wiki.train.tokens``; ``ptb.train.txt``);
        default ``$TPRBENCH_DATA/<corpus>``.
    files: explicit {split: path}, overriding discovery; must include ``train`` (the vocabulary).
    cache_dir: cache the ids (and the BPE model) there; None computes every time.
    bpe_vocab_size: train a BPE model of this size on train and encode with it; None = words.
    bpe_min_frequency: BPE merges need a pair seen at least this often.
    """
    if corpus not in CORPORA:
        raise DataError(f"unknown LM corpus {corpus!r}; expected one of {', '.join(CORPORA)}")
    paths = _resolve_files(corpus, data_dir, files)
    kind = "word" if bpe_vocab_size is None else f"bpe{int(bpe_vocab_size)}"
    options = {"v": _CACHE_VERSION, "kind": kind, "min_freq": bpe_min_frequency if bpe_vocab_size else None}
    key = _key(paths, options)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else None
    cache_file = cache / f"lm-{corpus}-{kind}-{key}.pt" if cache is not None else None

    bpe_file: Path | None = None
    if bpe_vocab_size is not None:
        bpe_key = _key({"train": paths["train"]}, {"v": _CACHE_VERSION, "min_freq": bpe_min_frequency})
        bpe_file = cache / f"bpe-{corpus}-{int(bpe_vocab_size)}-{bpe_key}.json" if cache is not None else None

    if cache_file is not None and cache_file.is_file():
        try:
            saved = torch.load(cache_file, weights_only=True)
            if bpe_file is None or bpe_file.is_file():
                return _from_saved(corpus, saved, paths, bpe_file)
        except Exception:  # a torn or foreign cache file: rebuild it
            pass

    if bpe_vocab_size is None:
        vocab, splits, n_words, n_oov = _encode_words(paths)
    else:
        vocab, splits, n_words, bpe_file = _encode_bpe(corpus, paths, int(bpe_vocab_size), bpe_min_frequency, bpe_file)
        n_oov = {}
    saved = {
        "vocab": vocab,
        "splits": {s: t.to(torch.int32) for s, t in splits.items()},
        "n_words": n_words,
        "n_oov": n_oov,
        "tokenizer": "word" if bpe_vocab_size is None else "bpe",
    }
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(".tmp")
        torch.save(saved, tmp)
        tmp.replace(cache_file)
    return LMCorpus(
        corpus,
        saved["tokenizer"],
        vocab,
        splits,
        n_words,
        {s: len(t) for s, t in splits.items()},
        n_oov,
        {s: str(p) for s, p in paths.items()},
        str(bpe_file) if bpe_file else None,
    )


def _from_saved(corpus: str, saved: dict, paths: dict[str, Path], bpe_file: Path | None) -> LMCorpus:
    splits = {s: t.to(torch.long) for s, t in saved["splits"].items()}
    return LMCorpus(
        corpus,
        saved["tokenizer"],
        list(saved["vocab"]),
        splits,
        dict(saved["n_words"]),
        {s: len(t) for s, t in splits.items()},
        dict(saved["n_oov"]),
        {s: str(p) for s, p in paths.items()},
        str(bpe_file) if bpe_file else None,
    )


def _resolve_files(corpus: str, data_dir, files) -> dict[str, Path]:
    how = _HOW[corpus]
    if files:
        if "train" not in files:
            raise DataError(f"{corpus}: files= must include 'train' (the vocabulary is built from it); got {', '.join(files)}")
        return {s: require_file(p, f"{corpus} split {s!r}", how) for s, p in files.items()}
    base = dataset_dir(corpus, data_dir, _DEFAULT_DIRS[corpus], how)
    out = {}
    for split, names in _CANDIDATES[corpus].items():
        hit = next((base / n for n in names if (base / n).is_file()), None)
        if hit is None:
            raise DataError(f"{corpus} split {split!r}: file not found (looked for {' or '.join(str(base / n) for n in names)}); {how}")
        out[split] = hit
    return out


def _key(paths: dict[str, Path], options: dict) -> str:
    stamp = {s: [str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for s, p in sorted(paths.items())}
    blob = json.dumps({"files": stamp, "options": options}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def _lines(path: Path) -> Iterator[str]:
    """Lines of a UTF-8 text file (universal newlines, as the PyTorch example reads them)."""
    lineno = 0
    with open(path, encoding="utf-8") as f:
        try:
            for lineno, line in enumerate(f, start=1):  # noqa: B007 (the except clause reads lineno)
                yield line
        except UnicodeDecodeError as exc:
            raise DataError(f"{where(path, lineno + 1)}: not UTF-8 text ({exc.reason} at byte {exc.start} of a read block)") from None


# Plain Python over lines, not `datasets`: the product is one flat id stream per split, built in
# one pass with str.split and cached with torch.save; an Arrow table of lines adds nothing.
def _encode_words(paths: dict[str, Path]):
    counts: collections.Counter = collections.Counter()
    for line in _lines(paths["train"]):
        counts.update(line.split())
        counts[EOS] += 1
    words = [w for w, _ in counts.most_common() if w not in (EOS, UNK)]
    vocab = [EOS, UNK, *words]
    stoi = {w: i for i, w in enumerate(vocab)}
    splits, n_words, n_oov = {}, {}, {}
    for split, path in paths.items():
        ids = array.array("q")
        oov = 0
        for line in _lines(path):
            toks = line.split()
            row = [stoi.get(w, -1) for w in toks]
            if -1 in row:
                oov += row.count(-1)
                row = [UNK_ID if i < 0 else i for i in row]
            ids.extend(row)
            ids.append(EOS_ID)
        t = torch.frombuffer(ids, dtype=torch.int64).clone() if len(ids) else torch.zeros(0, dtype=torch.long)
        splits[split], n_words[split], n_oov[split] = t, len(ids), oov
    return vocab, splits, n_words, n_oov


def _train_bpe(path: Path, vocab_size: int, min_frequency: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=UNK))
    # Metaspace: words are split on the corpus's spaces and keep a "▁" word-start marker, so
    # decode() restores the word boundaries. The text is already word-tokenised.
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOS, UNK], show_progress=False)
    tok.train_from_iterator((" ".join(line.split()) for line in _lines(path)), trainer=trainer)
    if tok.token_to_id(EOS) != EOS_ID or tok.token_to_id(UNK) != UNK_ID:
        raise RuntimeError("BPE special tokens did not get ids 0 and 1")
    return tok


def _encode_bpe(corpus: str, paths: dict[str, Path], vocab_size: int, min_frequency: int, bpe_file: Path | None):
    from tokenizers import Tokenizer

    if bpe_file is not None and bpe_file.is_file():
        tok = Tokenizer.from_file(str(bpe_file))
    else:
        tok = _train_bpe(paths["train"], vocab_size, min_frequency)
        if bpe_file is not None:
            bpe_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = bpe_file.with_suffix(".tmp")
            tok.save(str(tmp))
            tmp.replace(bpe_file)
    splits, n_words = {}, {}
    for split, path in paths.items():
        ids = array.array("q")
        words = 0
        chunk: list[str] = []

        def flush(chunk: list[str], ids: array.array) -> None:
            for enc in tok.encode_batch(chunk, add_special_tokens=False):
                ids.extend(enc.ids)
                ids.append(EOS_ID)
            chunk.clear()

        for line in _lines(path):
            toks = line.split()
            words += len(toks) + 1
            chunk.append(" ".join(toks))
            if len(chunk) >= 10_000:
                flush(chunk, ids)
        flush(chunk, ids)
        splits[split] = torch.frombuffer(ids, dtype=torch.int64).clone() if len(ids) else torch.zeros(0, dtype=torch.long)
        n_words[split] = words
    vocab = [t for t, _ in sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])]
    return vocab, splits, n_words, bpe_file


def batchify(ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """[B, N]: the stream cut into B contiguous rows (the tail that does not fill a row is dropped).

    Row b holds ids[b*N:(b+1)*N]; this is the transpose of the PyTorch example's [N, B] layout.
    """
    if ids.dim() != 1:
        raise ValueError(f"batchify expects a 1-D id stream, got shape {tuple(ids.shape)}")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    n = ids.numel() // batch_size
    if n < 2:
        raise ValueError(f"{ids.numel()} tokens are too few for batch_size {batch_size} (need >= 2 per row)")
    return ids[: n * batch_size].view(batch_size, n).contiguous()


def bptt_batches(data: torch.Tensor, bptt: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Truncated-BPTT windows over a batchified [B, N] tensor.

    Yields (input [B, T], target [B, T]) with target = input shifted one step ahead; T == bptt
    except the last window (N - 1 is not always a multiple of bptt). Carry the hidden state across
    windows (detached) to train with truncated BPTT.
    """
    if bptt < 1:
        raise ValueError("bptt must be >= 1")
    n = data.size(1)
    for i in range(0, n - 1, bptt):
        t = min(bptt, n - 1 - i)
        yield data[:, i : i + t], data[:, i + 1 : i + 1 + t]


def split_sentences(ids: torch.Tensor, eos_id: int = EOS_ID) -> list[torch.Tensor]:
    """The stream cut after every `eos_id`: one tensor per line of the corpus, each ending in <eos>
    (a trailing piece without one is kept as it is). The non-contiguous LM reads these."""
    if ids.dim() != 1:
        raise ValueError(f"split_sentences expects a 1-D id stream, got shape {tuple(ids.shape)}")
    ends = (ids == eos_id).nonzero().flatten() + 1
    bounds = [0, *ends.tolist()]
    if bounds[-1] != ids.numel():
        bounds.append(ids.numel())
    return [ids[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def sentence_batches(
    sentences: list[torch.Tensor], batch_size: int, generator: torch.Generator | None = None, eos_id: int = EOS_ID, pool: int = 50
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Batches of whole sentences, right-padded: (input [B, T], target [B, T], mask [B, T]).

    A sentence w_1 … w_n <eos> is read as input <eos> w_1 … w_n and target w_1 … w_n <eos>: every
    token of the stream is predicted once, as in the contiguous mode, with <eos> standing for the
    sentence start (the authors' lingvo input feeds <s>; both predict n + 1 tokens per sentence,
    lingvo's `num_words = word_count + 1`). Padding carries id `eos_id` and mask False.

    With a generator (training) the sentences are shuffled, sorted by length within pools of
    `pool` batches (so a batch holds sentences of similar length, as lingvo's length buckets do)
    and the batches shuffled; without one (evaluation) they are sorted by length once."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if generator is None:
        order = sorted(range(len(sentences)), key=lambda i: (len(sentences[i]), i))
        groups = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    else:
        perm = torch.randperm(len(sentences), generator=generator).tolist()
        groups = []
        for p in range(0, len(perm), pool * batch_size):
            chunk = sorted(perm[p : p + pool * batch_size], key=lambda i: len(sentences[i]))
            groups += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
        groups = [groups[i] for i in torch.randperm(len(groups), generator=generator).tolist()]
    for group in groups:
        steps = max(len(sentences[i]) for i in group)
        inputs = torch.full((len(group), steps), eos_id, dtype=torch.long)
        targets = torch.full((len(group), steps), eos_id, dtype=torch.long)
        mask = torch.zeros(len(group), steps, dtype=torch.bool)
        for row, i in enumerate(group):
            s = sentences[i]
            inputs[row, 1 : len(s)] = s[:-1]
            targets[row, : len(s)] = s
            mask[row, : len(s)] = True
        yield inputs, targets, mask
