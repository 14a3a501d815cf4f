"""`tprbench transfer RUN_ID`: SentEval on the frozen encoder of a tracked run.

Everything needed to rebuild the model comes from the record: the run's tags (task, arch, unit,
dims) and params (hyperparameters, seed), its cell run's params (task options, data) and its
`best.pt` artifact. Results are logged as a `transfer` run nested under the source run, with one
metric per task (`senteval_<task>_acc`, or `_pearson`/`_spearman`).

The record is read through harness.record.reader.TrackedRuns and written through
harness.record.writer.Tracker (`log_transfer`): no MLflow client of its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tasks.registry import get_task
from tasks.result import BEST_WEIGHTS, RunStatus

from .record.contract import Kind, RunRecord, Tag
from .record.reader import RunNotFound, TrackedRuns


class TransferError(ValueError):
    user_error = True


def _value(text: str) -> Any:
    """A param as logged: JSON (numbers, lists, null), else the string itself."""
    if text == "None":  # str(None), as records before JSON-encoded params wrote it
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def load_tracked_model(runs: TrackedRuns, run_id: str, cache_dir: Path):
    """(adapter, model, run) for a tracked trial/seed run, weights from its best.pt artifact."""
    adapter, model, run, _config = rebuild_tracked_run(runs, run_id, cache_dir, sentence_encoder=True)
    return adapter, model, run


def rebuild_tracked_run(
    runs: TrackedRuns, run_id: str, cache_dir: Path, *, sentence_encoder: bool = False, trained: bool = True, adapters: dict | None = None
) -> tuple[Any, Any, RunRecord, Any]:
    """(adapter, model, run, TrainConfig) for a tracked trial/seed run (`runs`: the record's
    reader of runs by id): the model built exactly as
    the run built it (same seed, so `trained=False` gives the run's own initial weights), with the
    weights of its best.pt artifact when `trained`. `sentence_encoder`: refuse tasks without one.
    `adapters`: a dict shared between calls, so runs with the same task, options and data share
    one prepared adapter (the analyses read many runs of one study)."""
    import torch

    from tasks.checkpoint import load_checkpoint
    from tasks.training import TrainConfig

    try:
        run = runs.run(run_id)
    except RunNotFound as exc:
        raise TransferError(str(exc)) from None
    tags = run.tags
    if tags.get(Tag.KIND) != Kind.RUN:
        raise TransferError(f"run {run_id} is not a tprbench trial/seed run (kind={tags.get(Tag.KIND)!r})")
    if tags.get(Tag.STATUS) != RunStatus.FINISHED:
        raise TransferError(f"run {run_id} did not finish (status {tags.get(Tag.STATUS)!r}): no trained encoder")
    try:
        cell = runs.cell_params(run)
    except RunNotFound as exc:
        raise TransferError(str(exc)) from None
    options = json.loads(cell["task_options"])
    task = tags[Tag.TASK]
    key = (task, json.dumps(options, sort_keys=True), os.path.expandvars(cell["data"]))
    adapter = adapters.get(key) if adapters is not None else None
    if adapter is None:
        adapter = get_task(task)(options, os.path.expandvars(cell["data"]), cache_dir)
        if adapters is not None:
            adapters[key] = adapter
    if sentence_encoder and not hasattr(adapter, "encode_sentences"):
        raise TransferError(f"run {run_id}: task {task!r} has no sentence encoder (SentEval needs an NLI-style task)")
    # The run's params are its resolved hyperparameters (older records hold the study's values).
    hparams = adapter.resolve_hparams({k: _value(v) for k, v in run.params.items() if k != "seed"})
    config = TrainConfig(
        unit=tags[Tag.UNIT],
        arch=tags[Tag.ARCH],
        dim=int(tags[Tag.DIM]),
        input_dim=int(tags[Tag.INPUT_DIM]),
        epochs=int(cell.get("epochs", 1)),
        seed=int(run.params.get("seed", 0)),
        hparams=hparams,
    )
    adapter.prepare()
    torch.manual_seed(config.seed)
    model = adapter.build_model(config.unit, config.arch, config.dim, config.input_dim, config.hparams)
    if not trained:
        return adapter, model, run, config
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = runs.artifact(run_id, BEST_WEIGHTS, tmp)
        except RunNotFound as exc:
            raise TransferError(str(exc)) from None
        model.load_state_dict(load_checkpoint(path))
    return adapter, model, run, config


def evaluate_run(
    tracking_uri: str, run_id: str, tasks: list[str], task_path: str | None, kfold: int, cache_dir: Path, log: bool = True
) -> dict[str, dict[str, Any]]:
    from tasks.transfer.senteval import evaluate

    from .record.writer import Tracker

    adapter, model, run = load_tracked_model(TrackedRuns(tracking_uri), run_id, cache_dir)
    if task_path is None and adapter.data:
        task_path = f"{adapter.data}/senteval"
    # expand_vocab: the SentEval words outside the training vocabulary get the run's word vectors (InferSent's way)
    results = evaluate(
        lambda sentences: adapter.encode_sentences(model, sentences), task_path, tasks, kfold=kfold, prepare=getattr(adapter, "expand_vocab", None)
    )
    if log:
        tracker = Tracker(tracking_uri, run.tags.get(Tag.STUDY, ""), create=False)
        tracker.log_transfer(run, {task: r for task, r in results.items() if task in tasks})
    results["_source"] = {"unit": run.tags.get(Tag.UNIT, ""), "label": run.tags.get(Tag.LABEL, "")}
    return results
