"""NLI data: MNLI, SNLI, QNLI from local files into HF `datasets` (Arrow), word vocabulary, batches.

Public API (the NLI adapter builds on these names):

    load_nli(source, files=None, data_dir=None, cache_dir=None, hub=False) -> NLIData
    tokenize(text) -> list[str]
    Vocab.build(token_lists, min_count=1, max_size=None) / Vocab.from_dataset(ds, ...)
    encode(ds, vocab, max_len=None, tokenizer=tokenize) -> Dataset   (+ premise_ids, hypothesis_ids)
    collate(batch) -> dict[str, Tensor]                               (DataLoader collate_fn)
    load_word_vectors(path, vocab, dim=None, seed=0) -> (Tensor [V, dim], hits)

Every split is a `datasets.Dataset` with exactly the columns ``premise`` (str), ``hypothesis``
(str) and ``label`` (int64): 3-way NLI entailment=0, neutral=1, contradiction=2; QNLI
entailment=0, not_entailment=1. Rows whose gold label is ``-`` or empty (no annotator
consensus) are dropped and counted in ``NLIData.dropped[split]``.

Layouts read (the format is chosen from the file name):

- ``*.csv``: RFC-4180 CSV with a header (the MNLI dev CSVs here: pairID,sentence1,sentence2,label).
- ``*.jsonl`` / ``*.json``: the official MultiNLI / SNLI jsonl (sentence1, sentence2, gold_label).
- ``*.tsv`` / ``*.txt``: tab-separated with a header, read with quoting disabled (GLUE QNLI
  index/question/sentence/label; also the official multinli_1.0_*.txt / snli_1.0_*.txt and GLUE
  MNLI tsv, whose sentences contain stray ``"``).
- ``s1.<split>``: SentEval's SNLI layout, three line-aligned files s1.X (premise), s2.X
  (hypothesis), labels.X next to each other.

Columns are found by name: premise = sentence1 | question | premise, hypothesis = sentence2 |
sentence | hypothesis, label = gold_label | label (string labels, or integer ids with -1 = none).

Line numbers in errors: CSV/TSV record i (0-based) is reported as line i+2 (header + 1-based);
exact for files without quoted newlines (true of every file in ../shared/data).
"""

from __future__ import annotations

import collections
import csv
import gzip
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataError, where
from ..paths import dataset_dir, require_file

NLI3_LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")
QNLI_LABELS: tuple[str, ...] = ("entailment", "not_entailment")

SOURCES = ("mnli", "snli", "qnli")

PAD, UNK = 0, 1
PAD_TOKEN, UNK_TOKEN = "<pad>", "<unk>"

# Where each source lives under the data root, the files discovered there per split
# (first existing candidate wins), the splits that must be present, and how to get the data.
_DEFAULT_DIRS = {"mnli": ("mnli",), "snli": ("snli", "senteval/SNLI"), "qnli": ("qnli",)}
_CANDIDATES: dict[str, dict[str, tuple[str, ...]]] = {
    "mnli": {
        "train": ("train.csv", "multinli_1.0_train.jsonl", "multinli_1.0_train.txt", "train.tsv"),
        "dev_matched": ("dev_matched.csv", "multinli_1.0_dev_matched.jsonl", "multinli_1.0_dev_matched.txt", "dev_matched.tsv"),
        "dev_mismatched": ("dev_mismatched.csv", "multinli_1.0_dev_mismatched.jsonl", "multinli_1.0_dev_mismatched.txt", "dev_mismatched.tsv"),
    },
    "snli": {
        "train": ("s1.train", "snli_1.0_train.jsonl", "snli_1.0_train.txt"),
        "dev": ("s1.dev", "snli_1.0_dev.jsonl", "snli_1.0_dev.txt"),
        "test": ("s1.test", "snli_1.0_test.jsonl", "snli_1.0_test.txt"),
    },
    "qnli": {"train": ("train.tsv",), "dev": ("dev.tsv",)},
}
_REQUIRED = {"mnli": ("dev_matched", "dev_mismatched"), "snli": ("dev", "test"), "qnli": ("dev",)}
_HOW = {
    "mnli": "put MultiNLI dev_matched.csv/dev_mismatched.csv (pairID,sentence1,sentence2,label) or the "
    "official multinli_1.0_*.jsonl there (https://cims.nyu.edu/~sbowman/multinli/), pass "
    "files={split: path}, or hub=True to load nyu-mll/multi_nli",
    "snli": "put SentEval's SNLI s1/s2/labels.{dev,test} (SentEval data/downstream/get_transfer_data.bash) "
    "or the official snli_1.0_*.jsonl there (https://nlp.stanford.edu/projects/snli/), pass "
    "files={split: path}, or hub=True to load stanfordnlp/snli",
    "qnli": "put GLUE QNLI dev.tsv (and train.tsv) there (GLUE download_glue_data.py), pass "
    "files={split: path}, or hub=True to load nyu-mll/glue qnli",
}
_HUB = {
    "mnli": (("nyu-mll/multi_nli", None), {"train": "train", "validation_matched": "dev_matched", "validation_mismatched": "dev_mismatched"}),
    "snli": (("stanfordnlp/snli", None), {"train": "train", "validation": "dev", "test": "test"}),
    "qnli": (("nyu-mll/glue", "qnli"), {"train": "train", "validation": "dev"}),
}
_PREMISE_COLS = ("sentence1", "question", "premise")
_HYPOTHESIS_COLS = ("sentence2", "sentence", "hypothesis")
_LABEL_COLS = ("gold_label", "label")


