"""A store that is unavailable for a while: retried with backoff, then one line.

Every write to the MLflow tracking store and every call to the Optuna storage goes through
`with_retry` (the writer's `Tracker.retry`, the driver, the worker's pruning reports): a store
that is locked, restarting or briefly unreachable costs a wait, not a study.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from ..diskfull import exception_chain, is_disk_full

RETRY_ENV = "TPRBENCH_STORE_RETRY_SECONDS"  # how long a write waits for an unavailable store
DEFAULT_RETRY_SECONDS = 120.0
T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """The MLflow tracking store (or Optuna storage) stayed unavailable past the retry window.

    The driver stops: what was recorded stays recorded, the runs not recorded yet are still
    RUNNING in Optuna and are dispatched again (from their checkpoints) by the next `run`."""

    user_error = True


def retry_seconds() -> float:
    try:
        return max(float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_SECONDS)), 0.0)
    except ValueError:
        return DEFAULT_RETRY_SECONDS


def is_transient(exc: BaseException) -> bool:
    """An error a store may recover from: database locked/unreachable, connection refused, 5xx.
    Out of disk space is not one, whatever its shape (harness.diskfull): waiting does not free space."""
    if is_disk_full(exc):
        return False
    try:
        from mlflow.exceptions import MlflowException
    except ImportError:  # pragma: no cover
        MlflowException = ()  # type: ignore[assignment]
    if isinstance(exc, MlflowException):
        return exc.get_http_status_code() >= 500
    if isinstance(exc, (OSError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    return name in ("OperationalError", "ConnectionError", "Timeout", "ConnectTimeout", "ReadTimeout")


def interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM, which the driver turns into one) that `exc` was raised while handling.

    A store's clean-up can replace the interrupt with an error of its own: Optuna's journal lock
    (`JournalFileOpenLock.release`) unlinks its rename file, and when the interrupt lands after
    that unlink its `except BaseException` unlinks again, so a FileNotFoundError -- transient to
    `is_transient` -- carries the KeyboardInterrupt as its context. Retried, the interrupt was
    lost and the driver ran the study to the end (CI, stop 55: exit 0 where 130 was due)."""
    return next((e for e in exception_chain(exc) if isinstance(e, KeyboardInterrupt)), None)


def with_retry(fn: Callable[[], T], what: str, on_retry: Callable[[str], None] | None = None, window: float | None = None) -> T:
    """Call `fn`; on a transient store error, retry with exponential backoff (0.5 s doubling to
    8 s) for up to `window` seconds (default $TPRBENCH_STORE_RETRY_SECONDS, else 120), then raise
    StoreUnavailable naming the store and the first line of the error. `fn` must be idempotent.

    The messages tell the time really waited, the calls included (an MLflow server call that
    hangs takes up to its own timeout: `http_defaults` keeps that short and lets this loop be
    the only one that retries)."""
    window = retry_seconds() if window is None else window
    started = time.monotonic()
    deadline, delay = started + window, 0.5
    while True:
        try:
            return fn()
        except Exception as exc:
            interrupt = interrupt_behind(exc)
            if interrupt is not None:
                raise interrupt from None
            if not is_transient(exc):
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            left = deadline - time.monotonic()
            waited = time.monotonic() - started
            if left <= 0:
                raise StoreUnavailable(
                    f"{what}: unavailable for {waited:.0f} s ({type(exc).__name__}: {first}); stopped. Everything "
                    f"recorded so far is kept: rerun the same command to resume (set {RETRY_ENV} to wait longer "
                    f"than {window:.0f} s)"
                ) from exc
            if on_retry is not None:
                on_retry(
                    f"{what}: {type(exc).__name__}: {first}; retrying in {min(delay, left):.1f} s "
                    f"(unavailable for {waited:.0f} s; giving up after {window:.0f} s)"
                )
            time.sleep(min(delay, left))
            delay = min(delay * 2, 8.0)


HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def http_defaults() -> None:
    """MLflow's client retries each HTTP call itself (7 times, backoff up to minutes, each call
    waiting up to 120 s): under `with_retry` a server that stopped answering was retried for
    278 s while the message said 120 s. The driver retries (once per call, 30 s timeout), unless
    the user set MLflow's own variables."""
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
