"""The training loop every task shares.

The run's `HParams` pick the optimiser (Adam by default), the schedule (÷10 every 30 epochs by
default), warm-up and gradient clipping; the best epoch is chosen by the run's validation metric
(the study's, else the task's) and the best model is evaluated on every test split. Seeded; a
checkpoint after every epoch so a killed run resumes where it stopped and ends exactly where an
uninterrupted run would (data order and SVP are drawn from a generator seeded by (seed, epoch),
and torch's RNG states are checkpointed). A NaN/inf loss ends the run as `diverged` with the
reason (a result, not an error) — unless it happens during warm-up and `nan_restarts` allows a
fresh initialisation. An unreadable checkpoint is moved aside and the run restarts; one that
would run code is refused (tasks/checkpoint.py).

`train` reads as its four jobs: restore (`_read_checkpoint`, `_apply_checkpoint`), one epoch
(`_train_epoch`), checkpoint (`_save_checkpoint`) and evaluate (`_end_of_epoch`, `_test`).
`stop_value` / `stop_patience` end a run before `epochs`, decided from the history alone (a
resumed run stops where it would have). `until_epoch` pauses a run after that epoch: it comes back
`paused` with its best model so far tested, and its checkpoint stays, so the next call continues
it to where an uninterrupted run would have ended (a study's "every row through the first lr phase
before any goes further": `tprbench run --until-epoch`). `TrainingSteps` is the same step, batch by
batch, outside a run: what `tprbench bench train` times.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .base import TaskAdapter
from .checkpoint import CheckpointCorrupt, CheckpointMismatch, atomic_save, load_checkpoint, set_aside, weights_copy
from .determinism import Determinism, is_nondeterminism_error, rng_state, set_rng_state
from .device import to_device
from .errors import DataError, TaskError
from .hparams import HParams, as_params, fingerprint_params
from .meta import run_metric
from .metrics import MAXIMIZE
from .optim import Schedule, make_optimizer, optimizer_step
from .progress import current as current_progress
from .result import BEST_WEIGHTS, CHECKPOINT, RESULT, RunResult, RunStatus, paused_reason

RESTART_SEED_STRIDE = 1_000_003  # restart r after a NaN in warm-up initialises with seed + r × this


@dataclass
class TrainConfig:
    """Everything that decides a training run besides the data. `hparams`: the study's values
    (a dict, resolved with the task's defaults by `train`) or an already resolved `HParams`."""

    unit: str
    arch: str
    dim: int
    input_dim: int
    epochs: int
    seed: int = 0
    hparams: dict[str, Any] | HParams = field(default_factory=dict)
    metric: str | None = None  # e.g. "valid_loss"; None: valid_<the task's metric>
    direction: str | None = None  # None: the task's direction for that metric
    deterministic: bool = True  # bitwise-reproducible kernels (not part of the fingerprint)

    def fingerprint(self, task: str, task_options: dict[str, Any], hp: HParams, metric: str, direction: str) -> str:
        """What a checkpoint or result must match to be reused: everything that changes the run."""
        return _digest({**self._identity(task, task_options), "hparams": fingerprint_params(hp), "metric": metric, "direction": direction})

    def legacy_fingerprint(self, task: str, task_options: dict[str, Any]) -> str | None:
        """The fingerprint before hyperparameters were resolved (study values only, task metric):
        checkpoints and results written then still resume. None when `hparams` is already typed."""
        if isinstance(self.hparams, HParams):
            return None
        return _digest({**self._identity(task, task_options), "hparams": self.hparams})

    def _identity(self, task: str, task_options: dict[str, Any]) -> dict[str, Any]:
        """The part of both fingerprints that names the run: task, options, model, length, seed."""
        return {
            "task": task,
            "options": task_options,
            "unit": self.unit,
            "arch": self.arch,
            "dim": self.dim,
            "input_dim": self.input_dim,
            "epochs": self.epochs,
            "seed": self.seed,
        }


def fingerprint_of(adapter: TaskAdapter, config: TrainConfig) -> str:
    """The run's fingerprint as `train` computes it (hyperparameters resolved with the task's defaults)."""
    hp = adapter.resolve_hparams(config.hparams)
    metric, direction = run_metric(adapter, config.metric, config.direction)
    return config.fingerprint(adapter.name, adapter.options.model_dump(mode="json"), hp, metric, direction)


def _digest(blob: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_masks(batch: Any) -> None:
    """Every [B, T] bool tensor named `*mask` in a dict batch is right-padded; checked on the host,
    once per batch, so units need not check (and sync) on the device."""
    if not isinstance(batch, dict):
        return
    from units.base import check_right_padded

    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and key.endswith("mask") and value.dtype == torch.bool and value.dim() == 2 and value.device.type == "cpu":
            try:
                check_right_padded(value)
            except ValueError as exc:
                raise TaskError(f"batch key {key!r}: {exc}") from None


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _print_notice(text: str) -> None:
    print(f"tprbench train: {text}", file=sys.stderr)


@dataclass
class _Session:
    """One attempt at the run: the model and what trains it (rebuilt on a NaN restart)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    aux_modules: list[torch.nn.Module]
    restarts: int = 0
    step: int = 0  # optimiser steps so far (warm-up counts them)
    best_state: dict[str, torch.Tensor] | None = None  # weights of the best epoch so far


@dataclass
class _Context:
    """What stays fixed for the whole run."""

    adapter: TaskAdapter
    config: TrainConfig
    hp: HParams
    metric: str
    direction: str
    device: torch.device
    run_path: Path | None
    fingerprints: tuple[str, ...]  # the current one first, then the legacy one if any
    notice: Callable[[str], None]
    determinism: Determinism
    notes: list[str] = field(default_factory=list)
    no_gradients: bool = False  # grad_log_batches: the unit cannot be stepped (said once)
    until_epoch: int | None = None  # pause after this epoch (None: train to the end)

    def say(self, text: str) -> None:
        """Tell the caller (one line) and keep the line in the run's result."""
        self.notes.append(text)
        self.notice(text)

    @property
    def eval_batch_size(self) -> int:
        return max(self.hp.batch_size, 256)


def train(
    adapter: TaskAdapter,
    config: TrainConfig,
    run_dir: str | Path | None = None,
    report: Callable[[int, dict[str, float]], bool] | None = None,
    progress: Callable[[int, dict[str, float]], None] | None = None,
    device: torch.device | str | None = None,
    notice: Callable[[str], None] | None = None,
    until_epoch: int | None = None,
) -> RunResult:
    """Train one model; resumable from `run_dir`. `report(epoch, metrics)` returning True prunes;
    `notice(line)` hears what the run had to do (default: one line on stderr). `until_epoch`: stop
    after that epoch (or at once, if a checkpoint is already past it) and return `paused`, its best
    model so far tested; no result.json is written, so the next call resumes from the checkpoint.

    Metrics per epoch: train_loss, train_<metric…>, train_aux (when a module sets aux_loss),
    valid_<metric…>, lr, epoch_seconds.
    """
    started = time.perf_counter()
    ctx = _context(adapter, config, run_dir, device, notice, until_epoch)
    if ctx.run_path is not None:
        ctx.run_path.mkdir(parents=True, exist_ok=True)
        previous = _finished_result(ctx)
        if previous is not None:
            return previous
    with ctx.determinism:
        result, model, best_state = _fit(ctx, report, progress)
    if result.status in (RunStatus.FINISHED, RunStatus.PAUSED) and best_state is not None:
        model.load_state_dict(best_state)
        result.test = _test(ctx, model)
    result.reproducible = ctx.determinism.reproducible
    result.notes = list(dict.fromkeys(result.notes + ctx.notes))
    result.seconds = time.perf_counter() - started
    if ctx.run_path is not None and result.status != RunStatus.PAUSED:  # a paused run continues from its checkpoint
        record = asdict(result) | {"fingerprint": ctx.fingerprints[0]}
        tmp = ctx.run_path / (RESULT + ".tmp")
        tmp.write_text(json.dumps(record, sort_keys=True, indent=1))
        os.replace(tmp, ctx.run_path / RESULT)
    return result


def _context(
    adapter: TaskAdapter,
    config: TrainConfig,
    run_dir: str | Path | None,
    device: torch.device | str | None,
    notice: Callable[[str], None] | None,
    until_epoch: int | None,
) -> _Context:
    """The run's fixed part: data prepared, architecture checked, hyperparameters resolved with the
    task's defaults, metric and fingerprints (shared by `train` and `TrainingSteps`)."""
    adapter.prepare()
    adapter.check_arch(config.arch)
    hp = adapter.resolve_hparams(config.hparams)
    metric, direction = run_metric(adapter, config.metric, config.direction)
    if hp.epoch_updates and adapter.train_example_count() is None:
        raise TaskError(
            f"epoch_updates = {hp.epoch_updates}: task {adapter.name!r} builds its training batches a pass at a time "
            "(no train_batch), so it has no stream of updates; leave epoch_updates out"
        )
    options = adapter.options.model_dump(mode="json")
    fps = [config.fingerprint(adapter.name, options, hp, metric, direction)]
    if config.metric in (None, f"valid_{adapter.metric}") and config.direction in (None, adapter.metric_direction(adapter.metric)):
        fps.append(config.legacy_fingerprint(adapter.name, options))
    return _Context(
        adapter,
        config,
        hp,
        metric,
        direction,
        torch.device(device) if device is not None else default_device(),
        Path(run_dir) if run_dir is not None else None,
        tuple(f for f in fps if f),
        notice or _print_notice,
        Determinism(config.deterministic),
        until_epoch=until_epoch,
    )


def _finished_result(ctx: _Context) -> RunResult | None:
    """The run's result.json when it belongs to this configuration (a finished run is never redone)."""
    done = ctx.run_path / RESULT
    if not done.exists():
        return None
    try:
        previous = json.loads(done.read_text())
    except (ValueError, OSError) as exc:
        moved = set_aside(done)
        ctx.say(f"{done}: unreadable ({type(exc).__name__}); moved to {moved.name}, training again")
        return None
    if previous.get("fingerprint") not in ctx.fingerprints:
        return None
    previous.pop("fingerprint")
    return RunResult.from_dict(previous)


def _build(ctx: _Context, restarts: int) -> _Session:
    """Model, optimiser and schedule, initialised from the run's seed (a restart gets its own)."""
    torch.manual_seed(ctx.config.seed + RESTART_SEED_STRIDE * restarts)
    c = ctx.config
    model = ctx.adapter.build_model(c.unit, c.arch, c.dim, c.input_dim, ctx.hp).to(ctx.device)
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], ctx.hp)
    schedule = Schedule(optimizer, ctx.hp, ctx.metric, ctx.direction)
    aux = [m for m in model.modules() if hasattr(m, "aux_loss")]
    return _Session(model, optimizer, schedule, aux, restarts)


