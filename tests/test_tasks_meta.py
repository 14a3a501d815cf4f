"""The built-in tasks' torch-free declarations (tasks/<name>/meta.py) are their adapters'.

Study files are checked against `task_meta(name)` (no torch); runs use the adapter. Every
built-in adapter must subclass its metadata class and redeclare none of it, so there is one
declaration of each option, architecture, metric and default.
"""

from __future__ import annotations

import pytest

from tasks.meta import TaskMeta
from tasks.registry import TASKS, get_task, task_meta

DECLARED = (
    "archs",
    "Options",
    "HParams",
    "layouts",
    "metric",
    "metrics",
    "report_layout",
    "defaults",
    "references",
    "check_unit",
    "resolve_hparams",
    "metric_direction",
)


def _builtins() -> list[str]:
    TASKS.load_builtins()
    return sorted(name for name, cls in TASKS.entries.items() if isinstance(cls, type) and cls.__module__.startswith("tasks."))


def test_every_builtin_task_has_metadata_and_no_metadata_lacks_a_task():
    names = _builtins()
    assert {"autoencode", "babi", "lm", "logic", "nli", "transfer"} <= set(names)
    TASKS.load_metas()
    assert sorted(TASKS.metas) == names


@pytest.mark.parametrize("name", _builtins())
def test_the_adapter_subclasses_its_metadata_and_redeclares_none_of_it(name):
    adapter, meta = get_task(name), task_meta(name)
    assert meta is not adapter and issubclass(meta, TaskMeta) and issubclass(adapter, meta)
    assert meta.name == adapter.name == name
    # nothing between the adapter and its metadata in the MRO declares these again
    mro = adapter.__mro__
    between = mro[: mro.index(meta)]
    for attr in DECLARED:
        where = [k.__qualname__ for k in between if attr in vars(k)]
        assert not where, f"{attr} of task {name!r} is declared again in {where}: declare it in tasks/{name}/meta.py"


def test_a_plugin_task_is_its_own_metadata():
    assert task_meta("tasks.logic.adapter:LogicTask") is get_task("logic")


def test_unknown_task_reads_as_before():
    from tasks.errors import TaskError

    with pytest.raises(TaskError, match="unknown task 'logik'; did you mean 'logic'"):
        task_meta("logik")
