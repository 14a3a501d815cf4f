"""What every task adapter provides to the shared training loop and to the harness.

An adapter owns its data (where it comes from, tokenisation, caching, batches), the
architecture around the unit, the loss and the metrics per split. The training loop
(tasks/training.py) and the harness only call the methods below. docs/adding-a-task.md walks
through a complete adapter.

The contract, in the order the trainer uses it:

- `prepare()` loads or generates the data (using `cache_dir`). The base class makes it run once
  per adapter, however often it is called: implementations need no guard of their own.
- `train_batches(batch_size, generator, epoch)` yields the batches of one epoch; every random
  choice comes from `generator` (seeded by (seed, epoch)), so a resumed run sees the same order.
  A batch is a tensor or a dict/list/tuple of tensors (moved to the device with `to_device`);
  other values (flags, strings) pass through. Boolean tensors of shape [B, T] whose key ends
  in `mask` are checked once per batch on the host: right-padded (True, then only False).
- `eval_batches(split, batch_size)` yields a split's batches in a fixed order (use
  `cached_eval_batches` to build them once).
- `build_model(unit, arch, dim, input_dim, hparams)` returns the model; `hparams` is the run's
  resolved `HParams` (dropout, mlp_hidden and the task's own fields).
- `loss(model, batch)` returns `(mean loss tensor, counts)`: counts are additive numbers over
  batches, e.g. {"correct": 7, "count": 16}; "count" weights the loss when it is averaged.
  Tasks whose model carries state from one batch to the next (truncated BPTT) implement
  `loss_with_carry(model, batch, carry) → (loss, counts, carry)` instead; the trainer starts each
  epoch and each evaluation with carry None and passes it along explicitly.
- `metrics_from_counts(loss_sum, counts)` turns summed counts into metrics ({"loss", "acc"} by
  default). `evaluate(model, split, batch_size)` returns them for a split. The trainer logs
  them per epoch as `train_<name>` and `valid_<name>`; the study's metric must be one of the
  `valid_<name>` keys, where `<name>` is one of `metrics` (names registered in tasks/metrics.py).
- `summarize_tests(results)` may add metrics over the test splits (bAbI: mean error, failed tasks),
  computed from the splits' metrics after the test; they are logged as `test_<name>_<metric>`.
- Modules of the model may set a tensor `aux_loss` during forward (already weighted and masked;
  set anew on every forward): the trainer adds their sum to the task loss and logs it per epoch
  as `train_aux`.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pydantic
import torch
from torch import nn

from .device import to_device
from .errors import TaskError
from .hparams import HParams
from .meta import TaskMeta

GENERATED = "generated"


def _option_problem(task: str, model: type[pydantic.BaseModel], err: dict[str, Any]) -> str:
    """One pydantic error as `key: message`; an unknown key gets a did-you-mean and the accepted names."""
    key = ".".join(map(str, err["loc"]))
    if err["type"] == "extra_forbidden":
        import difflib

        names = list(model.model_fields)
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown option {key!r}{hint}; task {task!r} accepts {', '.join(names) or 'no options'}"
    return f"{key}: {err['msg']}" if key else err["msg"]  # a check across options has no single key


def _prepare_once(prepare: Callable[[Any], None]) -> Callable[[Any], None]:
    """Wrap an adapter's `prepare` so it runs once per instance (the copies of this guard that
    every adapter carried live here)."""
    if getattr(prepare, "_once", False):
        return prepare

    @functools.wraps(prepare)
    def once(self: TaskAdapter) -> None:
        if self.__dict__.get("_prepared"):
            return
        prepare(self)
        self._prepared = True

    once._once = True  # type: ignore[attr-defined]
    return once


class TaskAdapter(TaskMeta, ABC):
    """An adapter. Its declarations (name, archs, Options, HParams, metrics, defaults, references,
    check_unit) are `TaskMeta`'s (tasks/meta.py): a built-in declares them in tasks/<name>/meta.py
    and its adapter subclasses that class, so a study file is read without torch."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "prepare" in cls.__dict__:
            cls.prepare = _prepare_once(cls.__dict__["prepare"])  # type: ignore[method-assign]

    def __init__(self, options: pydantic.BaseModel | dict | None, data: str | None, cache_dir: str | Path) -> None:
        if not isinstance(options, pydantic.BaseModel):
            try:
                options = self.Options.model_validate(options or {})
            except pydantic.ValidationError as exc:
                problems = "; ".join(_option_problem(self.name, self.Options, e) for e in exc.errors())
                raise TaskError(f"task {self.name!r} options: {problems}") from None
        self.options = options
        self.data = data
        self.cache_dir = Path(cache_dir)
        self._eval_cache: dict[tuple[str, int], list[Any]] = {}

    # -- data ------------------------------------------------------------------------------
    @property
    def generated(self) -> bool:
        """True when the study asks for the task's built-in data (`data = "generated"` or none)."""
        return self.data in (None, "", GENERATED)

    def check_data(self) -> None:  # noqa: B027 (optional hook: the default checks nothing)
        """Cheap check that the data location exists (no loading); raises DataError naming it.

        The harness calls it before it opens a study's record, so a wrong path writes nothing.
        Default: no check (`prepare` reports problems)."""

    @abstractmethod
    def prepare(self) -> None:
        """Load (or generate) and tokenise the data, using the cache. Runs once (the base guards it)."""

    @property
    @abstractmethod
    def valid_split(self) -> str: ...

    @property
    @abstractmethod
    def test_splits(self) -> list[str]: ...

    @abstractmethod
    def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[Any]:
        """One epoch of training batches; all randomness from `generator` (seeded per epoch)."""

    @abstractmethod
    def eval_batches(self, split: str, batch_size: int) -> Iterator[Any]: ...

    def train_example_count(self) -> int | None:
        """Training examples, for a task whose batches can be built from any list of them
        (`train_batch`): the training loop's stream of full batches (`HParams.epoch_updates`).
        Default None: the task offers only its own epochs (`train_batches`)."""
        return None

    def train_batch(self, index: Any) -> Any:
        """The batch of training examples `index` (a 1-d int64 tensor of positions), in that order."""
        raise NotImplementedError(f"task {self.name!r} builds batches only a pass at a time (train_batches)")

    def train_batch_count(self, batch_size: int) -> int | None:
        """Batches in one training epoch, when known without building them (a progress bar's
        total and ETA; called after `prepare`). Default None: the bar counts without an ETA."""
        return None

    def cached_eval_batches(self, split: str, batch_size: int, make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """`make()`'s batches, built once per (split, batch size) and replayed on every evaluation."""
        key = (split, batch_size)
        if key not in self._eval_cache:
            self._eval_cache[key] = list(make())
        return iter(self._eval_cache[key])

    # -- model (check_unit: TaskMeta's) ------------------------------------------------------
    def check_arch(self, arch: str) -> None:
        if arch not in self.archs:
            raise TaskError(f"task {self.name!r} has no architecture {arch!r} (choose one of {', '.join(self.archs)})")

    @abstractmethod
    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module: ...

    def report_notes(self, arch: str) -> list[str]:
        """Lines a report header should print about this task and architecture: which BiDAF it is,
        which SentEval solver... (what differs from, or names the variant of, the papers)."""
        return []

    @abstractmethod
    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean loss of a batch and additive counts for metrics, e.g. {"correct": 7, "count": 16}."""

    def loss_with_carry(self, model: nn.Module, batch: Any, carry: Any) -> tuple[torch.Tensor, dict[str, float], Any]:
        """`loss` for models that carry state across batches; stateless tasks keep this default."""
        loss, stats = self.loss(model, batch)
        return loss, stats, carry

    def metrics_from_counts(self, loss_sum: float, counts: dict[str, float]) -> dict[str, float]:
        """Turn summed counts into metrics. Classification default: loss and accuracy."""
        n = max(counts.get("count", 0), 1)
        return {"loss": loss_sum / n, "acc": counts.get("correct", 0) / n}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        model.eval()
        loss_sum, counts, carry = 0.0, {}, None
        device = next(model.parameters()).device
        for batch in self.eval_batches(split, batch_size):
            loss, stats, carry = self.loss_with_carry(model, to_device(batch, device), carry)
            loss_sum += float(loss) * stats.get("count", 1)
            for k, v in stats.items():
                counts[k] = counts.get(k, 0) + v
        return self.metrics_from_counts(loss_sum, counts)

    def summarize_tests(self, results: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        """Metrics over the test splits, computed from their metrics: {name: {metric: value}}, logged
        like a split's (`test_<name>_<metric>`) but not a split of the task. Default: none. bAbI
        returns {"summary": {"mean_error": …, "failed": …}} (the papers' two summary rows)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Facts about the prepared data, for logs and the CLI (sizes per split, vocab size...)."""
        return {}
