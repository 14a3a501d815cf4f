"""Reading the DeepMind logical-entailment files, the character vocabulary, SVP and batching.

File format: one pair per line, `A,B,E,H1,H2,H3` (formulas A and B, label E = [A ⊧ B],
heuristic columns H1-H3, see README.original.md). A missing final newline is fine; any
malformed line is a `DataError` naming `file:line` and what is wrong.

Vocabulary (fixed, character level; `VOCAB_SIZE` = 33):

    id 0        <pad>
    ids 1..26   the variables a..z  (a=1, b=2, ..., z=26)
    id 27       ~   (not)
    id 28       &   (and)
    id 29       |   (or)
    id 30       >   (implies)
    id 31       (
    id 32       )

Symbolic Vocabulary Permutation (SVP, Evans et al. 2018): during training the variables of
a pair are renamed by one random permutation of a-z applied to both formulas. Entailment
is invariant under renaming, so the label (and H1-H3) stay as they are.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.errors import DataError, where
from tasks.paths import expect_files

from . import formulas as F

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

SPLITS = ("train", "validate", "test_easy", "test_hard", "test_big", "test_massive", "test_exam")
EVAL_SPLITS = SPLITS[1:]
SPLIT_FILES = tuple(f"{name}.txt" for name in SPLITS)  # what a data folder of the task holds

PAD = 0
SYMBOLS = F.ALPHABET + "~&|>()"
STOI = {c: i + 1 for i, c in enumerate(SYMBOLS)}
ITOS = {i: c for c, i in STOI.items()}
VOCAB_SIZE = len(SYMBOLS) + 1

HOW_TO_GET = (
    "generate one with `tprbench data logic --out DIR`, or point TPRBENCH_DATA at the folder holding logical_entailment/ (the DeepMind files)"
)


@dataclass(frozen=True, slots=True)
class LogicExample:
    """One pair: premise `a`, hypothesis `b` (canonical strings as in the files), `label` = [a ⊧ b].

    `heuristics` holds the file's H1-H3 columns when read from a file (None otherwise).
    """

    a: str
    b: str
    label: int
    heuristics: tuple[int, int, int] | None = None


# ----------------------------------------------------------------------------- files


def _bit(text: str, field: str, path: object, lineno: int) -> int:
    if text == "0":
        return 0
    if text == "1":
        return 1
    raise DataError(f"{where(path, lineno)}: {field} must be 0 or 1, got {text!r}")


def _check_formula(text: str, field: str, path: Path, lineno: int) -> None:
    """DataError naming the file, line, field and the parser's reason when `text` is no formula."""
    if F.is_formula(text):
        return
    try:
        F.parse(text)
        msg = "not a formula"
    except F.FormulaError as exc:
        msg = str(exc)
    raise DataError(f"{where(path, lineno)}: field {field} is not a formula: {msg}")


