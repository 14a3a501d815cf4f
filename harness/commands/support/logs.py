"""Third-party library logs go to a file under the run directory, not to the terminal.

MLflow logs a full SQLAlchemy traceback for every failed store call (`_logger.exception`), and
alembic its migrations; on a locked or full store that is dozens of lines around the one line
the driver says itself. `route_library_logs` sends the loggers of those libraries to
`<root>/logs/libraries.log` (and keeps MLflow from installing its own stderr handler when it is
imported later: MLFLOW_CONFIGURE_LOGGING=false). A log file that cannot be written (the disk is
full) drops the record silently: the command's own error line is what matters then.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

#: logger → level written to the file (SQLAlchemy at INFO would echo every SQL statement).
LIBRARIES = {"mlflow": logging.INFO, "alembic": logging.INFO, "sqlalchemy": logging.WARNING, "urllib3": logging.WARNING}
FILE = "libraries.log"


class _QuietFileHandler(logging.FileHandler):
    """A FileHandler that creates its folder on first use and never prints its own failures."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        pass


def route_library_logs(root: str | Path) -> Path:
    """Send the libraries' loggers to `<root>/logs/libraries.log`; returns the file's path."""
    os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
    path = Path(root) / "logs" / FILE
    handler = _QuietFileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name, level in LIBRARIES.items():
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(level)
    return path
