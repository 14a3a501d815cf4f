"""Sentence autoencoding as a task adapter: TPGN's substitute for image captioning.

A sentence (PTB, ≤ `max_len` = 30 words) is read by an LSTM encoder; its state at the last word,
the plan vector z, conditions a decoder unit, which regenerates the sentence word by word. This is
the generation half of the TPGN paper (Huang et al., NAACL 2018) with the image replaced by an
encoded sentence (the paper's own image features, ResNet-152 vectors of COCO images, are not available here).

Conditioning, the one place where units differ:

- units with `initial_carry(z)` (tpgn): z starts the recurrence, as the paper's image vector
  initialises S; the adapter builds them with `plan_size` = the encoder size.
- every other unit (lstm, gru, tpru, ...): z, projected to the embedding size, is the decoder's
  first input step, before `<bos>` (Show and Tell's wiring, Vinyals et al. 2015: the image is
  fed once at t = −1). This is a deviation from "z initialises the state"; `report_notes` says so.

Readout: `tied` (default) = Linear(width, d_embed) then the decoder tied to the embedding, as the
`lm` task (cheap on CPU, and nearly the same parameters for every unit); `full` = the paper's lexical
layer x_t = softmax(W_x f_t + b_x), one Linear(width, V).

Metrics per split: teacher-forced `loss` (mean cross-entropy per target token, `<eos>` included)
and `ppl`, and greedy reconstruction BLEU-1…4 (`bleu1`…`bleu4`, sacrebleu, tasks/autoencode/metrics.py).
Greedy decoding starts from `<bos>`, feeds back its argmax (never `<pad>`/`<bos>`) and stops at
`<eos>` or after max_len + 1 steps. The encoder is torch's nn.LSTM and is not a registered unit, so
the parameter counts the harness logs are the decoder's (the encoder stands in for the paper's
CNN, which the paper does not count either).
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
from units.base import last_state

from ..base import TaskAdapter
from ..errors import TaskError
from ..hparams import HParams
from ..lm.data import corpus_files
from ..paths import corpus_folder
from ..registry import register_task
from .data import BOS_ID, CORPORA, EOS_ID, PAD_ID, UNK_ID, SentenceSplit, load_sentences
from .meta import BLEU_ORDERS, AutoencodeMeta
from .metrics import corpus_bleu


class SentenceAutoencoder(nn.Module):
    """Embedding (shared) → nn.LSTM encoder → plan z → decoder unit → readout over the vocabulary."""

    def __init__(self, decoder: str, vocab_size: int, dim: int, input_dim: int, encoder_dim: int, dropout: float, readout: str = "tied") -> None:
        super().__init__()
        resolved = units.resolve(decoder, dim)
        if resolved.bidirectional:
            raise TaskError(f"autoencode: decoder {decoder!r} is bidirectional; a decoder generates left to right")
        self.embed = nn.Embedding(vocab_size, input_dim)
        nn.init.orthogonal_(self.embed.weight)  # as the lm task (the TPRU authors' models/lm.py)
        self.encoder = nn.LSTM(input_dim, encoder_dim, batch_first=True)
        self.conditioning = "initial_carry" if hasattr(resolved.cls, "initial_carry") else "first_input"
        spec = resolved.spec
        if self.conditioning == "initial_carry":
            given = spec.option_dict.get("plan_size")
            if given is not None and int(given) != encoder_dim:
                raise TaskError(
                    f"autoencode: decoder {decoder!r} has plan_size={given} but the plan vector has "
                    f"{encoder_dim} entries (encoder_dim); leave plan_size out, the task sets it"
                )
            spec = spec.with_options(plan_size=encoder_dim)
            self.plan_input = None
        else:
            self.plan_input = nn.Linear(encoder_dim, input_dim)  # z as the first input step (Show and Tell)
        self.decoder = units.build(str(spec), input_dim, dim)
        if not hasattr(self.decoder, "forward_carry"):
            raise TaskError(f"autoencode: decoder {decoder!r} cannot run step by step (no forward_carry)")
        width = self.decoder.output_size
        if readout == "tied":
            self.project = nn.Linear(width, input_dim)
            nn.init.orthogonal_(self.project.weight)
            nn.init.zeros_(self.project.bias)
            self.out = nn.Linear(input_dim, vocab_size)
            self.out.weight = self.embed.weight
        else:
            self.project = nn.Identity()
            self.out = nn.Linear(width, vocab_size)
        self.dropout = nn.Dropout(dropout)

    # -- pieces ------------------------------------------------------------------------------
    def encode(self, enc_input: torch.Tensor, enc_mask: torch.Tensor) -> torch.Tensor:
        """The plan vector z [B, encoder_dim]: the encoder's output at each sentence's last word."""
        outputs, _ = self.encoder(self.dropout(self.embed(enc_input)))  # causal: right padding cannot reach it
        return last_state(outputs, enc_mask.sum(1))

    def start(self, z: torch.Tensor) -> Any:
        """The decoder's carry before `<bos>` is read."""
        if self.conditioning == "initial_carry":
            layers = getattr(self.decoder, "layers", None)
            if layers is not None:  # stacked: the plan starts the first layer
                return [layers[0].initial_carry(z)] + [None] * (len(layers) - 1)
            return self.decoder.initial_carry(z)
        _, carry = self.decoder.forward_carry(self.plan_input(z).unsqueeze(1), None)
        return carry

    def logits(self, outputs: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(self.project(outputs)))

    # -- teacher forcing and greedy generation ---------------------------------------------
    def forward(self, enc_input: torch.Tensor, enc_mask: torch.Tensor, dec_input: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits [B, L + 1, V] for targets w_1 … w_n <eos>."""
        z = self.encode(enc_input, enc_mask)
        x = self.dropout(self.embed(dec_input))
        if self.conditioning == "initial_carry":
            outputs, _ = self.decoder.forward_carry(x, self.start(z))
        else:  # one pass over [z; <bos> w_1 …]: the same as start() then the words, in one kernel call
            outputs, _ = self.decoder.forward_carry(torch.cat([self.plan_input(z).unsqueeze(1), x], 1), None)
            outputs = outputs[:, 1:]
        return self.logits(outputs)

    @torch.no_grad()
    def generate(self, enc_input: torch.Tensor, enc_mask: torch.Tensor, max_steps: int) -> torch.Tensor:
        """Greedy decoding: ids [B, ≤ max_steps] (each row read up to its first <eos>)."""
        carry = self.start(self.encode(enc_input, enc_mask))
        token = torch.full((enc_input.shape[0],), BOS_ID, dtype=torch.long, device=enc_input.device)
        done = torch.zeros_like(token, dtype=torch.bool)
        out = []
        for _ in range(max_steps):
            outputs, carry = self.decoder.forward_carry(self.embed(token).unsqueeze(1), carry)
            scores = self.logits(outputs[:, 0])
            scores[:, PAD_ID] = scores[:, BOS_ID] = -math.inf  # never targets: not words to emit
            token = scores.argmax(-1)
            out.append(token)
            done = done | (token == EOS_ID)
            if bool(done.all()):
                break
        return torch.stack(out, 1)


@register_task("autoencode")
class AutoencodeTask(AutoencodeMeta, TaskAdapter):
    # archs, Options, metrics, defaults, ...: AutoencodeMeta's (tasks/autoencode/meta.py)

    def check_data(self) -> Path | None:
        """The corpus folder (None: the default under the data root), checked: `prepare` reads it here."""
        return corpus_folder(self.data, "autoencode", "PTB/WikiText-2", "${TPRBENCH_DATA}/ptb", corpus_files(self.options.corpus))

    def prepare(self) -> None:
        data_dir = self.check_data()
        opts = self.options
        self.corpus = load_sentences(opts.corpus, data_dir=data_dir, max_len=opts.max_len)
        self.n_unk_added = _limit_vocab(self.corpus, opts.max_vocab)
        self.sentences: dict[str, SentenceSplit] = {}
        for split, sentences in self.corpus.splits.items():
            limit = opts.max_train_sentences if split == "train" else opts.max_eval_sentences
            self.sentences[split] = _first(sentences, limit)

    @property
    def valid_split(self) -> str:
        return "valid"

    @property
    def test_splits(self) -> list[str]:
        return ["test"]

    # -- batches ----------------------------------------------------------------------------
    @staticmethod
    def _batch(sentences: SentenceSplit, indices: list[int]) -> dict[str, torch.Tensor]:
        b = sentences.batch(indices)
        return {"enc_input": b.enc_input, "enc_mask": b.enc_mask, "dec_input": b.dec_input, "dec_target": b.dec_target, "dec_mask": b.dec_mask}

    def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        sentences = self.sentences["train"]
        order = torch.randperm(len(sentences), generator=generator).tolist()
        for i in range(0, len(order), batch_size):
            yield self._batch(sentences, order[i : i + batch_size])

    def eval_batches(self, split: str, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        size = self.options.eval_batch_size
        sentences = self.sentences[split]

        def make() -> Iterator[dict[str, torch.Tensor]]:
            for i in range(0, len(sentences), size):
                yield self._batch(sentences, list(range(i, min(i + size, len(sentences)))))

        return self.cached_eval_batches(split, size, make)

    # -- model, loss, metrics -----------------------------------------------------------------
    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module:
        self.check_arch(arch)
        return SentenceAutoencoder(
            unit, self.corpus.vocab_size, dim, input_dim, self.options.encoder_dim or dim, hparams.dropout, self.options.readout
        )

    def report_notes(self, arch: str) -> list[str]:
        o = self.options
        return [
            f"substitute task for TPGN's image captioning: {o.corpus} sentences of ≤ {o.max_len} words → LSTM "
            f"encoder → plan vector → decoder regenerates the sentence",
            "conditioning: tpgn's initial_carry (the plan starts S); other decoders read the plan as their first "
            "input step (Show and Tell's wiring; a deviation from 'the plan initialises the state')",
            f"readout: {'Linear(d, d_embed) + decoder tied to the embedding' if o.readout == 'tied' else 'Linear(d, V)'}; "
            "BLEU: greedy decoding, corpus BLEU-1..4 (sacrebleu), one reference (the input sentence)",
        ]

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(batch["enc_input"], batch["enc_mask"], batch["dec_input"])
        mask = batch["dec_mask"]
        loss = F.cross_entropy(logits[mask], batch["dec_target"][mask])
        return loss, {"count": int(mask.sum())}

    def metrics_from_counts(self, loss_sum: float, counts: dict[str, float]) -> dict[str, float]:
        nll = loss_sum / max(counts.get("count", 0), 1)
        return {"loss": nll, "ppl": math.exp(min(nll, 50.0))}

    def evaluate(self, model: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        metrics = super().evaluate(model, split, batch_size)
        if self.options.bleu:
            metrics.update(self.bleu(model, split))
        return metrics

    @torch.no_grad()
    def reconstructions(self, model: nn.Module, split: str) -> tuple[list[list[str]], list[list[str]]]:
        """(greedy hypotheses, references) as word lists, in the split's order."""
        model.eval()
        device = next(model.parameters()).device
        hyps, refs = [], []
        for batch in self.eval_batches(split, self.options.eval_batch_size):
            ids = model.generate(batch["enc_input"].to(device), batch["enc_mask"].to(device), self.options.max_len + 1)
            hyps.extend(self.corpus.words(row) for row in ids.tolist())
            refs.extend(self.corpus.words(row) for row in batch["dec_target"].tolist())
        return hyps, refs

    def bleu(self, model: nn.Module, split: str) -> dict[str, float]:
        hyps, refs = self.reconstructions(model, split)
        return corpus_bleu(hyps, refs, max_order=max(BLEU_ORDERS))

    def describe(self) -> dict[str, Any]:
        self.prepare()
        return {
            "corpus": self.corpus.name,
            "vocab": self.corpus.vocab_size,
            "max_len": self.corpus.max_len,
            **{f"{s}_sentences": len(v) for s, v in self.sentences.items()},
            **{f"{s}_dropped": n for s, n in self.corpus.n_dropped.items()},
            **{f"{s}_unk_added": n for s, n in self.n_unk_added.items()},
        }


def _limit_vocab(corpus: Any, size: int | None) -> dict[str, int]:
    """Keep the `size` first vocabulary entries (the specials, then the most frequent train words):
    every other word becomes <unk>, in place. Returns the words so replaced, per split."""
    if size is None or size >= corpus.vocab_size:
        return {split: 0 for split in corpus.splits}
    corpus.vocab = corpus.vocab[:size]
    replaced = {}
    for split, sentences in corpus.splits.items():
        rare = sentences.ids >= size
        replaced[split] = int(rare.sum())
        sentences.ids = sentences.ids.masked_fill(rare, UNK_ID)
    return replaced


def _first(sentences: SentenceSplit, n: int | None) -> SentenceSplit:
    """The first n sentences of a split (all when n is None or larger)."""
    if n is None or n >= len(sentences):
        return sentences
    offsets = sentences.offsets[: n + 1]
    return SentenceSplit(sentences.ids[: int(offsets[-1])], offsets)


assert set(CORPORA) == {"ptb", "wikitext2"}
