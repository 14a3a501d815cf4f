"""Language modelling (WikiText-2/103, PTB) as a task adapter.

Two layers of the unit by default, a Linear(d, d_embed) projection before the decoder tied to
the input embeddings (the authors' models/lm.py: `proj` with orthogonal init and bias 0, always
present; option `projection=false` drops it when d = d_embed), truncated BPTT with the
state carried across windows (`forward_carry`), perplexity per split (per BPE token with BPE,
plus word-level perplexity). The train stream is cut into `batch_size` rows read left to right,
so the windows of an epoch are in a fixed order; the carry restarts at each epoch and each
evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pydantic
import torch
from torch import nn
from torch.nn import functional as F

import units

from ..base import TaskAdapter
from ..errors import DataError
from ..hparams import HParams
from ..registry import TaskError, register_task
from .data import CORPORA, batchify, bptt_batches, load_lm_corpus


class LMOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    corpus: Literal["wikitext2", "wikitext103", "ptb"] = "wikitext2"
    bpe_vocab_size: int | None = pydantic.Field(None, ge=64, description="train a BPE vocabulary of this size (None: words)")
    bptt: int = pydantic.Field(35, ge=2, description="truncated-BPTT window length")
    layers: int = pydantic.Field(2, ge=1, description="unit layers when the unit spec does not say")
    max_train_tokens: int | None = pydantic.Field(None, ge=1000, description="use only the first N train tokens (CPU runs)")
    max_eval_tokens: int | None = pydantic.Field(None, ge=1000, description="use only the first N valid/test tokens")
    eval_batch_size: int = pydantic.Field(10, ge=1)
    projection: bool = pydantic.Field(True, description="Linear(d, d_embed) before the tied decoder, as the authors' lm.py "
                                                        "(false: none, allowed only when d = d_embed)")


class LanguageModel(nn.Module):
    """Embedding → unit (stacked) → projection Linear(d, d_embed) → decoder tied to the embedding.

    As the authors' models/lm.py: embedding and projection weights orthogonal (`init_weights`),
    projection bias 0, the decoder an nn.Linear (default bias init) sharing the embedding matrix."""

    def __init__(self, unit: str, vocab_size: int, dim: int, input_dim: int, dropout: float, projection: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, input_dim)
        nn.init.orthogonal_(self.embed.weight)
        self.encoder = units.build(unit, input_dim, dim)
        width = self.encoder.output_size
        if projection:
            self.project = nn.Linear(width, input_dim)
            nn.init.orthogonal_(self.project.weight)
            nn.init.zeros_(self.project.bias)
        elif width == input_dim:
            self.project = nn.Identity()
        else:
            raise TaskError(f"lm: projection=false needs the unit's output size ({width}) to equal the embedding size "
                            f"({input_dim}): the decoder is tied to the embedding")
        self.decoder = nn.Linear(input_dim, vocab_size)
        self.decoder.weight = self.embed.weight  # tied input/output embeddings
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor, carry: Any = None) -> tuple[torch.Tensor, Any]:
        outputs, carry = self.encoder.forward_carry(self.dropout(self.embed(tokens)), carry)
        return self.decoder(self.dropout(self.project(outputs))), carry


def detach(carry: Any) -> Any:
    if isinstance(carry, torch.Tensor):
        return carry.detach()
    if isinstance(carry, (list, tuple)):
        return type(carry)(detach(c) for c in carry)
    return carry


@register_task("lm")
class LMTask(TaskAdapter):
    archs = ("lm",)
    Options = LMOptions
    layouts = ("WikiText-2/103 folder (train.txt|wiki.train.tokens, valid, test) or PTB folder "
               "(ptb.train.txt, ptb.valid.txt, ptb.test.txt); tokens = line.split() + <eos>")
    metric = "ppl"
    direction = "minimize"
    metrics = {"loss": "minimize", "ppl": "minimize", "word_ppl": "minimize"}
    defaults = {"lr": 1e-3, "lr_step": 30, "lr_gamma": 0.1, "clip": 0.25, "batch_size": 20, "dropout": 0.2}

    def check_data(self) -> None:
        if self.data == "generated":
            raise DataError("lm: there is no generated corpus; set data to a WikiText/PTB folder, e.g. ${TPRBENCH_DATA}/wikitext2")
        if self.data not in (None, "") and not Path(self.data).expanduser().is_dir():
            raise DataError(f"lm: corpus folder {Path(self.data).expanduser()} not found")

    def prepare(self) -> None:
        self.check_data()
        opts = self.options
        data_dir = None if self.data in (None, "") else Path(self.data).expanduser()
        self.corpus = load_lm_corpus(opts.corpus, data_dir=data_dir, cache_dir=self.cache_dir / "lm",
                                     bpe_vocab_size=opts.bpe_vocab_size)
        streams = dict(self.corpus.splits)
        if opts.max_train_tokens:
            streams["train"] = streams["train"][: opts.max_train_tokens]
        if opts.max_eval_tokens:
            for split in ("valid", "test"):
                streams[split] = streams[split][: opts.max_eval_tokens]
        self.streams = streams
        self._rows: dict[tuple[str, int], torch.Tensor] = {}

    @property
    def valid_split(self) -> str:
        return "valid"

    @property
    def test_splits(self) -> list[str]:
        return ["test"]

    def _batched(self, split: str, batch_size: int) -> torch.Tensor:
        key = (split, batch_size)
        if key not in self._rows:
            self._rows[key] = batchify(self.streams[split], batch_size)
        return self._rows[key]

    def _windows(self, split: str, batch_size: int) -> Iterator[dict[str, Any]]:
        for i, (x, y) in enumerate(bptt_batches(self._batched(split, batch_size), self.options.bptt)):
            yield {"input": x, "target": y, "first": i == 0}

    def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[dict[str, Any]]:
        return self._windows("train", batch_size)

    def eval_batches(self, split: str, batch_size: int) -> Iterator[dict[str, Any]]:
        return self._windows(split, self.options.eval_batch_size)

    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module:
        self.check_arch(arch)
        resolved = units.resolve(unit, dim)
        if resolved.bidirectional:
            raise TaskError(f"lm: unit {unit!r} is bidirectional; a language model reads left to right")
        spec = resolved.spec if "layers" in resolved.spec.option_dict else resolved.spec.with_options(layers=self.options.layers)
        model = LanguageModel(str(spec), self.corpus.vocab_size, dim, input_dim, hparams.dropout,
                              projection=self.options.projection)
        if not hasattr(model.encoder, "forward_carry"):
            raise TaskError(f"lm: unit {unit!r} cannot carry state across BPTT windows (no forward_carry)")
        return model

    def loss_with_carry(self, model: nn.Module, batch: dict[str, Any], carry: Any) -> tuple[torch.Tensor, dict[str, float], Any]:
        """One BPTT window continuing from `carry` (the trainer passes it along; None at a pass's start)."""
        logits, carry = model(batch["input"], None if batch["first"] else carry)
        target = batch["target"]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        return loss, {"count": int(target.numel())}, detach(carry)

    def loss(self, model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        loss, stats, _ = self.loss_with_carry(model, batch, None)
        return loss, stats

    def metrics_from_counts(self, loss_sum: float, counts: dict[str, float]) -> dict[str, float]:
        nll = loss_sum / max(counts.get("count", 0), 1)
        return {"loss": nll, "ppl": math.exp(min(nll, 50.0))}

    def evaluate(self, model: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        metrics = super().evaluate(model, split, batch_size)
        if self.corpus.tokenizer == "bpe" and not (self.options.max_eval_tokens or self.options.max_train_tokens):
            metrics["word_ppl"] = self.corpus.word_perplexity(split, metrics["loss"])
        return metrics

    def describe(self) -> dict[str, Any]:
        self.prepare()
        return {"corpus": self.corpus.name, "tokenizer": self.corpus.tokenizer, "vocab": self.corpus.vocab_size,
                **{f"{s}_tokens": int(t.numel()) for s, t in self.streams.items()}}


assert set(CORPORA) == {"wikitext2", "wikitext103", "ptb"}
