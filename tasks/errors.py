"""Errors about what a person supplied — data, a task, its options — printed as one line (exit 2).

A leaf module: every part of `tasks/` raises these (the registry, the metadata, the trainer, the
optimiser) without importing another part to get them.
"""

from __future__ import annotations


class DataError(ValueError):
    """Missing or malformed data. The CLI prints it as one line and exits 2."""

    user_error = True


class TaskError(ValueError):
    """Unknown task or architecture, or task options that do not fit. Printed as one line, exit 2."""

    user_error = True


def where(path: object, line: int | None = None) -> str:
    """`path:line` for messages."""
    return f"{path}:{line}" if line is not None else str(path)
