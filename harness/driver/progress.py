"""The driver's progress: trials done/running/failed per cell, seeds, and an ETA.

On a terminal, a live table (rich). Unattended (output to a file, a batch scheduler's log, a
pipe: no TTY), a live table cannot redraw, so the driver prints one progress line every
$TPRBENCH_PROGRESS_SECONDS (default 30) and the whole table, at its natural width, at the end.
The ETA counts epochs (`EpochEta`, fed by the driver), not runs.

In harness/driver/: the driver's loop is its only user (the final table borrows harness.report.render's
plain-text table for very long studies).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from statistics import median
from typing import TYPE_CHECKING, Any

from tasks.progress import interval  # one setting for every progress line (the driver's, train's, data's)
from tasks.result import RunStatus, paused_epoch

from ..record.contract import RunKey, Tag, will_retry

if TYPE_CHECKING:
    from ..study.cells import Cell


EPOCH_SECONDS = "epoch_seconds"  # the trainer's per-epoch metric (tasks/training.py): a run's last epoch's wall time
#: Epoch durations kept per cell for its median: the recent ones (a machine that fills up slows
#: epochs down), enough that one slow epoch (a checkpoint on a busy disk) is outvoted.
RECENT_EPOCHS = 20


class EpochEta:
    """The driver's ETA: epochs this invocation still has to train × seconds an epoch / runs in flight.

    Why epochs, not runs: a run's time depends on the epochs it has left. Counting runs, a run
    already paused at `--until-epoch` (back in seconds, untrained) made the mean run time tiny
    and still counted as to do: a 14-cell study said "ETA 00:00:59" with three hours left.

    The driver feeds it: `start` (paused records' epochs, read once from their reasons),
    `dispatched`, `epoch` (each live per-epoch message) and `ended` (a result's epochs trained
    here that no live message brought, e.g. with live metrics off). A run's target is its cell's
    epochs, or `until_epoch` if smaller; its epochs done are the latest seen live, else those its
    paused record holds.

    Seconds an epoch are per cell, the median of its recent epochs: cells of one study differ
    several-fold in cost (unit, d, task), and a global mean would price a cheap cell's epochs at
    the expensive one's. A cell not measured yet is priced at the median of every cell's recent
    epochs. A duration is the wall time since the run's previous epoch ended (training,
    validation, checkpoint), or the trainer's `epoch_seconds` for a run's first epoch seen here.

    An upper bound where the driver cannot know cheaply: a trial may be pruned and a run stopped
    early (`stop_patience`), and a trial left running by a dead driver or an errored run counts
    from epoch 0 though it may resume from a checkpoint. A run's start-up (data, model) is not counted.
    """

    def __init__(self, until_epoch: int | None = None) -> None:
        self.until_epoch = until_epoch
        self.credit: dict[str, int] = {}  # run key → epochs its checkpoint holds (paused records)
        self.running: dict[str, list[Any]] = {}  # run key → [cell id, target epoch, epochs done]
        self.last: dict[str, tuple[int, float | None]] = {}  # run key → (epoch, wall time) last seen
        self.recent: dict[str, deque[float]] = {}  # cell id → its recent epoch durations (seconds)
        self._waiting_of: dict[str, tuple[tuple, int]] = {}  # cell id → (its state's signature, epochs waiting): see `_waiting`

    def target(self, cell: Cell) -> int:
        """The epoch this invocation trains a cell's runs to."""
        return cell.epochs if self.until_epoch is None else min(cell.epochs, self.until_epoch)

    # -- fed by the driver -----------------------------------------------------------------
    def start(self, states: list[Any]) -> None:
        """Once, from the record as opened: the epoch each paused run continues from, and the
        seconds of the last epoch each recorded run trained (a cell's price before any epoch of
        this invocation is measured: a study continued on its machine, or a second stage)."""
        for st in states:
            for key, rec in st.records.items():
                epoch = paused_epoch(rec.tags.get(Tag.REASON)) if rec.status == RunStatus.PAUSED else None
                if epoch:
                    self.credit[key] = epoch
                seconds = rec.metrics.get(EPOCH_SECONDS)
                if seconds is not None and seconds > 0:
                    self.recent.setdefault(st.cell.id, deque(maxlen=RECENT_EPOCHS)).append(float(seconds))

    def longest_first(self, states: list[Any]) -> list[Any]:
        """The cells in dispatch order: the most training seconds left first — epochs left
        (`remaining`) × the cell's seconds an epoch (measured, or the median cell's). Why: the
        driver fills its slots from the front, and a long cell started last finishes alone while
        every other slot idles (the logic study's 512-role rows take ~2.5× its other rows' epochs;
        in plan order its second stage would have ended up to ~2 wall-hours later). Longest
        processing time first is the classic bound for that (Graham 1969: within 4/3 of the best
        makespan). Cells never measured, in a study never measured, keep the order given (the
        sort is stable), which the driver makes partly-trained-first, then plan order."""
        left = self.remaining(states)
        prices = {cid: median(q) for cid, q in self.recent.items() if q}
        fallback = median(prices.values()) if prices else 1.0
        return sorted(states, key=lambda st: -left.get(st.cell.id, 0) * prices.get(st.cell.id, fallback))

    def dispatched(self, run_key: str, cell: Cell) -> None:
        self.running[run_key] = [cell.id, self.target(cell), self.credit.get(run_key, 0)]

    def epoch(self, run_key: str, epoch: int, row: dict[str, float] | None, at: float | None) -> None:
        """A run in flight ended `epoch` at wall time `at`: its progress, and the epoch's duration."""
        run, prev = self.running.get(run_key), self.last.get(run_key)
        if run is None or (prev is not None and epoch <= prev[0]):
            return  # not this driver's, or seen already (live, then in the result)
        run[2] = epoch
        self.last[run_key] = (epoch, at)
        consecutive = prev is not None and epoch == prev[0] + 1 and at is not None and prev[1] is not None
        seconds = at - prev[1] if consecutive else (row or {}).get(EPOCH_SECONDS)
        if seconds is not None and seconds > 0:
            self.recent.setdefault(run[0], deque(maxlen=RECENT_EPOCHS)).append(float(seconds))

    def ended(self, run_key: str, result: Any) -> None:
        """A run's result: the epochs it trained in this invocation (after `resumed_from_epoch`;
        the history before it came from the checkpoint) count if no live message had them."""
        times = getattr(result, "epoch_times", None) or {}
        for row in result.history or []:
            epoch = int(row.get("epoch", 0))
            if epoch > (result.resumed_from_epoch or 0):
                self.epoch(run_key, epoch, row, times.get(epoch))
        self.running.pop(run_key, None)
        self.last.pop(run_key, None)

    # -- read by the progress line ---------------------------------------------------------
    def seconds(self, states: list[Any], in_flight: int) -> float | None:
        """Seconds left, or None: no epoch measured yet, or nothing left to train."""
        pooled = [d for q in self.recent.values() for d in q]
        left = {cid: n for cid, n in self.remaining(states).items() if n}
        if not pooled or not left:
            return None
        fallback = median(pooled)
        total = sum(n * (median(self.recent[cid]) if cid in self.recent else fallback) for cid, n in left.items())
        return total / max(in_flight, 1)

    def remaining(self, states: list[Any]) -> dict[str, int]:
        """Epochs this invocation still has to train, by cell id: runs waiting and in flight."""
        left = {st.cell.id: self._waiting(st) for st in states}
        for cell_id, target, done in self.running.values():
            left[cell_id] = left.get(cell_id, 0) + max(target - done, 0)
        return left

    def _waiting(self, st: Any) -> int:
        """Epochs of a cell's runs not dispatched yet, recounted only when what they depend on
        changed: a line reads every cell, and a live view draws one twice a second (at 10k cells,
        recounting every cell's run keys each time took 0.19 s a line)."""
        signature = (st.note, st.to_ask, len(st.stale), st.trials_done, st.final_params is None, len(st.final_todo))
        cached = self._waiting_of.get(st.cell.id)
        if cached is None or cached[0] != signature:
            cached = (signature, self._count_waiting(st))
            self._waiting_of[st.cell.id] = cached
        return cached[1]

    def _count_waiting(self, st: Any) -> int:
        """Trials to ask, trials to dispatch again, seeds: their epochs to go."""
        if st.note:
            return 0  # failed or errored: nothing more is dispatched
        target = self.target(st.cell)
        if not self.credit:  # no paused record: every waiting run starts at epoch 0 (no keys built)
            return (st.to_ask + len(st.stale)) * target + self._seeds_left(st, target)
        stale = sum(self._left(str(RunKey.trial(st.cell.id, number)), target) for number, _ in st.stale)
        return st.to_ask * target + stale + self._seeds_left(st, target)

    def _left(self, run_key: str, target: int) -> int:
        return max(target - self.credit.get(run_key, 0), 0)

    def _seeds_left(self, st: Any, target: int) -> int:
        """Epochs of a cell's seed runs not dispatched yet. Planned (final parameters chosen): its
        to-do list. Not yet (the driver plans a cell when it first visits it): the seeds its record
        does not hold as ended under the final parameters it records, if those are current (the
        rule of `StudyRunner.final_params`), else every seed from epoch 0."""
        if st.final_params is not None:
            if not self.credit:
                return len(st.final_todo) * target
            h = st.tags.get(Tag.FINAL_PARAMS_HASH, "")
            return sum(self._left(str(RunKey.seed(st.cell.id, s, h)), target) for s in st.final_todo)
        return self._unplanned_seeds_left(st, target)

    def _unplanned_seeds_left(self, st: Any, target: int) -> int:
        h = st.recorded_final_hash() if st.trials_done >= st.trials_wanted else None
        if h is None:
            return st.seeds_wanted * target
        keys = [str(RunKey.seed(st.cell.id, s, h)) for s in range(st.seeds_wanted)]
        return sum(self._left(k, target) for k in keys if not _ended(st.records.get(k)))


