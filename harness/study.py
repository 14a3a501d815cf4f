"""Study files (TOML) → a validated `Study` → `Cell`s with stable ids.

    study = load_study("studies/quickstart.toml")     # raises StudyError (one line per problem)
    cells = expand(study)                              # task × arch × dim × input_dim × unit
    cells = filter_cells(cells, ["unit=tpru*", "dim=64"])

Schema (every table rejects unknown keys, with a did-you-mean; see docs/study-files.md)::

    [study]
    name = "quickstart"      # [A-Za-z0-9_.-]+; default: the file name without .toml
    description = ""
    trials = 2               # Optuna trials per cell (search phase), >= 0; 0 = no search, use the defaults
    seeds = 3                # final-phase runs per cell with the best parameters, >= 0 (seeds 0..n-1)
    epochs = 3               # required, >= 1
    metric = "valid_acc"     # optional; default: valid_<the adapter's `metric`>; must be a valid_<name> the task logs
    direction = "maximize"   # optional; default: the direction the task declares for that metric
    deterministic = true     # bitwise-reproducible kernels (not hashed: it does not change what is measured)

    [[tasks]]                # one or more
    name = "logic"           # a registered task (tasks.registry.get_task)
    label = "logic"          # optional, default = name; must be unique; used in cell labels
    data = "generated"       # "generated", a path, "~/…" or "${TPRBENCH_DATA}/…" (env vars expanded)
    units = ["tprn*"]        # optional: only the matrix units matching these globs (as --only unit=); default all
    [tasks.options]          # validated by the task adapter's `Options` pydantic model (defaults filled)

    [matrix]
    arch = ["plain"]         # a name or a list; each in every task's `archs`; default: each task's first arch
    dim = [64, 128]          # hidden sizes d (an int or a list); required unless every unit's options fix
                             # its size (tpr3: entity·relation·entity), which is then the cell's d
    input_dim = 300          # optional: embedding sizes d' (an int or a list); default: = dim
    units = ["lstm", "tpru[roles=32]"]   # unit specs
    [[matrix.grid]]          # a unit spec × the product of option lists (scalars count as one-item lists)
    unit = "tpru"
    roles = [8, 32]
    slices = [1, 8]

    Several `[[matrix]]` tables (instead of one `[matrix]`) each cross their own archs × dims ×
    units, and the study is their union: e.g. TPR-RNN with its own unit next to baselines that
    share another architecture and size. The same cell twice is an error.

    [search]                 # see harness/search_space.py: fixed values or distributions; names are
    lr = { log_uniform = [1e-4, 1e-2] }   # tasks.hparams.HParams fields (plus the task's own), checked here
    [search.defaults]        # optional: values for study.trials = 0

    [pruner]
    kind = "median"          # none | median | hyperband | successive_halving
    startup_trials = 5       # median only
    warmup_epochs = 0        # median only
    min_epochs = 1           # hyperband / successive_halving
    reduction_factor = 3     # hyperband / successive_halving

    [resources]
    cpus = 1.0               # per trial, > 0 (a fraction below 1 or a whole number, as Ray requires)
    gpus = 0.0               # per trial, >= 0 (0.25 packs four trials on one GPU)
    max_concurrent = 0       # 0 = as many as the cluster fits
    retries = 3              # Ray task retries for lost workers

Study files never execute code: every value is data. The single way a study file can load
code is a unit named by import path (`units = ["mypkg.cells:MyCell[k=3]"]`), which
`units.resolve` imports to check its options — the same thing `tprbench units` does with
that spec.

Cell ids: 12 hex chars of sha256 over canonical JSON of what affects a run's result — task
name, the task options that differ from their defaults, data *as written* (so
`${TPRBENCH_DATA}/x` gives the same id on a laptop and on a cluster), arch, the unit spec with
its non-default options (`tpru` = `tpru[roles=64]`; an option added to a unit or task later,
with a default, changes no existing id), dim, input_dim, epochs, the
normalised search space (defaults included), metric and direction. Not the study name,
trials, seeds, pruner or resources: raising trials or seeds continues the same cells, and two
studies that share a cell share its id.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from units.spec import glob_regex, spec_pattern

from .search_space import did_you_mean, is_searchable, parse_space, show

ID_VERSION = 3  # bump when the hashed identity changes shape or what every cell computes (3: fidelity defaults, e.g. E ~ N(0,1), two-layer encoders)
NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
# A study name becomes a path component with more appended (`logs/<name>-YYYYmmdd-HHMMSS.log`,
# `locks/<name>.lock`, a writer's `.<name>.<pid>.tmp`) in a file system allowing 255 bytes, and
# MLflow's experiment name `tprbench/<name>` (256 characters in its SQL schema): 128 leaves room.
NAME_MAX = 128
DIRECTIONS = ("maximize", "minimize")
FILTER_KEYS = ("arch", "dim", "id", "input_dim", "task", "unit")


class StudyError(ValueError):
    """A study file (or a cell filter) that cannot be used. One line per problem, each starting
    with the file path and naming the key path: `studies/x.toml: search.lr.low: must be > 0 …`."""

    user_error = True  # the CLI prints it without a traceback and exits 2

    def __init__(self, path: str | os.PathLike | None, problems: list[tuple[str | None, str]]) -> None:
        self.path = None if path is None else str(path)
        self.problems = list(problems)
        lines = []
        for where, message in self.problems:
            parts = [p for p in (self.path, where, message) if p]
            lines.append(": ".join(parts))
        super().__init__("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# The schema (pydantic). Strict: TOML already has types, so "3" is not an int here.


def _as_list(value: Any) -> Any:
    return [value] if not isinstance(value, (list, dict)) else value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


NonEmptyStr = Annotated[str, Field(min_length=1)]
PosInt = Annotated[int, Field(ge=1, le=65536)]


def study_name_problem(name: str) -> str | None:
    """Why `name` cannot name a study, or None. The one check of a study name, for everything
    every command does with it: it is a folder (`reports/<name>/`, `<root>/work/<name>/`), the
    start of file names (NAME_MAX) and part of MLflow's and Optuna's names. "." and ".." match
    the pattern but name the folder itself or its parent: the cells' run directories landed
    beside mlflow.db, and `report` wrote into the current directory."""
    if not re.fullmatch(NAME_PATTERN, name):
        return f"use only letters, digits, '_', '.' and '-', got {show(name)}"
    if name in (".", ".."):
        itself = "the folder itself" if name == "." else "the parent folder"
        return f"{name!r} means {itself} in a path, not a name of its own: use letters or digits too"
    if len(name) > NAME_MAX:
        return f"at most {NAME_MAX} characters (it names files and folders), got {len(name)}"
    return None


class StudySection(_Model):
    name: str | None = None

    @pydantic.field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        problem = None if value is None else study_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    description: str = ""
    trials: int = Field(0, ge=0, le=100_000)
    seeds: int = Field(3, ge=0, le=10_000)
    epochs: int = Field(ge=1, le=100_000)
    metric: NonEmptyStr | None = None
    direction: Literal["maximize", "minimize"] | None = None
    deterministic: bool = True


class TaskEntry(_Model):
    name: NonEmptyStr
    label: str | None = Field(None, pattern=NAME_PATTERN)
    data: NonEmptyStr = "generated"
    options: dict[str, Any] = Field(default_factory=dict)
    units: Annotated[list[NonEmptyStr], Field(min_length=1)] | None = None
    # Per-task overrides of [study].epochs and [search] (merged over it, name by name), for a task
    # whose training differs by design: e.g. bAbI's qa3 on its 1k file needs 10× the epochs (and
    # patience) of the 10k tasks for the same number of updates. Cells of tasks without them keep
    # their ids.
    epochs: int | None = Field(None, ge=1)
    search: dict[str, Any] = Field(default_factory=dict)


class GridEntry(BaseModel):
    """`unit` plus option lists; the option names are checked by the unit registry."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    unit: NonEmptyStr


