"""Named points where a test can have the driver killed at an exact moment.

Killing a process "while it closes a study" from outside is a race (the closing lasts a fraction
of a second). With `TPRBENCH_FAULT_AT=<point>` in its environment, the driver SIGKILLs itself
when it reaches that point: the state it leaves is the state a kill at that moment leaves, every
time. Unset (always, outside tests) a point costs one dictionary lookup.

Points: `closing` — the driver has recorded its last run and is about to close the record
(end the cell runs with their summary metrics, end the study run, take the snapshot);
`snapshot` — a snapshot's copy is written, not yet checked and renamed (harness.record.guard);
`restore` — `record restore` has built and checked its copy, and moved nothing yet;
`creating` — a new SQLite store is built on its temporary file, not yet renamed (harness.record.writer);
`recording` — a trial/seed run's record is written (created, metrics logged), not yet ended (harness.record.writer).

`<point>:<signal>` (e.g. `recording:SIGTERM`) sends that signal instead of SIGKILL: Python runs its
handler right after the point, so a stop that lands in the middle of a write happens every time.

At harness/'s root, below every package: both harness.record (snapshot, restore, creating, recording) and
harness.driver (closing) call `fault_point`, and the record must not import the driver.
"""

from __future__ import annotations

import os
import signal

ENV = "TPRBENCH_FAULT_AT"


def fault_point(name: str) -> None:
    """SIGKILL this process (or send it the signal named) if the environment asks for a fault at `name`."""
    asked = os.environ.get(ENV)
    if asked is None:
        return
    point, _, signame = asked.partition(":")
    if point == name:
        os.kill(os.getpid(), signal.Signals[signame] if signame else signal.SIGKILL)
