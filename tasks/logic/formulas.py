"""Propositional formulas of the DeepMind logical-entailment dataset (Evans et al. 2018).

Grammar of the files (canonical form, what `to_str` prints):

    formula := VAR                      a variable, one letter a-z
             | "~(" formula ")"         negation, written as a function application
             | "(" formula OP formula ")"   OP is & (and), | (or), > (implication)

The parser is lenient and also accepts `~x` without parentheses and redundant parentheses
around any sub-formula (`(g)`, `((p&q))`, `~((p&q))` are all fine); they carry no meaning
and printing gives the canonical string back. Every line of the six real files is canonical,
so `to_str(parse(s)) == s` byte for byte there.

Measures (as $TPRBENCH_DATA/logical_entailment/STATS.md defines them):
    ops(f)    number of operator symbols ~ & | >  (= number of Not and Bin nodes)
    depth(f)  nesting of Not/Bin nodes; a variable has depth 0, `~(p)` 1, `(p&~(q))` 2
    variables(f)  the set of variable letters

Label oracle: `entails(a, b)` is exact (A ⊧ B iff A ∧ ¬B has no model). It evaluates both
formulas on the whole truth table at once, one Python big integer per variable column
(bit k of column i is bit i of assignment k; & and | are bitwise and negation is XOR with the
all-ones mask, so every table stays non-negative, which is much faster for big integers).
Up to 18 variables the table is one block of 2^18 bits; above that the extra variables are
enumerated as constants over 2^(n-18) blocks, with early exit on the first counter-model.

Measured on the development machine (Python 3.11, one core): <= 10 variables about 0.03 ms
per pair; test_massive (12-24 variables) 0.5 ms per pair on average, 7 ms at 24 variables;
all 19,026 pairs of the six real files, parsing included, in about 3 s. sympy's
`satisfiable(A & ~B)` (also exact) took 6-8 ms per pair on the same pairs, so it is not used.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

ALPHABET = "abcdefghijklmnopqrstuvwxyz"
BINARY_OPS = "&|>"
OPERATORS = "~&|>"

# Above this many variables truth tables are split into blocks of 2^18 bits (32 KiB):
# bigger Python ints are allocated with mmap and every operation page-faults (measured
# 15-30x slower per bit at 2^20 bits and more).
BLOCK_VARS = 18
# The largest number of variables any function here accepts (26 letters exist).
MAX_VARS = 26


class FormulaError(ValueError):
    """A string that is not a formula of the grammar above; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Var:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Not:
    arg: Formula

    def __str__(self) -> str:
        return to_str(self)


@dataclass(frozen=True, slots=True)
class Bin:
    op: str  # one of & | >
    left: Formula
    right: Formula

    def __str__(self) -> str:
        return to_str(self)


Formula = Var | Not | Bin


# ----------------------------------------------------------------------------- parsing


# A recursive-descent parser in one function (its helpers are closures over the position), each
# branch one production of the grammar; splitting it would pass the position around by hand.
def parse(text: str) -> Formula:  # noqa: C901
    """Parse one formula; raises FormulaError naming the column and what was expected."""
    if not isinstance(text, str):
        raise FormulaError(f"expected a formula string, got {type(text).__name__}")
    if not text:
        raise FormulaError("empty formula")
    n = len(text)

    def fail(i: int, expected: str) -> FormulaError:
        got = repr(text[i]) if i < n else "end of formula"
        return FormulaError(f"expected {expected} at column {i + 1}, got {got} in {text!r}")

    def formula(i: int) -> tuple[Formula, int]:
        if i >= n:
            raise fail(i, "a formula")
        c = text[i]
        if "a" <= c <= "z":
            return Var(c), i + 1
        if c == "~":
            arg, j = formula(i + 1)
            return Not(arg), j
        if c == "(":
            left, j = formula(i + 1)
            if j < n and text[j] == ")":  # redundant parentheses around one sub-formula
                return left, j + 1
            if j >= n or text[j] not in BINARY_OPS:
                raise fail(j, "one of & | > or ')'")
            op = text[j]
            right, k = formula(j + 1)
            if k >= n or text[k] != ")":
                raise fail(k, "')'")
            return Bin(op, left, right), k + 1
        raise fail(i, "a variable a-z, '~' or '('")

    try:
        f, end = formula(0)
    except RecursionError:
        raise FormulaError(f"formula nested too deeply ({n} characters)") from None
    if end != n:
        raise fail(end, "end of formula")
    return f


