"""bAbI QA tasks 1–20 (Weston et al. 2015, v1.2), read as the TPR-RNN authors read them.

Public API (the babi adapter builds on these names):

    parse_tasks("1-20" | "1,2" | "1-3,7") -> (1, 2, ...)
    tokenize(text) -> list[str]
    read_stories(path) -> list[Story]
    load_babi(tasks="1-20", size="10k", data_dir=None, valid_fraction=0.1, max_story=None,
              fallback_1k=False, cache_dir=None) -> BabiData
    BabiSplit.batch(index) -> {"stories" [n,S,L], "lengths" [n], "question" [n,L], "answer" [n], "task" [n]}

As the authors' preprocessor/reader.py (itself from siddk/entity-network) reads them:
text is lowercased and split on ``\\W+`` keeping the punctuation runs as tokens ("Where is Mary?"
→ where, is, mary, ?); every question is one example whose story is all statements of its story
before it (questions are not statements), the last 70 kept (130 for qa3; ``max_story`` overrides);
the answer is one symbol, lists such as ``n,w`` included; the vocabulary (PAD = id 0, then the words
sorted) comes from the training examples only. Words of valid/test not in it (e.g. the 1k qa8 test
answer ``football,apple,milk``) become PAD and are counted in ``BabiData.oov``: the model cannot
name a symbol it never saw, so such an answer always counts as an error.

No official validation split is in ../shared/data (the authors trained on en-valid-10k, which is
not here): ``valid`` is the last ``valid_fraction`` of the *stories* of each task's train file.
The 10k qa3 train file is absent there ($TPRBENCH_DATA/babi/PROVENANCE.md); ``fallback_1k=True``
trains such a task on its 1k file and records it in ``BabiData.fallbacks``; without it the load
fails naming the file.

Storage is compact: every statement once ([M, L] ids), each example a window (start, length)
into them, so 20 tasks × 10k examples with up to 130 sentences cost ~25 MB rather than the
gigabytes of dense [N, 130, 12] stories; `batch` pads stories to the longest in the batch.
With a ``cache_dir`` the tensors are saved (torch.save, keyed by the files' size/mtime and the
options) and reload in well under a second.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import DataError, TaskError, where
from ..paths import dataset_dir
from .meta import TASK_IDS, parse_tasks

SIZES = {"10k": "en-10k", "1k": "en"}
PAD_TOKEN = "<pad>"
PAD_ID = 0
DEFAULT_MAX_STORY = 70
LONG_STORY_TASKS = {3: 130}  # reader.py: task 3 keeps 130 sentences
_CACHE_VERSION = 1
_SPLIT_RE = re.compile(r"(\W+)")
_HOW = (
    "put the bAbI v1.2 tasks there (folders en/ and en-10k/ with qa{N}_*_{train,test}.txt, "
    "https://research.facebook.com/downloads/babi/), or pass data_dir=<folder holding en/ and en-10k/>"
)


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------
#: What a bAbI data folder holds (its en/ and en-10k/ task files): the data path is checked for them.
LAYOUT = ("en/qa*_*_train.txt", "en-10k/qa*_*_train.txt")


def story_window(task: int, max_story: int | None) -> int:
    """How many of the latest statements an example of `task` keeps (reader.py: 70, qa3 130)."""
    return max_story if max_story is not None else LONG_STORY_TASKS.get(task, DEFAULT_MAX_STORY)


# ---------------------------------------------------------------------------------------------
# Reading one file
# ---------------------------------------------------------------------------------------------
def tokenize(text: str) -> list[str]:
    """reader.py `tokenize`: split on runs of non-word characters, keep them, strip, lowercase, drop empties.

    reader.py writes the pattern `(\\W+)?`; under Python ≥ 3.7 re.split would then split at every
    empty match (single letters), so the authors' behaviour (Python 3.6) is `(\\W+)`."""
    return [t.strip().lower() for t in _SPLIT_RE.split(text) if t.strip()]


@dataclass
class Story:
    """One story: its statements (token lists) in order, and its questions as
    (question tokens, answer, number of statements before the question, line number)."""

    statements: list[list[str]] = field(default_factory=list)
    questions: list[tuple[list[str], str, int, int]] = field(default_factory=list)


