"""One driver per study per record: a lease on the MLflow study run, renewed by a heartbeat.

The file lock under `--root` (harness.driver.runner.StudyLock) only stops a second driver on the same run
directory. Two drivers with different `--root`s on the same tracking server and Optuna storage
would each dispatch and record every run (every trial and seed twice). The study run is what
every driver of that record reads first, so the lease lives there, as the tag
`tprbench.driver` = {host, pid, started, heartbeat, root, token}:

- a driver reads it before it writes anything (`check`) and takes it (`acquire`) before it
  works: it writes its own, waits `SETTLE` seconds and reads it back, so of two drivers that
  took it at the same moment only the last writer goes on, the other is refused;
- a thread renews the heartbeat every `seconds / 4`; a lease whose heartbeat is older than
  `seconds` (TPRBENCH_LEASE_SECONDS, default 120) belongs to a dead driver; on the same host a
  lease whose process is gone (pid and its start time) is dead at once, so a rerun after a
  SIGKILL needs no wait;
- the driver removes it when it exits.

A second driver is refused in one line naming the first (`DriverBusy`, exit 2).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ..diskfull import is_disk_full
from .contract import Tag

ENV_SECONDS = "TPRBENCH_LEASE_SECONDS"
DEFAULT_SECONDS = 120.0
SETTLE = 1.0  # seconds between writing the lease and reading it back
log = logging.getLogger(__name__)


class DriverBusy(RuntimeError):
    """Another live driver holds the study's lease. One line naming it; exit 2."""

    user_error = True


def lease_seconds() -> float:
    try:
        return max(float(os.environ.get(ENV_SECONDS, DEFAULT_SECONDS)), 1.0)
    except ValueError:
        return DEFAULT_SECONDS


def process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (/proc/<pid>/stat field 22):
    with the pid it names one process, never a later one that got the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def parse(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and value.get("token") else None


def describe(holder: dict[str, Any]) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder.get("started", 0))))
    ago = max(time.time() - float(holder.get("heartbeat", 0)), 0.0)
    return f"host {holder.get('host')}, pid {holder.get('pid')}, started {started}, root {holder.get('root')}, last heartbeat {ago:.0f} s ago"


def holder_alive(holder: dict[str, Any], seconds: float | None = None) -> bool:
    """Whether the driver that wrote lease `holder` is alive: on this host its process says it at
    once (pid and start time), elsewhere its heartbeat is younger than `seconds`."""
    if holder.get("host") == socket.gethostname():
        pid = int(holder.get("pid") or 0)
        return pid > 0 and process_start(pid) is not None and process_start(pid) == holder.get("pid_start")
    return time.time() - float(holder.get("heartbeat") or 0) < (lease_seconds() if seconds is None else seconds)


class DriverLease:
    """The lease of one study in one record, for one driver (`tracker` writes the study run's tags)."""

    def __init__(self, tracker: Any, study_run_id: str, root: Path, seconds: float | None = None, note: Any = None) -> None:
        self.tracker, self.run_id, self.root = tracker, study_run_id, Path(root)
        self.note = note  # told when the lease could not be renewed or removed (the driver's messages)
        self.seconds = lease_seconds() if seconds is None else seconds
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.mine = {
            "host": self.host,
            "pid": self.pid,
            "pid_start": process_start(self.pid),
            "started": time.time(),
            "root": str(self.root),
            "token": uuid.uuid4().hex,
        }
        self.held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- reading ---------------------------------------------------------------------------------
    def holder(self) -> dict[str, Any] | None:
        """The lease as recorded now (one query)."""
        source = self.tracker.reader.source
        found = self.tracker.retry(lambda: source.study_run(self.tracker.experiment_id, self.tracker.study), "read the driver lease")
        return None if found is None else parse(found[1].get(Tag.DRIVER.bare))

    def alive(self, holder: dict[str, Any] | None) -> bool:
        """Whether `holder` is a live driver other than this one."""
        if holder is None or holder.get("token") == self.mine["token"]:
            return False
        return holder_alive(holder, self.seconds)

    def check(self, what: str) -> None:
        """Refuse (DriverBusy) if another live driver holds the lease; writes nothing."""
        holder = self.holder()
        if self.alive(holder):
            raise DriverBusy(self._busy(holder, what))

    def _busy(self, holder: dict[str, Any], what: str) -> str:
        return (
            f"study {self.tracker.study!r} in {self.tracker.uri} is driven by another `tprbench run` "
            f"({describe(holder)}): one driver per study per record, so this one {what}. Wait for it to end, or "
            f"stop it (a dead driver's lease ends {self.seconds:.0f} s after its last heartbeat, at once on its own host)"
        )

    # -- holding ---------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lease (see the module's docstring), then keep it alive from a thread."""
        self.check("did not start")
        self._write()
        time.sleep(SETTLE)
        holder = self.holder()
        if holder is None or holder.get("token") != self.mine["token"]:
            if holder is not None:
                raise DriverBusy(self._busy(holder, "did not start"))
            self._write()  # removed meanwhile by a driver that ended: ours now
        self.held = True
        self._thread = threading.Thread(target=self._beat, name="tprbench-lease", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        value = json.dumps({**self.mine, "heartbeat": time.time()}, sort_keys=True)
        self.tracker.retry(lambda: self.tracker.client.set_tag(self.run_id, Tag.DRIVER, value), "write the driver lease")

    def _beat(self) -> None:
        while not self._stop.wait(self.seconds / 4):
            try:
                self._write()
            except Exception as exc:  # the store is down: the driver's own writes will say so
                self._tell("driver lease heartbeat not written", exc)

    def release(self) -> None:
        """Stop the heartbeat and remove the lease (if it is still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if not self.held:
            return
        self.held = False
        try:
            if (self.holder() or {}).get("token") == self.mine["token"]:
                self.tracker.retry(lambda: self.tracker.client.delete_tag(self.run_id, Tag.DRIVER), "remove the driver lease")
        except Exception as exc:  # the store is down: the lease expires by itself
            self._tell("driver lease not removed", exc, f"; it expires {self.seconds:.0f} s after its last heartbeat")

    def _tell(self, what: str, exc: Exception, then: str = "") -> None:
        """One line on a failed lease write. Not out of disk space: the driver's own write stops it
        with harness.diskfull's one line, and on this host a lease ends with its process anyway."""
        if is_disk_full(exc):
            log.info("%s (out of disk space): %s", what, exc)
            return
        text = f"{what} ({type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}){then}"
        if self.note is not None:
            self.note(text)
        else:
            log.info(text)

    def __enter__(self) -> DriverLease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
