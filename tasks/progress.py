"""Progress inside long work: a training epoch, data generation, a study's start-up.

The ecosystem's usual way: on a terminal a rich progress bar (done/total, examples/s, elapsed,
ETA); unattended (a file, a pipe, a batch scheduler's log: no TTY) a plain line at once and then
one every $TPRBENCH_PROGRESS_SECONDS (default 30), since a bar cannot redraw there (a `train`
epoch once ran 37 minutes without a line).

Deep code (the training loop, a data generator) asks `current()` for the reporter instead of
taking one more argument through every signature; the default reporter is silent, so library
use, tests and Ray workers print nothing. A command that owns a console sets one with
`reporting(ConsoleReporter(console))`. Reporting reads counts only: it never changes what is
computed (no random numbers, no extra synchronisation).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

PROGRESS_ENV = "TPRBENCH_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 30.0


def interval() -> float:
    """Seconds between unattended progress lines ($TPRBENCH_PROGRESS_SECONDS, default 30)."""
    try:
        return max(float(os.environ.get(PROGRESS_ENV, DEFAULT_INTERVAL)), 0.0)
    except ValueError:
        return DEFAULT_INTERVAL


def clock(seconds: float) -> str:
    """H:MM:SS (hours beyond a day keep counting)."""
    s = max(int(seconds), 0)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Task:
    """One piece of long work. The base class is silent; use as a context manager or `close()`."""

    def advance(self, n: int = 1, examples: int = 0) -> None:
        """`n` more units done (batches, lines), covering `examples` examples (0: not counted)."""

    def close(self) -> None:
        """The work is over (a bar disappears; the caller prints the outcome)."""

    def __enter__(self) -> Task:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Reporter:
    """Hands out tasks; this default is silent (library use, tests, Ray workers)."""

    def task(self, description: str, total: int | None = None, unit: str = "batches") -> Task:
        return Task()


class _Counts:
    def __init__(self, total: int | None) -> None:
        self.total, self.done, self.examples, self.start = total, 0, 0, time.monotonic()

    def add(self, n: int, examples: int) -> None:
        self.done += n
        self.examples += examples

    def rate(self, now: float) -> str:
        elapsed = now - self.start
        return f"{self.examples / elapsed:,.0f} examples/s" if self.examples and elapsed > 0 else ""

    def eta(self, now: float) -> str | None:
        if not self.total or not self.done:
            return None
        return clock((now - self.start) * max(self.total - self.done, 0) / self.done)


class LineTask(Task):
    """Unattended: one line when the work starts, then one every `every` seconds while it runs —
    also while one step takes longer than that (a heartbeat thread writes the line then)."""

    def __init__(self, write: Callable[[str], None], description: str, total: int | None, unit: str, every: float) -> None:
        self.write, self.description, self.unit, self.every = write, description, unit, every
        self.counts = _Counts(total)
        self.last = self.counts.start
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.write(self.line(self.last))
        if every > 0:
            threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        while not self.stop.wait(max(self.last + self.every - time.monotonic(), 0.05)):
            self._maybe_write()

    def _maybe_write(self) -> None:
        with self.lock:
            now = time.monotonic()
            if now - self.last >= self.every and not self.stop.is_set():
                self.last = now
                self.write(self.line(now))

    def line(self, now: float) -> str:
        c = self.counts
        parts = [f"{self.description}: {c.done:,}" + (f"/{c.total:,}" if c.total else "") + f" {self.unit}"]
        if c.rate(now):
            parts.append(c.rate(now))
        parts.append(f"elapsed {clock(now - c.start)}")
        eta = c.eta(now)
        if eta is not None:
            parts.append(f"ETA {eta}")
        return f"[{time.strftime('%H:%M:%S')}] " + " · ".join(parts)

    def advance(self, n: int = 1, examples: int = 0) -> None:
        self.counts.add(n, examples)
        self._maybe_write()

    def close(self) -> None:
        self.stop.set()


class BarTask(Task):
    """On a terminal: a rich bar (description, bar, done/total, examples/s, elapsed, ETA) that
    disappears when the work is over."""

    def __init__(self, console: Any, description: str, total: int | None, unit: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.counts = _Counts(total)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self.progress.start()
        self.id = self.progress.add_task(description, total=total, rate="")
        self.last = 0.0

    def advance(self, n: int = 1, examples: int = 0) -> None:
        self.counts.add(n, examples)
        now = time.monotonic()
        if now - self.last >= 0.2:  # the bar redraws itself; this only feeds it
            self.last = now
            self.progress.update(self.id, completed=self.counts.done, rate=self.counts.rate(now))

    def close(self) -> None:
        self.progress.stop()


class ConsoleReporter(Reporter):
    """Bars on a terminal, lines every `every` seconds (default `interval()`) otherwise."""

    def __init__(self, console: Any, every: float | None = None) -> None:
        self.console, self.every = console, every

    def write(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def task(self, description: str, total: int | None = None, unit: str = "batches") -> Task:
        if self.console.is_terminal:
            return BarTask(self.console, description, total, unit)
        return LineTask(self.write, description, total, unit, interval() if self.every is None else self.every)


_SILENT = Reporter()
_CURRENT: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("tprbench_progress", default=None)


def current() -> Reporter:
    """The reporter long work reports to (silent unless a command set one)."""
    return _CURRENT.get() or _SILENT


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Long work inside this block reports to `reporter`."""
    token = _CURRENT.set(reporter)
    try:
        yield reporter
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def per_split(description: str, unit: str = "lines", units: dict[str, str] | None = None) -> Iterator[Callable[[str, int, int], None]]:
    """A `progress(split, done, total)` callback for a generator that writes split after split:
    one task per split (`<description> <split>`, counted in `units[split]`, else `unit`), each
    closed when the next starts or the block ends."""
    reporter = current()
    now: dict[str, Any] = {}  # the split being written: name, its task, lines reported so far

    def finish() -> None:
        if now:
            now["task"].close()
            now.clear()

    def progress(split: str, done: int, total: int) -> None:
        if now.get("split") != split:
            finish()
            now.update(split=split, done=0, task=reporter.task(f"{description} {split}", total=total, unit=(units or {}).get(split, unit)))
        if done > now["done"]:
            now["task"].advance(done - now["done"])
            now["done"] = done

    try:
        yield progress
    finally:
        finish()
