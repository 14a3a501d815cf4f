"""What a study's record says of each cell, read without changing (or creating) anything.

`study show` reads it (no Ray, torch, pandas or MLflow imported: tests/test_lazy_imports.py),
from the Optuna journal and the MLflow record; the driver counts a cell the same way
(harness.driver.cells). `describe_optuna_study` is what optuna-dashboard shows beside a cell's
Optuna study.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.result import RunStatus, is_diverged

from ..record.compressed import reading_root
from ..record.contract import Phase, RunKey, Tag, will_retry
from ..record.reader import RecordReader
from ..record.sources import default_tracking_uri
from ..record.storage import cell_study_name, default_storage_url, read_trial_states
from .cells import cell_status, count_trials

if TYPE_CHECKING:
    from ..study.cells import Cell, Study


def study_status(
    study: Study, cells: list[Cell], root: Path, tracking_uri: str | None = None, storage_url: str | None = None
) -> list[dict[str, Any]]:
    """What is done per cell, read from Optuna and MLflow without changing (or creating) either."""
    root = Path(root).resolve()
    ids = [c.id for c in cells]
    read = reading_root(root)  # a committed mlflow.db.gz: its decompressed copy (the journal is read where it is)
    reader = RecordReader(tracking_uri or default_tracking_uri(read), study.name, must_exist=False, root=read)
    records = reader.run_records(ids)
    tags_by_cell = reader.cell_tags(ids)
    journal = storage_url or default_storage_url(root)
    names = [cell_study_name(study.name, c.id) for c in cells]
    trials = read_trial_states(journal, names)
    seeds_by_cell: dict[str, list[Any]] = {}
    trials_by_cell: dict[str, list[Any]] = {}
    for text, rec in records.items():
        key = RunKey.parse(text)
        if key is None:
            continue
        if key.phase is Phase.FINAL:
            seeds_by_cell.setdefault(rec.cell_id, []).append((key, rec))
        else:
            trials_by_cell.setdefault(rec.cell_id, []).append(rec)
    rows = []
    for cell, name in zip(cells, names):
        done, failed, pruned, unfinished = count_trials(trials.get(name, []))
        final_hash = tags_by_cell.get(cell.id, {}).get(Tag.FINAL_PARAMS_HASH)
        seeds = [r for k, r in seeds_by_cell.get(cell.id, []) if final_hash and k.params_hash == final_hash]
        cell_trials = trials_by_cell.get(cell.id, [])
        errored = [r for r in cell_trials + seeds if r.status == RunStatus.ERRORED]
        retried = [r for r in errored if will_retry(r.status, r.tags)]
        paused = [r for r in cell_trials + seeds if r.status == RunStatus.PAUSED]
        # An errored trial to be retried, or a paused one, is still unfinished in Optuna: waiting, not running.
        running = max(len(unfinished) - sum(r in retried or r in paused for r in cell_trials), 0)
        # records are keyed by run key: one per seed
        seeds_done = len(seeds) - sum(r in retried or r in paused for r in seeds)
        status = cell_status(done, study.trials, running, failed + pruned, seeds_done, study.seeds, errored=len(errored), paused=len(paused))
        rows.append(
            {
                "id": cell.id,
                "label": cell.label,
                "task": cell.task,
                "arch": cell.arch,
                "unit": cell.unit,
                "dims": {"dim": cell.dim, "input_dim": cell.input_dim},
                "trials_done": done,
                "trials_wanted": study.trials,
                "trials_failed": failed,
                "trials_pruned": pruned,
                "trials_running": running,
                "seeds_done": seeds_done,
                "seeds_failed": sum(is_diverged(r.status) for r in seeds),
                "seeds_wanted": study.seeds,
                "runs_errored": len(errored),
                "errored_retried": len(retried),
                "runs_paused": len(paused),
                "errored_reason": errored[0].tags.get(Tag.REASON, "") if errored else "",
                "status": status,
            }
        )
    return rows


def describe_optuna_study(study: Any, cell: Cell, study_name: str) -> None:
    """What optuna-dashboard shows beside `<study>/<cell id>`: the cell's label, task, unit and
    dims as user attributes, and the objective's name (the cell's metric, not "Objective 0")."""
    attrs = {
        "label": cell.label,
        "study": study_name,
        "cell_id": cell.id,
        "task": cell.task,
        "arch": cell.arch,
        "unit": cell.unit,
        "dim": cell.dim,
        "metric": cell.metric,
        "direction": cell.direction,
    }
    have = study.user_attrs
    for key, value in attrs.items():
        if have.get(key) != value:
            study.set_user_attr(key, value)
    if study.metric_names != [cell.metric]:
        import warnings

        with warnings.catch_warnings():  # "experimental" since Optuna 3.2; optuna-dashboard reads it
            warnings.simplefilter("ignore")
            study.set_metric_names([cell.metric])
