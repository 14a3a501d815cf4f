"""Carry a long study to another machine: what a fresh root needs to continue every unfinished run.

A study's root holds the record (`mlflow.db`, `optuna.journal`) and, under `work/<study>/`, each
run's directory: `checkpoint.pt` after every epoch (model, optimiser, scheduler, RNG state, the
run's history) and `best.pt` (the best epoch's weights). A finished run leaves `result.json` and
its numbers in the record; a paused or interrupted run leaves only its checkpoint. On a new machine
the record alone restarts those runs from epoch 1: for a study of tens of core-hours that is the
whole study again.

`save` copies the record (SQLite's online backup, consistent while a driver writes), compressed
as `mlflow.db.gz` (harness.record.compressed: the committed tree must stay small), and, under
`state/`, the two checkpoint files of every run that has a checkpoint and no result — nothing per
epoch, nothing of finished runs, no caches (they are rebuilt). `load` puts them into a fresh root
(the record as a plain `mlflow.db`; a folder saved before compression, holding `mlflow.db`, loads
too): the next `tprbench run` there continues each run from its epoch and, every run being
deterministic, ends where an uninterrupted run would have.

Why `best.pt` is often not saved: when a run's last epoch is its best (most epochs of a run that
still improves), its best weights are the checkpoint's own model weights, so the state keeps one
copy (`best_from_checkpoint` in the manifest) and `load` writes `best.pt` back from the
checkpoint: a committed milestone of such a run costs half the bytes.

Why the copy of a run's two files is checked: a worker writes `best.pt` and then `checkpoint.pt`
after each epoch (each atomically, by rename), so a copy taken between the two renames would pair
one epoch's checkpoint with the next epoch's best weights. The copy is taken again until neither
file changed while it was copied.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tasks.paths import file_sha256
from tasks.result import BEST_WEIGHTS, CHECKPOINT, RESULT

from .compressed import DB, GZ, compress, decompress, reading_root, stored_record
from .guard import RecordCorrupt
from .layout import ARTIFACTS, JOURNAL, RunRoot

STATE = "state"  # under the saved record: <cell>/<run>/{checkpoint.pt,best.pt} and MANIFEST
MANIFEST = "manifest.json"
COPY_TRIES = 20


class CarryError(Exception):
    """A save or load that cannot be done as asked (nothing was changed); one line, exit 2."""

    user_error = True


@dataclass(frozen=True)
class CarriedRun:
    """One unfinished run in a saved state: its directory under `work/<study>/` and its epoch."""

    path: str  # "<study>/<cell>/<run dir>", relative to the root's work/
    epoch: int
    files: dict[str, str]  # file name → sha256
    best_from_checkpoint: bool = False  # best.pt not saved: the checkpoint's epoch is the best one


# ---------------------------------------------------------------------------------------------
# save


def save(root: Path, dest: Path) -> list[str]:
    """Copy the root's record and its unfinished runs' checkpoints to `dest` (a records/<study>
    folder). Runs saved earlier that have since finished are dropped from `dest/state/`. Returns
    one line per thing written, for the user."""
    db = reading_root(root) / DB
    if not db.is_file():
        raise CarryError(f"record save: {root / DB} not found (give the study's --root)")
    dest.mkdir(parents=True, exist_ok=True)
    lines = [_save_db(db, dest)]
    if (root / JOURNAL).is_file():
        shutil.copyfile(root / JOURNAL, dest / JOURNAL)
        lines.append(f"{dest / JOURNAL}: {(dest / JOURNAL).stat().st_size / 1e6:.1f} MB")
    runs = _save_state(RunRoot(root).work, dest / STATE)
    size = sum(p.stat().st_size for p in (dest / STATE).rglob("*") if p.is_file()) if runs else 0
    lines.append(f"{dest / STATE}: {len(runs)} unfinished run(s), {size / 1e6:.1f} MB")
    return lines


def _save_db(db: Path, dest: Path) -> str:
    """The record as `dest/mlflow.db.gz`; a plain `dest/mlflow.db` of an older save is removed."""
    tmp = dest / (DB + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as source, sqlite3.connect(tmp) as copy:
            source.backup(copy)
        with sqlite3.connect(tmp) as copy:
            copy.execute("VACUUM")
        size = tmp.stat().st_size
        compress(tmp, dest / GZ)
    finally:
        tmp.unlink(missing_ok=True)
    (dest / DB).unlink(missing_ok=True)
    return f"{dest / GZ}: {(dest / GZ).stat().st_size / 1e6:.1f} MB ({size / 1e6:.1f} MB as {DB})"


def unfinished_runs(work: Path) -> list[Path]:
    """Run directories under `work/<study>/<cell>/<run>` with a checkpoint and no result."""
    if not work.is_dir():
        return []
    return sorted(p.parent for p in work.glob(f"*/*/*/{CHECKPOINT}") if not (p.parent / RESULT).exists())


def _save_state(work: Path, state: Path) -> list[CarriedRun]:
    tmp = state.with_name(state.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    runs = []
    for run_dir in unfinished_runs(work):
        rel = run_dir.relative_to(work)
        runs.append(_copy_run(run_dir, tmp / rel, str(rel)))
    (tmp / MANIFEST).write_text(json.dumps([r.__dict__ for r in runs], indent=1) + "\n")
    if state.exists():
        shutil.rmtree(state)
    tmp.rename(state)
    return runs


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _copy_run(src: Path, out: Path, rel: str) -> CarriedRun:
    """The run's checkpoint and best weights, copied as one consistent pair (see the module's docstring)."""
    names = (CHECKPOINT, BEST_WEIGHTS)
    for _ in range(COPY_TRIES):
        before = {n: _stamp(src / n) for n in names}
        out.mkdir(parents=True, exist_ok=True)
        for n in names:
            (out / n).unlink(missing_ok=True)
            if before[n] is not None:
                try:
                    shutil.copyfile(src / n, out / n)
                except FileNotFoundError:
                    break
        if {n: _stamp(src / n) for n in names} == before and (out / CHECKPOINT).exists():
            epoch, best_epoch = _epochs(out / CHECKPOINT)
            from_checkpoint = epoch == best_epoch and (out / BEST_WEIGHTS).exists()
            if from_checkpoint:
                (out / BEST_WEIGHTS).unlink()  # the same weights as the checkpoint's model
            files = {n: file_sha256(out / n) for n in names if (out / n).exists()}
            return CarriedRun(rel, epoch, files, from_checkpoint)
    raise CarryError(f"record save: {src} changed on every one of {COPY_TRIES} copies; try again")


def _epochs(checkpoint: Path) -> tuple[int, int | None]:
    """(the epoch a checkpoint ended, its best epoch): equal when best.pt holds the checkpoint's weights."""
    from tasks.checkpoint import load_checkpoint

    state = load_checkpoint(checkpoint)
    best = state.get("best_epoch")
    return int(state["epoch"]), None if best is None else int(best)