def _new_result(ctx: _Context, model: torch.nn.Module) -> RunResult:
    from units import model_param_counts  # every unit in the model, as the papers report them

    counts = model_param_counts(model)
    return RunResult(
        status=RunStatus.FINISHED,
        metric=ctx.metric,
        direction=ctx.direction,
        params_formula=counts.formula,
        params_total=counts.total,
        hparams=as_params(ctx.hp),
    )


# -- restore ---------------------------------------------------------------------------------


def _read_checkpoint(ctx: _Context) -> dict[str, Any] | None:
    """The run directory's checkpoint, if it belongs to this run. An unreadable one is moved
    aside (the run starts again); one of another configuration or one that would run code stops the run."""
    path = ctx.run_path / CHECKPOINT if ctx.run_path is not None else None
    if path is None or not path.exists():
        return None
    try:
        state = load_checkpoint(path, map_location=ctx.device)
    except CheckpointCorrupt as exc:
        _restart_note(ctx, path, exc)
        return None
    if not isinstance(state, dict) or state.get("fingerprint") not in ctx.fingerprints:
        got = state.get("fingerprint") if isinstance(state, dict) else type(state).__name__
        raise CheckpointMismatch(
            f"{path}: checkpoint belongs to a different run configuration (fingerprint {got} != "
            f"{ctx.fingerprints[0]}); move it away or use a fresh run directory"
        )
    return state


