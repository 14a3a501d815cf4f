"""The task registry: task names → adapter classes, with did-you-mean errors.

An adapter class declares `name`, `archs` (architecture names it can build), `Options`
(a pydantic model of its study-file options, with defaults) and `layouts` (the data layouts it
reads, for `tprbench tasks`). See tasks/base.py for the methods the harness calls.
"""

from __future__ import annotations

import difflib
from typing import Callable


class TaskError(ValueError):
    """Unknown task or architecture, or task options that do not fit. Printed as one line, exit 2."""

    user_error = True


_TASKS: dict[str, type] = {}


def register_task(name: str) -> Callable[[type], type]:
    def decorate(cls: type) -> type:
        if name in _TASKS and _TASKS[name] is not cls:
            raise ValueError(f"task name {name!r} is already registered by {_TASKS[name].__qualname__}")
        _TASKS[name] = cls
        cls.name = name
        return cls

    return decorate


def _load_builtins() -> None:
    # Imported here, not at package import, so `import tasks` stays cheap.
    import importlib

    for module in ("tasks.logic.adapter", "tasks.nli.adapter", "tasks.lm.adapter", "tasks.transfer.adapter"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def available_tasks() -> list[str]:
    _load_builtins()
    return sorted(_TASKS)


def get_task(name: str) -> type:
    _load_builtins()
    if name in _TASKS:
        return _TASKS[name]
    close = difflib.get_close_matches(name, list(_TASKS), n=2, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise TaskError(f"unknown task {name!r}{hint} (available: {', '.join(sorted(_TASKS)) or 'none'})")
