"""The study file's tables as strict pydantic models, and their errors in plain words.

TOML already has types, so the models are strict ("3" is not an int here) and every table
rejects unknown keys, with a did-you-mean. `StudyError` carries one line per problem, each
naming the file and the key path; `validation_problems` turns pydantic's errors into those
lines. What the tables *mean* (tasks resolved, units checked, cells built) is `load`'s job.
"""

from __future__ import annotations

import os
import re
import types
import typing
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from .search_space import did_you_mean, show

NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
# A study name becomes a path component with more appended (`logs/<name>-YYYYmmdd-HHMMSS.log`,
# `locks/<name>.lock`, a writer's `.<name>.<pid>.tmp`) in a file system allowing 255 bytes, and
# MLflow's experiment name `tprbench/<name>` (256 characters in its SQL schema): 128 leaves room.
NAME_MAX = 128
DIRECTIONS = ("maximize", "minimize")


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


PRUNER_KEYS = {
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