# ---------------------------------------------------------------------------------------------
# load


def load(saved: Path, root: Path) -> list[str]:
    """Put a saved record and its unfinished runs into `root`, a run directory with no record yet.
    The experiment's artifact folder is moved to `root/mlartifacts` (it named the old machine's
    path). Refuses a root that already holds a record: loading must never replace one."""
    db = stored_record(saved)
    if db is None:
        raise CarryError(f"record load: {saved / DB} not found (give a folder written by `tprbench record save`)")
    held = stored_record(root)
    if held is not None:
        raise CarryError(f"record load: {held} exists; load into a fresh --root (nothing was changed)")
    runs = _read_manifest(saved / STATE)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (DB + ".load.tmp")
    _copy_saved_db(db, tmp)
    _rebase_artifacts(tmp, root / ARTIFACTS)
    lines = []
    if (saved / JOURNAL).is_file():
        shutil.copyfile(saved / JOURNAL, root / JOURNAL)
    for run in runs:
        _load_run(saved / STATE / run.path, RunRoot(root).work / run.path, run)
    os.replace(tmp, root / DB)  # last: a root with a record is a loaded root
    lines.append(f"{root / DB}: the record of {saved}")
    lines.append(f"{RunRoot(root).work}: {len(runs)} unfinished run(s) continue from their checkpoints at the next `tprbench run`")
    return lines


def _read_manifest(state: Path) -> list[CarriedRun]:
    manifest = state / MANIFEST
    if not state.exists():
        return []
    try:
        rows = json.loads(manifest.read_text())
        return [CarriedRun(r["path"], int(r["epoch"]), dict(r["files"]), bool(r.get("best_from_checkpoint", False))) for r in rows]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CarryError(f"record load: {manifest}: unreadable ({exc}); save the state again") from None


def _copy_saved_db(db: Path, out: Path) -> None:
    """The saved record (`mlflow.db.gz` decompressed, or a plain `mlflow.db`) copied to `out`,
    checked; a damaged one is one line naming the saved file, and `out` is removed."""
    if db.name == GZ:
        decompress(db, out)
    else:
        shutil.copyfile(db, out)
    try:
        with sqlite3.connect(f"file:{out}?mode=ro", uri=True) as con:
            problem = con.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        problem = str(exc)
    if problem != "ok":
        out.unlink(missing_ok=True)
        raise RecordCorrupt(f"record load: {db} is damaged ({problem}); nothing was changed")


def _rebase_artifacts(db: Path, artifacts: Path) -> None:
    """Point local experiments' artifact location at this root. A record saved on another machine
    names that machine's path; MLflow has no call to change it, so the one column is set here.
    Experiments of a tracking server (`mlflow-artifacts:`) are left as they are."""
    with sqlite3.connect(db) as con:
        con.execute(
            "UPDATE experiments SET artifact_location = ? WHERE artifact_location LIKE 'file:%'",
            (artifacts.resolve().as_uri(),),
        )


def _load_run(src: Path, out: Path, run: CarriedRun) -> None:
    for name, digest in run.files.items():
        if not (src / name).is_file() or file_sha256(src / name) != digest:
            raise CarryError(f"record load: {src / name} is missing or differs from its manifest; save the state again")
    out.mkdir(parents=True, exist_ok=True)
    # best.pt first, then the checkpoint: the order a worker writes them, so a copy cut short
    # leaves at worst a run that restarts, never a checkpoint that points past its best weights
    if run.best_from_checkpoint:
        _best_from_checkpoint(src / CHECKPOINT, out / BEST_WEIGHTS)
    for name in (BEST_WEIGHTS, CHECKPOINT):
        if name in run.files:
            tmp = out / (name + ".tmp")
            shutil.copyfile(src / name, tmp)
            os.replace(tmp, out / name)


def _best_from_checkpoint(checkpoint: Path, best: Path) -> None:
    """best.pt as the worker wrote it at the checkpoint's epoch (`weights_copy` of the model's state)."""
    from tasks.checkpoint import atomic_save, load_checkpoint, weights_copy

    atomic_save(weights_copy(load_checkpoint(checkpoint)["model"]), best)