def _ended(rec: Any) -> bool:
    """A record the next dispatch does not replace (finished, pruned, diverged, errored past the cap)."""
    return rec is not None and not will_retry(rec.status, rec.tags)


def _clock(seconds: float) -> str:
    """HH:MM:SS, hours past 24 included (time.strftime would wrap a two-day ETA to hours)."""
    s = int(seconds)
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def _eta(runner: Any, states: list[Any], in_flight: int) -> str:
    eta = getattr(runner, "eta", None)
    seconds = eta.seconds(states, in_flight) if eta is not None else None
    return "–" if seconds is None else _clock(seconds)


def _stage(runner: Any, states: list[Any]) -> str:
    """`run --until-epoch`: said on every line, since cells and seeds then stop short of done by
    design; the runs paused at the boundary so far counted."""
    until = getattr(runner, "until_epoch", None)
    if until is None:
        return ""
    paused = sum(s.paused for s in states)
    return f" · stage: until epoch {until}" + (f" ({paused} paused)" if paused else "")


COLUMNS = ("cell", "id", "trials done/wanted", "running", "pruned", "failed", "errored", "seeds", "status")
#: A live table shows at most this many cells (a screenful; those being worked on first): rich
#: renders every row of a table at each refresh (~5 ms a row), which at 5,000 cells would take
#: the driver's whole time. The caption counts the rest; `tprbench study show` lists all.
LIVE_ROWS = 40


