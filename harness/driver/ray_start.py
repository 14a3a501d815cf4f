"""Ray for a study: connect to a cluster (or start a local one) and count the runs it fits.

A wrong address fails within seconds in one line (Ray itself retries for minutes); a local Ray
that misses its start-up deadline on a loaded machine is started again; a per-run request the
cluster can never meet stops the study before anything is dispatched.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from .errors import RunnerError
from .ray_watchdog import start as start_watchdog
from .ray_watchdog import unmark

ADDRESS_TIMEOUT = 5.0  # seconds a cluster address gets to accept a connection before `run` gives up


def check_address(address: str, timeout: float = ADDRESS_TIMEOUT) -> None:
    """Fail within seconds, in one line, when nothing listens at a Ray address (`host:port` or
    `ray://host:port`). Ray itself retries a wrong address for minutes, printing GCS client errors.
    `auto` (and anything without a port) is left to Ray, which answers at once when no cluster runs."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except socket.gaierror as exc:
        why = f"unknown host {host!r} ({exc.strerror})"
    except TimeoutError:
        why = f"no answer within {timeout:.0f} s"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    raise RunnerError(
        f"--address {address}: no Ray cluster reachable there ({why}); start one with "
        "`ray start --head --port 6379` (docs/cluster.md) or check the host and port"
    )


def init_ray(address: str | None, num_cpus: int | None = None, temp_dir: str | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    if address:
        ray.init(address=address, **{k: v for k, v in kwargs.items() if k != "include_dashboard"})
    else:
        start_watchdog()  # a SIGKILLed driver's Ray processes end with it (harness/driver/ray_watchdog.py)
        try:
            start_local_ray(lambda: ray.init(num_cpus=num_cpus, _temp_dir=temp_dir, **kwargs), ray.shutdown)
        finally:
            unmark()
    stop_on_sigterm()


_terminated = False


def terminated() -> bool:
    """Whether SIGTERM stopped this process's driver (the CLI's exit message and code)."""
    return _terminated


def stop_on_sigterm() -> None:
    """Make SIGTERM stop the driver as Ctrl-C does: in-flight runs cancelled (they resume from their
    checkpoints), live runs dropped, cell runs and the study run ended KILLED, a record snapshot.

    Why: SIGTERM is how a cluster scheduler, `kill` or systemd stops a job, and `ray.init` leaves a
    handler (Ray core's failure-signal dump) that ends the process at once, with no `finally`: the
    record kept RUNNING runs until the next driver tidied them (measured: a SIGTERMed `run` left its
    cell runs RUNNING). A second SIGTERM while closing ends the process at once (the default)."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread only
        return

    def handler(signum: int, frame: Any) -> None:
        global _terminated
        _terminated = True  # what the CLI reads: the exception may come out of Ray's waits re-raised as another
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt  # where Ctrl-C's would be, so that it stops the driver the same way

    signal.signal(signal.SIGTERM, handler)


LOCAL_RAY_ATTEMPTS = 3


def start_local_ray(init: Any, shutdown: Any, attempts: int = LOCAL_RAY_ATTEMPTS, pause_s: float = 5.0) -> None:
    """Start a local Ray, retrying when its node does not come up in time.

    Ray waits a hard-coded 30 s for its raylet to register with the GCS and then raises
    "The current node timed out during startup"; an overloaded machine misses that (measured on
    this project's 2-core machine at load 38: two studies in a row failed). A retry after
    `ray.shutdown()` usually succeeds; after `attempts` the user gets one line, not a traceback."""
    for attempt in range(1, attempts + 1):
        try:
            init()
            return
        except Exception as exc:  # Ray raises a bare Exception here
            if "timed out during startup" not in str(exc):
                raise
            shutdown()
            if attempt == attempts:
                raise RunnerError(
                    f"local Ray did not start ({attempts} attempts, Ray waits 30 s each for its node): "
                    "the machine is probably overloaded; rerun later (the study resumes)"
                ) from None
            logging.getLogger(__name__).warning("local Ray did not start (attempt %d of %d); retrying", attempt, attempts)
            time.sleep(pause_s * attempt)


def check_fits(resources: Any) -> None:
    """One line, before anything is dispatched, when no trial could ever start: its request
    (`[resources] cpus`/`gpus`) is more than the whole cluster has. Ray would wait for such a
    task forever, without a word."""
    import ray

    total = ray.cluster_resources()
    for name, want in (("cpus", resources.cpus), ("gpus", resources.gpus or 0)):
        have = total.get(name[:-1].upper(), 0)
        if want > have:
            raise RunnerError(
                f"[resources] {name} = {want:g} per trial, but the Ray cluster has {have:g} in all: no trial "
                f"could start (lower it, or run on a cluster that has them: --address, docs/cluster.md)"
            )


def slots(resources: Any) -> int:
    """How many trials the cluster fits at once with the study's per-trial request."""
    import ray

    total = ray.cluster_resources()
    fit = int(total.get("CPU", 1) // max(resources.cpus, 1e-9))
    if resources.gpus:
        fit = min(fit, int(round(total.get("GPU", 0) / resources.gpus, 6)))
    if resources.max_concurrent:
        fit = min(fit, resources.max_concurrent)
    return max(fit, 1)
