"""`tprbench transfer RUN_ID`: SentEval on the frozen encoder of a tracked run.

Everything needed to rebuild the model comes from the record: the run's tags (task, arch, unit,
dims) and params (hyperparameters, seed), its cell run's params (task options, data) and its
`best.pt` artifact. Results are logged as a `transfer` run nested under the source run, with one
metric per task (`senteval_<task>_acc`, or `_pearson`/`_spearman`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from tasks.registry import get_task
from tasks.result import BEST_WEIGHTS, RunStatus

from .record.contract import MLFLOW_PARENT, Kind, MlflowStatus, Tag


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


def load_tracked_model(client: Any, run_id: str, cache_dir: Path):
    """(adapter, model, run) for a tracked trial/seed run, weights from its best.pt artifact."""
    adapter, model, run, _config = rebuild_tracked_run(client, run_id, cache_dir, sentence_encoder=True)
    return adapter, model, run


def rebuild_tracked_run(
    client: Any, run_id: str, cache_dir: Path, *, sentence_encoder: bool = False, trained: bool = True, adapters: dict | None = None
):
    """(adapter, model, run, TrainConfig) for a tracked trial/seed run: the model built exactly as
    the run built it (same seed, so `trained=False` gives the run's own initial weights), with the
    weights of its best.pt artifact when `trained`. `sentence_encoder`: refuse tasks without one.
    `adapters`: a dict shared between calls, so runs with the same task, options and data share
    one prepared adapter (the analyses read many runs of one study)."""
    import torch

    from tasks.checkpoint import load_checkpoint
    from tasks.training import TrainConfig

    try:
        run = client.get_run(run_id)
    except Exception as exc:
        raise TransferError(f"run {run_id!r} not found in {client.tracking_uri}: {str(exc).splitlines()[0]}") from None
    tags = run.data.tags
    if tags.get(Tag.KIND) != Kind.RUN:
        raise TransferError(f"run {run_id} is not a tprbench trial/seed run (kind={tags.get(Tag.KIND)!r})")
    if tags.get(Tag.STATUS) != RunStatus.FINISHED:
        raise TransferError(f"run {run_id} did not finish (status {tags.get(Tag.STATUS)!r}): no trained encoder")
    cell = client.get_run(tags[MLFLOW_PARENT]).data.params
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
    hparams = adapter.resolve_hparams({k: _value(v) for k, v in run.data.params.items() if k != "seed"})
    config = TrainConfig(
        unit=tags[Tag.UNIT],
        arch=tags[Tag.ARCH],
        dim=int(tags[Tag.DIM]),
        input_dim=int(tags[Tag.INPUT_DIM]),
        epochs=int(cell.get("epochs", 1)),
        seed=int(run.data.params.get("seed", 0)),
        hparams=hparams,
    )
    adapter.prepare()
    torch.manual_seed(config.seed)
    model = adapter.build_model(config.unit, config.arch, config.dim, config.input_dim, config.hparams)
    if not trained:
        return adapter, model, run, config
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, BEST_WEIGHTS, tmp)
        except Exception as exc:
            raise TransferError(f"run {run_id}: no best.pt artifact ({str(exc).splitlines()[0]})") from None
        model.load_state_dict(load_checkpoint(Path(path)))
    return adapter, model, run, config


def evaluate_run(
    tracking_uri: str, run_id: str, tasks: list[str], task_path: str | None, kfold: int, cache_dir: Path, log: bool = True
) -> dict[str, dict[str, Any]]:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    from tasks.transfer.senteval import evaluate

    client = MlflowClient(tracking_uri=tracking_uri)
    adapter, model, run = load_tracked_model(client, run_id, cache_dir)
    if task_path is None and adapter.data:
        task_path = f"{adapter.data}/senteval"
    # expand_vocab: the SentEval words outside the training vocabulary get the run's word vectors (InferSent's way)
    results = evaluate(
        lambda sentences: adapter.encode_sentences(model, sentences), task_path, tasks, kfold=kfold, prepare=getattr(adapter, "expand_vocab", None)
    )
    if log:
        tags = {
            Tag.KIND: Kind.TRANSFER,
            Tag.STUDY: run.data.tags.get(Tag.STUDY, ""),
            MLFLOW_PARENT: run_id,
            Tag.SOURCE_RUN: run_id,
            Tag.UNIT: run.data.tags.get(Tag.UNIT, ""),
            Tag.CELL: run.data.tags.get(Tag.CELL, ""),
        }
        tags = {str(k): str(v) for k, v in tags.items()}
        child = client.create_run(run.info.experiment_id, tags=tags, run_name=f"transfer/{run_id[:8]}").info.run_id
        now = int(time.time() * 1000)
        metrics = [
            Metric(f"senteval_{task}_{k}", float(v), now, 0)
            for task, r in results.items()
            if task in tasks
            for k, v in r.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        client.log_batch(child, metrics=metrics)
        client.set_terminated(child, MlflowStatus.FINISHED)
    results["_source"] = {"unit": run.data.tags.get(Tag.UNIT, ""), "label": run.data.tags.get(Tag.LABEL, "")}
    return results