def _restart_note(ctx: _Context, path: Path, exc: Exception) -> None:
    moved = set_aside(path)
    best = ctx.run_path / BEST_WEIGHTS
    if best.exists() and path != best:
        set_aside(best)  # its epoch's history went with the checkpoint
    ctx.say(f"{exc}; moved it to {moved.name} and restarting the run from epoch 1")


def _apply_checkpoint(ctx: _Context, s: _Session, result: RunResult, state: dict[str, Any]) -> int:
    """Load a checkpoint into the session and result; returns the epoch it ended."""
    s.model.load_state_dict(state["model"])  # weights_only above: a checkpoint cannot run code
    s.optimizer.load_state_dict(state["optimizer"])
    s.schedule.load_state_dict(state["scheduler"])
    set_rng_state(state)
    s.step = int(state.get("step", 0))
    epoch = int(state["epoch"])
    result.history = json.loads(state["history"])
    result.best_epoch, result.best_valid = state["best_epoch"], state["best_valid"]
    result.resumed_from_epoch = epoch
    result.notes = list(state.get("notes", []))
    best = ctx.run_path / BEST_WEIGHTS
    if not (best.exists() and epoch):
        return epoch
    try:
        s.best_state = load_checkpoint(best, map_location=ctx.device)
        return epoch
    except CheckpointCorrupt as exc:
        _restart_note(ctx, ctx.run_path / CHECKPOINT if (ctx.run_path / CHECKPOINT).exists() else best, exc)
        raise _Restart(same_seed=True) from None