def read_stories(path: str | Path) -> list[Story]:
    """Stories of one bAbI file. A story starts at every line whose id is 1; question lines carry
    `question<TAB>answer<TAB>supporting ids`. Malformed lines raise DataError with file:line."""
    path = Path(path)
    stories: list[Story] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        nid, _, text = line.partition(" ")
        if not nid.isdigit() or not text:
            raise DataError(f"{where(path, lineno)}: expected '<id> <text>', got {raw[:60]!r}")
        if int(nid) == 1 or not stories:
            if int(nid) != 1:
                raise DataError(f"{where(path, lineno)}: the first story must start at id 1, got {nid}")
            stories.append(Story())
        story = stories[-1]
        if "\t" in text:
            fields = text.split("\t")
            if len(fields) != 3 or not fields[1].strip():
                raise DataError(f"{where(path, lineno)}: a question line needs question<TAB>answer<TAB>supporting ids, got {len(fields)} field(s)")
            question = tokenize(fields[0])
            if not question:
                raise DataError(f"{where(path, lineno)}: empty question")
            story.questions.append((question, fields[1].strip().lower(), len(story.statements), lineno))
        else:
            statement = tokenize(text)
            if not statement:
                raise DataError(f"{where(path, lineno)}: empty statement")
            story.statements.append(statement)
    return stories


# ---------------------------------------------------------------------------------------------
# Tensors
# ---------------------------------------------------------------------------------------------
@dataclass
class BabiSplit:
    """Examples of one split. Statements are stored once; example i's story is the window
    sentences[start[i] : start[i] + length[i]] (at most the task's `max_story` latest statements)."""

    sentences: torch.Tensor  # [M, L] int32 word ids, PAD-filled
    start: torch.Tensor  # [N] int64
    length: torch.Tensor  # [N] int64 (0 ≤ length ≤ window)
    question: torch.Tensor  # [N, L] int32
    answer: torch.Tensor  # [N] int64
    task: torch.Tensor  # [N] int64, 1..20

    def __len__(self) -> int:
        return int(self.answer.shape[0])

    @property
    def max_length(self) -> int:
        """The longest story (in sentences) of the split."""
        return int(self.length.max().item()) if len(self) else 0

    def select(self, index: torch.Tensor) -> BabiSplit:
        """The examples at `index` (indices or a boolean mask), sharing the statement table."""
        return BabiSplit(self.sentences, self.start[index], self.length[index], self.question[index], self.answer[index], self.task[index])

    def only_task(self, task: int) -> BabiSplit:
        return self.select(self.task == task)

    def batch(self, index: torch.Tensor | None = None, pad_to: int | None = None) -> dict[str, torch.Tensor]:
        """Padded tensors for the examples at `index` (all when None): stories [n, S, L] (S = the
        longest story among them, or `pad_to`; sentences past a story's length are all PAD),
        lengths [n], question [n, L], answer [n], task [n] — ids as int64."""
        part = self if index is None else self.select(index)
        longest = part.max_length
        steps = max(longest, 1) if pad_to is None else pad_to
        if steps < longest:
            raise ValueError(f"pad_to={pad_to} is shorter than the longest story ({longest} sentences)")
        offsets = torch.arange(steps)
        real = offsets.unsqueeze(0) < part.length.unsqueeze(1)  # [n, S]
        rows = torch.where(real, part.start.unsqueeze(1) + offsets, torch.zeros((), dtype=torch.long))
        stories = self.sentences[rows].long() * real.unsqueeze(-1)
        return {
            "stories": stories,
            "lengths": part.length.clone(),
            "question": part.question.long(),
            "answer": part.answer.clone(),
            "task": part.task.clone(),
        }

    def stories(self, pad_to: int | None = None) -> torch.Tensor:
        """All stories as one dense [N, S, L] tensor (S = the longest story, or `pad_to`)."""
        return self.batch(None, pad_to)["stories"]

    def to_dict(self) -> dict[str, torch.Tensor]:
        return {k: getattr(self, k) for k in ("sentences", "start", "length", "question", "answer", "task")}


