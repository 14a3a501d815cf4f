"""The training loop every task shares.

Adam, a step schedule (÷`lr_gamma` every `lr_step` epochs), gradient clipping, the best epoch
chosen by the validation metric, the best model evaluated on every test split. Seeded; a
checkpoint after every epoch so a killed run resumes where it stopped and ends exactly where an
uninterrupted run would (data order and SVP are drawn from a generator seeded by (seed, epoch),
and torch's RNG state is checkpointed). A NaN/inf loss ends the run as `failed` with the reason.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from .base import TaskAdapter
from .errors import DataError

CHECKPOINT = "checkpoint.pt"
BEST_WEIGHTS = "best.pt"
RESULT = "result.json"


@dataclass
class TrainConfig:
    """Everything that decides a training run besides the data. Logged as resolved."""

    unit: str
    arch: str
    dim: int
    input_dim: int
    epochs: int
    seed: int = 0
    hparams: dict[str, Any] = field(default_factory=dict)  # lr, batch_size, clip, dropout, lr_step, ...

    def fingerprint(self, task: str, task_options: dict[str, Any]) -> str:
        blob = json.dumps({"task": task, "options": task_options, **asdict(self)}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class RunResult:
    status: str  # finished | failed | pruned
    reason: str = ""
    best_epoch: int | None = None
    best_valid: float | None = None
    metric: str = ""
    history: list[dict[str, float]] = field(default_factory=list)
    test: dict[str, dict[str, float]] = field(default_factory=dict)  # split → metrics of the best model
    params_formula: int | None = None
    params_total: int = 0
    seconds: float = 0.0
    resumed_from_epoch: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "RunResult":
        return cls(**json.loads(text))


class CheckpointMismatch(DataError):
    """A checkpoint in the run directory belongs to a different configuration (unit, dims, ...)."""


class CheckpointRefused(DataError):
    """A checkpoint file that is not plain tensors and containers (it would need code to load), or is corrupt."""


def _load_reason(exc: BaseException) -> str:
    """The informative line of torch's weights-only error (its first line only suggests weights_only=False)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    boiler = ("Weights only load failed", "Please file an issue", "Check the documentation", "WeightsUnpickler error")
    useful = [ln for ln in lines if not ln.startswith(boiler)]
    return (useful or lines or [type(exc).__name__])[0].rstrip(".")


