"""Study-file text → a validated `Study`: parse, resolve every table, check, one line a problem.

`parse_study` reads the TOML, validates it against `harness.study.schema`, then resolves what
the schema cannot check alone: env vars in data paths, each task against its registered
adapter (options, archs, metric, search keys), each unit spec against the unit registry, the
matrices' dims, and finally the cells themselves (each once, each buildable). Every problem
found is collected, so a file with three mistakes gets three lines, not one per attempt.
`select` adds the CLI's `--only` patterns: what `tprbench run` (and `bench train`) train.
"""

from __future__ import annotations

import itertools
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pydantic

from units.spec import spec_pattern

from .cells import Cell, MatrixConfig, Study, TaskConfig, UnitEntry, expand, filter_cells, filter_values
from .schema import PRUNER_KEYS, GridEntry, Matrix, StudyError, StudyFile, StudySection, TaskEntry, study_name_problem, validation_problems
from .search_space import did_you_mean, is_searchable, parse_space, show

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
    for key, kinds in PRUNER_KEYS.items():
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


# ---------------------------------------------------------------------------------------------
# A study file and `--only` patterns → the cells to run


def select(path: str | os.PathLike, only: list[str] | tuple[str, ...] = ()) -> tuple[Study, list[Cell]]:
    """The study and its cells, restricted by `--only` patterns; a filter that keeps no cell is
    a StudyError (exit 2) naming the filter and the values the study has, never "nothing to do".
    What `tprbench run` and `tprbench bench train` train."""
    study = load_study(path)
    cells = expand(study)
    if not only:
        return study, cells
    kept = filter_cells(cells, only)
    if not kept:
        keys = sorted({p.partition("=")[0].strip() for p in only})
        have = "; ".join(f"{k}: {', '.join(sorted({v for c in cells for v in _listed(c, k)}))}" for k in keys)
        raise StudyError(path, [(" ".join(f"--only {p}" for p in only), f"matches no cell of the study ({have})")])
    return study, kept


def _listed(cell: Cell, key: str) -> tuple[str, ...]:
    """A cell's values an error lists for `key`: a task's name and label (both select), a unit's
    spec as the study writes it (its canonical form, all options spelled out, would double a long list)."""
    values = filter_values(cell, key)
    return values if key == "task" else values[:1]