@dataclass
class BabiData:
    """What `load_babi` returns.

    splits: "train", "valid" (when valid_fraction > 0) and one test split "qa{N}" per task.
    vocab: id → token (0 = PAD); max_words: L, the word slots of every sentence and question (the
    longest sentence or question over all loaded files, as reader.py's global sentence max).
    windows: task → statements kept per story. files: "qa{N}:train|test" → the file read.
    fallbacks: task → the 1k train file used because the 10k one is missing (fallback_1k=True).
    file_counts: "qa{N}:train|test" → (stories, questions) of the whole file, before the valid carve.
    oov: split → tokens (answers included) not in the vocabulary, read as PAD.
    truncated: split → examples whose story was longer than the window (cut to its latest statements).
    """

    tasks: tuple[int, ...]
    size: str
    valid_fraction: float
    vocab: list[str]
    splits: dict[str, BabiSplit]
    max_words: int
    windows: dict[int, int]
    files: dict[str, str]
    fallbacks: dict[int, str]
    file_counts: dict[str, tuple[int, int]]
    oov: dict[str, int]
    truncated: dict[str, int]

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def word2id(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.vocab)}

    @property
    def test_splits(self) -> list[str]:
        return [f"qa{t}" for t in self.tasks]

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """Token ids → text, PAD dropped (for showing examples)."""
        values = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return " ".join(self.vocab[i] for i in values if i != PAD_ID)

    def __getitem__(self, split: str) -> BabiSplit:
        try:
            return self.splits[split]
        except KeyError:
            raise KeyError(f"bAbI has no split {split!r} here (have: {', '.join(self.splits)})") from None


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------
def load_babi(
    tasks: str | int | list | tuple = "1-20",
    size: str = "10k",
    data_dir: str | Path | None = None,
    valid_fraction: float = 0.1,
    max_story: int | None = None,
    fallback_1k: bool = False,
    cache_dir: str | Path | None = None,
) -> BabiData:
    """Load bAbI tasks as tensors (see the module docstring for the reading rules).

    tasks: ids 1..20 ("1-20", "1,2", 3, [1, 2]); several tasks share one vocabulary (all-task model).
    size: "10k" (en-10k/) or "1k" (en/). data_dir: the folder holding en/ and en-10k/
        (default $TPRBENCH_DATA/babi).
    valid_fraction: the last fraction of each task's train *stories* becomes "valid" (0 = none).
    max_story: statements kept per example (None: 70, and 130 for qa3, as the authors).
    fallback_1k: train a task whose 10k train file is missing (qa3 here) on its 1k file; recorded
        in `fallbacks`. Off by default: the load then fails naming the missing file.
    cache_dir: save/reload the tensors there; None parses every time.
    """
    ids = parse_tasks(tasks)
    if size not in SIZES:
        raise TaskError(f"babi size {size!r}: choose one of {', '.join(SIZES)}")
    if not 0 <= valid_fraction < 1:
        raise TaskError(f"babi valid_fraction={valid_fraction}: must be in [0, 1) (a fraction of each task's train stories)")
    if max_story is not None and max_story < 1:
        raise TaskError(f"babi max_story={max_story}: must be >= 1")
    base = dataset_dir("bAbI", data_dir, ("babi",), _HOW)
    files, fallbacks = _find_files(base, ids, size, fallback_1k)
    options = {
        "v": _CACHE_VERSION,
        "tasks": ids,
        "size": size,
        "valid_fraction": valid_fraction,
        "max_story": max_story,
        "fallbacks": sorted(fallbacks),
    }
    cache_file = None
    if cache_dir is not None:
        key = _key(files, options)
        cache_file = Path(cache_dir).expanduser() / f"babi-{size}-{_tasks_name(ids)}-{key}.pt"
        if cache_file.is_file():
            try:
                return _from_saved(torch.load(cache_file, weights_only=True), files)
            except Exception:  # a torn or foreign cache file: rebuild it
                pass
    saved = _build(ids, size, files, fallbacks, valid_fraction, max_story)
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(".tmp")
        torch.save(saved, tmp)
        tmp.replace(cache_file)
    return _from_saved(saved, files)


def _find_files(base: Path, ids: tuple[int, ...], size: str, fallback_1k: bool) -> tuple[dict[str, Path], dict[int, str]]:
    folder = base / SIZES[size]
    files: dict[str, Path] = {}
    fallbacks: dict[int, str] = {}
    for task in ids:
        for split in ("train", "test"):
            found = sorted(folder.glob(f"qa{task}_*_{split}.txt"))
            if not found and split == "train" and size == "10k":
                small = sorted((base / SIZES["1k"]).glob(f"qa{task}_*_{split}.txt"))
                if fallback_1k and small:
                    found = small
                    fallbacks[task] = str(small[0])
                elif small:
                    known = " (../shared/data lacks the 10k qa3 train file, see ../shared/data/babi/PROVENANCE.md)" if task == 3 else ""
                    raise DataError(
                        f"bAbI qa{task} 10k train: no file {folder}/qa{task}_*_train.txt{known}; pass "
                        f"fallback_1k=True to train qa{task} on the 1k file {small[0]} (marked in the "
                        "results), or use size=1k"
                    )
            if not found:
                raise DataError(f"bAbI qa{task} {split} ({size}): no file {folder}/qa{task}_*_{split}.txt; {_HOW}")
            if len(found) > 1:
                raise DataError(f"bAbI qa{task} {split} ({size}): several files match in {folder}: {', '.join(p.name for p in found)}")
            files[f"qa{task}:{split}"] = found[0]
    return files, fallbacks