def _row(s: Any) -> list[str]:
    return [
        s.cell.label,
        s.cell.id,
        f"{s.trials_done}/{s.trials_wanted}",
        str(s.running),
        str(s.trials_pruned),
        str(s.trials_failed + s.seeds_failed),
        str(s.errored),
        f"{s.seeds_done}/{s.seeds_wanted}",
        s.status,
    ]


def shown(states: list[Any], limit: int | None = LIVE_ROWS) -> list[Any]:
    """The cells a live table shows: all when they fit, else the running ones, then the others
    not done (waiting, failed), in study order, up to `limit`."""
    if limit is None or len(states) <= limit:
        return states
    busy = [s for s in states if s.running]
    return (busy + [s for s in states if not s.running and s.status != "done"])[:limit]


def render(runner: Any, states: list[Any], in_flight: int, limit: int | None = LIVE_ROWS):
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"study {runner.study.name}", caption=None)
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("cell", "id", "status") else "right")
    rows = shown(states, limit)
    for s in rows:
        cells = _row(s)
        table.add_row(escape(cells[0]), *cells[1:])
    hidden = len(states) - len(rows)
    table.caption = summary_line(runner, states, in_flight) + (
        f" · {hidden} more cell(s) not shown (`tprbench study show` lists every cell)" if hidden else ""
    )
    return table