def read_split(path: str | os.PathLike) -> list[LogicExample]:
    """Every line of one split file as a LogicExample; DataError on anything malformed."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"logical entailment split: file {p} not found; {HOW_TO_GET}")
    try:
        text = p.read_text(encoding="ascii")
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise DataError(f"{where(p, line)}: non-ASCII byte {exc.object[exc.start]:#04x}; a formula uses only a-z ~ & | > ( )") from None
    except OSError as exc:
        raise DataError(f"{p}: cannot read ({exc.strerror})") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()  # blank lines at the very end are tolerated
    out: list[LogicExample] = []
    for lineno, line in enumerate(lines, 1):
        fields = line.split(",")
        if len(fields) != 6:
            raise DataError(f"{where(p, lineno)}: expected 6 comma-separated fields A,B,E,H1,H2,H3, got {len(fields)} in {line[:80]!r}")
        a, b = fields[0], fields[1]
        for name, formula in (("A", a), ("B", b)):
            _check_formula(formula, name, p, lineno)
        label = _bit(fields[2], "label E", p, lineno)
        h = (_bit(fields[3], "H1", p, lineno), _bit(fields[4], "H2", p, lineno), _bit(fields[5], "H3", p, lineno))
        out.append(LogicExample(a, b, label, h))
    if not out:
        raise DataError(f"{p}: no examples in the file; {HOW_TO_GET}")
    return out


def find_splits(directory: str | os.PathLike) -> dict[str, Path]:
    """Split name → path for the DeepMind file names present in `directory` (train is optional).

    `directory` is the dataset folder itself: a data root holding `logical_entailment/` is an
    error that names that folder (`did you mean …/logical_entailment?`), not a silent descent.
    """
    d = expect_files("logical entailment data", directory, SPLIT_FILES, HOW_TO_GET)
    return {name: d / f"{name}.txt" for name in SPLITS if (d / f"{name}.txt").is_file()}


# ----------------------------------------------------------------------------- vocabulary


def encode(formula: str) -> list[int]:
    """Character ids of a formula string (see the table in the module docstring)."""
    try:
        return [STOI[c] for c in formula]
    except KeyError as exc:
        raise ValueError(f"character {exc.args[0]!r} is not in the logic vocabulary ({SYMBOLS!r})") from None


def decode(ids: Sequence[int]) -> str:
    """Inverse of `encode`; padding ids are skipped."""
    return "".join(ITOS[int(i)] for i in ids if int(i) != PAD)


# ----------------------------------------------------------------------------- SVP


def random_permutation(rng: random.Random | np.random.Generator) -> str:
    """A permutation of a-z as a 26-letter string: letter i goes to result[i]."""
    if hasattr(rng, "permutation"):  # numpy Generator / RandomState
        return "".join(F.ALPHABET[int(i)] for i in rng.permutation(26))
    return "".join(rng.sample(F.ALPHABET, 26))


def svp(example: LogicExample, rng: random.Random | np.random.Generator) -> LogicExample:
    """Rename the variables of both formulas by ONE random permutation of a-z (label unchanged)."""
    table = str.maketrans(F.ALPHABET, random_permutation(rng))
    return replace(example, a=example.a.translate(table), b=example.b.translate(table))


# ----------------------------------------------------------------------------- batches


def _pad(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    width = max((len(s) for s in seqs), default=0)
    ids = torch.zeros((len(seqs), max(width, 1)), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids, ids != PAD


def collate(examples: Sequence[LogicExample]) -> dict[str, torch.Tensor]:
    """Right-padded id tensors: a, a_mask, b, b_mask [B, T] (long / bool), label [B] long,
    and the lengths a_len, b_len [B] long."""
    import torch

    if not examples:
        raise ValueError("collate needs at least one example")
    a, a_mask = _pad([encode(ex.a) for ex in examples])
    b, b_mask = _pad([encode(ex.b) for ex in examples])
    return {
        "a": a,
        "a_mask": a_mask,
        "b": b,
        "b_mask": b_mask,
        "label": torch.tensor([int(ex.label) for ex in examples], dtype=torch.long),
        "a_len": a_mask.sum(dim=1),
        "b_len": b_mask.sum(dim=1),
    }


def iterate_batches(
    examples: Sequence[LogicExample], batch_size: int, shuffle: bool = True, seed: int = 0, svp: bool = False, drop_last: bool = False
) -> Iterator[dict[str, torch.Tensor]]:
    """Collated batches; with `svp`, every pair of every batch gets a fresh permutation.

    Deterministic given `seed` (one `random.Random(seed)` drives the order and the renamings);
    call with a different seed per epoch for a new order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = random.Random(seed)
    order = list(range(len(examples)))
    if shuffle:
        rng.shuffle(order)
    apply_svp = svp
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        if drop_last and len(idx) < batch_size:
            break
        batch = [examples[i] for i in idx]
        if apply_svp:
            batch = [_svp(ex, rng) for ex in batch]
        yield collate(batch)


_svp = svp  # `iterate_batches` has a parameter of the same name

__all__ = [
    "SPLITS",
    "EVAL_SPLITS",
    "PAD",
    "SYMBOLS",
    "STOI",
    "ITOS",
    "VOCAB_SIZE",
    "LogicExample",
    "read_split",
    "find_splits",
    "encode",
    "decode",
    "random_permutation",
    "svp",
    "collate",
    "iterate_batches",
]