def label_names(source: str) -> tuple[str, ...]:
    """Label names in id order for a source (`qnli` is 2-way, the others 3-way)."""
    return QNLI_LABELS if source == "qnli" else NLI3_LABELS


@dataclass
class NLIData:
    """What `load_nli` returns: one `datasets.Dataset` per split plus bookkeeping.

    splits: split name -> Dataset(premise: str, hypothesis: str, label: int64)
    dropped: split name -> rows dropped for a `-`/empty gold label
    files: split name -> the file that split was read from (a hub name when hub=True)
    """

    source: str
    splits: dict[str, Any]
    dropped: dict[str, int]
    label_names: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    def __getitem__(self, split: str):
        try:
            return self.splits[split]
        except KeyError:
            raise KeyError(f"{self.source} has no split {split!r} (have: {', '.join(self.splits)})") from None

    def __contains__(self, split: str) -> bool:
        return split in self.splits


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_nli(
    source: str,
    files: dict[str, str | Path] | None = None,
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    hub: bool = False,
) -> NLIData:
    """Load an NLI source into `datasets.Dataset` splits (columns premise, hypothesis, label).

    source: ``mnli`` | ``snli`` | ``qnli``.
    files: explicit {split: path}; overrides discovery (any split names; for SentEval's SNLI layout
        give the ``s1.<split>`` path, s2/labels are read next to it).
    data_dir: folder to discover files in; default ``$TPRBENCH_DATA/{mnli | snli or senteval/SNLI | qnli}``.
        Discovered splits: mnli dev_matched, dev_mismatched (+ train); snli dev, test (+ train);
        qnli dev (+ train). Splits in parentheses are optional.
    cache_dir: where Arrow caches go (default: the `datasets` cache, ~/.cache/huggingface).
    hub: load by hub name (nyu-mll/multi_nli, stanfordnlp/snli, nyu-mll/glue qnli) through
        `datasets.load_dataset`; only when asked, never as a fallback. Needs the network or a warm cache.

    Raises DataError for missing files (naming the path and how to get the data) and malformed
    rows (file:line).
    """
    if source not in SOURCES:
        raise DataError(f"unknown NLI source {source!r}; expected one of {', '.join(SOURCES)}")
    _quiet_datasets()
    cache = str(Path(cache_dir).expanduser()) if cache_dir is not None else None
    names = label_names(source)
    if hub and not files:
        return _load_hub(source, cache, names)

    if files:
        chosen = {split: Path(p).expanduser() for split, p in files.items()}
        for split, p in chosen.items():
            require_file(p, f"{source} split {split!r}", _HOW[source])
    else:
        chosen = _discover(source, data_dir)

    splits, dropped = {}, {}
    for split, path in chosen.items():
        ds, n_dropped = _load_split(source, split, path, cache, names)
        splits[split] = ds
        dropped[split] = n_dropped
    return NLIData(source, splits, dropped, names, {s: str(p) for s, p in chosen.items()})