def _size_free(specs: list[str]) -> str | None:
    """The first unit spec in `specs` that takes any hidden size (so its matrix needs `dim`); None
    when every unit fixes its own (tpr3). A spec that does not parse is reported on its own."""
    import units

    for text in specs:
        try:
            cls = units.unit_meta(units.parse_spec(text).name)
        except ValueError:  # UnitSpecError
            continue
        if getattr(cls, "implied_hidden_size", None) is None:
            return text
    return None


class Matrix(_Model):
    # units and grid come first: `dim` is checked against them (it may be left out only for units
    # whose options fix their size, e.g. tpr3)
    arch: Annotated[list[NonEmptyStr], BeforeValidator(_as_list), Field(min_length=1)] | None = None
    units: Annotated[list[NonEmptyStr], Field(min_length=1)] | None = None
    grid: Annotated[list[GridEntry], Field(min_length=1)] | None = None
    dim: Annotated[list[PosInt], BeforeValidator(_as_list), Field(min_length=1)] | None = Field(None, validate_default=True)
    input_dim: Annotated[list[PosInt], BeforeValidator(_as_list), Field(min_length=1)] | None = None

    @pydantic.field_validator("dim", mode="after")
    @classmethod
    def _dim_needed(cls, value: list[int] | None, info: pydantic.ValidationInfo) -> list[int] | None:
        specs = list(info.data.get("units") or []) + [g.unit for g in info.data.get("grid") or []]
        if value is not None:
            return value
        free = _size_free(specs) if specs else None
        if not specs or free is not None:
            whose = f": unit {free!r} takes any size" if free else ""
            raise ValueError(f"required key is missing{whose} (only units whose options fix their size, e.g. tpr3, may leave it out)")
        return value


