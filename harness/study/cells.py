"""The validated study, its cells and their ids; a study → its cells; the `--only` filters.

Everything here is plain frozen dataclasses built by `harness.study.load` from a checked file:
nothing in this module reads a file or a registry (except a task's option defaults, which a
cell's id leaves out when they are at their default).

Cell ids: 12 hex chars of sha256 over canonical JSON of `Cell.identity()` (see the package
docstring for what it includes and why); `ID_VERSION` is part of it.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from units.spec import glob_regex, spec_pattern

from .schema import Pruner, Resources, StudyError, StudySection
from .search_space import did_you_mean

ID_VERSION = 3  # bump when the hashed identity changes shape or what every cell computes (3: fidelity defaults, e.g. E ~ N(0,1), two-layer encoders)
FILTER_KEYS = ("arch", "dim", "id", "input_dim", "task", "unit")


# ---------------------------------------------------------------------------------------------
# The validated study and its cells


@dataclass(frozen=True)
class TaskConfig:
    """One `[[tasks]]` entry, resolved: options with the task's defaults, data with env vars expanded."""

    name: str
    label: str
    options: dict[str, Any]
    data: str
    data_source: str  # as written in the file (hashed into cell ids)
    archs: tuple[str, ...]
    metric: str
    direction: str
    units: tuple[str, ...] | None = None  # globs over the matrix's unit specs; None: every unit
    epochs: int | None = None  # the entry's own epochs (None: [study].epochs)
    search: dict[str, dict[str, Any]] | None = None  # [search] with the entry's overrides (None: none)

    def runs_unit(self, unit: UnitEntry) -> bool:
        """Whether this task's cells include `unit` (a task entry may keep only some matrix units,
        e.g. one with BiDAF's `modelling_unit` set only for the unit it was meant for)."""
        return self.units is None or any(spec_pattern(g).match(v) for g in self.units for v in (unit.spec, unit.canonical))


@dataclass(frozen=True)
class UnitEntry:
    spec: str  # normalised spec as written, e.g. "tpru[roles=32,slices=8]"
    canonical: str  # every option spelled out
    where: str  # key path in the study file, e.g. "matrix.grid[0]"
    identity: str = ""  # only non-default options: what cell ids hash
    implied_dim: int | None = None  # the hidden size the unit's options fix (tpr3), when the matrix gives no dim


@dataclass(frozen=True)
class MatrixConfig:
    """One `[matrix]` table, resolved: its archs × dims × input dims × units."""

    archs: tuple[str, ...] | None  # None: each task's first arch
    dims: tuple[int, ...] | None  # None: each unit's implied size
    input_dims: tuple[int, ...] | None  # None: input_dim = dim
    units: tuple[UnitEntry, ...]
    where: str = "matrix"

    def dims_of(self, unit: UnitEntry) -> list[tuple[int, int]]:
        """(dim, input_dim) pairs this unit is crossed with."""
        dims = self.dims if self.dims is not None else (unit.implied_dim,)
        return [(d, e) for d in dims for e in (self.input_dims or (d,))]


@dataclass(frozen=True)
class Study:
    path: str
    name: str
    description: str
    trials: int
    seeds: int
    epochs: int
    metric: str | None  # as written (None: each task's default; see TaskConfig.metric)
    direction: str | None
    tasks: tuple[TaskConfig, ...]
    matrices: tuple[MatrixConfig, ...]
    search: dict[str, dict[str, Any]]  # normalised (harness.study.search_space)
    pruner: Pruner
    resources: Resources
    deterministic: bool = True

    @property
    def cells(self) -> list[Cell]:
        return expand(self)

    @property
    def units(self) -> tuple[UnitEntry, ...]:
        """Every unit entry of every matrix, in file order."""
        return tuple(u for m in self.matrices for u in m.units)

    @property
    def study(self) -> StudySection:
        """The `[study]` table as validated, with the name resolved (`study.study.trials` == `study.trials`)."""
        return StudySection(
            name=self.name,
            description=self.description,
            trials=self.trials,
            seeds=self.seeds,
            epochs=self.epochs,
            metric=self.metric,
            direction=self.direction,
            deterministic=self.deterministic,
        )


def non_default_options(task: str, options: dict[str, Any]) -> dict[str, Any]:
    """Task options minus those at their default: a task option added later (with a default)
    leaves every existing cell id, and so its records, untouched."""
    try:
        from tasks.registry import task_meta

        defaults = _option_defaults(task_meta(task).Options)
    except Exception:  # an unknown task is reported elsewhere; hash everything
        return options
    missing = object()
    return {key: value for key, value in options.items() if defaults.get(key, missing) != value}


@functools.lru_cache(maxsize=64)
def _option_defaults(options_model: type) -> dict[str, Any]:
    """A task's option defaults, read once per options model: every cell's id needs them, and
    pydantic's `get_default` costs ~2 µs a field (at 10,000 cells)."""
    return {key: info.get_default(call_default_factory=True) for key, info in options_model.model_fields.items()}


