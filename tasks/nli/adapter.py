"""Natural language inference (MNLI, SNLI, QNLI) as a task adapter.

Splits are named `source:split` (e.g. train on `snli:test`, validate on `snli:dev`, test on
`mnli:dev_matched` and `mnli:dev_mismatched`), so one run can train on one corpus and be tested
on others, as the papers' transfer settings do. Architectures: `plain` (max-pool, [u;v;|u−v|;u∘v],
MLP with one ReLU hidden layer) and `bidaf`. Paper default lr 1e-4 (Adam). Rows whose gold
label is `-` are dropped and counted (`describe()`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pydantic
import torch
from torch import nn
from torch.nn import functional as F

from ..architectures import ARCHS, PairModel
from ..base import TaskAdapter
from ..errors import DataError
from ..hparams import HParams
from ..paths import data_root
from ..registry import TaskError, register_task
from . import data as nli_data


def _split_name(ref: str) -> str:
    return ref.replace(":", "_")


class NLIOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    train: str = pydantic.Field("snli:test", description="training split as source:split (mnli|snli|qnli)")
    valid: str = pydantic.Field("snli:dev", description="validation split (selects the best epoch)")
    test: list[str] = pydantic.Field(["mnli:dev_matched", "mnli:dev_mismatched"], description="test splits")
    max_len: int | None = pydantic.Field(64, ge=1, description="truncate sentences to this many tokens")
    vocab_size: int | None = pydantic.Field(30000, ge=10, description="most frequent training words kept")
    min_count: int = pydantic.Field(1, ge=1)
    max_train: int | None = pydantic.Field(None, ge=10, description="use only the first N training pairs")
    vectors: str | None = pydantic.Field(None, description="GloVe/fastText text file of pretrained word vectors")
    freeze_vectors: bool = False
    pooling: Literal["max", "last", "mean"] = "max"

    @pydantic.field_validator("train", "valid")
    @classmethod
    def _ref(cls, value: str) -> str:
        return _check_ref(value)

    @pydantic.field_validator("test")
    @classmethod
    def _refs(cls, value: list[str]) -> list[str]:
        return [_check_ref(v) for v in value]


def _check_ref(ref: str) -> str:
    source, _, split = ref.partition(":")
    if source not in nli_data.SOURCES or not split:
        raise ValueError(f"{ref!r} is not source:split with source one of {', '.join(nli_data.SOURCES)}")
    return ref


@register_task("nli")
class NLITask(TaskAdapter):
    archs = ARCHS
    Options = NLIOptions
    layouts = ("data root with mnli/ (dev CSV or official jsonl), senteval/SNLI or snli/ (SentEval s1/s2/labels "
               "or snli_1.0 jsonl), qnli/ (GLUE tsv); splits named source:split")
    metric = "acc"
    direction = "maximize"
    defaults = {"lr": 1e-4, "lr_step": 30, "lr_gamma": 0.1, "clip": 5.0, "batch_size": 64, "dropout": 0.0}

    def _root_and_sources(self) -> tuple[Path, set[str]]:
        root = data_root(None if self.generated else self.data)
        if root is None:
            raise DataError("nli: no data root; set data to the shared data folder (e.g. ${TPRBENCH_DATA}) or set TPRBENCH_DATA")
        opts = self.options
        sources = {r.split(":", 1)[0] for r in [opts.train, opts.valid, *opts.test]}
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
        refs = [opts.train, opts.valid, *opts.test]
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
        train = loaded[opts.train]
        if opts.max_train:
            train = train.select(range(min(opts.max_train, len(train))))
        self.vocab = nli_data.Vocab.from_dataset(train, min_count=opts.min_count, max_size=opts.vocab_size)
        self._encoded = {}
        self._lengths = {}
        for ref in dict.fromkeys(refs):
            ds = train if ref == opts.train else loaded[ref]
            enc = nli_data.encode(ds, self.vocab, max_len=opts.max_len)
            self._encoded[_split_name(ref)] = (enc["premise_ids"], enc["hypothesis_ids"], enc["label"])

    @property
    def valid_split(self) -> str:
        return _split_name(self.options.valid)

    @property
    def test_splits(self) -> list[str]:
        return [_split_name(r) for r in self.options.test]

    def _batches(self, split: str, batch_size: int, order: list[int]) -> Iterator[dict[str, torch.Tensor]]:
        premise, hypothesis, label = self._encoded[split]
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            yield nli_data.collate({"premise_ids": [premise[i] for i in idx],
                                    "hypothesis_ids": [hypothesis[i] for i in idx],
                                    "label": [label[i] for i in idx]})

    def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        n = len(self._encoded[_split_name(self.options.train)][2])
        order = torch.randperm(n, generator=generator).tolist()
        return self._batches(_split_name(self.options.train), batch_size, order)

    def eval_batches(self, split: str, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        n = len(self._encoded[split][2])
        return self.cached_eval_batches(split, batch_size, lambda: self._batches(split, batch_size, list(range(n))))

    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module:
        self.check_arch(arch)
        vectors = None
        if self.options.vectors:
            path = Path(os.path.expandvars(self.options.vectors)).expanduser()
            vectors, _hits = nli_data.load_word_vectors(path, self.vocab, dim=input_dim)
        return PairModel(unit, arch, len(self.vocab), dim, input_dim, classes=len(self.label_names),
                         pooling=self.options.pooling, mlp_hidden=hparams.mlp_hidden,
                         dropout=hparams.dropout, embeddings=vectors,
                         freeze_embeddings=self.options.freeze_vectors)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(batch["premise"], batch["premise_mask"], batch["hypothesis"], batch["hypothesis_mask"])
        loss = F.cross_entropy(logits, batch["label"])
        return loss, {"correct": int((logits.argmax(-1) == batch["label"]).sum()), "count": int(batch["label"].shape[0])}

    @torch.no_grad()
    def encode_sentences(self, model: nn.Module, sentences: list) -> np.ndarray:
        """Frozen sentence vectors: the trained encoder (no attention, no classifier) + pooling.

        `sentences` are token lists (SentEval's convention) or strings; tokenised like the training data.
        """
        model.eval()
        device = next(model.parameters()).device
        ids = []
        for sentence in sentences:
            text = sentence if isinstance(sentence, str) else " ".join(sentence)
            tokens = nli_data.tokenize(text)[: self.options.max_len or None]
            ids.append(self.vocab.lookup(tokens) or [nli_data.UNK])
        batch = nli_data.collate({"premise_ids": ids, "hypothesis_ids": ids, "label": [0] * len(ids)})
        tokens, mask = batch["premise"].to(device), batch["premise_mask"].to(device)
        outputs, state = model.encoder(model.embed(tokens), mask)
        from ..architectures import pool

        return pool(outputs, state, mask, model.pooling).float().cpu().numpy().astype(np.float64)

    def describe(self) -> dict[str, Any]:
        self.prepare()
        out = {f"{name}_pairs": len(v[2]) for name, v in self._encoded.items()}
        out["vocab"] = len(self.vocab)
        out["dropped_gold_dash"] = {k: v for k, v in self.dropped.items() if v}
        return out