class Pruner(_Model):
    kind: Literal["none", "median", "hyperband", "successive_halving"] = "median"
    startup_trials: int | None = Field(None, ge=0, le=100_000)
    warmup_epochs: int | None = Field(None, ge=0, le=100_000)
    min_epochs: int | None = Field(None, ge=1, le=100_000)
    reduction_factor: int | None = Field(None, ge=2, le=100)


class Resources(_Model):
    cpus: float = Field(1.0, gt=0, le=4096, allow_inf_nan=False)
    gpus: float = Field(0.0, ge=0, le=1024, allow_inf_nan=False)
    max_concurrent: int = Field(0, ge=0, le=1_000_000)
    retries: int = Field(3, ge=0, le=100)

    @property
    def threads(self) -> int:
        """Torch threads each run gets: its whole CPUs, at least one (a fraction of a CPU is one thread)."""
        return int(self.cpus) if self.cpus >= 1 else 1


def _as_matrices(value: Any) -> Any:
    """`[matrix]` (one table) or `[[matrix]]` (several): always a list here."""
    return [value] if isinstance(value, dict) else value


class StudyFile(_Model):
    study: StudySection
    tasks: Annotated[list[TaskEntry], Field(min_length=1)]
    matrix: Annotated[list[Matrix], BeforeValidator(_as_matrices), Field(min_length=1)]
    search: dict[str, Any] = Field(default_factory=dict)
    pruner: Pruner = Field(default_factory=Pruner)
    resources: Resources = Field(default_factory=Resources)


_PRUNER_KEYS = {
    "startup_trials": ("median",),
    "warmup_epochs": ("median",),
    "min_epochs": ("hyperband", "successive_halving"),
    "reduction_factor": ("hyperband", "successive_halving"),
}


# ---------------------------------------------------------------------------------------------
# pydantic errors → plain words with key paths