def is_formula(text: str) -> bool:
    """True iff `parse(text)` would succeed; builds nothing, so it is several times faster."""
    if not isinstance(text, str) or not text:
        return False
    n = len(text)

    def scan(i: int) -> int:  # index after one formula starting at i, or -1
        if i >= n:
            return -1
        c = text[i]
        if "a" <= c <= "z":
            return i + 1
        if c == "~":
            return scan(i + 1)
        if c == "(":
            j = scan(i + 1)
            if j < 0 or j >= n:
                return -1
            if text[j] == ")":
                return j + 1
            if text[j] not in BINARY_OPS:
                return -1
            k = scan(j + 1)
            if k < 0 or k >= n or text[k] != ")":
                return -1
            return k + 1
        return -1

    try:
        return scan(0) == n
    except RecursionError:
        return False


def as_formula(f: Formula | str) -> Formula:
    return parse(f) if isinstance(f, str) else f


# ----------------------------------------------------------------------------- printing


def to_str(f: Formula) -> str:
    """The canonical string: `~(x)` for negation, `(x op y)` for binary, no spaces."""
    out: list[str] = []

    def emit(g: Formula) -> None:
        if type(g) is Var:
            out.append(g.name)
        elif type(g) is Not:
            out.append("~(")
            emit(g.arg)
            out.append(")")
        else:
            out.append("(")
            emit(g.left)
            out.append(g.op)
            emit(g.right)
            out.append(")")

    emit(f)
    return "".join(out)


# ----------------------------------------------------------------------------- measures


def variables(f: Formula | str) -> frozenset[str]:
    """The variable letters of a formula (for a string no parse is needed)."""
    if isinstance(f, str):
        return frozenset(c for c in f if "a" <= c <= "z")
    out: set[str] = set()
    stack = [f]
    while stack:
        g = stack.pop()
        if type(g) is Var:
            out.add(g.name)
        elif type(g) is Not:
            stack.append(g.arg)
        else:
            stack.append(g.left)
            stack.append(g.right)
    return frozenset(out)


def ops(f: Formula | str) -> int:
    """Number of operators ~ & | > ("operators per formula" in $TPRBENCH_DATA/logical_entailment/STATS.md)."""
    s = f if isinstance(f, str) else to_str(f)
    return sum(s.count(c) for c in OPERATORS)


def depth(f: Formula | str) -> int:
    """Nesting depth of Not/Bin nodes; a variable has depth 0."""
    return _depth(as_formula(f))


def _depth(g: Formula) -> int:
    if type(g) is Var:
        return 0
    if type(g) is Not:
        return 1 + _depth(g.arg)
    return 1 + max(_depth(g.left), _depth(g.right))


def size(f: Formula | str) -> int:
    """Number of nodes (variables + operators); the H1 length used in test_big/test_massive."""
    s = f if isinstance(f, str) else to_str(f)
    return sum(1 for c in s if "a" <= c <= "z") + ops(s)


def prop_length(f: Formula | str) -> int:
    """Variables + negations: the length behind column H1 of validate/test_easy/test_hard.

    Those three files (the train distribution) satisfy H1 = [prop_length(A) >= prop_length(B)]
    on every line; test_big and test_massive were made by a generator version that counted
    every node (`size`).
    """
    s = f if isinstance(f, str) else to_str(f)
    return sum(1 for c in s if "a" <= c <= "z") + s.count("~")


