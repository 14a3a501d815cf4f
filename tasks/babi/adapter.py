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

Training defaults are the paper's single-task setting (Schlag & Schmidhuber 2018; the authors'
code, ischlag/TPR-RNN tpr_rnn_graph.py):
Nadam with constant momentum as tf.contrib.opt.NadamOptimizer (`nadam-tf`), lr 0.008,
β = (0.6, 0.4), batch 128, 50 warm-up steps at lr/10 with re-initialisation on a NaN loss,
global-norm clipping at 5, lr × 0.5 once when the validation loss falls below 0.1, best epoch by
validation accuracy. The all-task setting (lr 1e-3, β = (0.9, 0.999), batch 32) is set in its
study's [search] (studies/babi-paper.toml).

How the authors' loop feeds and validates — not in the paper, so from their code — is two
hyperparameters a study sets: `data_order = "fixed"` (one permutation drawn once and repeated,
`Dataset.from_tensor_slices(train[p]).cache().repeat()`) and `epoch_updates = 200` (one stream of
full batches, validated every 200 updates, `train(validate_every=200)`): studies/babi-authors-rule.toml
and reports/babi-qa17-isolate. They are not the task's defaults, so that the earlier studies'
"epochs" (a pass over the data each) still mean what their files say. Their code also undoes the
lr × 0.5 at the next step (each step first sets the lr back when i > warm_up_steps), so their runs
keep lr 0.008; the decay here is the paper's rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..base import TaskAdapter
from ..errors import TaskError
from ..hparams import HParams
from ..paths import expect_files
from ..registry import register_task
from .data import _HOW, LAYOUT, BabiData, load_babi
from .meta import BabiHParams, BabiMeta, parse_tasks
from .models import SentenceModel, TPRRNNModel

FAIL_ERROR = 5.0  # a task "fails" above 5% test error (Weston et al. 2015; every bAbI paper since)
SUMMARY = "summary"  # the name summarize_tests logs under: test_summary_<metric>


@register_task("babi")
class BabiTask(BabiMeta, TaskAdapter):
    # archs, Options, metrics, defaults, ...: BabiMeta's (tasks/babi/meta.py)

    # -- data ------------------------------------------------------------------------------
    def _data_dir(self) -> str | None:
        return None if self.generated else self.data

    def check_data(self) -> None:
        if not self.generated:
            expect_files("bAbI", self.data, LAYOUT, _HOW)

    def prepare(self) -> None:
        opts = self.options
        self.babi: BabiData = load_babi(
            opts.tasks, opts.size, self._data_dir(), opts.valid_fraction, opts.max_story, opts.fallback_1k, cache_dir=Path(self.cache_dir) / "babi"
        )

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
            yield split.batch(order[start : start + batch_size])

    def train_example_count(self) -> int:
        return len(self.babi["train"])

    def train_batch(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.babi["train"].batch(index)

    def eval_batches(self, split: str, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        def make() -> Iterator[dict[str, torch.Tensor]]:
            data = self.babi[split]
            order = torch.argsort(data.length, stable=True)  # similar lengths together: less padding, same counts
            for start in range(0, len(order), batch_size):
                yield data.batch(order[start : start + batch_size])

        return self.cached_eval_batches(split, batch_size, make)

    # -- model -----------------------------------------------------------------------------
    def symbol_size(self, dim: int, input_dim: int) -> int:
        """S: the vocabulary size (symbol_size = "vocab", the authors' rule) or the cell's input_dim."""
        if self.options.symbol_size == "input_dim":
            return input_dim
        if input_dim != dim:
            raise TaskError(
                f"babi symbol_size='vocab' sets the sentence vector size to the vocabulary size "
                f"({self.babi.vocab_size}); input_dim={input_dim} would be unused: leave matrix.input_dim "
                "out, or set the task option symbol_size = 'input_dim'"
            )
        return self.babi.vocab_size

    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module:
        self.check_arch(arch)
        self.check_unit(arch, unit)
        self.prepare()
        if hparams.mlp_hidden is not None:
            raise TaskError(
                f"babi: mlp_hidden={hparams.mlp_hidden} would be unused (TPR-RNN's MLP size is the tpr3 "
                "option mlp_hidden; the plain baseline reads out linearly)"
            )
        S = self.symbol_size(dim, input_dim)
        V, L = self.babi.vocab_size, self.babi.max_words
        embed_init = getattr(hparams, "embed_init", BabiHParams.model_fields["embed_init"].default)
        if arch == "tpr-rnn":
            if hparams.dropout:
                raise TaskError(f"babi arch 'tpr-rnn' has no dropout (the paper's model); dropout={hparams.dropout} would be unused")
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
        summary = {"mean_error": sum(errors) / len(errors), "failed": float(sum(e > FAIL_ERROR for e in errors)), "tasks": float(len(errors))}
        summary.update({f"fallback_1k_qa{t}": 1.0 for t in sorted(self.babi.fallbacks)})
        return {SUMMARY: summary}

    def describe(self) -> dict[str, Any]:
        self.prepare()
        b = self.babi
        out: dict[str, Any] = {"tasks": ",".join(map(str, b.tasks)), "size": b.size, "vocab": b.vocab_size, "max_words": b.max_words}
        out.update({f"{name}_examples": len(split) for name, split in b.splits.items()})
        if b.fallbacks:
            out["fallback_1k"] = ", ".join(f"qa{t}: {path}" for t, path in sorted(b.fallbacks.items()))
        return out