def key_path(loc: tuple[Any, ...] | list[Any], prefix: str = "") -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _strip(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0]
        else:
            return tp


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that validates the table at `loc` (for did-you-mean on unknown keys)."""
    tp: Any = root
    for part in loc:
        tp = _strip(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if not isinstance(part, str) or part not in tp.model_fields:
                return None
            tp = tp.model_fields[part].annotation
        elif typing.get_origin(tp) is list and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict and isinstance(part, str):
            tp = typing.get_args(tp)[1]
        else:
            return None
    tp = _strip(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _bound(x: Any) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


# A flat table from pydantic's error kinds to plain words: one branch per kind, nothing nested.
def _plain(err: dict[str, Any], root: type[BaseModel] | None) -> str:  # noqa: C901
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    got = f", got {show(value)}"
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        key = str(err["loc"][-1])
        model = _model_at(root, tuple(err["loc"][:-1])) if root is not None else None
        names = list(model.model_fields) if model is not None else []
        allowed = f"; allowed: {', '.join(names)}" if names else ""
        return f"unknown key {key!r}{did_you_mean(key, names)}{allowed}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected a whole number{got}"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"expected a number{got}"
    if kind in ("string_type",):
        return f"expected a string{got}"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false{got}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list{got}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a table{got}"
    if kind == "too_short":
        return "must not be empty"
    if kind == "greater_than":
        return f"must be > {_bound(ctx.get('gt'))}{got}"
    if kind == "greater_than_equal":
        return f"must be >= {_bound(ctx.get('ge'))}{got}"
    if kind == "less_than":
        return f"must be < {_bound(ctx.get('lt'))}{got}"
    if kind == "less_than_equal":
        return f"must be <= {_bound(ctx.get('le'))}{got}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        options = re.findall(r"'([^']*)'", expected)
        hint = did_you_mean(value, options) if isinstance(value, str) else ""
        return f"must be one of {expected}{got}{hint}"
    if kind == "string_pattern_mismatch":
        return f"use only letters, digits, '_', '.' and '-'{got}"
    if kind == "value_error":
        return str(err.get("msg", "")).removeprefix("Value error, ")
    return f"{str(err.get('msg', kind)).rstrip('.').lower()}{got}"


def validation_problems(exc: pydantic.ValidationError, prefix: str = "", root: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """One (key path, plain message) per pydantic error."""
    return [(key_path(err["loc"], prefix) or prefix or "(top level)", _plain(err, root)) for err in exc.errors()]


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
    search: dict[str, dict[str, Any]]  # normalised (harness.search_space)
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


# ---------------------------------------------------------------------------------------------
# Loading


_ENV_RE = re.compile(r"\$(?:\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def expand_data(text: str, where: str, problems: list[tuple[str, str]]) -> str:
    """`${VAR}` / `$VAR` and a leading `~` expanded; unset or empty variables are problems."""
    if text == "generated":
        return text

    def sub(match: re.Match[str]) -> str:
        name = match.group("braced") if match.group("braced") is not None else match.group("bare")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
            problems.append((where, f"bad variable reference {match.group(0)!r} in {text!r}"))
            return ""
        value = os.environ.get(name)
        if not value:
            problems.append((where, f"environment variable {name} is not set (used in {text!r}); export {name}=/path/to/data or write the path out"))
            return ""
        return value

    return os.path.expanduser(_ENV_RE.sub(sub, text))


def _search_problems(where: str, cls: type, task: str, space: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """The study's [search] checked against what the task's trainer reads: unknown names (with a
    did-you-mean) and values that do not validate (each default, choice and range end)."""
    from tasks.hparams import check_search_names, check_values

    problems = [(f"search.{name}", f"{message} ({where})") for name, message in check_search_names(list(space), cls.HParams, task)]
    if problems:
        return problems
    for name, p in space.items():
        values = [p.get("value", p.get("default"))] + list(p.get("choices", [])) + [p[k] for k in ("low", "high") if k in p]
        seen: list[Any] = []
        for value in values:
            if value is None or any(type(value) is type(u) and value == u for u in seen):
                continue
            seen.append(value)
            problems += [
                (f"search.{name}", f"{show(value)}: {message.split(', got ')[0]} ({where})")
                for _, message in check_values({name: value}, cls.defaults, cls.HParams)
            ]
    return problems


def _resolve_task(
    i: int, entry: TaskEntry, section: StudySection, space: dict[str, dict[str, Any]], problems: list[tuple[str, str]]
) -> TaskConfig | None:
    from tasks.registry import task_meta

    where = f"tasks[{i}]"
    try:
        cls = task_meta(entry.name)  # a built-in's declarations (tasks/<name>/meta.py): no torch
    except ValueError as exc:  # TaskError
        problems.append((f"{where}.name", str(exc)))
        return None
    n = len(problems)
    options: dict[str, Any] = {}
    model = getattr(cls, "Options", None)
    if model is None:
        for key in entry.options:
            problems.append((f"{where}.options.{key}", f"unknown key {key!r}: task {entry.name!r} takes no options"))
    else:
        fields = model.model_fields
        names = list(fields) + [f.alias for f in fields.values() if f.alias]
        for key in entry.options:
            if key not in names:
                problems.append(
                    (
                        f"{where}.options.{key}",
                        f"unknown key {key!r}{did_you_mean(key, names)}; task {entry.name!r} accepts {', '.join(fields) or 'no options'}",
                    )
                )
        if len(problems) == n:
            try:
                options = model.model_validate(dict(entry.options)).model_dump(mode="json")
            except pydantic.ValidationError as exc:
                # the task named too: `tasks[1]` alone sends the reader counting [[tasks]] tables
                problems.extend((key, f"{message} (task {entry.name!r})") for key, message in validation_problems(exc, f"{where}.options", model))
    data = expand_data(entry.data, f"{where}.data", problems)
    archs = tuple(getattr(cls, "archs", ()) or ())
    from tasks.errors import TaskError
    from tasks.meta import run_metric

    metric = direction = ""
    try:
        metric, direction = run_metric(cls, section.metric, section.direction)
    except TaskError as exc:
        problems.append(("study.metric", f"{exc} ({where})"))
    own_space = None
    if entry.search:
        extra, extra_problems = parse_space(entry.search, f"{where}.search")
        problems += extra_problems
        own_space = {**space, **extra}
    problems += _search_problems(where, cls, entry.name, own_space if own_space is not None else space)
    if len(problems) > n:
        return None
    units = tuple(entry.units) if entry.units is not None else None
    return TaskConfig(entry.name, entry.label or entry.name, options, data, entry.data, archs, metric, direction, units, entry.epochs, own_space)


def _grid_values(path: str, key: str, raw: Any, unit: str, given: dict[str, str], problems: list[tuple[str, str]]) -> list[Any] | None:
    """One grid option's values, checked (scalars, no repeats, not also in the spec); None if bad."""
    values = raw if isinstance(raw, list) else [raw]
    if key in given:
        problems.append((path, f"option {key!r} is given both in unit {unit!r} and as a grid list"))
        return None
    if not values:
        problems.append((path, "must not be empty"))
        return None
    ok = True
    for j, v in enumerate(values):
        if not (isinstance(v, (str, bool, int, float))):
            problems.append((f"{path}[{j}]" if isinstance(raw, list) else path, f"expected a number, string or true/false, got {show(v)}"))
            ok = False
        elif any(type(v) is type(u) and v == u for u in values[:j]):
            problems.append((path, f"{show(v)} is listed twice"))
            ok = False
    return values if ok else None


