"""Keep the terminal for tprbench's own lines: library chatter goes to the run directory's log.

Ray's C++ core writes straight to file descriptor 2 (GCS client retries, node-death notices,
state dumps), below anything Python's `logging` or `sys.stderr` can redirect; MLflow prints a
"View run … at" line per run it ends on a tracking server (switched off by the environment
variable MLflow reads for that). `stderr_to(path)` points descriptor 2 at a log file for the
length of a `tprbench run`, so those lines land in `<root>/logs/…log` with everything else the
libraries say, and puts the terminal back afterwards (the CLI's own error line comes after).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

QUIET_ENV = {
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # no "🏃 View run … at: http://…" per run
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def quiet_libraries() -> None:
    """Environment switches the libraries read (set unless the user set them)."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


def log_path(root: Path, study: str) -> Path:
    return Path(root) / "logs" / f"{study}-{time.strftime('%Y%m%d-%H%M%S')}.log"


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[Path]:
    """Descriptor 2 (and `sys.stderr`) → `path` for the block; restored on exit, also on errors."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab", buffering=0) as log:
        os.dup2(log.fileno(), 2)
        try:
            yield path
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
