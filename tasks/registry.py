"""The task registry: task names → adapter classes, with did-you-mean errors.

An adapter class (a `tasks.base.TaskAdapter` subclass) declares `name`, `archs` (architecture
names it can build), `Options` (a pydantic model of its study-file options, with defaults),
`metrics` and `layouts`. See tasks/base.py for the methods the harness calls and
docs/adding-a-task.md for a complete example.

The lookup is the generic registry of units/plugins.py, as for units: built-ins (every
`tasks/<name>/adapter.py`, imported on the first lookup), entry points of installed packages
(group `tprbench.tasks`), import paths (`mypkg.tasks:MyTask` as a study's task name), a
base-class check and "did you mean". `task_meta(name)` gives a built-in's declarations
(tasks/<name>/meta.py, tasks/meta.py) without importing its adapter, or torch.
"""

from __future__ import annotations

from collections.abc import Callable

from units.plugins import Registry, package_modules

from .errors import TaskError

ENTRY_POINT_GROUP = "tprbench.tasks"


def _adapter_base() -> type:
    from .base import TaskAdapter

    return TaskAdapter


def _stamp(cls: type, name: str) -> None:
    cls.name = name


TASKS = Registry(
    "task",
    ENTRY_POINT_GROUP,
    builtins=lambda: package_modules("tasks", pattern="{name}.adapter"),
    error=TaskError,
    base=_adapter_base,
    on_add=_stamp,
    name_import_paths=True,
    metas=lambda: package_modules("tasks", pattern="{name}.meta"),
    on_meta=_stamp,
)


def register_task(name: str) -> Callable[[type], type]:
    """Class decorator: make a task adapter available under `name`."""
    return TASKS.register(name)


def register_task_meta(name: str) -> Callable[[type], type]:
    """Class decorator: the torch-free declarations of built-in task `name` (tasks/<name>/meta.py,
    a `tasks.meta.TaskMeta` subclass that the adapter subclasses)."""
    return TASKS.register_meta(name)


def task_meta(name: str) -> type:
    """What a study file needs of a task (Options, archs, metrics, HParams, defaults, check_unit)
    without importing its adapter (and torch): a built-in's `TaskMeta`, else the adapter class."""
    return TASKS.meta(name)


def available_tasks() -> list[str]:
    return TASKS.available()


def get_task(name: str) -> type:
    """The adapter class of a task name, entry point or `package.module:Class` path."""
    return TASKS.lookup(name)
