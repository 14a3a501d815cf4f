"""The driver's live view: trials done/running/failed per cell, seeds, and an ETA."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any


def _eta(runner: Any, states: list[Any], in_flight: int) -> str:
    remaining = sum(max(s.trials_wanted - s.trials_done, 0) + max(s.seeds_wanted - s.seeds_done, 0)
                    for s in states if not s.note)
    if not runner.run_seconds or not remaining:
        return "–"
    per_run = sum(runner.run_seconds) / len(runner.run_seconds)
    seconds = remaining * per_run / max(in_flight, 1)
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def render(runner: Any, states: list[Any], in_flight: int):
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"study {runner.study.name}", caption=None)
    for col in ("cell", "id", "trials done/wanted", "running", "pruned", "failed", "seeds", "status"):
        table.add_column(col, justify="left" if col in ("cell", "id", "status") else "right")
    for s in states:
        table.add_row(escape(s.cell.label), s.cell.id, f"{s.trials_done}/{s.trials_wanted}", str(s.running),
                      str(s.trials_pruned), str(s.trials_failed + s.seeds_failed), f"{s.seeds_done}/{s.seeds_wanted}",
                      s.status)
    elapsed = time.strftime("%H:%M:%S", time.gmtime(time.time() - runner.started))
    done = sum(s.status == "done" for s in states)
    table.caption = f"{done}/{len(states)} cells done · {in_flight} running · elapsed {elapsed} · ETA {_eta(runner, states, in_flight)}"
    return table


@contextlib.contextmanager
def live_view(runner: Any, states: list[Any]) -> Iterator[Callable[[list[Any], int], None]]:
    """Yields `update(states, in_flight)`; a no-op without a console (tests, library use)."""
    if runner.console is None:
        yield lambda states, in_flight: None
        return
    from rich.live import Live

    last = [0.0]
    with Live(render(runner, states, 0), console=runner.console, refresh_per_second=2, transient=False) as live:
        def update(states: list[Any], in_flight: int) -> None:
            now = time.time()
            if now - last[0] >= 0.5:
                last[0] = now
                live.update(render(runner, states, in_flight))

        yield update
        live.update(render(runner, states, 0))