class _Restart(Exception):
    """Start the run again: a NaN in warm-up (new initialisation) or a corrupt best.pt (same one)."""

    def __init__(self, same_seed: bool = False) -> None:
        self.same_seed = same_seed


# -- the run ---------------------------------------------------------------------------------


def _fit(ctx: _Context, report: Any, progress: Any) -> tuple[RunResult, torch.nn.Module, dict | None]:
    """Build, restore and train; rebuilt from scratch on a restart. (result, model, best weights)."""
    state = _read_checkpoint(ctx)
    restarts = int(state.get("restarts", 0)) if state else 0
    while True:
        s = _build(ctx, restarts)
        result = _new_result(ctx, s.model)
        try:
            start = _apply_checkpoint(ctx, s, result, state) if state else 0
            state = None
            _epochs(ctx, s, result, start, report, progress)
            return result, s.model, s.best_state
        except _Restart as again:
            state = None
            if not again.same_seed:
                restarts += 1
                ctx.say(f"loss was not finite during warm-up: re-initialised (restart {restarts} of {ctx.hp.nan_restarts})")
                _clear_run_files(ctx)


def _clear_run_files(ctx: _Context) -> None:
    for name in (CHECKPOINT, BEST_WEIGHTS):
        if ctx.run_path is not None and (ctx.run_path / name).exists():
            (ctx.run_path / name).unlink()


def _epochs(ctx: _Context, s: _Session, result: RunResult, start: int, report: Any, progress: Any) -> None:
    last = ctx.config.epochs if ctx.until_epoch is None else min(ctx.until_epoch, ctx.config.epochs)
    for epoch in range(start + 1, last + 1):
        stop = _stop_reason(ctx, result)  # from the history alone, so a resumed run stops where it would have
        if stop:
            ctx.say(stop)
            return
        t0 = time.perf_counter()
        train_metrics = _train_epoch(ctx, s, result, epoch)
        if train_metrics is None:
            return  # diverged: result says why
        if not _end_of_epoch(ctx, s, result, epoch, train_metrics, t0):
            return
        if progress:
            progress(epoch, result.history[-1])
        if report is not None and report(epoch, result.history[-1]):
            result.status, result.reason = RunStatus.PRUNED, f"pruned after epoch {epoch}"
            return
    done = int(result.history[-1]["epoch"]) if result.history else start
    if done < ctx.config.epochs and ctx.until_epoch is not None:
        stop = _stop_reason(ctx, result)  # a run its rule ends here is finished, not paused
        if stop:
            ctx.say(stop)
            return
        result.status, result.reason = RunStatus.PAUSED, paused_reason(done, ctx.config.epochs, ctx.until_epoch)


def _stop_reason(ctx: _Context, result: RunResult) -> str | None:
    """Why the run ends before `epochs` (hparams stop_value / stop_patience), or None."""
    if not result.history or result.best_epoch is None:
        return None
    last = int(result.history[-1]["epoch"])
    target = ctx.hp.stop_value
    if target is not None and (result.best_valid >= target if ctx.direction == MAXIMIZE else result.best_valid <= target):
        return f"stopped after epoch {last}: {ctx.metric} reached {target:g} at epoch {result.best_epoch} (stop_value)"
    if ctx.hp.stop_patience and last - result.best_epoch >= ctx.hp.stop_patience:
        return (
            f"stopped after epoch {last}: no better {ctx.metric} for {last - result.best_epoch} epochs since "
            f"epoch {result.best_epoch} (stop_patience)"
        )
    return None