def _grid_units(i: int, entry: GridEntry, problems: list[tuple[str, str]], prefix: str = "matrix") -> list[tuple[str, str]]:
    import units

    where = f"{prefix}.grid[{i}]"
    try:
        base = units.parse_spec(entry.unit)
    except units.UnitSpecError as exc:
        problems.append((f"{where}.unit", str(exc)))
        return []
    lists = {key: _grid_values(f"{where}.{key}", key, raw, entry.unit, base.option_dict, problems) for key, raw in (entry.model_extra or {}).items()}
    if any(values is None for values in lists.values()):
        return []
    keys = list(lists)
    return [(str(base.with_options(**dict(zip(keys, combo)))), where) for combo in itertools.product(*lists.values())]


def _implied_dim(resolved: Any, where: str, prefix: str, problems: list[tuple[str, str]]) -> int | None:
    """The hidden size a unit's options fix (a matrix without `dim`); a problem for other units."""
    implied = resolved.implied_hidden_size
    if implied is None:
        problems.append(
            (
                where,
                f"unit {str(resolved.spec)!r} needs a hidden size: give {prefix}.dim (only units whose "
                f"options fix their size, e.g. tpr3, may leave it out)",
            )
        )
    return implied


def _unit_entry(spec: str, where: str, dims: list[int] | None, prefix: str, problems: list[tuple[str, str]]) -> UnitEntry | None:
    """One unit spec resolved and checked at every dim of its matrix (or the size it implies)."""
    import units

    try:
        resolved = units.resolve(spec)
    except units.UnitSpecError as exc:
        message = str(exc)
        problems.append((where, message if spec in message else f"{spec}: {message}"))
        return None
    implied = None
    if dims is None:
        implied = _implied_dim(resolved, where, prefix, problems)
        if implied is None:
            return None
    bad = False
    for d in dims or [implied]:
        try:
            units.resolve(spec, d)
        except units.UnitSpecError as exc:
            problems.append((where, f"{exc} ({prefix}.dim = {d})" if dims else str(exc)))
            bad = True
    return None if bad else UnitEntry(spec, resolved.canonical, where, resolved.identity, implied)


