"""What the analyses read: a tracked run (rebuilt from its record, trained or at its initial
weights) or a freshly initialised unit spec on a task's data, as one `Source`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.errors import DataError
from tasks.registry import get_task
from tasks.result import RunStatus

from ..record.contract import TRAIN_SPEC, Col, Phase, Tag
from ..record.reader import RecordReader, ReportError, TrackedRuns
from ..record.sources import default_tracking_uri
from ..transfer import TransferError, rebuild_tracked_run


class AnalysisError(ValueError):
    """Bad input to `tprbench gradients` / `interpret` (a run, a spec, an option): exit 2."""

    user_error = True


@dataclass
class Source:
    label: str  # what tables and panels call it: the run's unit spec (+ "untrained")
    unit: str  # the unit spec as the run wrote it
    task: str
    adapter: Any
    model: Any
    run_id: str | None
    seed: int
    trained: bool


def tracking(root: str | Path, uri: str | None) -> str:
    return uri or default_tracking_uri(Path(root).expanduser().resolve())


def from_run(uri: str, run_id: str, cache_dir: Path, trained: bool = True, adapters: dict | None = None) -> Source:
    """`adapters`: a dict the caller shares between its sources (one prepared adapter per task,
    options and data: the data is read once however many runs of a study are analysed)."""
    try:
        adapter, model, run, config = rebuild_tracked_run(TrackedRuns(uri), run_id, cache_dir, trained=trained, adapters=adapters)
    except TransferError as exc:
        raise AnalysisError(str(exc)) from None
    model.eval()
    unit = run.tags.get(Tag.UNIT, config.unit)
    label = described(unit, adapter)
    return Source(label if trained else f"{label} (untrained)", unit, run.tags.get(Tag.TASK, "?"), adapter, model, run_id, config.seed, trained)


def described(unit: str, adapter: Any) -> str:
    """What tables call a run: its unit spec, and the LM's HRR embedding when it has one."""
    options = getattr(adapter, "options", None)
    if getattr(options, "embedding", None) == "hrr":
        return f"{unit} + HRR embedding (N = {options.hrr_roles}, d' = {options.hrr_fillers})"
    return unit


def from_run_dir(path: Path, cache_dir: Path, trained: bool = True, adapters: dict | None = None) -> Source:
    """A `tprbench train` run directory (its train.json and best.pt), trained or at its initial
    weights (the run's seed, as the trainer builds the model)."""
    import json

    import torch

    from tasks.training import CheckpointMismatch, TrainConfig, load_best_model

    spec_file = Path(path) / TRAIN_SPEC
    if not spec_file.is_file():
        raise AnalysisError(f"{path}: no {TRAIN_SPEC} (a `tprbench train` run directory has one)")
    try:
        spec = json.loads(spec_file.read_text(encoding="utf-8"))
        data = os.path.expandvars(spec["data"]) if spec["data"] else spec["data"]
        key = (spec["task"], json.dumps(spec["options"], sort_keys=True), data)
    except (ValueError, KeyError) as exc:
        raise AnalysisError(f"{spec_file}: unreadable ({exc})") from None
    adapter = adapters.get(key) if adapters is not None else None
    if adapter is None:
        adapter = get_task(spec["task"])(spec["options"], data, cache_dir)
        if adapters is not None:
            adapters[key] = adapter
    config = TrainConfig(
        unit=spec["unit"],
        arch=spec["arch"],
        dim=int(spec["dim"]),
        input_dim=int(spec["input_dim"]),
        epochs=int(spec["epochs"]),
        seed=int(spec["seed"]),
        hparams=spec["hparams"],
    )
    try:
        if trained:
            model = load_best_model(adapter, config, path)
        else:
            adapter.prepare()
            torch.manual_seed(config.seed)
            model = adapter.build_model(config.unit, config.arch, config.dim, config.input_dim, adapter.resolve_hparams(config.hparams))
    except (DataError, CheckpointMismatch) as exc:
        raise AnalysisError(str(exc)) from None
    model.eval()
    label = described(spec["unit"], adapter)
    return Source(label if trained else f"{label} (untrained)", spec["unit"], spec["task"], adapter, model, None, config.seed, trained)


def load_source(ref: str, uri: str, cache_dir: Path, trained: bool = True, adapters: dict | None = None) -> Source:
    """RUN_ID (a tracked run) or RUN_DIR (a `tprbench train` run directory)."""
    if Path(ref).expanduser().is_dir():
        return from_run_dir(Path(ref).expanduser(), cache_dir, trained, adapters)
    return from_run(uri, ref, cache_dir, trained, adapters)


def from_spec(
    spec: str, task: str, data: str | None, options: dict[str, Any], arch: str, dim: int, input_dim: int | None, seed: int, cache_dir: Path
) -> Source:
    """A freshly initialised model around `spec` on `task`'s data (`tprbench gradients --unit`)."""
    import torch

    import units

    try:
        units.resolve(spec, dim)
    except units.UnitSpecError as exc:
        raise AnalysisError(f"--unit {spec!r}: {exc}") from None
    adapter = get_task(task)(options, os.path.expandvars(data) if data else data, cache_dir)
    adapter.prepare()
    hp = adapter.resolve_hparams({})
    torch.manual_seed(seed)
    model = adapter.build_model(spec, arch, dim, input_dim or dim, hp)
    model.eval()
    return Source(f"{spec} (untrained)", spec, task, adapter, model, None, seed, False)


def study_runs(uri: str, study: str, only: dict[str, str]) -> list[tuple[str, str]]:
    """(run id, unit) of a study's finished final-phase seed runs (seed 0 first), filtered by
    tag values (`task=logic`), in the study's cell order."""
    try:
        runs = RecordReader(uri, study).runs()
    except ReportError as exc:
        raise AnalysisError(str(exc)) from None
    runs = runs[(runs[Col.STATUS] == RunStatus.FINISHED) & (runs[Col.PHASE] == Phase.FINAL)]
    for key, value in only.items():
        if key not in runs.columns:
            raise AnalysisError(f"--only {key}=...: runs have no {key!r} (use one of task, arch, unit, dim, seed)")
        runs = runs[runs[key].astype(str) == value]
    runs = runs.sort_values([Col.START_TIME], kind="stable").drop_duplicates(Col.CELL)
    if not len(runs):
        raise AnalysisError(f"study {study!r}: no finished seed runs match {only or 'the study'}")
    return list(zip(runs[Col.RUN_ID], runs[Col.UNIT]))


def parse_pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AnalysisError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def analysed_unit(model: Any, layer: int) -> Any:
    from tasks.analysis.readout import encoder_layers, layer_unit

    try:
        layers = encoder_layers(model)
    except ValueError as exc:
        raise AnalysisError(str(exc)) from None
    if not 1 <= layer <= len(layers):
        raise AnalysisError(f"--layer {layer}: the encoder has {len(layers)} layer(s)")
    return layer_unit(layers[layer - 1])
