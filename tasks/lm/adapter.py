"""Language modelling (WikiText-2/103, PTB) as a task adapter.

Two layers of the unit by default, a Linear(d, d_embed) projection before the decoder tied to
the input embeddings (the authors' models/lm.py: `proj` with orthogonal init and bias 0, always
present; option `projection=false` drops it when d = d_embed), truncated BPTT with the
state carried across windows (`forward_carry`), perplexity per split (per BPE token with BPE,
plus word-level perplexity). The train stream is cut into `batch_size` rows read left to right,
so the windows of an epoch are in a fixed order; the carry restarts at each epoch and each
evaluation.

`contiguous=false` reads one sentence (line) per row instead, right-padded, the state starting from
zero for every sentence: the non-contiguous rows of Luo et al.'s Table 1.

`embedding="hrr"` replaces the embedding and the tied decoder by Luo et al.'s HRR word embedding
and its readout (tasks/lm/hrr.py), around any registered unit; the unit's output is projected to
the embedding width d (the `projection` Linear, or none when the widths agree) before the readout.

Four options for the HRR authors' lingvo configuration (each at the PyTorch models' choice by
default): `loss="sequence_sum"` trains on the cross-entropy summed over each row's tokens and averaged
over the rows (their lr 1, clip 5 and β = 100 then apply as written), `dropout_between_layers` adds the
run's dropout between the stacked unit's layers (lingvo's StackedCuDNNLSTM drops after every layer),
`decoder_bias=false` drops the plain decoder's bias (lingvo's softmax has none), and `init_uniform=0.05`
draws every weight U(±0.05) with biases 0, as lingvo's PTB configs. For Zaremba et al.'s small LSTM (the
budget's anchor of studies/hrr-ptb-paper.toml), `tie=false` gives the decoder its own Linear and
`init_uniform_biases=true` draws the biases U(±s) too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

import units
from units.wrappers import Stacked

from ..base import TaskAdapter
from ..errors import TaskError
from ..hparams import HParams
from ..paths import corpus_folder
from ..registry import register_task
from .data import CORPORA, batchify, bptt_batches, corpus_files, load_lm_corpus, sentence_batches, split_sentences
from .hrr import EmbeddingParamCounts, HRRWordEmbedding
from .meta import LMMeta


class LanguageModel(nn.Module):
    """Embedding → unit (stacked) → projection Linear(d, d_embed) → decoder tied to the embedding
    (its own Linear with `tie=False`).

    As the authors' models/lm.py: embedding and projection weights orthogonal (`init_weights`),
    projection bias 0, the decoder an nn.Linear (default bias init; none with `decoder_bias=False`)
    sharing the embedding matrix.
    With `hrr` (HRRWordEmbedding's keyword arguments) the embedding is Luo et al.'s HRR embedding
    and the decoder its tied readout `logits(h)`, h being the projected unit output."""

    def __init__(
        self,
        unit: str,
        vocab_size: int,
        dim: int,
        input_dim: int,
        dropout: float,
        projection: bool = True,
        hrr: dict[str, Any] | None = None,
        sequence_sum: bool = False,
        dropout_between_layers: bool = False,
        decoder_bias: bool = True,
        init_uniform: float | None = None,
        init_uniform_biases: bool = False,
        tie: bool = True,
    ) -> None:
        super().__init__()
        self.sequence_sum = sequence_sum  # the training loss is per sequence: β weighs against it unscaled
        if hrr is None:
            self.embed = nn.Embedding(vocab_size, input_dim)
            nn.init.orthogonal_(self.embed.weight)
        else:
            self.embed = HRRWordEmbedding(vocab_size, input_dim, **hrr)
        self.encoder = units.build(unit, input_dim, dim)
        width = self.encoder.output_size
        if projection:
            self.project = nn.Linear(width, input_dim)
            nn.init.orthogonal_(self.project.weight)
            nn.init.zeros_(self.project.bias)
        elif width == input_dim:
            self.project = nn.Identity()
        else:
            raise TaskError(
                f"lm: projection=false needs the unit's output size ({width}) to equal the embedding size "
                f"({input_dim}): the decoder reads the embedding's width"
            )
        if hrr is None:
            self.decoder = nn.Linear(input_dim, vocab_size, bias=decoder_bias)
            if tie:
                self.decoder.weight = self.embed.weight  # tied input/output embeddings
        self.dropout = nn.Dropout(dropout)
        self.between_layers = dropout_between_layers and isinstance(self.encoder, Stacked)
        if init_uniform is not None:
            self._init_uniform(init_uniform, init_uniform_biases)

    def _init_uniform(self, scale: float, biases: bool = False) -> None:
        """lingvo's PTB initialisation: every weight matrix U(±scale), every bias 0 (its cuDNN LSTM's two
        bias vectors included, so the forget gate's too); with `biases` the biases U(±scale) as well, as
        Zaremba et al.'s `getParameters():uniform`. The HRR embedding is left as it drew itself (U(±0.05)
        coefficients and trained bases, N(0, 1/d) fixed ones; an orthonormal start stays orthonormal)."""
        skip = {id(p) for p in self.hrr.parameters()} if self.hrr is not None else set()
        with torch.no_grad():
            for p in self.parameters():
                if id(p) in skip:
                    continue
                if p.dim() >= 2 or biases:
                    p.uniform_(-scale, scale)
                else:
                    p.zero_()

    @property
    def hrr(self) -> HRRWordEmbedding | None:
        return self.embed if isinstance(self.embed, HRRWordEmbedding) else None

    def forward(self, tokens: torch.Tensor, carry: Any = None, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        """Logits [B, T, V] and the carry. With `mask` (whole sentences) the unit runs from a zero
        state over the padded batch and the carry is None; without, it continues from `carry`."""
        hrr = self.hrr
        if hrr is None:
            x = self.embed(tokens)
        elif self.sequence_sum:  # the loss is lingvo's already (summed per sequence): β as written
            x = hrr.embed(tokens)
        else:  # lingvo's loss is summed over each sequence's tokens: β weighs against that (docs/hrr.md)
            tokens_per_row = (mask.sum() if mask is not None else tokens.numel()) / max(tokens.shape[0], 1)
            x = hrr.embed(tokens, loss_scale=1.0 / max(float(tokens_per_row), 1.0))
        outputs, carry = self._encode(self.dropout(x), carry, mask)
        h = self.dropout(self.project(outputs))
        return (self.decoder(h) if hrr is None else hrr.logits(h)), carry

    def _encode(self, x: torch.Tensor, carry: Any, mask: torch.Tensor | None) -> tuple[torch.Tensor, Any]:
        """The unit over x: from `carry` (None with `mask`: whole sentences from a zero state). With
        `between_layers` the stacked layers run one by one, the dropout after each but the top one
        (the top's output is dropped by `forward`, after the projection)."""
        if not self.between_layers:
            if mask is None:
                return self.encoder.forward_carry(x, carry)
            return self.encoder(x, mask)[0], None
        layers = self.encoder.layers
        carries = carry if carry is not None else [None] * len(layers)
        out = []
        for i, layer in enumerate(layers):
            if mask is None:
                x, c = layer.forward_carry(x, carries[i])
                out.append(c)
            else:
                x, _ = layer(x, mask)
            if i < len(layers) - 1:
                x = self.dropout(x)
        return x, (out if mask is None else None)


def detach(carry: Any) -> Any:
    if isinstance(carry, torch.Tensor):
        return carry.detach()
    if isinstance(carry, (list, tuple)):
        return type(carry)(detach(c) for c in carry)
    return carry


@register_task("lm")
class LMTask(LMMeta, TaskAdapter):
    # archs, Options, metrics, defaults, ...: LMMeta's (tasks/lm/meta.py)

    def check_data(self) -> Path | None:
        """The corpus folder (None: the default under the data root), checked: `prepare` reads it here."""
        return corpus_folder(self.data, "lm", "WikiText/PTB", "${TPRBENCH_DATA}/wikitext2", corpus_files(self.options.corpus))

    def prepare(self) -> None:
        data_dir = self.check_data()
        opts = self.options
        self.corpus = load_lm_corpus(opts.corpus, data_dir=data_dir, cache_dir=self.cache_dir / "lm", bpe_vocab_size=opts.bpe_vocab_size)
        streams = dict(self.corpus.splits)
        if opts.max_train_tokens:
            streams["train"] = streams["train"][: opts.max_train_tokens]
        if opts.max_eval_tokens:
            for split in ("valid", "test"):
                streams[split] = streams[split][: opts.max_eval_tokens]
        self.streams = streams
        self._rows: dict[tuple[str, int], torch.Tensor] = {}
        self._split_sentences: dict[str, list[torch.Tensor]] = {}

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

    def _sentences(self, split: str) -> list[torch.Tensor]:
        if split not in self._split_sentences:
            self._split_sentences[split] = split_sentences(self.streams[split], self.corpus.eos_id)
        return self._split_sentences[split]

    def _windows(self, split: str, batch_size: int) -> Iterator[dict[str, Any]]:
        for i, (x, y) in enumerate(bptt_batches(self._batched(split, batch_size), self.options.bptt)):
            yield {"input": x, "target": y, "first": i == 0}

    def _sentence_batches(self, split: str, batch_size: int, generator: torch.Generator | None) -> Iterator[dict[str, Any]]:
        for x, y, mask in sentence_batches(self._sentences(split), batch_size, generator, self.corpus.eos_id):
            yield {"input": x, "target": y, "mask": mask}

    def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[dict[str, Any]]:
        if not self.options.contiguous:
            return self._sentence_batches("train", batch_size, generator)
        return self._windows("train", batch_size)

    def eval_batches(self, split: str, batch_size: int) -> Iterator[dict[str, Any]]:
        if not self.options.contiguous:
            return self.cached_eval_batches(
                split, self.options.eval_batch_size, lambda: self._sentence_batches(split, self.options.eval_batch_size, None)
            )
        return self._windows(split, self.options.eval_batch_size)

    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module:
        self.check_arch(arch)
        resolved = units.resolve(unit, dim)
        if resolved.bidirectional:
            raise TaskError(f"lm: unit {unit!r} is bidirectional; a language model reads left to right")
        spec = resolved.spec if "layers" in resolved.spec.option_dict else resolved.spec.with_options(layers=self.options.layers)
        try:
            model = LanguageModel(
                str(spec),
                self.corpus.vocab_size,
                dim,
                input_dim,
                hparams.dropout,
                projection=self.options.projection,
                hrr=self.hrr_kwargs(),
                sequence_sum=self.options.loss == "sequence_sum",
                dropout_between_layers=self.options.dropout_between_layers,
                decoder_bias=self.options.decoder_bias,
                init_uniform=self.options.init_uniform,
                init_uniform_biases=self.options.init_uniform_biases,
                tie=self.options.tie,
            )
        except ValueError as exc:  # HRRWordEmbedding's checks that need d (e.g. isometric N·d' <= d)
            if isinstance(exc, TaskError) or self.options.embedding != "hrr":
                raise
            raise TaskError(f'lm: embedding = "hrr" at input_dim {input_dim}: {exc}') from None
        if self.options.contiguous and not hasattr(model.encoder, "forward_carry"):
            raise TaskError(f"lm: unit {unit!r} cannot carry state across BPTT windows (no forward_carry); use contiguous = false")
        return model

    def hrr_kwargs(self) -> dict[str, Any] | None:
        """HRRWordEmbedding's arguments from the options (None for the plain embedding)."""
        o = self.options
        if o.embedding != "hrr":
            return None
        return {
            "fillers": o.hrr_fillers,
            "roles": o.hrr_roles,
            "basis": o.hrr_basis,
            "beta": o.hrr_beta,
            "anneal_steps": o.hrr_anneal(),
            "filler_dropout": o.hrr_filler_dropout,
            "basis_init": o.hrr_basis_init,
        }

    def loss_with_carry(self, model: nn.Module, batch: dict[str, Any], carry: Any) -> tuple[torch.Tensor, dict[str, float], Any]:
        """One BPTT window continuing from `carry` (the trainer passes it along; None at a pass's start),
        or one batch of whole sentences (`mask` present: padding is not predicted, no carry)."""
        target = batch["target"]
        mask = batch.get("mask")
        if mask is not None:
            logits, _ = model(batch["input"], mask=mask)
            target = target.masked_fill(~mask, -100)  # cross_entropy's ignore_index
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
            return self._training_loss(model, loss, int(mask.sum()), target.shape[0]), {"count": int(mask.sum())}, None
        logits, carry = model(batch["input"], None if batch["first"] else carry)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        return self._training_loss(model, loss, int(target.numel()), target.shape[0]), {"count": int(target.numel())}, detach(carry)

    def _training_loss(self, model: nn.Module, mean: torch.Tensor, tokens: int, rows: int) -> torch.Tensor:
        """The per-token mean, or with `loss="sequence_sum"` in training a loss whose gradient is that of
        lingvo's Σ tokens xent / rows (= mean · tokens/rows) and whose value stays the per-token mean
        (exactly: x − x is 0): the logged train loss/perplexity and the token counts are per token as
        always, while the gradient (what the clip and the optimiser see) is the authors'."""
        if not (model.training and self.options.loss == "sequence_sum"):
            return mean
        summed = mean * (tokens / max(rows, 1))
        return mean.detach() + (summed - summed.detach())

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

    def report_notes(self, arch: str) -> list[str]:
        """The embedding (HRR: its parameter counts against the plain V·d) and the reading mode."""
        o = self.options
        mode = "contiguous (one stream, truncated BPTT, state carried)" if o.contiguous else "per sentence (padded, state reset for each sentence)"
        notes = [f"lm: {mode}"]
        if o.loss == "sequence_sum":
            notes.append("lm: trained on the cross-entropy summed over each row's tokens, averaged over the rows (lingvo's)")
        if o.dropout_between_layers:
            notes.append("lm: dropout also between the stacked unit's layers")
        if not o.tie:
            notes.append("lm: the decoder untied from the embedding (Zaremba et al.'s h2y)")
        if not o.decoder_bias:
            notes.append("lm: no bias on the decoder (lingvo's softmax)")
        if o.init_uniform is not None:
            if o.init_uniform_biases:
                notes.append(f"lm: every parameter U(±{o.init_uniform}) (Zaremba et al.'s initialisation)")
            else:
                notes.append(f"lm: weights U(±{o.init_uniform}), biases 0 (lingvo's initialisation)")
        if o.embedding == "hrr":
            notes.append(
                f"lm: HRR embedding (Luo et al.), N = {o.hrr_roles} roles, d' = {o.hrr_fillers}, {o.hrr_basis} "
                f"bases, annealing {o.hrr_anneal()}, decoded-filler dropout {o.hrr_filler_dropout}"
                + (f", β = {o.hrr_beta} (per sequence)" if o.hrr_basis == "isometric" else "")
                + (", bases started orthonormal (a deviation from the authors)" if o.hrr_basis_init == "orthonormal" else "")
            )
        return notes

    def embedding_param_counts(self, input_dim: int) -> EmbeddingParamCounts:
        """Parameters of the embedding and its readout at width `input_dim`: the HRR count
        (V·N·d' + bases when trained) against the plain V·d; `total` adds the readout bias b_w (and
        an untied decoder's own V·d)."""
        self.prepare()
        v = self.corpus.vocab_size
        kwargs = self.hrr_kwargs()
        if kwargs is None:
            decoder = (0 if self.options.tie else v * input_dim) + (v if self.options.decoder_bias else 0)
            return EmbeddingParamCounts(v * input_dim, v * input_dim, v * input_dim + decoder)
        return HRRWordEmbedding(v, input_dim, **kwargs).param_counts()

    def describe(self) -> dict[str, Any]:
        self.prepare()
        return {
            "corpus": self.corpus.name,
            "tokenizer": self.corpus.tokenizer,
            "vocab": self.corpus.vocab_size,
            **{f"{s}_tokens": int(t.numel()) for s, t in self.streams.items()},
        }


assert set(CORPORA) == {"wikitext2", "wikitext103", "ptb"}