def _train_epoch(ctx: _Context, s: _Session, result: RunResult, epoch: int) -> dict[str, float] | None:
    """One pass over the training batches; the train_* metrics, or None when the loss diverged."""
    s.model.train()
    loss_sum, aux_sum, counts, carry, n = 0.0, 0.0, {}, None, 0
    with current_progress().task(f"epoch {epoch}/{ctx.config.epochs}", _batches_per_epoch(ctx), "batches") as bar:
        for step, batch in enumerate(_epoch_batches(ctx, epoch)):
            check_masks(batch)
            loss, aux, stats, carry = _batch_step(ctx, s, to_device(batch, ctx.device), carry)
            if not torch.isfinite(loss):
                if _may_restart(ctx, s):
                    raise _Restart()
                result.status = RunStatus.DIVERGED
                result.reason = f"loss became {float(loss.detach())} at epoch {epoch}, step {step}"
                return None
            loss_sum += float(loss.detach()) * stats.get("count", 1)
            aux_sum += aux
            n += 1
            for k, v in stats.items():
                counts[k] = counts.get(k, 0) + v
            bar.advance(1, int(stats.get("count", 0)))
    metrics = {f"train_{k}": v for k, v in ctx.adapter.metrics_from_counts(loss_sum, counts).items()}
    if s.aux_modules:
        metrics["train_aux"] = aux_sum / max(n, 1)
    return metrics


def _epoch_batches(ctx: _Context, epoch: int) -> Any:
    """The epoch's training batches, their order drawn from a generator seeded by (seed, pass):
    a resumed run, and a benchmark of the step, see the batches an uninterrupted run sees. An
    epoch is one pass (the task's `train_batches`), or `epoch_updates` batches of one stream."""
    if ctx.hp.epoch_updates:
        return _stream_batches(ctx, epoch)
    return ctx.adapter.train_batches(ctx.hp.batch_size, _pass_generator(ctx, epoch), epoch)


def _pass_generator(ctx: _Context, pass_number: int) -> torch.Generator:
    """The generator of pass `pass_number`'s order (1-based); `data_order = fixed`: pass 1's, always."""
    number = 1 if ctx.hp.data_order == "fixed" else pass_number
    return torch.Generator().manual_seed(ctx.config.seed * 100_003 + number)