def _discover(source: str, data_dir: str | Path | None) -> dict[str, Path]:
    base = dataset_dir(source, data_dir, _DEFAULT_DIRS[source], _HOW[source])
    found: dict[str, Path] = {}
    for split, candidates in _CANDIDATES[source].items():
        hit = next((base / c for c in candidates if (base / c).is_file()), None)
        if hit is not None:
            found[split] = hit
    for split in _REQUIRED[source]:
        if split not in found:
            names = " or ".join(str(base / c) for c in _CANDIDATES[source][split])
            raise DataError(f"{source} split {split!r}: file not found (looked for {names}); {_HOW[source]}")
    # Keep a stable split order: train first, then the evaluation splits.
    return {s: found[s] for s in _CANDIDATES[source] if s in found}


def _layout(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.startswith("s1."):
        return "senteval"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    if name.endswith((".tsv", ".txt")):
        return "tsv"
    raise DataError(f"{path}: cannot tell the layout from the file name; expected *.csv, *.jsonl, *.tsv, *.txt or SentEval's s1.<split>")


def _load_split(source: str, split: str, path: Path, cache: str | None, names: tuple[str, ...]):
    import numpy as np

    layout = _layout(path)
    if layout == "senteval":
        raw, offset = _load_senteval_snli(path, cache), 1
    elif layout == "jsonl":
        raw, offset = _load_table(path, "json", cache), 1
    else:
        raw, offset = _load_table(path, layout, cache), 2
    premise_col, hypothesis_col, label_col = _resolve_columns(path, raw.column_names)
    label_ids = {n: i for i, n in enumerate(names)}
    num = len(names)

    short_rows: dict[str, set[int]] = {}

    def normalise(batch: dict, indices: list[int]) -> dict:
        premises, hypotheses, labels = [], [], []
        for i, p, h, y in zip(indices, batch[premise_col], batch[hypothesis_col], batch[label_col]):
            line = i + offset
            if p is None or h is None:
                raise DataError(f"{where(path, line)}: missing {premise_col if p is None else hypothesis_col} field")
            if layout in ("csv", "tsv") and "" in (p, h, y):
                # pandas fills the fields missing from a short row with "" (keep_default_na=False),
                # indistinguishable from an empty label (= no gold, dropped). Only then look at the
                # raw file, once, to tell a short row (an error) from an empty field.
                if "rows" not in short_rows:
                    short_rows["rows"] = _short_rows(path, layout, len(raw.column_names))
                if line in short_rows["rows"]:
                    missing = premise_col if p == "" else hypothesis_col if h == "" else label_col
                    raise DataError(
                        f"{where(path, line)}: missing {missing} field (expected {len(raw.column_names)} fields: {', '.join(raw.column_names)})"
                    )
            premises.append(p)
            hypotheses.append(h)
            labels.append(_label_id(y, label_ids, num, path, line))
        return {"premise": premises, "hypothesis": hypotheses, "label": labels}

    from datasets import Features, Value
    from datasets.fingerprint import Hasher

    features = Features({"premise": Value("string"), "hypothesis": Value("string"), "label": Value("int64")})
    fp = Hasher.hash((raw._fingerprint, "nli-normalise-v1", source, names, premise_col, hypothesis_col, label_col, offset))
    ds = raw.map(
        normalise, batched=True, with_indices=True, remove_columns=raw.column_names, features=features, new_fingerprint=fp, desc=f"{source} {split}"
    )
    labels = np.asarray(ds.data.column("label").to_numpy())
    n_dropped = int((labels < 0).sum())
    if n_dropped:
        ds = ds.filter(lambda b: [y >= 0 for y in b["label"]], batched=True, new_fingerprint=Hasher.hash((fp, "drop-unlabelled")))
    return ds, n_dropped


def _label_id(y: Any, label_ids: dict[str, int], num: int, path: Path, line: int) -> int:
    """-1 for 'no gold label' (`-`, empty, None, integer -1); DataError for anything unknown."""
    if y is None:
        return -1
    if isinstance(y, (int,)) and not isinstance(y, bool):
        if -1 <= y < num:
            return int(y)
        raise DataError(f"{where(path, line)}: label id {y} out of range (expected -1..{num - 1})")
    text = str(y).strip()
    if text in ("", "-"):
        return -1
    key = text.lower()
    if key in label_ids:
        return label_ids[key]
    raise DataError(f"{where(path, line)}: unknown label {text!r}; expected one of {', '.join(label_ids)} or '-' (no gold label)")


def _resolve_columns(path: Path, columns: Sequence[str]) -> tuple[str, str, str]:
    def pick(options: tuple[str, ...], role: str) -> str:
        for c in options:
            if c in columns:
                return c
        raise DataError(f"{path}: no {role} column (looked for {' / '.join(options)}; the file has {', '.join(columns) or 'no columns'})")

    return pick(_PREMISE_COLS, "premise"), pick(_HYPOTHESIS_COLS, "hypothesis"), pick(_LABEL_COLS, "label")


def _read_header(path: Path, sep: str) -> list[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
        first = f.readline()
    if not first.strip():
        raise DataError(f"{where(path, 1)}: empty file or missing header line")
    if sep == ",":
        return next(csv.reader([first]))
    return first.rstrip("\r\n").split(sep)


def _load_table(path: Path, layout: str, cache: str | None):
    """CSV/TSV/jsonl through `datasets.load_dataset` (Arrow-cached under cache_dir)."""
    from datasets import Features, Value, load_dataset

    kwargs: dict[str, Any] = {}
    if layout == "json":
        builder = "json"
    else:
        builder = "csv"
        sep = "," if layout == "csv" else "\t"
        header = _read_header(path, sep)
        # Every column as a string: ids like "63735n" or a label column must not be re-typed, and
        # keep_default_na=False stops pandas from turning a sentence "NA"/"null" into a missing value.
        kwargs = dict(sep=sep, keep_default_na=False, encoding="utf-8-sig", features=Features({c: Value("string") for c in header}))
        if layout == "tsv":
            kwargs["quoting"] = csv.QUOTE_NONE  # QNLI/official NLI txt: `"` is text, not quoting
    try:
        dd = load_dataset(builder, data_files={"data": str(path)}, cache_dir=cache, **kwargs)
    except DataError:
        raise
    except Exception as exc:  # datasets wraps the parser error; name the file and line
        raise _table_error(path, exc) from exc
    return dd["data"]


def _table_error(path: Path, exc: BaseException) -> DataError:
    chain, e = [], exc
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = e.__cause__ or e.__context__
    text = " | ".join(str(x) for x in chain)
    m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", text)
    if m:
        return DataError(f"{where(path, int(m.group(2)))}: expected {m.group(1)} fields, saw {m.group(3)}")
    m = re.search(r"in row (\d+)", text)  # pyarrow's JSON reader: 0-based row
    line = int(m.group(1)) + 1 if m else None
    if line is None:
        m = re.search(r"line (\d+)", text)
        line = int(m.group(1)) if m else None
    msg = re.search(r"JSON parse error: ([^\n]*?)(?: in row \d+|$)", text)
    detail = msg.group(1) if msg else f"{type(chain[-1]).__name__}: {str(chain[-1])[:300]}"
    return DataError(f"{where(path, line)}: cannot parse ({detail})")


def _short_rows(path: Path, layout: str, ncols: int) -> set[int]:
    """Line numbers (as reported in errors: record index + 2) of rows with fewer than ncols fields."""
    out: set[int] = set()
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
        if layout == "csv":
            rows = csv.reader(f)
        else:
            rows = (line.rstrip("\r\n").split("\t") for line in f)
        next(rows, None)  # header
        for i, row in enumerate(rows):
            if row and len(row) < ncols:
                out.add(i + 2)
    return out


def _load_senteval_snli(s1: Path, cache: str | None):
    """SentEval's SNLI layout (s1.X, s2.X, labels.X, line-aligned) as a cached Arrow dataset.

    Three aligned files are not one of `load_dataset`'s formats, so they are zipped line by line
    here and handed to `Dataset.from_generator`, which writes (and reuses) the Arrow cache.
    """
    from datasets import Dataset, Features, Value

    suffix = s1.name[len("s1.") :]
    paths = [s1, s1.with_name("s2." + suffix), s1.with_name("labels." + suffix)]
    for p in paths:
        require_file(p, "SNLI (SentEval layout)", _HOW["snli"])
    stamp = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in paths]
    counts = [_count_lines(p) for p in paths]
    if len(set(counts)) != 1:
        short = min(range(3), key=lambda i: counts[i])
        raise DataError(
            f"{where(paths[short], counts[short] + 1)}: file ends early ({counts[short]} lines, "
            f"but {paths[0].name} has {counts[0]}, {paths[1].name} {counts[1]}, "
            f"{paths[2].name} {counts[2]}); s1/s2/labels must be line-aligned"
        )
    features = Features({"sentence1": Value("string"), "sentence2": Value("string"), "gold_label": Value("string")})
    # gen_kwargs is part of the cache key (path, size, mtime of each file). A JSON string, not a
    # list: `from_generator` would shard a list argument across generator calls.
    return Dataset.from_generator(_senteval_rows, features=features, cache_dir=cache, gen_kwargs={"stamp": json.dumps(stamp)})


def _senteval_rows(stamp: str):
    files = [open(s[0], encoding="utf-8", newline="\n") for s in json.loads(stamp)]
    try:
        for a, b, y in zip(*files):
            # SentEval sentences are already tokenised and end with " "; keep the text as is
            # (the word tokeniser strips whitespace anyway).
            yield {"sentence1": a.rstrip("\n"), "sentence2": b.rstrip("\n"), "gold_label": y.strip()}
    finally:
        for f in files:
            f.close()


def _count_lines(path: Path) -> int:
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (0 if last == b"\n" else 1)


def _load_hub(source: str, cache: str | None, names: tuple[str, ...]) -> NLIData:
    """By hub name, only when the caller asked (hub=True). Hub labels are ints with -1 = no gold."""
    import numpy as np
    from datasets import load_dataset

    (name, config), split_map = _HUB[source]
    try:
        dd = load_dataset(name, config, cache_dir=cache)
    except Exception as exc:
        raise DataError(
            f"{source}: could not load {name}{'/' + config if config else ''} from the hub "
            f"({type(exc).__name__}: {exc}); without network use local files: {_HOW[source]}"
        ) from exc
    splits, dropped, files = {}, {}, {}
    for hub_split, split in split_map.items():
        if hub_split not in dd:
            continue
        ds = dd[hub_split]
        p_col, h_col, _ = _resolve_columns(Path(name), ds.column_names)
        ds = ds.rename_columns({p_col: "premise", h_col: "hypothesis"}) if p_col != "premise" else ds
        ds = ds.select_columns(["premise", "hypothesis", "label"])
        labels = np.asarray(ds.data.column("label").to_numpy())
        dropped[split] = int((labels < 0).sum())
        splits[split] = ds.filter(lambda b: [y >= 0 for y in b["label"]], batched=True) if dropped[split] else ds
        files[split] = f"hub:{name}{'/' + config if config else ''}:{hub_split}"
    return NLIData(source, splits, dropped, names, files)


def _quiet_datasets() -> None:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


# ---------------------------------------------------------------------------------------------
# Tokenising, vocabulary, encoding, batching
# ---------------------------------------------------------------------------------------------

# Lower-case, then: clitics split PTB-style ("don't" -> do n't, "it's" -> it 's), words with
# inner hyphens/periods/apostrophes-free digits kept whole ("well-known", "3.5"), every other
# non-space, non-word character is its own token ("end." -> end .). Already tokenised text
# (SentEval's SNLI: "abc 's", "ca n't") comes out unchanged apart from case, so raw MNLI/QNLI
# and pre-tokenised SNLI share one vocabulary. A regex, not HF `tokenizers`: this is a
# word-level splitter whose output feeds our own Vocab; the NLI models are word-level.
_TOKEN_RE = re.compile(r"\w+?(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\w+(?:[-.]\w+)*|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Word tokens of `text`: lower-cased, punctuation and clitics split off (see _TOKEN_RE)."""
    return _TOKEN_RE.findall(text.lower())


class Vocab:
    """Word vocabulary: `<pad>`=0, `<unk>`=1, then words by descending count (ties: first seen).

    Build it from the training split only (`Vocab.from_dataset(data["train"])`).
    """

    def __init__(self, itos: Sequence[str]):
        itos = list(itos)
        if itos[:2] != [PAD_TOKEN, UNK_TOKEN]:
            raise ValueError(f"a Vocab starts with {PAD_TOKEN!r}, {UNK_TOKEN!r}; got {itos[:2]}")
        self.itos = itos
        self.stoi = {w: i for i, w in enumerate(itos)}
        if len(self.stoi) != len(itos):
            raise ValueError("duplicate tokens in vocabulary")

    pad_id = PAD
    unk_id = UNK

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], min_count: int = 1, max_size: int | None = None) -> Vocab:
        """From tokenised sentences. min_count: drop rarer words; max_size: cap including the 2 specials."""
        counts: collections.Counter = collections.Counter()
        for tokens in token_lists:
            counts.update(tokens)
        # Counter.most_common sorts by count, stable w.r.t. insertion order (first seen wins ties).
        words = [w for w, c in counts.most_common() if c >= min_count and w not in (PAD_TOKEN, UNK_TOKEN)]
        if max_size is not None:
            words = words[: max(0, max_size - 2)]
        return cls([PAD_TOKEN, UNK_TOKEN, *words])

    @classmethod
    def from_dataset(
        cls,
        ds,
        columns: Sequence[str] = ("premise", "hypothesis"),
        min_count: int = 1,
        max_size: int | None = None,
        tokenizer: Callable[[str], list[str]] = tokenize,
        batch_size: int = 10_000,
    ) -> Vocab:
        """From the text columns of a Dataset (read in batches, tokenised with `tokenizer`)."""

        def token_lists():
            for start in range(0, len(ds), batch_size):
                batch = ds[start : start + batch_size]
                for col in columns:
                    for text in batch[col]:
                        yield tokenizer(text)

        return cls.build(token_lists(), min_count=min_count, max_size=max_size)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: str) -> bool:
        return word in self.stoi

    def lookup(self, tokens: Sequence[str]) -> list[int]:
        get = self.stoi.get
        return [get(t, UNK) for t in tokens]

    def fingerprint(self) -> str:
        from datasets.fingerprint import Hasher

        return Hasher.hash(self.itos)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"itos": self.itos}, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        p = require_file(path, "vocabulary", "build it with Vocab.from_dataset(...).save(path)")
        try:
            return cls(json.loads(p.read_text(encoding="utf-8"))["itos"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{p}: not a vocabulary file ({exc})") from exc


def concatenate(datasets: Sequence[Any]):
    """Several loaded splits as one (the papers train on MNLI + SNLI): the text and label columns,
    in the order given. One split is returned as it is (its cache fingerprint unchanged)."""
    if len(datasets) == 1:
        return datasets[0]
    from datasets import concatenate_datasets

    columns = ["premise", "hypothesis", "label"]
    parts = [ds.select_columns(columns) for ds in datasets]
    parts = [parts[0]] + [p.cast(parts[0].features) if p.features != parts[0].features else p for p in parts[1:]]
    return concatenate_datasets(parts)


def encode(ds, vocab: Vocab, max_len: int | None = None, tokenizer: Callable[[str], list[str]] = tokenize, num_proc: int | None = None):
    """Add ``premise_ids`` / ``hypothesis_ids`` (lists of int) with a batched `Dataset.map`.

    max_len truncates each sentence to its first max_len tokens. A sentence with no tokens becomes
    [<unk>] so every sequence has length >= 1 (pooling over an empty sequence is undefined).
    The map is cached next to `ds`'s Arrow files, keyed by ds, vocab, max_len and tokenizer.
    """
    from datasets import Sequence as HFSequence
    from datasets import Value
    from datasets.fingerprint import Hasher

    def ids(texts: list[str]) -> list[list[int]]:
        out = []
        for t in texts:
            toks = tokenizer(t)
            if max_len is not None:
                toks = toks[:max_len]
            out.append(vocab.lookup(toks) or [UNK])
        return out

    def fn(batch: dict) -> dict:
        return {"premise_ids": ids(batch["premise"]), "hypothesis_ids": ids(batch["hypothesis"])}

    features = ds.features.copy()
    features["premise_ids"] = HFSequence(Value("int32"))
    features["hypothesis_ids"] = HFSequence(Value("int32"))
    fp = Hasher.hash(
        (
            ds._fingerprint,
            "nli-encode-v1",
            vocab.fingerprint(),
            max_len,
            getattr(tokenizer, "__module__", ""),
            getattr(tokenizer, "__qualname__", repr(tokenizer)),
        )
    )
    return ds.map(fn, batched=True, features=features, new_fingerprint=fp, num_proc=num_proc, desc="encode")


def collate(batch) -> dict:
    """Right-padded tensors from encoded rows (a list of row dicts, or a dict of columns).

    Returns premise [B, Tp] long, premise_mask [B, Tp] bool (True = real token),
    hypothesis [B, Th], hypothesis_mask [B, Th], label [B] long. Padding id is 0 (`<pad>`).
    """
    import torch

    if isinstance(batch, dict):
        columns = batch
    else:
        columns = {k: [row[k] for row in batch] for k in ("premise_ids", "hypothesis_ids", "label")}

    def pad(seqs) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = [s.tolist() if hasattr(s, "tolist") else list(s) for s in seqs]
        width = max(1, max((len(s) for s in seqs), default=1))
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        mask = torch.zeros(len(seqs), width, dtype=torch.bool)
        for i, s in enumerate(seqs):
            if s:
                ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
                mask[i, : len(s)] = True
        return ids, mask

    premise, premise_mask = pad(columns["premise_ids"])
    hypothesis, hypothesis_mask = pad(columns["hypothesis_ids"])
    label = torch.as_tensor([int(y) for y in columns["label"]], dtype=torch.long)
    return {"premise": premise, "premise_mask": premise_mask, "hypothesis": hypothesis, "hypothesis_mask": hypothesis_mask, "label": label}


# ---------------------------------------------------------------------------------------------
# Pretrained word vectors
# ---------------------------------------------------------------------------------------------


def load_word_vectors(path: str | Path, vocab: Vocab, dim: int | None = None, seed: int = 0):
    """Embedding matrix [len(vocab), dim] from a GloVe/fastText text file, and the hit count.

    Returns (matrix: torch.FloatTensor, hits: int). Format: one ``word v1 ... vdim`` per line
    (GloVe); a first line of exactly two integers ``count dim`` (fastText .vec) is a header and is
    skipped. ``.gz`` files are read compressed. The vector is the last `dim` fields, so words with
    spaces (GloVe 840B) still parse. A word matches exactly, else by its lower-case form (the
    first vector seen for a vocab entry wins). Rows for words not in the file are N(0, σ²) with σ the
    std of the vectors found (1 if none), seeded by `seed`; the `<pad>` row is zero.
    dim: expected dimension; default the header's, else the first line's.

    Every line's field count is checked (wrong count → DataError file:line); numbers are parsed
    only for vocab words (a 5 GB file is mostly words we do not need), and a bad number there is
    a DataError too. No library in the stack reads these text formats (torchtext is retired),
    hence this small reader.
    """
    import numpy as np
    import torch

    p = require_file(
        path,
        "word vectors",
        "download GloVe (https://nlp.stanford.edu/projects/glove/) or fastText .vec (https://fasttext.cc/docs/en/english-vectors.html)",
    )
    rows, dim = _scan_vectors(p, vocab.stoi, dim, skip={PAD})
    if dim is None:
        raise DataError(f"{p}: no vectors in file")
    found = np.stack(list(rows.values())) if rows else np.zeros((0, dim), np.float32)
    std = float(found.std()) if found.size > 1 else 1.0
    std = std if std > 0 and math.isfinite(std) else 1.0
    gen = torch.Generator().manual_seed(seed)
    matrix = torch.randn(len(vocab), dim, generator=gen) * std
    if rows:
        idx = torch.as_tensor(list(rows.keys()), dtype=torch.long)
        matrix[idx] = torch.from_numpy(found)
    matrix[PAD] = 0.0
    return matrix, len(rows)


def _scan_vectors(p: Path, stoi: dict[str, int], dim: int | None, skip: set[int] = frozenset()):
    """One pass over a GloVe/fastText text file: {index in stoi: vector} for the words of `stoi`
    (exact match first, else the lower-case form), and the dimension. See load_word_vectors."""
    opener = gzip.open if p.name.endswith(".gz") else open
    rows: dict = {}  # index → numpy vector
    exact: set[int] = set()
    with opener(p, "rt", encoding="utf-8", errors="strict", newline="\n") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, start=1):
                line = line.rstrip("\n").rstrip("\r").rstrip(" ")
                if not line:
                    continue
                if lineno == 1:
                    dim, header = _first_vector_line(p, line, dim)
                    if header:
                        continue
                parts = line.rsplit(" ", dim)
                if len(parts) != dim + 1 or not parts[0]:
                    raise DataError(f"{where(p, lineno)}: expected a word and {dim} numbers, got {len(parts) - 1 if parts[0] else len(parts)} fields")
                word = parts[0]
                idx = stoi.get(word)
                is_exact = idx is not None
                if idx is None:
                    idx = stoi.get(word.lower())
                if idx is None or idx in skip or idx in exact or (not is_exact and idx in rows):
                    continue
                rows[idx] = _vector(p, lineno, word, parts[1:])
                if is_exact:
                    exact.add(idx)
        except UnicodeDecodeError as exc:
            raise DataError(f"{where(p, lineno + 1)}: not UTF-8 ({exc.reason})") from None
    return rows, dim


def _first_vector_line(p: Path, line: str, dim: int | None) -> tuple[int, bool]:
    """(dimension, whether the line is fastText's `count dim` header) from a vector file's first
    line: a header's dimension must be `dim` when one is expected; without a header, the first
    vector's length is the dimension."""
    head = line.split()
    if len(head) == 2 and head[0].isdigit() and head[1].isdigit():
        if dim is not None and dim != int(head[1]):
            raise DataError(f"{where(p, 1)}: header says dim {int(head[1])}, expected {dim}")
        return int(head[1]), True
    if dim is None:
        dim = len(head) - 1
        if dim < 1:
            raise DataError(f"{where(p, 1)}: expected 'word v1 ... vd', got {line[:80]!r}")
    return dim, False


def _vector(p: Path, lineno: int, word: str, values: list[str]):
    """A kept word's vector (float32), every value a finite number."""
    import numpy as np

    try:
        vec = np.asarray(values, dtype=np.float32)
    except ValueError as exc:
        raise DataError(f"{where(p, lineno)}: not a number in the vector of {word!r} ({exc})") from None
    if not np.all(np.isfinite(vec)):
        raise DataError(f"{where(p, lineno)}: non-finite value in the vector of {word!r}")
    return vec


def vectors_for_words(path: str | Path, words: Sequence[str], dim: int | None = None) -> dict:
    """{word: vector} for the `words` the file has (same matching and checks as load_word_vectors);
    words it lacks are left out. For growing a vocabulary after training (SentEval, InferSent's way)."""
    p = require_file(path, "word vectors", "the run's `vectors` file")
    words = list(dict.fromkeys(words))
    rows, _ = _scan_vectors(p, {w: i for i, w in enumerate(words)}, dim)
    return {words[i]: vec for i, vec in rows.items()}


def default_dir(source: str, root: str | Path) -> Path:
    """Where `source` lives under a data root (the first of its usual folder names that exists)."""
    if source not in SOURCES:
        raise DataError(f"unknown NLI source {source!r}; expected one of {', '.join(SOURCES)}")
    return dataset_dir(source, None, _DEFAULT_DIRS[source], _HOW[source], root=root)
