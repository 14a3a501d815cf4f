"""What every task adapter provides to the shared training loop and to the harness.

An adapter owns its data (where it comes from, tokenisation, caching, batches), the
architecture around the unit, the loss and the metrics per split. The training loop
(tasks/training.py) and the harness only call the methods below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Iterator

import pydantic
import torch
from torch import nn

from .registry import TaskError


def _option_problem(task: str, model: type[pydantic.BaseModel], err: dict[str, Any]) -> str:
    """One pydantic error as `key: message`; an unknown key gets a did-you-mean and the accepted names."""
    key = ".".join(map(str, err["loc"]))
    if err["type"] == "extra_forbidden":
        import difflib

        names = list(model.model_fields)
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown option {key!r}{hint}; task {task!r} accepts {', '.join(names) or 'no options'}"
    return f"{key}: {err['msg']}"


class TaskAdapter(ABC):
    name: ClassVar[str]
    archs: ClassVar[tuple[str, ...]]
    Options: ClassVar[type[pydantic.BaseModel]]
    layouts: ClassVar[str] = ""
    metric: ClassVar[str] = "acc"  # the validation metric that selects the best epoch
    direction: ClassVar[str] = "maximize"
    # Training defaults of the papers for this task; a study's search space overrides them.
    defaults: ClassVar[dict[str, Any]] = {}

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

    # -- data ------------------------------------------------------------------------------
    def check_data(self) -> None:
        """Cheap check that the data location exists (no loading); raises DataError naming it.

        The harness calls it before it opens a study's record, so a wrong path writes nothing.
        Default: no check (`prepare` reports problems)."""

    @abstractmethod
    def prepare(self) -> None:
        """Load (or generate) and tokenise the data, using the cache. Idempotent."""

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

    # -- model -----------------------------------------------------------------------------
    def check_arch(self, arch: str) -> None:
        if arch not in self.archs:
            raise TaskError(f"task {self.name!r} has no architecture {arch!r} (choose one of {', '.join(self.archs)})")

    @abstractmethod
    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: dict[str, Any]) -> nn.Module: ...

    def report_notes(self, arch: str) -> list[str]:
        """Lines a report header should print about this task and architecture: which BiDAF it is,
        which SentEval solver... (what differs from, or names the variant of, the papers)."""
        return []

    @abstractmethod
    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean loss of a batch and additive counts for metrics, e.g. {"correct": 7, "count": 16}."""

    def metrics_from_counts(self, loss_sum: float, counts: dict[str, float]) -> dict[str, float]:
        """Turn summed counts into metrics. Classification default: loss and accuracy."""
        n = max(counts.get("count", 0), 1)
        return {"loss": loss_sum / n, "acc": counts.get("correct", 0) / n}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        model.eval()
        loss_sum, counts = 0.0, {}
        from .training import to_device

        device = next(model.parameters()).device
        for batch in self.eval_batches(split, batch_size):
            loss, stats = self.loss(model, to_device(batch, device))
            loss_sum += float(loss) * stats.get("count", 1)
            for k, v in stats.items():
                counts[k] = counts.get(k, 0) + v
        return self.metrics_from_counts(loss_sum, counts)

    def describe(self) -> dict[str, Any]:
        """Facts about the prepared data, for logs and the CLI (sizes per split, vocab size...)."""
        return {}