def _key(files: dict[str, Path], options: dict) -> str:
    stamp = {k: [str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for k, p in sorted(files.items())}
    blob = json.dumps({"files": stamp, "options": options}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def _tasks_name(ids: tuple[int, ...]) -> str:
    return "all" if ids == tuple(TASK_IDS) else "-".join(map(str, ids)) if len(ids) <= 4 else f"{len(ids)}tasks"


def _build(ids, size, files, fallbacks, valid_fraction, max_story) -> dict:
    """Parse, carve valid, build the vocabulary from train, encode: the dict that is cached."""
    parsed: dict[str, list[tuple[int, list[Story]]]] = {"train": [], "valid": []}
    file_counts: dict[str, tuple[int, int]] = {}
    for task in ids:
        train = read_stories(files[f"qa{task}:train"])
        test = read_stories(files[f"qa{task}:test"])
        for split, stories in (("train", train), ("test", test)):
            file_counts[f"qa{task}:{split}"] = (len(stories), sum(len(s.questions) for s in stories))
        n_valid = _valid_stories(len(train), valid_fraction, files[f"qa{task}:train"])
        parsed["train"].append((task, train[: len(train) - n_valid]))
        if valid_fraction > 0:
            parsed["valid"].append((task, train[len(train) - n_valid :]))
        parsed[f"qa{task}"] = [(task, test)]
    if valid_fraction == 0:
        del parsed["valid"]

    words: set[str] = set()
    for _, stories in parsed["train"]:
        for story in stories:
            for statement in story.statements:
                words.update(statement)
            for question, answer, _, _ in story.questions:
                words.update(question)
                words.add(answer)
    vocab = [PAD_TOKEN] + sorted(words)
    word2id = {w: i for i, w in enumerate(vocab)}
    max_words = max(
        len(sentence)
        for task_stories in parsed.values()
        for _, stories in task_stories
        for story in stories
        for sentence in story.statements + [q for q, _, _, _ in story.questions]
    )
    windows = {task: story_window(task, max_story) for task in ids}

    splits, oov, truncated = {}, {}, {}
    for split, task_stories in parsed.items():
        splits[split], oov[split], truncated[split] = _encode(task_stories, word2id, max_words, windows)
    return {
        "tasks": list(ids),
        "size": size,
        "valid_fraction": valid_fraction,
        "vocab": vocab,
        "splits": splits,
        "max_words": max_words,
        "windows": windows,
        "fallbacks": fallbacks,
        "file_counts": file_counts,
        "oov": oov,
        "truncated": truncated,
    }


def _valid_stories(n: int, fraction: float, path: Path) -> int:
    if fraction == 0:
        return 0
    count = int(fraction * n + 0.5)  # round half up; a task this small may get no valid story
    if count >= n:
        raise DataError(f"{path}: valid_fraction={fraction} of its {n} stories leaves no training story")
    return count


def _encode(task_stories, word2id: dict[str, int], width: int, windows: dict[int, int]):
    """One split's stories → the BabiSplit tensors (as a dict), its OOV count and truncations."""
    sentences: list[list[int]] = []
    start, length, questions, answers, tasks = [], [], [], [], []
    oov = truncated = 0

    def encode(tokens: list[str]) -> list[int]:
        nonlocal oov
        row = [word2id.get(w, -1) for w in tokens]
        missing = row.count(-1)
        if missing:
            oov += missing
            row = [max(i, PAD_ID) for i in row]
        return row + [PAD_ID] * (width - len(row))

    for task, stories in task_stories:
        window = windows[task]
        for story in stories:
            offset = len(sentences)
            sentences.extend(encode(s) for s in story.statements)
            for question, answer, before, _ in story.questions:
                kept = min(before, window)
                truncated += before > window
                start.append(offset + before - kept)
                length.append(kept)
                questions.append(encode(question))
                answers.append(encode([answer])[0])
                tasks.append(task)
    as_tensor = {
        "sentences": torch.tensor(sentences, dtype=torch.int32).view(-1, width),
        "start": torch.tensor(start, dtype=torch.long),
        "length": torch.tensor(length, dtype=torch.long),
        "question": torch.tensor(questions, dtype=torch.int32).view(-1, width),
        "answer": torch.tensor(answers, dtype=torch.long),
        "task": torch.tensor(tasks, dtype=torch.long),
    }
    return as_tensor, oov, truncated


def _from_saved(saved: dict, files: dict[str, Path]) -> BabiData:
    return BabiData(
        tasks=tuple(saved["tasks"]),
        size=saved["size"],
        valid_fraction=saved["valid_fraction"],
        vocab=list(saved["vocab"]),
        splits={k: BabiSplit(**v) for k, v in saved["splits"].items()},
        max_words=int(saved["max_words"]),
        windows={int(k): int(v) for k, v in saved["windows"].items()},
        files={k: str(p) for k, p in files.items()},
        fallbacks={int(k): v for k, v in saved["fallbacks"].items()},
        file_counts={k: tuple(v) for k, v in saved["file_counts"].items()},
        oov=dict(saved["oov"]),
        truncated=dict(saved["truncated"]),
    )
