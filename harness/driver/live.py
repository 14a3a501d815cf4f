"""Per-epoch metrics while runs train: workers → a small Ray actor → the driver → MLflow.

Workers never write MLflow (harness/record/writer.py says why), so a worker sends each epoch's
metrics, with its own wall-clock time, to `EpochSink`, an actor on the driver's node; the
driver takes what arrived once a loop turn (about once a second) and logs it into the run's
MLflow run, created when the worker's first message says it has started (so the run's start
time is the worker's). The final record (`Tracker.log_run`) then adds only what was not logged
live. A driver that stops leaves the live runs of its jobs in flight to the close's one sweep
(`RecordClosing._retire_half_written`), which ends them KILLED and deletes them. Best effort
throughout: if the actor cannot be created or dies, runs are recorded at their end exactly as
before, and a worker whose message cannot be sent trains on.

In harness/driver/: the driver and its worker are its only users.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SINK_TIMEOUT = 5.0  # seconds the driver waits for the sink's answer before turning live metrics off


class EpochSink:
    """The actor: a list that workers append to and the driver empties."""

    def __init__(self) -> None:
        self.items: list[tuple] = []

    def put(self, item: tuple) -> None:
        self.items.append(item)

    def take(self) -> list[tuple]:
        out, self.items = self.items, []
        return out


def start_sink() -> Any | None:
    """The sink actor, pinned to the driver's node (worker nodes may be lost); None if Ray refuses."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        node = ray.get_runtime_context().get_node_id()
        actor = ray.remote(num_cpus=0, max_restarts=0)(EpochSink).options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=True))
        return actor.remote()
    except Exception:  # live metrics are a convenience: never stop a study for them
        return None


def sender(sink: Any, run_key: str, start: float) -> Callable[[int | None, dict[str, float] | None], None]:
    """The worker's side: `send(epoch, row)` (epoch None: "started"); fire-and-forget."""
    state = {"on": sink is not None}

    def send(epoch: int | None, row: dict[str, float] | None) -> None:
        if not state["on"]:
            return
        try:
            sink.put.remote((run_key, start, epoch, dict(row or {}), time.time()))
        except Exception:  # the driver is gone or the actor died: train on, the result carries everything
            state["on"] = False

    return send


class LiveRuns:
    """The driver's side: takes the sink's messages and logs them into live MLflow runs."""

    def __init__(
        self, tracker: Any, sink: Any, say: Callable[[str], None], on_epoch: Callable[[str, int, dict[str, float], float], None] | None = None
    ) -> None:
        self.tracker, self.sink, self.say = tracker, sink, say
        self.on_epoch = on_epoch  # (run key, epoch, metrics, wall time) of each epoch of a job in flight: the ETA's clock
        self.run_ids: dict[str, str | None] = {}  # run key → live MLflow run id (None: already recorded)
        self.epochs: dict[str, set[int]] = {}  # run key → epochs logged live
        self._pending: Any = None  # the outstanding `take` of the sink

    def poll(self, jobs: dict[str, Any], start_run: Callable[[Any, float], str | None]) -> None:
        """Log what arrived for the jobs still in flight (`jobs`: run key → job)."""
        if self.sink is None:
            return
        import ray

        # Never wait on the sink: its actor may still be starting (tens of seconds on a busy
        # machine). One `take` is outstanding at a time; its answer is used on a later turn.
        if self._pending is None:
            self._pending = self.sink.take.remote()
        ready, _ = ray.wait([self._pending], timeout=0)
        if not ready:
            return
        try:
            items = ray.get(self._pending, timeout=SINK_TIMEOUT)
        except Exception as exc:  # the actor died (or could not be created): runs are recorded when they end
            self.sink = None
            self.say(f"live per-epoch metrics off ({type(exc).__name__}); runs are recorded when they end")
            return
        finally:
            self._pending = None
        rows: dict[str, list[tuple[int, dict[str, float], float]]] = {}
        for run_key, start, epoch, row, ts in items:
            job = jobs.get(run_key)
            if job is None:
                continue  # recorded already (or not this driver's)
            if epoch is not None and self.on_epoch is not None:
                self.on_epoch(run_key, epoch, row, ts)
            if run_key not in self.run_ids:
                self.run_ids[run_key] = start_run(job, start)
                self.epochs[run_key] = set()
            if epoch is not None and self.run_ids[run_key] and epoch not in self.epochs[run_key]:
                rows.setdefault(run_key, []).append((epoch, row, ts))
                self.epochs[run_key].add(epoch)
        for run_key, epoch_rows in rows.items():
            self.tracker.log_epochs(self.run_ids[run_key], epoch_rows)

    def pop(self, run_key: str) -> tuple[str | None, set[int]]:
        """(live run id, epochs logged) of a job about to be recorded; forgets it."""
        return self.run_ids.pop(run_key, None), self.epochs.pop(run_key, set())
