"""The driver's progress: trials done/running/failed per cell, seeds, and an ETA.

On a terminal, a live table (rich). Unattended (output to a file, a batch scheduler's log, a
pipe: no TTY), a live table cannot redraw, so the driver prints one progress line every
$TPRBENCH_PROGRESS_SECONDS (default 30) and the whole table, at its natural width, at the end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

# One setting for every progress line (the driver's and train's/data's): defined in tasks.progress.
from tasks.progress import interval


def _eta(runner: Any, states: list[Any], in_flight: int) -> str:
    remaining = sum(max(s.trials_wanted - s.trials_done, 0) + max(s.seeds_wanted - s.seeds_done, 0) for s in states if not s.note)
    if not runner.run_seconds or not remaining:
        return "–"
    per_run = sum(runner.run_seconds) / len(runner.run_seconds)
    seconds = remaining * per_run / max(in_flight, 1)
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


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
    from .report.render import PLAIN_ROWS, Section, _print_wide, plain_table

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
    """One line for logs: cells done, trials and seeds done of wanted, running, errored, elapsed, ETA."""
    elapsed = time.strftime("%H:%M:%S", time.gmtime(time.time() - runner.started))
    done = sum(s.status == "done" for s in states)
    trials = f"{sum(s.trials_done for s in states)}/{sum(s.trials_wanted for s in states)}"
    seeds = f"{sum(s.seeds_done for s in states)}/{sum(s.seeds_wanted for s in states)}"
    errored = sum(s.errored for s in states)
    return (
        f"{done}/{len(states)} cells done · trials {trials} · seeds {seeds} · {in_flight} running"
        + (f" · {errored} errored" if errored else "")
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
