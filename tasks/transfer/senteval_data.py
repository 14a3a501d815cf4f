"""SentEval transfer-task loaders for the `data/downstream` layout (facebookresearch/SentEval).

Each loader returns a `TaskData`: per split the sentences as token lists (SentEval's
``str.split()`` of the already tokenised files; SICK and MRPC are split on whitespace as
SentEval does) and the labels/scores as a numpy array. Pair tasks also carry the second
sentence. Quirks handled as SentEval handles them:

- MR/CR/SUBJ/MPQA/TREC are read as latin-1 (TREC train has one latin-1 byte).
- MRPC starts with a UTF-8 BOM and a header line; SICK has a header line.
- SST binary is ``sentence <TAB>label``, SST fine is ``label sentence``.
- STS12–16 gold files have empty lines for unscored pairs: those pairs are dropped (SentEval:
  ``gs != ''``). STS13 has no SMT input here (licence), SentEval uses FNWN, headlines, OnWN.

    load_task(name, task_path) -> TaskData          one of TASKS
    TaskData.splits: split -> Split(a, b, y)        b is None for single-sentence tasks

Split names: ``all`` for the cross-validated MR/CR/SUBJ/MPQA; ``train``/``test`` for TREC and
MRPC; ``train``/``dev``/``test`` for SST2/SST5/SICK*/STSBenchmark; one split per sub-dataset for
STS12–16 (e.g. ``MSRpar``). Malformed lines raise DataError with file:line; missing files
raise DataError naming the path and how to get the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError, where
from ..paths import data_root, require_dir, require_file
from .meta import SENTEVAL_TASKS

HOW = (
    "run SentEval's data/downstream/get_transfer_data.bash (https://github.com/facebookresearch/SentEval) "
    "and point task_path (or $TPRBENCH_DATA/senteval) at data/downstream"
)

BINARY_FILES = {
    # task: (folder, positive file (label 1), negative file (label 0)) — SentEval's convention.
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
TREC_LABELS = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}
SICK_LABELS = {"ENTAILMENT": 0, "NEUTRAL": 1, "CONTRADICTION": 2}
STS_DATASETS = {
    "STS12": ("STS12-en-test", ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews")),
    "STS13": ("STS13-en-test", ("FNWN", "headlines", "OnWN")),
    "STS14": ("STS14-en-test", ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news")),
    "STS15": ("STS15-en-test", ("answers-forums", "answers-students", "belief", "headlines", "images")),
    "STS16": ("STS16-en-test", ("answer-answer", "headlines", "plagiarism", "postediting", "question-question")),
}
TASKS = SENTEVAL_TASKS  # every task SentEval's protocol here runs (declared with the task's options)


@dataclass
class Split:
    """Sentences (token lists) a, optional second sentences b, labels or gold scores y."""

    a: list[list[str]]
    b: list[list[str]] | None
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.a)


@dataclass
class TaskData:
    name: str
    splits: dict[str, Split]
    nclasses: int | None = None  # classification tasks; None for similarity/relatedness

    def __getitem__(self, split: str) -> Split:
        return self.splits[split]

    def sizes(self) -> dict[str, int]:
        return {s: len(v) for s, v in self.splits.items()}


def resolve_task_path(task_path: str | Path | None) -> Path:
    """`task_path`, else ``$TPRBENCH_DATA/senteval``; DataError when neither exists."""
    if task_path is None:
        root = data_root()
        if root is None:
            raise DataError(f"SentEval: no task_path given and TPRBENCH_DATA is not set; {HOW}")
        task_path = root / "senteval"
    return require_dir(task_path, "SentEval task_path", HOW)


def load_task(name: str, task_path: str | Path | None = None) -> TaskData:
    """Load one SentEval task (a name from TASKS) from the data/downstream layout."""
    base = resolve_task_path(task_path)
    if name in BINARY_FILES:
        return load_binary(name, base)
    if name in STS_DATASETS:
        return load_sts(name, base)
    loaders = {
        "SST2": lambda: load_sst(base, fine=False),
        "SST5": lambda: load_sst(base, fine=True),
        "TREC": lambda: load_trec(base),
        "MRPC": lambda: load_mrpc(base),
        "SICKEntailment": lambda: load_sick(base, relatedness=False),
        "SICKRelatedness": lambda: load_sick(base, relatedness=True),
        "STSBenchmark": lambda: load_stsb(base),
    }
    if name not in loaders:
        raise DataError(f"unknown SentEval task {name!r}; known: {', '.join(TASKS)}")
    return loaders[name]()


def _file(base: Path, *parts: str) -> Path:
    return require_file(base.joinpath(*parts), "SentEval", HOW)


def _read_lines(path: Path, encoding: str) -> list[str]:
    # SentEval: io.open(..., encoding=...).read().splitlines(); errors name the file.
    try:
        return path.read_text(encoding=encoding).splitlines()
    except UnicodeDecodeError as exc:
        raw = path.read_bytes()
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{where(path, line)}: not {encoding} text ({exc.reason})") from None


def load_binary(name: str, base: Path) -> TaskData:
    """MR, CR, SUBJ, MPQA: one sentence per line, the label is the file (pos=1, neg=0)."""
    folder, pos, neg = BINARY_FILES[name]
    pos_lines = _read_lines(_file(base, folder, pos), "latin-1")
    neg_lines = _read_lines(_file(base, folder, neg), "latin-1")
    a = [line.split() for line in pos_lines] + [line.split() for line in neg_lines]
    y = np.array([1] * len(pos_lines) + [0] * len(neg_lines), dtype=np.int64)
    return TaskData(name, {"all": Split(a, None, y)}, nclasses=2)


def load_trec(base: Path) -> TaskData:
    """TREC: ``COARSE:fine question`` lines; the coarse label (6 classes), latin-1."""
    splits = {}
    for split, fname in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = _file(base, "TREC", fname)
        a, y = [], []
        for i, line in enumerate(_read_lines(path, "latin-1"), start=1):
            line = line.strip()
            if not line:
                continue
            target, sep, rest = line.partition(":")
            words = rest.split(" ", 1)
            if not sep or target not in TREC_LABELS or len(words) < 2:
                raise DataError(f"{where(path, i)}: expected 'COARSE:fine question' with COARSE in {', '.join(TREC_LABELS)}; got {line[:60]!r}")
            a.append(words[1].split())
            y.append(TREC_LABELS[target])
        splits[split] = Split(a, None, np.array(y, dtype=np.int64))
    return TaskData("TREC", splits, nclasses=6)


def load_sst(base: Path, fine: bool) -> TaskData:
    """SST2 (``sentence <TAB>label``) or SST5 (``label sentence``), train/dev/test."""
    folder, name, ncls = ("fine", "SST5", 5) if fine else ("binary", "SST2", 2)
    splits = {}
    for split in ("train", "dev", "test"):
        path = _file(base, "SST", folder, f"sentiment-{split}")
        a, y = [], []
        for i, line in enumerate(_read_lines(path, "utf-8"), start=1):
            line = line.strip()
            if not line:
                continue
            if fine:
                label, _, text = line.partition(" ")
            else:
                text, _, label = line.rpartition("\t")
            if not label.isdigit() or int(label) >= ncls or not text.strip():
                form = "'label sentence'" if fine else "'sentence<TAB>label'"
                raise DataError(f"{where(path, i)}: expected {form} with label 0..{ncls - 1}; got {line[:60]!r}")
            a.append(text.split())
            y.append(int(label))
        splits[split] = Split(a, None, np.array(y, dtype=np.int64))
    return TaskData(name, splits, nclasses=ncls)


def _tsv_rows(path: Path, encoding: str, min_fields: int, header: bool):
    for i, line in enumerate(_read_lines(path, encoding), start=1):
        if header and i == 1:
            continue
        if not line.strip():
            continue
        fields = line.strip().split("\t")
        if len(fields) < min_fields:
            raise DataError(f"{where(path, i)}: expected {min_fields} tab-separated fields, got {len(fields)}")
        yield i, fields


def load_mrpc(base: Path) -> TaskData:
    """MRPC: TSV with BOM + header ``Quality, #1 ID, #2 ID, #1 String, #2 String``; train/test."""
    splits = {}
    for split in ("train", "test"):
        path = _file(base, "MRPC", f"msr_paraphrase_{split}.txt")
        a, b, y = [], [], []
        for i, f in _tsv_rows(path, "utf-8-sig", 5, header=True):
            if f[0] not in ("0", "1"):
                raise DataError(f"{where(path, i)}: quality must be 0 or 1, got {f[0]!r}")
            a.append(f[3].split())
            b.append(f[4].split())
            y.append(int(f[0]))
        splits[split] = Split(a, b, np.array(y, dtype=np.int64))
    return TaskData("MRPC", splits, nclasses=2)


