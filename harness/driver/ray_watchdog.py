"""The local Ray of a driver ends with the driver, even when the driver is SIGKILLed.

A driver that starts Ray itself (`tprbench run` without --address) owns its GCS, raylet, agents
and workers. Killed with SIGKILL it cannot shut them down; Ray's own fate-sharing ends the GCS
and raylet, but its two agents (`ray::DashboardAgent`, `ray::RuntimeEnvAgent`) notice the
raylet's death and then try to report it through the dead GCS: they stay alive under PID 1 for
~60 s (Ray's GCS reconnect timeout) and ignore SIGTERM meanwhile; a worker in the middle of a
trial finishes its epoch first (measured: ~30 s). A second driver started in that minute shares
the machine with them.

So the driver marks its environment with a token before Ray starts and starts this watchdog, a
small separate process. The GCS, the raylet and the workers inherit the token; the two agents do
NOT (Ray starts them with an environment of its own: seen in /proc/<pid>/environ on Ray 2.60), but
they are the raylet's children. So while the driver lives the watchdog remembers, every `SCAN`
seconds, the token holders and all their descendants, each as (pid, start time): once the raylet
is dead its orphans are re-parented and could no longer be told apart from anyone's. When the
driver's process is gone (however it ended), the watchdog SIGKILLs every process that holds the
token or was remembered, and is still the same process (same pid *and* start time, so a reused
pid is never hit) — only processes this driver's Ray started, found by their environment and
parentage, never by name — and exits. After a normal end (`ray.shutdown()`) there is usually
nothing left to kill.

In harness/driver/ beside `ray_start`, its only user; started as `python -m harness.driver.ray_watchdog`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

ENV = "TPRBENCH_RAY_OWNER"  # token in the environment of every process of the driver's local Ray
POLL = 0.25  # seconds between two looks at the driver
SCAN = 2.0  # seconds between two scans of /proc for the token holders' descendants, while the driver lives
GRACE = 10.0  # seconds the watchdog goes on killing after the driver's end (late children)


def start() -> str:
    """Mark this process's environment and start the watchdog; returns the token. A new token
    each time: never one inherited from a parent that started a Ray of its own (its watchdog
    would end this driver). The caller removes it again once Ray is up (`unmark`), so that only
    Ray's processes carry it, not what the driver starts later."""
    token = f"{os.getpid()}-{uuid.uuid4().hex}"
    os.environ[ENV] = token
    subprocess.Popen(
        [sys.executable, "-m", "harness.driver.ray_watchdog", str(os.getpid()), token],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env={**os.environ, ENV: ""},
    )  # not marked itself
    return token


def unmark() -> None:
    """Ray is up (its processes copied the environment): the driver's own children go unmarked."""
    os.environ.pop(ENV, None)


def holders(token: str) -> list[int]:
    """Processes whose environment holds `token` (this one excluded)."""
    needle = f"{ENV}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:  # gone, or not ours to read
            pass
    return found


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in clock ticks) of `pid` from /proc/<pid>/stat; None if gone.
    The command name (field 2) may hold spaces and parentheses: split after its last ')'."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def descendants(roots: list[int], skip: set[int]) -> dict[int, int]:
    """{pid: start time} of `roots` and every process below them, from one pass over /proc;
    nothing in `skip` (the driver, this watchdog) and nothing below it."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _stat(int(entry))
        if st is not None:
            children.setdefault(st[1], []).append(int(entry))
            started[int(entry)] = st[2]
    found: dict[int, int] = {}
    todo = [p for p in roots if p in started]
    while todo:
        pid = todo.pop()
        if pid not in found and pid not in skip:
            found[pid] = started[pid]
            todo.extend(children.get(pid, []))
    return found


def _same(pid: int, start: int) -> bool:
    """`pid` is alive and is still the process that was remembered (not a reused pid)."""
    st = _stat(pid)
    return st is not None and st[0] != "Z" and st[2] == start


def watch(driver: int, token: str) -> int:
    """Wait for `driver` to end, then kill what its Ray left (for up to GRACE s); returns how many."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is the driver's to handle
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    known: dict[int, int] = {}  # pid -> start time of every token holder and descendant seen so far
    next_scan = 0.0
    skip = {driver, os.getpid()}
    while _alive(driver):
        if time.monotonic() >= next_scan:  # forget the ended, add the new: bounded over a long study
            known = {p: s for p, s in known.items() if _same(p, s)} | descendants(holders(token), skip)
            next_scan = time.monotonic() + SCAN
        time.sleep(POLL)
    killed: set[int] = set()
    deadline = time.monotonic() + GRACE
    while True:
        remembered = [p for p, start in known.items() if _same(p, start)]
        left = sorted({p for p in holders(token) if _alive(p)} | set(remembered))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        if not left and time.monotonic() > deadline - GRACE + 1.0 or time.monotonic() > deadline:
            return len(killed)
        time.sleep(POLL)


if __name__ == "__main__":
    sys.exit(0 if watch(int(sys.argv[1]), sys.argv[2]) >= 0 else 1)
