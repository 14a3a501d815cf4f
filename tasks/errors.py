"""Errors about data a person supplied: the message names the file (and line) and what to do."""

from __future__ import annotations


class DataError(ValueError):
    """Missing or malformed data. The CLI prints it as one line and exits 2."""

    user_error = True


def where(path: object, line: int | None = None) -> str:
    """`path:line` for messages."""
    return f"{path}:{line}" if line is not None else str(path)