def load_sick(base: Path, relatedness: bool) -> TaskData:
    """SICK train/trial(=dev)/test_annotated: entailment label (3 classes) or relatedness score 1–5."""
    splits = {}
    for split, fname in (("train", "SICK_train.txt"), ("dev", "SICK_trial.txt"), ("test", "SICK_test_annotated.txt")):
        path = _file(base, "SICK", fname)
        a, b, y = [], [], []
        for i, f in _tsv_rows(path, "utf-8", 5, header=True):
            a.append(f[1].split())
            b.append(f[2].split())
            if relatedness:
                try:
                    y.append(float(f[3]))
                except ValueError:
                    raise DataError(f"{where(path, i)}: relatedness score {f[3]!r} is not a number") from None
            else:
                if f[4] not in SICK_LABELS:
                    raise DataError(f"{where(path, i)}: entailment label {f[4]!r} not in {', '.join(SICK_LABELS)}")
                y.append(SICK_LABELS[f[4]])
        splits[split] = Split(a, b, np.array(y, dtype=np.float64 if relatedness else np.int64))
    if relatedness:
        return TaskData("SICKRelatedness", splits)
    return TaskData("SICKEntailment", splits, nclasses=3)


def load_stsb(base: Path) -> TaskData:
    """STS Benchmark (SentEval-processed): ``genre source year id score s1 s2``; train/dev/test, scores 0–5."""
    splits = {}
    for split in ("train", "dev", "test"):
        path = _file(base, "STS", "STSBenchmark", f"sts-{split}.csv")
        a, b, y = [], [], []
        for i, f in _tsv_rows(path, "utf-8", 7, header=False):
            try:
                y.append(float(f[4]))
            except ValueError:
                raise DataError(f"{where(path, i)}: score {f[4]!r} is not a number") from None
            a.append(f[5].split())
            b.append(f[6].split())
        splits[split] = Split(a, b, np.array(y, dtype=np.float64))
    return TaskData("STSBenchmark", splits)


