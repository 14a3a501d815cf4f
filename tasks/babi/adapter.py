"""bAbI question answering (Weston et al. 2015) as a task adapter, trained as TPR-RNN's authors did.

Data: tasks/babi/data.py (the authors' reader). Options choose the tasks ("1-20" trains one
all-task model; "3" a single-task one), the size (10k | 1k), the validation carve (the last
`valid_fraction` of each task's train stories: ../shared/data has no en-valid split), the story
window and whether a task without a 10k train file (qa3 here) may train on its 1k file.

Architectures (tasks/babi/models.py): `tpr-rnn` (the paper's model; needs a `tpr3` unit, whose
hidden size E·R·E a study's matrix may leave to the spec) and `plain`, a sentence-level
baseline for any unit. The sentence vector size S is the vocabulary size V by default, as the
authors' code sets it in both settings (`c.symbol_size = c.vocab_size`).

Metrics: loss, accuracy and error (%) per split; the test splits are qa{N} for the tasks trained
on, and `summarize_tests` adds the papers' summary rows — mean error over them and the number
of failed tasks (error > 5%) — as `test_summary_mean_error` / `test_summary_failed`.

Training defaults are the paper's single-task setting (TPR-FAMILY.md §1.1, tpr_rnn_graph.py):
Nadam with constant momentum as tf.contrib.opt.NadamOptimizer (`nadam-tf`), lr 0.008,
β = (0.6, 0.4), batch 128, 50 warm-up steps at lr/10 with re-initialisation on a NaN loss,
global-norm clipping at 5, lr × 0.5 once when the validation loss falls below 0.1, best epoch by
validation accuracy. The all-task setting (lr 1e-3, β = (0.9, 0.999), batch 32) is set in its
study's [search] (studies/babi-paper.toml).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pydantic
import torch
from torch import nn
from torch.nn import functional as F

from ..base import TaskAdapter
from ..hparams import HParams
from ..paths import require_dir
from ..registry import TaskError, register_task
from .data import _HOW, BabiData, load_babi, parse_tasks
from .models import SentenceModel, TPRRNNModel

FAIL_ERROR = 5.0  # a task "fails" above 5% test error (Weston et al. 2015; every bAbI paper since)
SUMMARY = "summary"  # the name summarize_tests logs under: test_summary_<metric>


class BabiOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    tasks: str = pydantic.Field("1-20", description='task ids 1..20: "1-20" (one all-task model), "3", "1,2", "1-3,7"')
    size: Literal["10k", "1k"] = pydantic.Field("10k", description="training set: 10k (en-10k/) or 1k (en/) examples per task")
    valid_fraction: float = pydantic.Field(
        0.1, gt=0, lt=1, description="validation = the last fraction of each task's train stories (no en-valid split here)")
    max_story: int | None = pydantic.Field(
        None, ge=1, description="statements kept per question (default: the authors' 70, and 130 for qa3)")
    fallback_1k: bool = pydantic.Field(
        False, description="train a task whose 10k train file is missing (qa3 in ../shared/data) on its 1k file; "
                           "marked in the record (test_summary_fallback_1k_qaN) and in reports")
    symbol_size: Literal["vocab", "input_dim"] = pydantic.Field(
        "vocab", description="sentence vector size S: the vocabulary size (the authors' S = V) or the cell's input_dim")

    @pydantic.field_validator("tasks", mode="before")
    @classmethod
    def _tasks(cls, value: Any) -> str:
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str):
            raise ValueError(f'expected task ids as text like "1-20" or "1,2", got {value!r}')
        parse_tasks(text)  # a TaskError (ValueError) names what is wrong
        return text


class BabiHParams(HParams):
    """bAbI's own hyperparameter: the input module's embedding initialisation."""

    embed_init: float = pydantic.Field(
        0.01, gt=0, description="word embeddings D ~ U(±embed_init): 0.01 the paper, 0.1 the authors' code")


@register_task("babi")
class BabiTask(TaskAdapter):
    archs = ("tpr-rnn", "plain")
    Options = BabiOptions
    HParams = BabiHParams
    layouts = ("bAbI v1.2 (Weston et al.): a folder holding en/ and en-10k/ with qa{N}_*_{train,test}.txt "
               "(data = its path; \"generated\" means $TPRBENCH_DATA/babi)")
    metric = "acc"  # the paper keeps the epoch of best validation accuracy
    direction = "maximize"
    metrics = {"loss": "minimize", "acc": "maximize", "error": "minimize"}
    defaults = {
        "optimizer": "nadam-tf", "lr": 0.008, "betas": (0.6, 0.4), "batch_size": 128, "clip": 5.0,
        "warmup_steps": 50, "warmup_factor": 0.1, "nan_restarts": 10,
        "schedule": "threshold", "threshold_metric": "valid_loss", "threshold_value": 0.1,
        "threshold_mode": "below", "factor": 0.5,
    }
    #: Published single-task numbers (test error %, 10k) printed beside ours: {column: {row: text}}.
    references = {
        "paper single-task, 10k (TPR-FAMILY §1.3)": {
            "qa3": "1.78", "qa7": "2.78", "qa19": "12.64 ± 17.39", "mean error": "1.12 ± 1.19",
        },
        "PyTorch port, Adam, single-task, 10k (APodolskiy/TPR-RNN-Torch README)": {
            f"qa{t}": v for t, v in zip(range(1, 21), (
                "0.0", "0.1", "1.1", "0.0", "0.3", "2.5", "0.4", "0.4", "2.2", "0.1",
                "0.3", "0.2", "1.6", "0.4", "0.0", "0.0", "3.9", "2.3", "0.2", "0.0"))
        } | {"mean error": "0.80", "failed": "0"},
    }

    # -- data ------------------------------------------------------------------------------
    def _data_dir(self) -> str | None:
        return None if self.generated else self.data

    def check_data(self) -> None:
        if not self.generated:
            require_dir(self.data, "bAbI", _HOW)

    def prepare(self) -> None:
        opts = self.options
        self.babi: BabiData = load_babi(opts.tasks, opts.size, self._data_dir(), opts.valid_fraction, opts.max_story,
                                        opts.fallback_1k, cache_dir=Path(self.cache_dir) / "babi")

    @property
    def valid_split(self) -> str:
        return "valid"

    @property
    def test_splits(self) -> list[str]:
        return [f"qa{t}" for t in parse_tasks(self.options.tasks)]

    def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        split = self.babi["train"]
        order = torch.randperm(len(split), generator=generator)
        for start in range(0, len(order), batch_size):
            yield split.batch(order[start:start + batch_size])

    def eval_batches(self, split: str, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        def make() -> Iterator[dict[str, torch.Tensor]]:
            data = self.babi[split]
            order = torch.argsort(data.length, stable=True)  # similar lengths together: less padding, same counts
            for start in range(0, len(order), batch_size):
                yield data.batch(order[start:start + batch_size])

        return self.cached_eval_batches(split, batch_size, make)

    # -- model -----------------------------------------------------------------------------
    @classmethod
    def check_unit(cls, arch: str, unit: str) -> None:
        if arch != "tpr-rnn":
            return
        import units

        resolved = units.resolve(unit)
        if not (resolved.cls is units.lookup("tpr3") and resolved.layers == 1 and not resolved.bidirectional):
            raise TaskError(f"babi arch 'tpr-rnn' is TPR-RNN's own model around its update module and needs a single "
                            f"tpr3 unit (e.g. 'tpr3' or 'tpr3[entity=15,relation=10]'), got {unit!r}; use arch "
                            "'plain' (the sentence-level baseline) for other units")

    def symbol_size(self, dim: int, input_dim: int) -> int:
        """S: the vocabulary size (symbol_size = "vocab", the authors' rule) or the cell's input_dim."""
        if self.options.symbol_size == "input_dim":
            return input_dim
        if input_dim != dim:
            raise TaskError(f"babi symbol_size='vocab' sets the sentence vector size to the vocabulary size "
                            f"({self.babi.vocab_size}); input_dim={input_dim} would be unused: leave matrix.input_dim "
                            "out, or set the task option symbol_size = 'input_dim'")
        return self.babi.vocab_size

    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module:
        self.check_arch(arch)
        self.check_unit(arch, unit)
        self.prepare()
        if hparams.mlp_hidden is not None:
            raise TaskError(f"babi: mlp_hidden={hparams.mlp_hidden} would be unused (TPR-RNN's MLP size is the tpr3 "
                            "option mlp_hidden; the plain baseline reads out linearly)")
        S = self.symbol_size(dim, input_dim)
        V, L = self.babi.vocab_size, self.babi.max_words
        embed_init = getattr(hparams, "embed_init", BabiHParams.model_fields["embed_init"].default)
        if arch == "tpr-rnn":
            if hparams.dropout:
                raise TaskError(f"babi arch 'tpr-rnn' has no dropout (the paper's model); dropout={hparams.dropout} "
                                "would be unused")
            return TPRRNNModel(unit, dim, V, L, S, embed_init)
        return SentenceModel(unit, dim, V, L, S, embed_init, hparams.dropout)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(batch["stories"], batch["lengths"], batch["question"])
        correct = int((logits.argmax(-1) == batch["answer"]).sum())
        return F.cross_entropy(logits, batch["answer"]), {"correct": correct, "count": int(batch["answer"].shape[0])}

    # -- metrics ---------------------------------------------------------------------------
    def metrics_from_counts(self, loss_sum: float, counts: dict[str, float]) -> dict[str, float]:
        out = super().metrics_from_counts(loss_sum, counts)
        out["error"] = 100.0 * (1.0 - out["acc"])
        return out

    def summarize_tests(self, results: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        """Mean test error over the tasks and the number of failed tasks (> 5% error), as the
        papers' last two rows; a task trained on its 1k file is flagged (fallback_1k_qaN = 1)."""
        errors = [results[s]["error"] for s in self.test_splits if s in results]
        if not errors:
            return {}
        summary = {"mean_error": sum(errors) / len(errors), "failed": float(sum(e > FAIL_ERROR for e in errors)),
                   "tasks": float(len(errors))}
        summary.update({f"fallback_1k_qa{t}": 1.0 for t in sorted(self.babi.fallbacks)})
        return {SUMMARY: summary}

    def describe(self) -> dict[str, Any]:
        self.prepare()
        b = self.babi
        out: dict[str, Any] = {"tasks": ",".join(map(str, b.tasks)), "size": b.size, "vocab": b.vocab_size,
                               "max_words": b.max_words}
        out.update({f"{name}_examples": len(split) for name, split in b.splits.items()})
        if b.fallbacks:
            out["fallback_1k"] = ", ".join(f"qa{t}: {path}" for t, path in sorted(b.fallbacks.items()))
        return out