def print_final(runner: Any, states: list[Any], console: Any) -> None:
    """Every cell's line at the end of an unattended run, at its natural width: a rich table, or
    aligned plain text above `render.PLAIN_ROWS` cells (rich took ~25 s for 5,010 rows)."""
    from ..report.render import PLAIN_ROWS, Section, _print_wide, plain_table

    if len(states) <= PLAIN_ROWS:
        _print_wide(console, render(runner, states, 0, limit=None))
        return
    sec = Section(
        "",
        "progress",
        f"study {runner.study.name}",
        list(COLUMNS),
        ["l", "l"] + ["r"] * 6 + ["l"],
        [_row(s) for s in states],
        footnotes=[summary_line(runner, states, 0)],
    )
    console.print(plain_table(sec), markup=False, highlight=False, soft_wrap=True)


def summary_line(runner: Any, states: list[Any], in_flight: int) -> str:
    """One line for logs: cells done, trials and seeds done of wanted, running, errored, stage, elapsed, ETA."""
    elapsed = _clock(time.time() - runner.started)
    done = sum(s.status == "done" for s in states)
    trials = f"{sum(s.trials_done for s in states)}/{sum(s.trials_wanted for s in states)}"
    seeds = f"{sum(s.seeds_done for s in states)}/{sum(s.seeds_wanted for s in states)}"
    errored = sum(s.errored for s in states)
    return (
        f"{done}/{len(states)} cells done · trials {trials} · seeds {seeds} · {in_flight} running"
        + (f" · {errored} errored" if errored else "")
        + _stage(runner, states)
        + f" · elapsed {elapsed} · ETA {_eta(runner, states, in_flight)}"
    )


@contextlib.contextmanager
def live_view(runner: Any, states: list[Any]) -> Iterator[Callable[[list[Any], int], None]]:
    """Yields `update(states, in_flight)`; a no-op without a console (tests, library use) or with
    `runner.show_progress` false (`tprbench run --quiet`)."""
    console = runner.console
    if console is None or not getattr(runner, "show_progress", True):
        yield lambda states, in_flight: None
        return
    if not console.is_terminal:
        yield from _lines(runner, states, console)
        return
    from rich.live import Live

    last = [0.0]
    with Live(render(runner, states, 0), console=console, refresh_per_second=2, transient=False) as live:

        def update(states: list[Any], in_flight: int) -> None:
            now = time.time()
            if now - last[0] >= 0.5:
                last[0] = now
                live.update(render(runner, states, in_flight))

        yield update
        live.update(render(runner, states, 0))


def _lines(runner: Any, states: list[Any], console: Any) -> Iterator[Callable[[list[Any], int], None]]:
    """Unattended: a progress line at intervals, the full-width table at the end."""
    every, last = interval(), [time.time()]

    def update(states: list[Any], in_flight: int) -> None:
        now = time.time()
        if now - last[0] >= every:
            last[0] = now
            console.print(f"[{time.strftime('%H:%M:%S')}] " + summary_line(runner, states, in_flight), markup=False, highlight=False, soft_wrap=True)

    yield update
    print_final(runner, states, console)