def _resolve_units(matrix: Matrix, dims: list[int] | None, problems: list[tuple[str, str]], prefix: str = "matrix") -> list[UnitEntry]:
    """The matrix's unit entries, each checked at every dim (or at the size its options imply)."""
    import units

    if matrix.units is None and matrix.grid is None:
        problems.append((prefix, f"no units: give {prefix}.units = [...] and/or [[{prefix.split('[')[0]}.grid]] tables"))
        return []
    candidates: list[tuple[str, str]] = []
    for i, text in enumerate(matrix.units or []):
        try:
            candidates.append((str(units.parse_spec(text)), f"{prefix}.units[{i}]"))
        except units.UnitSpecError as exc:
            problems.append((f"{prefix}.units[{i}]", str(exc)))
    for i, entry in enumerate(matrix.grid or []):
        candidates.extend(_grid_units(i, entry, problems, prefix))
    entries: list[UnitEntry] = []
    seen: dict[str, UnitEntry] = {}
    for spec, where in candidates:
        entry = _unit_entry(spec, where, dims, prefix, problems)
        if entry is None:
            continue
        if entry.canonical in seen:
            first = seen[entry.canonical]
            same = "" if first.spec == spec else f" (both are {entry.canonical})"
            problems.append(
                (where, f"duplicate cells: unit {spec!r} is the same unit as {first.spec!r} from {first.where}{same}; list each unit once")
            )
            continue
        seen[entry.canonical] = entry
        entries.append(entry)
    return entries


def _duplicates(values: list[Any], where: str, problems: list[tuple[str, str]]) -> None:
    for j, v in enumerate(values):
        if v in values[:j]:
            problems.append((f"{where}[{j}]", f"duplicate cells: {show(v)} is listed twice"))


