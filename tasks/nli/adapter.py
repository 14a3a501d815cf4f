"""Natural language inference (MNLI, SNLI, QNLI) as a task adapter.

Splits are named `source:split` (e.g. train on `snli:test`, validate on `snli:dev`, test on
`mnli:dev_matched` and `mnli:dev_mismatched`), so one run can train on one corpus and be tested
on others, as the papers' transfer settings do. Several training splits are concatenated (the
papers: `train = ["mnli:train", "snli:train"]`); several validation splits select the best epoch
by their MEAN accuracy (the papers and the authors' main_mnli.py: mean of MNLI dev matched and
mismatched). Architectures: `plain` (max-pool, [u;v;|u−v|;u∘v], MLP with one ReLU hidden layer of
width d) and `bidaf`. Paper default: Adam, lr 1e-4, constant (main_mnli.py has no schedule). Rows
whose gold label is `-` are dropped and counted (`describe()`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..arch_options import describe_arch
from ..architectures import PairModel, encoder_spec
from ..base import TaskAdapter
from ..errors import DataError, TaskError
from ..hparams import HParams
from ..paths import data_root
from ..registry import register_task
from . import data as nli_data
from .meta import NLIMeta

TRAIN = "train"  # the (concatenated) training splits' name in `_encoded`


def _split_name(ref: str) -> str:
    return ref.replace(":", "_")


@register_task("nli")
class NLITask(NLIMeta, TaskAdapter):
    # archs, Options, metrics, defaults, ...: NLIMeta's (tasks/nli/meta.py)

    def _root_and_sources(self) -> tuple[Path, set[str]]:
        root = data_root(None if self.generated else self.data)
        if root is None:
            raise DataError("nli: no data root; set data to the shared data folder (e.g. ${TPRBENCH_DATA}) or set TPRBENCH_DATA")
        opts = self.options
        sources = {r.split(":", 1)[0] for r in [*opts.train, *opts.valid, *opts.test]}
        return root, sources

    def check_data(self) -> None:
        root, sources = self._root_and_sources()
        if len({nli_data.label_names(s) for s in sources}) > 1:
            raise TaskError(f"nli: splits of {', '.join(sorted(sources))} mix 2-way (qnli) and 3-way labels")
        if not root.is_dir():
            raise DataError(f"nli: data root {root} not found")
        for source in sorted(sources):
            nli_data.default_dir(source, root)  # names the folders it looked for

    def prepare(self) -> None:
        self.check_data()
        opts = self.options
        root, sources = self._root_and_sources()
        refs = [*opts.train, *opts.valid, *opts.test]
        self.label_names = nli_data.label_names(next(iter(sources)))
        loaded: dict[str, Any] = {}
        self.dropped: dict[str, int] = {}
        cache = self.cache_dir / "nli"
        for source in sorted(sources):
            got = nli_data.load_nli(source, data_dir=nli_data.default_dir(source, root), cache_dir=cache)
            for split, ds in got.splits.items():
                loaded[f"{source}:{split}"] = ds
                self.dropped[f"{source}:{split}"] = got.dropped[split]
        for ref in refs:
            if ref not in loaded:
                have = ", ".join(sorted(loaded))
                raise DataError(f"nli: split {ref!r} not found under {root} (have: {have})")
        train = nli_data.concatenate([loaded[r] for r in opts.train])
        if opts.max_train:
            train = train.select(range(min(opts.max_train, len(train))))
        self.vocab = nli_data.Vocab.from_dataset(train, min_count=opts.min_count, max_size=opts.vocab_size)
        self._encoded = {}
        self._lengths = {}
        enc = nli_data.encode(train, self.vocab, max_len=opts.max_len)
        self._encoded[TRAIN] = (enc["premise_ids"], enc["hypothesis_ids"], enc["label"])
        for ref in dict.fromkeys([*opts.valid, *opts.test]):
            ds = loaded[ref]
            if opts.max_eval:
                ds = ds.select(range(min(opts.max_eval, len(ds))))
            enc = nli_data.encode(ds, self.vocab, max_len=opts.max_len)
            self._encoded[_split_name(ref)] = (enc["premise_ids"], enc["hypothesis_ids"], enc["label"])

    @property
    def valid_split(self) -> str:
        """One validation split's name, or `mean(a,b)` for several: `evaluate` averages them."""
        names = [_split_name(r) for r in self.options.valid]
        return names[0] if len(names) == 1 else f"mean({','.join(names)})"

    def evaluate(self, model: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        """A split's metrics; for `mean(a,b,...)` the mean of each metric over the splits (what the
        training loop's best-epoch rule reads) plus every split's own, e.g. `acc_mnli_dev_matched`."""
        if not (split.startswith("mean(") and split.endswith(")")):
            return super().evaluate(model, split, batch_size)
        parts = {name: super(NLITask, self).evaluate(model, name, batch_size) for name in split[5:-1].split(",")}
        out = {key: sum(m[key] for m in parts.values()) / len(parts) for key in next(iter(parts.values()))}
        for name, metrics in parts.items():
            out.update({f"{key}_{name}": value for key, value in metrics.items()})
        return out

    @property
    def test_splits(self) -> list[str]:
        return [_split_name(r) for r in self.options.test]

    def _batches(self, split: str, batch_size: int, order: list[int]) -> Iterator[dict[str, torch.Tensor]]:
        premise, hypothesis, label = self._encoded[split]
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            yield nli_data.collate(
                {"premise_ids": [premise[i] for i in idx], "hypothesis_ids": [hypothesis[i] for i in idx], "label": [label[i] for i in idx]}
            )

    def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        n = len(self._encoded[TRAIN][2])
        order = torch.randperm(n, generator=generator).tolist()
        return self._batches(TRAIN, batch_size, order)

    def eval_batches(self, split: str, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        n = len(self._encoded[split][2])
        return self.cached_eval_batches(split, batch_size, lambda: self._batches(split, batch_size, list(range(n))))

    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module:
        self.check_arch(arch)
        vectors = None
        if self.options.vectors:
            path = Path(os.path.expandvars(self.options.vectors)).expanduser()
            vectors, _hits = nli_data.load_word_vectors(path, self.vocab, dim=input_dim)
        opts = self.options
        return PairModel(
            encoder_spec(unit, dim, opts.layers),
            arch,
            len(self.vocab),
            dim,
            input_dim,
            classes=len(self.label_names),
            pooling=opts.pooling,
            mlp_hidden=hparams.mlp_hidden,
            dropout=hparams.dropout,
            embeddings=vectors,
            freeze_embeddings=opts.freeze_vectors,
            attention=opts.attention,
            modelling_unit=opts.modelling_unit,
        )

    def report_notes(self, arch: str) -> list[str]:
        return [describe_arch(arch, self.options)]

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(batch["premise"], batch["premise_mask"], batch["hypothesis"], batch["hypothesis_mask"])
        loss = F.cross_entropy(logits, batch["label"])
        return loss, {"correct": int((logits.argmax(-1) == batch["label"]).sum()), "count": int(batch["label"].shape[0])}

    def _sentence_tokens(self, sentence) -> list[str]:
        text = sentence if isinstance(sentence, str) else " ".join(sentence)
        return nli_data.tokenize(text)[: self.options.max_len or None]

    def expand_vocab(self, sentences: list) -> int:
        """SentEval's `prepare` hook, InferSent's way: the words of `sentences` that the training
        vocabulary lacks get their vectors from the run's word-vector file (`vectors`), so the frozen
        encoder sees real embeddings instead of <unk>; words the file lacks stay <unk>. Without
        `vectors` (embeddings learnt from scratch) there is nothing to expand with. Returns the
        number of words added. (InferSent's GloVe lookup is frozen; with `freeze_vectors=false`
        the added words keep their pretrained vectors while trained words have moved.)"""
        if not self.options.vectors:
            return 0
        self.prepare()
        extra = getattr(self, "_extra", {})
        known = self.vocab.stoi
        words = sorted({t for s in sentences for t in self._sentence_tokens(s)} - known.keys() - extra.keys() - getattr(self, "_missing", set()))
        if not words:
            return 0
        path = Path(os.path.expandvars(self.options.vectors)).expanduser()
        found = nli_data.vectors_for_words(path, words)
        self._missing = getattr(self, "_missing", set()) | (set(words) - found.keys())
        if found:
            new = torch.as_tensor(np.stack([found[w] for w in sorted(found)]), dtype=torch.float32)
            self._extra = {**extra, **{w: len(extra) + i for i, w in enumerate(sorted(found))}}
            old = getattr(self, "_extra_vectors", None)
            self._extra_vectors = new if old is None else torch.cat([old, new])
        return len(found)

    @torch.no_grad()
    def encode_sentences(self, model: nn.Module, sentences: list) -> np.ndarray:
        """Frozen sentence vectors: the trained encoder (no attention, no classifier) + pooling.

        `sentences` are token lists (SentEval's convention) or strings; tokenised like the training
        data. Words added by `expand_vocab` are embedded with their pretrained vectors.
        """
        model.eval()
        device = next(model.parameters()).device
        extra = getattr(self, "_extra", {})
        base = len(self.vocab)
        stoi = self.vocab.stoi
        ids = []
        for sentence in sentences:
            tokens = self._sentence_tokens(sentence)
            row = [stoi[t] if t in stoi else base + extra[t] if t in extra else nli_data.UNK for t in tokens]
            ids.append(row or [nli_data.UNK])
        batch = nli_data.collate({"premise_ids": ids, "hypothesis_ids": ids, "label": [0] * len(ids)})
        tokens, mask = batch["premise"].to(device), batch["premise_mask"].to(device)
        weight = model.embed.weight
        if extra:
            if self._extra_vectors.shape[1] != weight.shape[1]:
                raise DataError(
                    f"nli: word vectors {self.options.vectors} have dim {self._extra_vectors.shape[1]}, the model's embeddings {weight.shape[1]}"
                )
            weight = torch.cat([weight, self._extra_vectors.to(weight)])
        outputs, state = model.encoder(F.embedding(tokens, weight, padding_idx=0), mask)
        from ..architectures import pool

        return pool(outputs, state, mask, model.pooling).float().cpu().numpy().astype(np.float64)

    def describe(self) -> dict[str, Any]:
        self.prepare()
        out = {f"{name}_pairs": len(v[2]) for name, v in self._encoded.items()}
        out["train_splits"] = list(self.options.train)
        out["vocab"] = len(self.vocab)
        out["dropped_gold_dash"] = {k: v for k, v in self.dropped.items() if v}
        return out