def literals(f: Formula | str) -> frozenset[tuple[str, bool]]:
    """Literals of the negation normal form: (variable, polarity) of every occurrence.

    Polarity flips under ~ and in the antecedent of >, which is exactly where the variable
    lands after pushing negations inwards (A > B ≡ ~A | B; De Morgan; ~~A ≡ A).
    """
    out: set[tuple[str, bool]] = set()
    stack: list[tuple[Formula, bool]] = [(as_formula(f), True)]
    while stack:
        g, pol = stack.pop()
        if type(g) is Var:
            out.add((g.name, pol))
        elif type(g) is Not:
            stack.append((g.arg, not pol))
        else:
            stack.append((g.left, (not pol) if g.op == ">" else pol))
            stack.append((g.right, pol))
    return frozenset(out)


Features = tuple[int, frozenset, frozenset]


def features(f: Formula | str) -> Features:
    """(prop_length, variables, literals): what the heuristics compare, computed once per formula."""
    s = f if isinstance(f, str) else to_str(f)
    return prop_length(s), variables(s), literals(f)


def heuristics_from(fa: Features, fb: Features) -> tuple[int, int, int]:
    """(H1, H2, H3) from the `features` of A and B."""
    return int(fa[0] >= fb[0]), int(fb[1] <= fa[1]), int(fb[2] <= fa[2])


def heuristics(a: Formula | str, b: Formula | str) -> tuple[int, int, int]:
    """(H1, H2, H3) of README.original.md for the pair A, B.

    H1 = prop_length(A) >= prop_length(B); H2 = vars(B) ⊆ vars(A);
    H3 = literals(NNF(B)) ⊆ literals(NNF(A)).
    """
    return heuristics_from(features(a), features(b))


def rename(f: Formula | str, mapping: Mapping[str, str]) -> str:
    """The canonical string with each variable letter replaced through `mapping` (others kept)."""
    s = f if isinstance(f, str) else to_str(f)
    return "".join(mapping.get(c, c) for c in s)


def alpha_key(a: Formula | str, b: Formula | str) -> str:
    """A key equal for two pairs iff they are the same up to renaming variables (α-equivalence).

    Variables are renamed a, b, c, ... in order of first occurrence in A, then B. Strings are
    compared as text, so they must be canonical (the real files and the generator's output
    are); pass `to_str(parse(s))` for anything else.
    """
    sa = a if isinstance(a, str) else to_str(a)
    sb = b if isinstance(b, str) else to_str(b)
    mapping: dict[str, str] = {}
    out = []
    for c in sa + "," + sb:
        if "a" <= c <= "z":
            m = mapping.get(c)
            if m is None:
                m = mapping[c] = ALPHABET[len(mapping)]
            out.append(m)
        else:
            out.append(c)
    return "".join(out)


# ----------------------------------------------------------------------------- semantics


def evaluate(f: Formula | str, assignment: Mapping[str, bool]) -> bool:
    """Truth value under one assignment (plain recursion; the brute-force reference)."""
    g = as_formula(f)
    if type(g) is Var:
        return bool(assignment[g.name])
    if type(g) is Not:
        return not evaluate(g.arg, assignment)
    x = evaluate(g.left, assignment)
    y = evaluate(g.right, assignment)
    if g.op == "&":
        return x and y
    if g.op == "|":
        return x or y
    return (not x) or y


def columns(n: int) -> tuple[int, ...]:
    """Truth-table columns for n variables: bit k of column i is (k >> i) & 1.

    Cached up to BLOCK_VARS (18) variables; above that built afresh (2^n bits each).
    """
    if not 0 <= n <= MAX_VARS:
        raise ValueError(f"columns() takes 0..{MAX_VARS} variables, got {n}")
    return _columns_cached(n) if n <= BLOCK_VARS else _build_columns(n)


@functools.cache
def _columns_cached(n: int) -> tuple[int, ...]:
    return _build_columns(n)


def _build_columns(n: int) -> tuple[int, ...]:
    total = 1 << n
    cols = []
    for i in range(n):
        half = 1 << i
        col = ((1 << half) - 1) << half  # one period: `half` zeros then `half` ones
        width = 2 * half
        while width < total:
            col |= col << width
            width *= 2
        cols.append(col)
    return tuple(cols)