def load_checkpoint(path: str | Path, map_location: Any = None) -> Any:
    """`torch.load(path, weights_only=True)`: a file that would run code when loaded (a pickled object
    with `__reduce__`), or a corrupt one, raises CheckpointRefused naming the file; nothing in it runs."""
    import pickle

    try:
        return torch.load(path, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as exc:
        raise CheckpointRefused(
            f"{path}: refused to load: not a plain weights checkpoint ({_load_reason(exc)}); tprbench loads "
            "checkpoints with weights_only=True and never runs code from them: delete the file or use a fresh "
            "run directory") from None
    except (RuntimeError, EOFError) as exc:
        raise CheckpointRefused(f"{path}: cannot read the checkpoint ({_load_reason(exc)}); delete the file or use "
                                "a fresh run directory") from None


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _hparam(hparams: dict[str, Any], defaults: dict[str, Any], key: str, fallback: Any) -> Any:
    return hparams.get(key, defaults.get(key, fallback))


def _better(a: float, b: float | None, direction: str) -> bool:
    return b is None or (a > b if direction == "maximize" else a < b)


def to_device(batch: Any, device: torch.device | str) -> Any:
    """Move a batch (tensor, or dict/list/tuple of tensors) to `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train(
    adapter: TaskAdapter,
    config: TrainConfig,
    run_dir: str | Path | None = None,
    report: Callable[[int, dict[str, float]], bool] | None = None,
    progress: Callable[[int, dict[str, float]], None] | None = None,
    device: torch.device | str | None = None,
) -> RunResult:
    """Train one model; resumable from `run_dir`. `report(epoch, metrics)` returning True prunes.

    Metrics per epoch: train_loss, train_acc (if any), valid_<metric...>, lr, epoch_seconds.
    """
    started = time.perf_counter()
    adapter.prepare()
    adapter.check_arch(config.arch)
    run_path = Path(run_dir) if run_dir is not None else None
    task_options = adapter.options.model_dump(mode="json")
    fingerprint = config.fingerprint(adapter.name, task_options)
    if run_path is not None:
        run_path.mkdir(parents=True, exist_ok=True)
        done = run_path / RESULT
        if done.exists():
            previous = json.loads(done.read_text())
            if previous.get("fingerprint") == fingerprint:
                previous.pop("fingerprint")
                return RunResult(**previous)

    hp, defaults = config.hparams, adapter.defaults
    torch.manual_seed(config.seed)
    device = torch.device(device) if device is not None else default_device()
    model = adapter.build_model(config.unit, config.arch, config.dim, config.input_dim, hp).to(device)
    from units import model_param_counts  # every unit in the model, as the papers report them

    counts = model_param_counts(model)
    optimizer = torch.optim.Adam(
        [p for p in model.parameters() if p.requires_grad],
        lr=_hparam(hp, defaults, "lr", 1e-3),
        weight_decay=_hparam(hp, defaults, "weight_decay", 0.0),
    )
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=int(_hparam(hp, defaults, "lr_step", 30)), gamma=_hparam(hp, defaults, "lr_gamma", 0.1)
    )
    batch_size = int(_hparam(hp, defaults, "batch_size", 64))
    eval_batch_size = max(batch_size, 256)
    clip = _hparam(hp, defaults, "clip", 5.0)
    metric, direction = adapter.metric, adapter.direction
    valid_key = f"valid_{metric}"

    result = RunResult(status="finished", metric=valid_key, params_formula=counts.formula, params_total=counts.total)
    start_epoch = 0
    ckpt_path = run_path / CHECKPOINT if run_path else None
    if ckpt_path is not None and ckpt_path.exists():
        state = load_checkpoint(ckpt_path, map_location=device)
        if state.get("fingerprint") != fingerprint:
            raise CheckpointMismatch(
                f"{ckpt_path}: checkpoint belongs to a different run configuration (fingerprint "
                f"{state.get('fingerprint')} != {fingerprint}); move it away or use a fresh run directory"
            )
        model.load_state_dict(state["model"])  # weights_only above: a checkpoint cannot run code
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"].cpu())
        start_epoch = int(state["epoch"])
        result.history = json.loads(state["history"])
        result.best_epoch, result.best_valid = state["best_epoch"], state["best_valid"]
        result.resumed_from_epoch = start_epoch

    best_state: dict[str, torch.Tensor] | None = None
    if run_path is not None and (run_path / BEST_WEIGHTS).exists() and start_epoch:
        best_state = load_checkpoint(run_path / BEST_WEIGHTS, map_location=device)

    for epoch in range(start_epoch + 1, config.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        generator = torch.Generator().manual_seed(config.seed * 100_003 + epoch)
        loss_sum, counts_sum, n_batches = 0.0, {}, 0
        for step, batch in enumerate(adapter.train_batches(batch_size, generator, epoch)):
            loss, stats = adapter.loss(model, to_device(batch, device))
            if not torch.isfinite(loss):
                result.status = "failed"
                result.reason = f"loss became {float(loss.detach())} at epoch {epoch}, step {step}"
                break
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            loss_sum += float(loss.detach()) * stats.get("count", 1)
            n_batches += 1
            for k, v in stats.items():
                counts_sum[k] = counts_sum.get(k, 0) + v
        if result.status == "failed":
            break
        train_metrics = adapter.metrics_from_counts(loss_sum, counts_sum)
        valid = adapter.evaluate(model, adapter.valid_split, eval_batch_size)
        row = {f"train_{k}": v for k, v in train_metrics.items()}
        row.update({f"valid_{k}": v for k, v in valid.items()})
        row.update({"epoch": epoch, "lr": optimizer.param_groups[0]["lr"], "epoch_seconds": time.perf_counter() - t0})
        scheduler.step()
        score = row[valid_key]
        if not math.isfinite(score):
            result.status, result.reason = "failed", f"validation {valid_key} became {score} at epoch {epoch}"
            break
        result.history.append(row)
        if _better(score, result.best_valid, direction):
            result.best_valid, result.best_epoch = score, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if run_path is not None:
                _atomic_save(best_state, run_path / BEST_WEIGHTS)
        if ckpt_path is not None:
            _atomic_save({
                "fingerprint": fingerprint, "epoch": epoch, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(), "history": json.dumps(result.history),
                "best_epoch": result.best_epoch, "best_valid": result.best_valid,
            }, ckpt_path)
        if progress:
            progress(epoch, row)
        if report is not None and report(epoch, row):
            result.status, result.reason = "pruned", f"pruned after epoch {epoch}"
            break

    if result.status == "finished" and best_state is not None:
        model.load_state_dict(best_state)
        for split in adapter.test_splits:
            result.test[split] = adapter.evaluate(model, split, eval_batch_size)
    result.seconds = time.perf_counter() - started
    if run_path is not None:
        record = asdict(result) | {"fingerprint": fingerprint}
        tmp = run_path / (RESULT + ".tmp")
        tmp.write_text(json.dumps(record, sort_keys=True, indent=1))
        os.replace(tmp, run_path / RESULT)
    return result


def load_best_model(adapter: TaskAdapter, config: TrainConfig, run_dir: str | Path) -> torch.nn.Module:
    """Rebuild a run's model and load its best weights (weights_only=True: no code from the file)."""
    path = Path(run_dir) / BEST_WEIGHTS
    if not path.exists():
        raise DataError(f"{path}: no best-model weights in this run directory")
    adapter.prepare()
    model = adapter.build_model(config.unit, config.arch, config.dim, config.input_dim, config.hparams)
    try:
        model.load_state_dict(load_checkpoint(path))
    except RuntimeError as exc:
        raise CheckpointMismatch(f"{path}: weights do not fit unit {config.unit!r} at d={config.dim}: {str(exc).splitlines()[0]}") from None
    return model