def _stream_batches(ctx: _Context, epoch: int) -> Any:
    """Epoch `epoch` of the stream: batches (epoch − 1)·K … epoch·K − 1 (K = epoch_updates) of one
    endless sequence of training examples, pass after pass, each pass a permutation of the data
    (`_pass_order`); every batch is full, one that crosses a pass's end takes the next pass's head.
    This is what the TPR-RNN authors' input pipeline feeds (`Dataset.from_tensor_slices(train[p])
    .cache().repeat().batch(bs)`, tpr_rnn_graph.py): a stream, not epochs. Each batch is found from
    its position alone, so a run resumed at any epoch sees what an uninterrupted one saw."""
    n, size, per_epoch = ctx.adapter.train_example_count(), ctx.hp.batch_size, ctx.hp.epoch_updates
    orders: dict[int, torch.Tensor] = {}
    for b in range((epoch - 1) * per_epoch, epoch * per_epoch):
        positions = torch.arange(b * size, (b + 1) * size)
        index = torch.empty(size, dtype=torch.long)
        for p in torch.unique(positions // n).tolist():
            if p not in orders:
                orders = {p: _pass_order(ctx, p + 1, n)}  # passes only move forward: keep one
            take = positions // n == p
            index[take] = orders[p][positions[take] % n]
        yield ctx.adapter.train_batch(index)


def _pass_order(ctx: _Context, pass_number: int, n: int) -> torch.Tensor:
    return torch.randperm(n, generator=_pass_generator(ctx, pass_number))


def _batches_per_epoch(ctx: _Context) -> int | None:
    return ctx.hp.epoch_updates or ctx.adapter.train_batch_count(ctx.hp.batch_size)


def _may_restart(ctx: _Context, s: _Session) -> bool:
    """A non-finite loss re-initialises the model (not a divergence) during warm-up while
    `nan_restarts` allows it."""
    return s.step < ctx.hp.warmup_steps and s.restarts < ctx.hp.nan_restarts


def _batch_step(ctx: _Context, s: _Session, batch: Any, carry: Any) -> tuple[torch.Tensor, float, dict, Any]:
    """Forward, auxiliary losses, backward, clip, optimiser step: (task loss, aux, counts, carry).
    An op without a deterministic implementation relaxes determinism once and redoes the batch."""
    for attempt in (0, 1):
        try:
            for m in s.aux_modules:
                m.aux_loss = None  # set anew by each forward
            loss, stats, new_carry = ctx.adapter.loss_with_carry(s.model, batch, carry)
            if not torch.isfinite(loss):
                return loss, 0.0, stats, new_carry
            aux = [m.aux_loss.reshape(()) for m in s.aux_modules if m.aux_loss is not None]
            aux_total = torch.stack(aux).sum() if aux else None
            s.optimizer.zero_grad(set_to_none=True)
            (loss if aux_total is None else loss + aux_total).backward()
            if ctx.hp.clip:
                torch.nn.utils.clip_grad_norm_(s.model.parameters(), ctx.hp.clip)
            optimizer_step(s.optimizer, ctx.hp, s.step)
            s.step += 1
            return loss, 0.0 if aux_total is None else float(aux_total.detach()), stats, new_carry
        except RuntimeError as exc:
            if attempt or not (ctx.determinism.deterministic and is_nondeterminism_error(exc)):
                raise
            ctx.determinism.relax(exc)
            ctx.say(f"not bitwise reproducible: {ctx.determinism.reason}")
    raise AssertionError("unreachable")


class Diverged(ArithmeticError):
    """A non-finite loss outside warm-up (or past `nan_restarts`): where `train` ends the run as diverged."""


class TrainingSteps:
    """The trainer's training step outside `train`, for timing it (`tprbench bench train`).

    The model is built as `train` builds it (`_build`: seeded, optimiser, schedule), each batch goes
    through what `_train_epoch` does with it (masks checked, moved to the device, `_batch_step`: aux
    losses, backward, clip, the optimiser step with warm-up counted across calls), and an epoch's
    batches come in `train`'s order (`_epoch_batches`). A non-finite loss during warm-up
    re-initialises the model as `train` would (the next restart's seed) but carries on with the next
    batch instead of starting the epoch again; any other one raises `Diverged`. Nothing else of a
    run happens: no checkpoint, validation, schedule step or test. Steps run inside `determinism`
    (enter it around them) as a run's do."""

    def __init__(self, adapter: TaskAdapter, config: TrainConfig, device: torch.device | str | None = "cpu") -> None:
        self.ctx = _context(adapter, config, None, device, lambda _line: None, None)
        self.session = _build(self.ctx, 0)

    @property
    def model(self) -> torch.nn.Module:
        return self.session.model

    @property
    def hparams(self) -> HParams:
        return self.ctx.hp

    @property
    def determinism(self) -> Determinism:
        return self.ctx.determinism

    def batches(self, epoch: int) -> Any:
        """Epoch `epoch`'s training batches (1-based, as `train` counts), in `train`'s order; the
        model in training mode, as `_train_epoch` sets it."""
        self.session.model.train()
        return _epoch_batches(self.ctx, epoch)

    def step(self, batch: Any, carry: Any = None) -> tuple[dict[str, float], Any]:
        """One training batch: (its counts, the carry for the next batch of the epoch; None at its start)."""
        check_masks(batch)
        loss, _aux, stats, carry = _batch_step(self.ctx, self.session, to_device(batch, self.ctx.device), carry)
        if torch.isfinite(loss):
            return stats, carry
        if not _may_restart(self.ctx, self.session):
            raise Diverged(f"loss became {float(loss.detach())} at step {self.session.step}")
        self.session = _build(self.ctx, self.session.restarts + 1)
        return stats, None


# -- evaluate and checkpoint -------------------------------------------------------------------


def _end_of_epoch(ctx: _Context, s: _Session, result: RunResult, epoch: int, row: dict[str, float], t0: float) -> bool:
    """Validate, step the schedule, keep the best weights, write the checkpoint. False: stop (diverged)."""
    valid = ctx.adapter.evaluate(s.model, ctx.adapter.valid_split, ctx.eval_batch_size)
    row = {**row, **{f"valid_{k}": v for k, v in valid.items()}, **_gradient_summary(ctx, s)}
    row.update({"epoch": epoch, "lr": s.optimizer.param_groups[0]["lr"], "epoch_seconds": time.perf_counter() - t0})
    if ctx.metric not in row:
        raise TaskError(f"metric {ctx.metric!r} is not among the logged metrics ({', '.join(sorted(row))})")
    score = row[ctx.metric]
    if math.isfinite(score):
        s.schedule.step(row)
    else:
        result.status, result.reason = RunStatus.DIVERGED, f"validation {ctx.metric} became {score} at epoch {epoch}"
        return False
    result.history.append(row)
    if _better(score, result.best_valid, ctx.direction):
        result.best_valid, result.best_epoch = score, epoch
        s.best_state = weights_copy(s.model.state_dict())
        if ctx.run_path is not None:
            atomic_save(s.best_state, ctx.run_path / BEST_WEIGHTS)
    _save_checkpoint(ctx, s, result, epoch)
    return True


def _gradient_summary(ctx: _Context, s: _Session) -> dict[str, float]:
    """`grad_log_batches` > 0: the gradient-flow summary of encoder layer 1 on that many validation
    batches (tasks/analysis/gradients.py `epoch_summary`), as this epoch's grad_* metrics. It cannot
    change the run: eval mode, the RNG state restored, no gradient left on the parameters. A model
    whose unit cannot be stepped is said once and not measured again."""
    if not ctx.hp.grad_log_batches or ctx.no_gradients:
        return {}
    from .analysis.carry import CarryError
    from .analysis.gradients import epoch_summary

    state = rng_state()
    try:
        return epoch_summary(s.model, ctx.adapter, ctx.hp.grad_log_batches, ctx.device)
    except (CarryError, ValueError) as exc:
        ctx.no_gradients = True
        ctx.say(f"grad_log_batches: no gradient summary for unit {ctx.config.unit!r} ({exc})")
        return {}
    finally:
        set_rng_state(state)
        s.model.zero_grad(set_to_none=True)


def _better(a: float, b: float | None, direction: str) -> bool:
    return b is None or (a > b if direction == MAXIMIZE else a < b)


def _save_checkpoint(ctx: _Context, s: _Session, result: RunResult, epoch: int) -> None:
    if ctx.run_path is None:
        return
    atomic_save(
        {
            "fingerprint": ctx.fingerprints[0],
            "epoch": epoch,
            "model": s.model.state_dict(),
            "optimizer": s.optimizer.state_dict(),
            "scheduler": s.schedule.state_dict(),
            **rng_state(),
            "history": json.dumps(result.history),
            "best_epoch": result.best_epoch,
            "best_valid": result.best_valid,
            "step": s.step,
            "restarts": s.restarts,
            "notes": list(dict.fromkeys(result.notes + ctx.notes)),
        },
        ctx.run_path / CHECKPOINT,
    )


def _test(ctx: _Context, model: torch.nn.Module) -> dict[str, dict[str, float]]:
    """The best model's metrics on every test split, in the task's order, then the task's summaries
    over them (e.g. bAbI's mean error and failed tasks: `TaskAdapter.summarize_tests`)."""
    results = {split: ctx.adapter.evaluate(model, split, ctx.eval_batch_size) for split in ctx.adapter.test_splits}
    summaries = ctx.adapter.summarize_tests(results)
    clash = sorted(set(summaries) & set(results))
    if clash:
        raise TaskError(f"task {ctx.adapter.name!r}: summary names {clash} are also test split names")
    return {**results, **summaries}


def load_best_model(adapter: TaskAdapter, config: TrainConfig, run_dir: str | Path) -> torch.nn.Module:
    """Rebuild a run's model and load its best weights (weights_only=True: no code from the file)."""
    path = Path(run_dir) / BEST_WEIGHTS
    if not path.exists():
        raise DataError(f"{path}: no best-model weights in this run directory")
    adapter.prepare()
    hp = adapter.resolve_hparams(config.hparams)
    model = adapter.build_model(config.unit, config.arch, config.dim, config.input_dim, hp)
    try:
        model.load_state_dict(load_checkpoint(path))
    except RuntimeError as exc:
        raise CheckpointMismatch(f"{path}: weights do not fit unit {config.unit!r} at d={config.dim}: {str(exc).splitlines()[0]}") from None
    return model
