"""Reading UD treebanks (CoNLL-U) for the role-vs-POS analyses: form, lemma, UPOS, XPOS per word.

Hand-written rather than the `conllu` package: the analyses read four columns of a
tab-separated line, and the only two rules that matter are explicit below (skip multiword-token
ranges `3-4` and empty nodes `10.1`, which are not syntactic words and have no place in a
left-to-right token stream); a dependency for every install of tprbench was not worth that.
Malformed lines are a DataError naming file and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError

FIELDS = 10  # ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC


@dataclass
class Sentence:
    sent_id: str
    text: str
    forms: list[str] = field(default_factory=list)
    lemmas: list[str] = field(default_factory=list)
    upos: list[str] = field(default_factory=list)
    xpos: list[str] = field(default_factory=list)


@dataclass
class Treebank:
    sentences: list[Sentence]
    skipped_multiword: int = 0
    skipped_empty: int = 0

    @property
    def tokens(self) -> int:
        return sum(len(s.forms) for s in self.sentences)


def read_conllu(path: str | Path) -> Treebank:
    """Sentences of a CoNLL-U file (syntactic words only) and how many range/empty lines were skipped."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"CoNLL-U file {p} not found (UD English EWT: ../shared/data/ud_english_ewt/)")
    bank = Treebank([])
    current: Sentence | None = None
    with p.open(encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.rstrip("\n")
            if not line.strip():
                _close(bank, current)
                current = None
                continue
            if current is None:
                current = Sentence(sent_id=f"{p.name}:{lineno}", text="")
            if line.startswith("#"):
                _comment(current, line)
            else:
                _word(bank, current, line, f"{p}:{lineno}")
    _close(bank, current)
    if not bank.sentences:
        raise DataError(f"{p}: no sentences (not a CoNLL-U file?)")
    return bank


def _close(bank: Treebank, sentence: Sentence | None) -> None:
    if sentence is not None and sentence.forms:
        bank.sentences.append(sentence)


def _comment(sentence: Sentence, line: str) -> None:
    key, _, value = line[1:].partition("=")
    if key.strip() == "sent_id":
        sentence.sent_id = value.strip()
    elif key.strip() == "text":
        sentence.text = value.strip()


def _word(bank: Treebank, sentence: Sentence, line: str, where: str) -> None:
    cols = line.split("\t")
    if len(cols) != FIELDS:
        raise DataError(f"{where}: a CoNLL-U word line has {FIELDS} tab-separated fields, found {len(cols)}")
    ident = cols[0]
    if "-" in ident:
        bank.skipped_multiword += 1
    elif "." in ident:
        bank.skipped_empty += 1
    elif not ident.isdigit():
        raise DataError(f"{where}: word ID {ident!r} is not an integer, a range (3-4) or an empty node (3.1)")
    else:
        sentence.forms.append(cols[1])
        sentence.lemmas.append(cols[2])
        sentence.upos.append(cols[3])
        sentence.xpos.append(cols[4])