def cell_id(identity: dict[str, Any]) -> str:
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Cell:
    """One task × arch × dim × unit of a study: what one Optuna study and its seed runs train.

    `id` is computed from `identity()` (everything that affects a run's result), never passed in.
    Treat the dict fields as read-only.
    """

    study: str
    task: str
    task_label: str
    task_options: dict[str, Any]
    data: str  # resolved (env vars expanded)
    data_source: str  # as written
    arch: str
    unit: str  # normalised spec as written, e.g. "tpru[roles=32,slices=8]"
    unit_canonical: str  # every option incl. defaults
    dim: int
    input_dim: int
    epochs: int
    search: dict[str, dict[str, Any]]
    metric: str
    direction: str
    unit_identity: str = ""  # only non-default options (what the id hashes); "" = use unit_canonical
    where: str = field(default="matrix", compare=False)  # the study file's key path of its unit (for messages)
    id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", cell_id(self.identity()))

    def __hash__(self) -> int:
        return hash(self.id)

    def identity(self) -> dict[str, Any]:
        """The hashed part: not the study name, trials, seeds, pruner or resources."""
        return {
            "v": ID_VERSION,
            "task": self.task,
            "task_options": non_default_options(self.task, self.task_options),
            "data": self.data_source,
            "arch": self.arch,
            "unit": self.unit_identity or self.unit_canonical,
            "dim": self.dim,
            "input_dim": self.input_dim,
            "epochs": self.epochs,
            "search": self.search,
            "metric": self.metric,
            "direction": self.direction,
        }

    @property
    def label(self) -> str:
        """`logic/plain/d64/tpru[roles=32]` (`d64e300` when input_dim differs from dim)."""
        dims = f"d{self.dim}" + (f"e{self.input_dim}" if self.input_dim != self.dim else "")
        return f"{self.task_label}/{self.arch}/{dims}/{self.unit}"

    def as_dict(self) -> dict[str, Any]:
        out = {name: copy.deepcopy(getattr(self, name)) for name in self.__dataclass_fields__}
        out["label"] = self.label
        return out


_LAST_EXPANDED: list[Any] = [None, []]  # (study, its cells): the last study expanded


def expand(study: Study) -> list[Cell]:
    """The study's cells in a deterministic order: task, arch, dim, input_dim, unit (file order).

    The last study's cells are kept (a Study is frozen, and so are its cells): parsing expands
    it once to check the cells, and the command that loaded it asks again (2 × 1.5 s at 10,000
    cells)."""
    if _LAST_EXPANDED[0] is study:
        return list(_LAST_EXPANDED[1])
    cells = _expand(study)
    _LAST_EXPANDED[:] = [study, cells]
    return list(cells)


def _plain_copy(value: Any) -> Any:
    """A copy of JSON-like data (dicts, lists, scalars): what `copy.deepcopy` gives for a cell's
    options and search space, at a tenth of its cost (no memo)."""
    if type(value) is dict:
        return {k: _plain_copy(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_plain_copy(v) for v in value)
    if isinstance(value, (str, int, float, bool, type(None))):
        return value  # immutable
    return copy.deepcopy(value)  # anything else, as before


def _expand(study: Study) -> list[Cell]:
    cells: list[Cell] = []
    for task in study.tasks:
        for matrix in study.matrices:
            archs = matrix.archs if matrix.archs is not None else task.archs[:1]
            if matrix.dims is not None:  # dim, input_dim, then unit (as before several matrices existed)
                combos = (
                    [(d, e, unit) for d, e in matrix.dims_of(matrix.units[0]) for unit in matrix.units if task.runs_unit(unit)]
                    if matrix.units
                    else []
                )
            else:  # each unit at its own size
                combos = [(d, e, unit) for unit in matrix.units if task.runs_unit(unit) for d, e in matrix.dims_of(unit)]
            for arch, (dim, input_dim, unit) in itertools.product(archs, combos):
                cells.append(
                    Cell(
                        study=study.name,
                        task=task.name,
                        task_label=task.label,
                        task_options=_plain_copy(task.options),
                        data=task.data,
                        data_source=task.data_source,
                        arch=arch,
                        unit=unit.spec,
                        unit_canonical=unit.canonical,
                        unit_identity=unit.identity,
                        dim=dim,
                        input_dim=input_dim,
                        epochs=task.epochs or study.epochs,
                        search=_plain_copy(study.search if task.search is None else task.search),
                        metric=task.metric,
                        direction=task.direction,
                        where=unit.where,
                    )
                )
    return cells


# ---------------------------------------------------------------------------------------------
# --only filters


def filter_values(cell: Cell, key: str) -> tuple[str, ...]:
    """What an `--only KEY=GLOB` is matched against: a task's name and label, a unit's spec and
    canonical form, else the field as text (also what an error lists when nothing matched)."""
    if key == "task":
        return (cell.task, cell.task_label)
    if key == "unit":
        return (cell.unit, cell.unit_canonical)
    return (str(getattr(cell, key)),)


def filter_cells(cells: list[Cell], patterns: list[str] | tuple[str, ...]) -> list[Cell]:
    """Keep the cells that match every `key=glob` pattern (keys: arch, dim, id, input_dim, task, unit).

    `unit=tpru*` matches tpru and its variants, `unit=tpru[roles=32]` is literal (only `*` and
    `?` are wildcards), `task=` matches the task name or label, `unit=` the spec or its canonical
    form, by `units.spec.spec_pattern` (options in any order)."""
    checks: list[tuple[str, re.Pattern[str]]] = []
    problems: list[tuple[str | None, str]] = []
    for pattern in patterns:
        key, sep, glob = pattern.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append((f"--only {pattern!r}", f"expected KEY=GLOB with KEY one of {', '.join(FILTER_KEYS)}"))
        elif key not in FILTER_KEYS:
            problems.append((f"--only {pattern!r}", f"unknown key {key!r}{did_you_mean(key, FILTER_KEYS)}; use one of {', '.join(FILTER_KEYS)}"))
        else:
            checks.append((key, spec_pattern(glob) if key == "unit" else glob_regex(glob.strip())))
    if problems:
        raise StudyError(None, problems)
    return [cell for cell in cells if all(any(rx.match(v) for v in filter_values(cell, key)) for key, rx in checks)]