def _toml(text: str, path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
        if match:
            message = message[: match.start()]
            raise StudyError(path, [(f"line {match.group(1)}", f"{message} (column {match.group(2)})")]) from None
        raise StudyError(path, [(None, f"not valid TOML: {message}")]) from None


def _check_sections(parsed: StudyFile, name: str, space: dict[str, Any], search_ok: bool, problems: list[tuple[str, str]]) -> None:
    """[study], [pruner] and [resources] against each other."""
    section, pruner = parsed.study, parsed.pruner
    problem = study_name_problem(name) if section.name is None else None
    if problem:
        problems.append(("study.name", f"missing, and the file name {name!r} is not a valid study name ({problem}): set study.name"))
    if section.trials > 0 and not is_searchable(space) and search_ok:
        problems.append(
            (
                "search",
                f"empty search space but study.trials = {section.trials}: add a distribution "
                "(e.g. lr = { log_uniform = [1e-4, 1e-2] }) or set study.trials = 0",
            )
        )
    for key, kinds in _PRUNER_KEYS.items():
        if getattr(pruner, key) is not None and pruner.kind not in kinds:
            problems.append((f"pruner.{key}", f"only used by kind = {' or '.join(repr(k) for k in kinds)}, not {pruner.kind!r}"))
    if pruner.min_epochs is not None and pruner.min_epochs > section.epochs:
        problems.append(("pruner.min_epochs", f"{pruner.min_epochs} is more than study.epochs = {section.epochs}"))
    if pruner.warmup_epochs is not None and pruner.warmup_epochs >= section.epochs:
        problems.append(("pruner.warmup_epochs", f"{pruner.warmup_epochs} leaves no epoch to prune in (study.epochs = {section.epochs})"))
    for key in ("cpus", "gpus"):
        value = getattr(parsed.resources, key)
        if value > 1 and value != int(value):
            problems.append((f"resources.{key}", f"Ray takes a fraction below 1 or a whole number, got {show(value)}"))


def _clash(i: int, task: TaskConfig, tasks: list[TaskConfig], task_index: list[int]) -> tuple[str, str] | None:
    """A resolved task that repeats an earlier one (same task/options/data/overrides, or the same label)."""
    for j, other in zip(task_index, tasks):
        if (other.name, other.options, other.data_source, other.epochs, other.search) == (
            task.name,
            task.options,
            task.data_source,
            task.epochs,
            task.search,
        ):
            return f"tasks[{i}]", f"duplicate cells: the same task, options, data and overrides as tasks[{j}]"
        if other.label == task.label:
            return (f"tasks[{i}].label", f"task label {task.label!r} is also used by tasks[{j}]: give each [[tasks]] entry a distinct label")
    return None


def _resolve_tasks(parsed: StudyFile, space: dict[str, Any], problems: list[tuple[str, str]]) -> list[TaskConfig]:
    tasks: list[TaskConfig] = []
    task_index: list[int] = []  # file index of each resolved task
    for i, entry in enumerate(parsed.tasks):
        task = _resolve_task(i, entry, parsed.study, space, problems)
        clash = None if task is None else _clash(i, task, tasks, task_index)
        if clash is not None:
            problems.append(clash)
        elif task is not None:
            tasks.append(task)
            task_index.append(i)
    return tasks


def _check_archs(archs: tuple[str, ...] | None, tasks: list[TaskConfig], problems: list[tuple[str, str]], prefix: str = "matrix") -> None:
    if archs is None:
        problems += [(f"tasks[{i}]", f"task {task.name!r} declares no architectures") for i, task in enumerate(tasks) if not task.archs]
        return
    _duplicates(list(archs), f"{prefix}.arch", problems)
    problems += [
        (
            f"{prefix}.arch[{j}]",
            f"task {task.name!r} has no architecture {arch!r}{did_you_mean(arch, task.archs)}; it has {', '.join(task.archs) or 'none'}",
        )
        for task in tasks
        for j, arch in enumerate(archs)
        if arch not in task.archs
    ]


def _resolve_matrix(matrix: Matrix, prefix: str, tasks: list[TaskConfig], problems: list[tuple[str, str]]) -> MatrixConfig:
    archs = tuple(matrix.arch) if matrix.arch is not None else None
    _check_archs(archs, tasks, problems, prefix)
    if matrix.dim is not None:
        _duplicates(matrix.dim, f"{prefix}.dim", problems)
    if matrix.input_dim is not None:
        _duplicates(matrix.input_dim, f"{prefix}.input_dim", problems)
    dims = list(dict.fromkeys(matrix.dim)) if matrix.dim is not None else None
    unit_entries = _resolve_units(matrix, dims, problems, prefix)
    return MatrixConfig(
        archs,
        tuple(matrix.dim) if matrix.dim is not None else None,
        tuple(matrix.input_dim) if matrix.input_dim is not None else None,
        tuple(unit_entries),
        prefix,
    )


def _check_cells(cells: list[Cell], tasks: list[TaskConfig], problems: list[tuple[str, str]]) -> None:
    """Every cell once, and each arch × unit one its task can build (`TaskAdapter.check_unit`)."""
    from tasks.registry import task_meta

    seen: dict[str, Cell] = {}
    checked: set[tuple[str, str, str]] = set()
    for cell in cells:
        if cell.id in seen:
            problems.append(("matrix", f"duplicate cells: {cell.label} and {seen[cell.id].label} are the same cell ({cell.id})"))
        seen[cell.id] = cell
        key = (cell.task, cell.arch, cell.unit)
        if key in checked:
            continue
        checked.add(key)
        check = getattr(task_meta(cell.task), "check_unit", None)
        try:
            if check is not None:
                check(cell.arch, cell.unit)
        except ValueError as exc:  # TaskError
            problems.append((cell.where, f"{exc} (cell {cell.label})"))


def _check_task_units(parsed: StudyFile, tasks: list[TaskConfig], unit_entries: list[UnitEntry], problems: list[tuple[str, str]]) -> None:
    """Every glob of a task's `units` must match a matrix unit (a typo would silently drop cells)."""
    for i, entry in enumerate(parsed.tasks):
        for j, glob in enumerate(entry.units or ()):
            rx = spec_pattern(glob)
            if not any(rx.match(v) for u in unit_entries for v in (u.spec, u.canonical)):
                problems.append(
                    (f"tasks[{i}].units[{j}]", f"{glob!r} matches no unit of the matrix ({', '.join(u.spec for u in unit_entries) or 'none'})")
                )


def parse_study(text: str, path: str | os.PathLike = "<study>") -> Study:
    """Validate study-file text; `path` is only used in messages (and for the default name)."""
    path = str(path)
    raw = _toml(text, path)
    space, search_problems = parse_space(raw.get("search"))
    try:
        parsed = StudyFile.model_validate(raw)
    except pydantic.ValidationError as exc:
        problems = validation_problems(exc, root=StudyFile)
        if isinstance(raw.get("matrix"), dict):  # one [matrix] table: its keys read matrix.x, not matrix[0].x
            problems = [(re.sub(r"^matrix\[0\]", "matrix", where), message) for where, message in problems]
        problems += [p for p in search_problems if not any(p[0] == q[0] for q in problems)]
        raise StudyError(path, problems) from None
    problems: list[tuple[str, str]] = list(search_problems)
    section = parsed.study
    name = section.name or Path(path).stem
    _check_sections(parsed, name, space, not search_problems, problems)
    tasks = _resolve_tasks(parsed, space, problems)
    single = isinstance(raw.get("matrix"), dict)
    matrices = [_resolve_matrix(m, "matrix" if single else f"matrix[{k}]", tasks, problems) for k, m in enumerate(parsed.matrix)]
    _check_task_units(parsed, tasks, [u for m in matrices for u in m.units], problems)
    if problems:
        raise StudyError(path, problems)
    study = Study(
        path=path,
        name=name,
        description=section.description,
        trials=section.trials,
        seeds=section.seeds,
        epochs=section.epochs,
        metric=section.metric,
        direction=section.direction,
        tasks=tuple(tasks),
        matrices=tuple(matrices),
        search=space,
        pruner=parsed.pruner,
        resources=parsed.resources,
        deterministic=section.deterministic,
    )
    _check_cells(expand(study), tasks, problems)  # a last guard: every cell once, and buildable
    if problems:
        raise StudyError(path, problems)
    return study


def load_study(path: str | os.PathLike) -> Study:
    """Read and validate a study file. Raises StudyError, whose lines start with the path."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StudyError(path, [(None, "study file not found")]) from None
    except IsADirectoryError:
        raise StudyError(path, [(None, "is a directory, not a study file")]) from None
    except UnicodeDecodeError as exc:
        raise StudyError(path, [(None, f"not UTF-8 text: {exc.reason} at byte {exc.start}")]) from None
    return parse_study(text, path)


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


__all__ = [
    "Cell",
    "GridEntry",
    "Matrix",
    "Pruner",
    "Resources",
    "Study",
    "StudyError",
    "StudyFile",
    "StudySection",
    "TaskConfig",
    "TaskEntry",
    "UnitEntry",
    "cell_id",
    "expand",
    "expand_data",
    "filter_cells",
    "load_study",
    "parse_study",
    "validation_problems",
]