def _table(g: Formula, env: Mapping[str, int], mask: int) -> int:
    """Bitwise evaluation on non-negative Python ints below `mask` (negation is `^ mask`;
    bitwise operators on negative big integers make copies and are several times slower)."""
    t = type(g)
    if t is Var:
        return env[g.name]
    if t is Not:
        return _table(g.arg, env, mask) ^ mask
    x = _table(g.left, env, mask)
    if g.op == "&":
        return x & _table(g.right, env, mask) if x else 0
    y = _table(g.right, env, mask)
    if g.op == "|":
        return x | y
    return (x ^ mask) | y


def _blocks(names: Sequence[str]) -> Iterator[tuple[dict[str, int], int]]:
    """(environment, mask) per block of the truth table over `names`.

    The first BLOCK_VARS names vary inside a block (bit k: names[i] = (k >> i) & 1); block
    number m gives names[BLOCK_VARS + j] the constant value (m >> j) & 1 (all ones or zero).
    """
    names = list(names)
    n = len(names)
    if n > MAX_VARS:
        raise ValueError(f"at most {MAX_VARS} variables, got {n}")
    low = min(n, BLOCK_VARS)
    base = dict(zip(names[:low], columns(low)))
    mask = (1 << (1 << low)) - 1
    high = names[low:]
    if not high:
        yield base, mask
        return
    for m in range(1 << len(high)):
        env = dict(base)
        for j, name in enumerate(high):
            env[name] = mask if (m >> j) & 1 else 0
        yield env, mask


def block_tables(f: Formula | str, names: Sequence[str]) -> list[int]:
    """The truth table of f over `names` as 2^max(0, n-18) blocks of <= 2^18 bits (see _blocks)."""
    g = as_formula(f)
    return [_table(g, env, mask) for env, mask in _blocks(names)]


def truth_table(f: Formula | str, names: Iterable[str]) -> int:
    """The truth table of f over `names` as one int of 2^len(names) bits.

    Bit k is f's value under the assignment giving names[i] the value (k >> i) & 1.
    Above 18 variables it is assembled from `block_tables` (slow; prefer those there).
    """
    names = list(names)
    blocks = block_tables(f, names)
    if len(blocks) == 1:
        return blocks[0]
    width = 1 << BLOCK_VARS
    out = 0
    for m, t in enumerate(blocks):
        out |= t << (m * width)
    return out


def entails(a: Formula | str, b: Formula | str) -> bool:
    """A ⊧ B: every assignment that makes A true makes B true. Exact."""
    fa, fb = as_formula(a), as_formula(b)
    names = sorted(variables(fa) | variables(fb))
    for env, mask in _blocks(names):
        ta = _table(fa, env, mask)
        if ta and ta & (_table(fb, env, mask) ^ mask):
            return False
    return True


def satisfiable(f: Formula | str) -> bool:
    g = as_formula(f)
    return any(_table(g, env, mask) for env, mask in _blocks(sorted(variables(g))))


def valid(f: Formula | str) -> bool:
    """f is a tautology."""
    g = as_formula(f)
    return all(_table(g, env, mask) == mask for env, mask in _blocks(sorted(variables(g))))


__all__ = [
    "ALPHABET",
    "BINARY_OPS",
    "OPERATORS",
    "MAX_VARS",
    "BLOCK_VARS",
    "FormulaError",
    "Var",
    "Not",
    "Bin",
    "Formula",
    "parse",
    "is_formula",
    "as_formula",
    "to_str",
    "variables",
    "ops",
    "depth",
    "size",
    "prop_length",
    "literals",
    "Features",
    "features",
    "heuristics_from",
    "heuristics",
    "rename",
    "alpha_key",
    "evaluate",
    "columns",
    "block_tables",
    "truth_table",
    "entails",
    "satisfiable",
    "valid",
]
