"""Bounded numbers for the command line: every numeric option is checked by argparse itself.

A number out of range used to reach Ray or the tables unchecked (`--num-cpus 0` ended in Ray's
traceback, `report --seeds 0` printed a table of dashes, a seed past 2**32 failed deep in numpy).
As an argparse `type`, a bound is checked before anything starts: a wrong value is one line
(`tprbench run: error: argument --num-cpus: expected an integer from 1 to 65536, got '0'`)
and exit 2, like any other argparse error. Floats must also be finite (no `nan`, no `inf`).
tests/test_bounds.py walks the whole parser: no numeric option may be declared without one.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from tasks.bounds import COUNT_MAX, DIM_MAX, FOLDS_MAX, LAYERS_MAX, SEED_MAX  # one definition: task options use them too


def _show(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _range(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"{'above' if lo_open else 'from'} {_show(lo)} {'up to' if lo_open else 'to'} {_show(hi)}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_show(lo)}"
    return f"<= {_show(hi)}"


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer {_range(lo, hi)}, got {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"expected an integer {_range(lo, hi)}, got {text!r}")
        return value

    parse.__name__ = "integer"
    parse.bounds = (lo, hi)  # type: ignore[attr-defined]
    return parse


def real(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [lo, hi] (or (lo, hi] with `lo_open`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number {_range(lo, hi, lo_open)}, got {text!r}") from None
        low = lo is not None and (value <= lo if lo_open else value < lo)
        if not math.isfinite(value) or low or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"expected a number {_range(lo, hi, lo_open)}, got {text!r}")
        return value

    parse.__name__ = "real"
    parse.bounds = (lo, hi)  # type: ignore[attr-defined]
    return parse


def integers(lo: int = 1, hi: int = COUNT_MAX) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers, each in [lo, hi] (at least one)."""
    one = integer(lo, hi)

    def parse(text: str) -> list[int]:
        parts = [v for v in text.split(",") if v.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers {_range(lo, hi)}, got {text!r}")
        try:
            return [one(v.strip()) for v in parts]
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers {_range(lo, hi)}, got {text!r}") from None

    parse.__name__ = "integers"
    parse.bounds = (lo, hi)  # type: ignore[attr-defined]
    return parse


# The usual ones, named once.
SEED = integer(0, SEED_MAX)
DIM = integer(1, DIM_MAX)
CPUS = integer(1, DIM_MAX)
THREADS = integer(1, 1024)
COUNT = integer(1, COUNT_MAX)
COUNTS = integer(0, COUNT_MAX)  # a count that may be zero
SEEDS_WANTED = integer(1, 100_000)
LAYER = integer(1, LAYERS_MAX)
FOLDS = integer(2, FOLDS_MAX)  # cross-validation folds
