"""Load: a study's record as frames (through harness.record, the one reader) and what a STUDY
argument names (a study file or a recorded study's name)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..record.reader import RecordReader, ReportError


def load_runs(tracking_uri: str, study_name: str, cell_ids: Iterable[str] | None = None) -> Any:
    """One row per recorded trial/seed run of the study (harness.record.reader.RecordReader.runs)."""
    return RecordReader(tracking_uri, study_name).runs(cell_ids)


def load_cells(tracking_uri: str, study_name: str, cell_ids: Iterable[str] | None = None) -> Any:
    """One row per cell run of the study: what was crossed, the planned final parameters, the schema tags."""
    return RecordReader(tracking_uri, study_name).cells(cell_ids)


def load_history(tracking_uri: str, study_name: str, run_ids: Iterable[str] | None = None, keys: Iterable[str] | None = None) -> Any:
    """Per-epoch metrics as a long frame: run_id, key, step (= epoch), value; sorted."""
    return RecordReader(tracking_uri, study_name).history(run_ids, keys)


def resolve_study(study: str) -> tuple[str, int | None, list[str] | None, str | None]:
    """STUDY argument → (name, seeds wanted, cell ids to restrict to, note).

    A .toml file is read with harness.study (its cells restrict the rows); if that module is
    missing or the file does not validate here (e.g. a data path's env var is unset), only
    `[study].name` and `seeds` are read with tomllib. Anything else is a study name.
    """
    path = Path(study)
    if not (study.endswith(".toml") or path.is_file()):
        return _checked_name(study, "study name"), None, None, None
    if not path.is_file():
        raise ReportError(f"study file {study} not found (give a study file or a recorded study's name)")
    note = None
    try:
        from harness.study.cells import expand
        from harness.study.load import load_study

        st = load_study(path)
        section = getattr(st, "study", st)
        return section.name, int(section.seeds), [c.id for c in expand(st)], None
    except ImportError:
        note = "harness.study is not available: reporting every cell recorded for the study"
    except Exception as exc:  # a study that does not validate here still names its record
        if not getattr(type(exc), "user_error", False):
            raise
        note = f"{study} does not validate here ({str(exc).splitlines()[0]}); reporting every cell recorded for the study"
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ReportError(f"{study}: cannot read the study file: {exc}") from None
    section = data.get("study", {}) if isinstance(data.get("study"), dict) else {}
    name = _checked_name(str(section.get("name") or path.stem), f"{study}: study.name")
    seeds = section.get("seeds")
    return name, (int(seeds) if isinstance(seeds, int) else 3), None, note


def _checked_name(name: str, what: str) -> str:
    """A study name that did not come through the study schema (a name on the command line, a file
    read without it), checked by the schema's own rule: `reports/<name>/` is written from it."""
    from harness.study.schema import study_name_problem

    problem = study_name_problem(name)
    if problem:
        raise ReportError(f"{what} {name!r}: {problem}")
    return name


def load_record(tracking_uri: str, study_name: str, cell_ids: Iterable[str] | None = None, root: Any = None) -> tuple[Any, Any]:
    """(runs, cells) of a study, restricted to `cell_ids` when given. Raises ReportError if empty.
    `root`: the run directory, where the summary of ended runs lives — needed for a tracking
    server (a SQLite file's summary sits beside it): without one every run is read again."""
    reader = RecordReader(tracking_uri, study_name, root=root)
    ids = None if cell_ids is None else list(cell_ids)
    runs, cells = reader.runs(ids), reader.cells(ids)
    if not len(cells):
        raise ReportError(
            f"study {study_name!r} in {tracking_uri}: no cells recorded" + (" for the cells of this study file" if cell_ids is not None else "")
        )
    return runs, cells