def load_sts(name: str, base: Path) -> TaskData:
    """STS12–16: per sub-dataset ``STS.input.X.txt`` (s1<TAB>s2) aligned with ``STS.gs.X.txt``.

    Pairs whose gold line is empty are dropped; every other gold line must be a number.
    """
    folder, datasets = STS_DATASETS[name]
    splits = {}
    for ds in datasets:
        inp = _file(base, "STS", folder, f"STS.input.{ds}.txt")
        gs = _file(base, "STS", folder, f"STS.gs.{ds}.txt")
        pairs = _read_lines(inp, "utf-8")
        gold = _read_lines(gs, "utf-8")
        if len(pairs) != len(gold):
            raise DataError(f"{gs}: {len(gold)} lines but {inp.name} has {len(pairs)}; they must be line-aligned")
        a, b, y = [], [], []
        for i, (pair, score) in enumerate(zip(pairs, gold), start=1):
            if score.strip() == "":
                continue
            fields = pair.split("\t")
            if len(fields) != 2:
                raise DataError(f"{where(inp, i)}: expected 'sentence1<TAB>sentence2', got {len(fields)} fields")
            try:
                y.append(float(score))
            except ValueError:
                raise DataError(f"{where(gs, i)}: gold score {score!r} is not a number") from None
            a.append(fields[0].split())
            b.append(fields[1].split())
        splits[ds] = Split(a, b, np.array(y, dtype=np.float64))
    return TaskData(name, splits)
