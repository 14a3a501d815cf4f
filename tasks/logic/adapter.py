"""Logical entailment (Evans et al. 2018) as a task adapter.

Data: a directory in the DeepMind layout (validate.txt, test_easy.txt, …, train.txt optional)
or `generated`. With a real directory that has no train.txt (the case in ../shared/data), the
training pairs are generated — de-duplicated against the real validate/test pairs up to
variable renaming — and the real splits are used for validation and test. Training applies
Symbolic Vocabulary Permutation: each pair of each batch renamed by one random permutation of
a–z. Paper defaults: Adam lr 1e-3 ÷10 every 30 epochs, 90 epochs, gradient clipping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..arch_options import describe_arch
from ..architectures import PairModel, encoder_spec
from ..base import TaskAdapter
from ..errors import DataError
from ..hparams import HParams
from ..paths import expect_files
from ..progress import per_split
from ..registry import register_task
from . import data as logic_data
from .generator import EXCLUDING, write_dataset
from .meta import LogicMeta

TEST_SPLITS = ("test_easy", "test_hard", "test_big", "test_massive", "test_exam")


@register_task("logic")
class LogicTask(LogicMeta, TaskAdapter):
    # archs, Options, metrics, defaults, ...: LogicMeta's (tasks/logic/meta.py)

    def check_data(self) -> None:
        """A data folder must hold the DeepMind split files (the data root is an error naming
        its `logical_entailment/`); data is generated only for `data = "generated"`."""
        if not self.generated:
            expect_files("logic data", self.data, logic_data.SPLIT_FILES, logic_data.HOW_TO_GET)

    def prepare(self) -> None:
        self.check_data()
        opts = self.options
        root = self.cache_dir / "logic"
        if self.generated:
            out = root / f"generated-{opts.preset}-n{opts.train_size}-e{opts.eval_size}-s{opts.data_seed}"
            presets = {s: opts.preset for s in ("train", "validate", "test_easy")}
            with per_split("generating logic data:") as progress:  # silent when cached
                info = write_dataset(out, train=opts.train_size, seed=opts.data_seed, eval_size=opts.eval_size, presets=presets, progress=progress)
            files = dict(info.files)
        else:
            path = Path(self.data).expanduser()
            files = logic_data.find_splits(path)
            if "validate" not in files:
                raise DataError(f"logic data: {path} has no validate.txt (DeepMind layout expected)")
            if "train" not in files:
                # Generated training pairs, never equal (up to renaming) to a real evaluation pair.
                tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
                out = root / f"train-for-{tag}-{opts.preset}-n{opts.train_size}-s{opts.data_seed}"
                # Said, not silent: the folder has no train.txt, so its pairs are generated.
                with per_split(f"no train.txt in {path}: generating", units={EXCLUDING: "files"}) as progress:
                    info = write_dataset(
                        out,
                        train=opts.train_size,
                        seed=opts.data_seed,
                        eval_size=0,
                        exclude=[files[s] for s in files],
                        presets={"train": opts.preset},
                        progress=progress,
                    )
                files["train"] = info.files["train"]
        self._splits = {name: logic_data.read_split(p) for name, p in files.items()}
        if opts.max_len:
            self._splits["train"] = [e for e in self._splits["train"] if max(len(e.a), len(e.b)) <= opts.max_len]

    @property
    def valid_split(self) -> str:
        return "validate"

    @property
    def test_splits(self) -> list[str]:
        return [s for s in TEST_SPLITS if s in self._splits]

    def train_batches(self, batch_size: int, generator: torch.Generator, epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        return logic_data.iterate_batches(self._splits["train"], batch_size, shuffle=True, seed=seed, svp=self.options.svp)

    def train_batch_count(self, batch_size: int) -> int | None:
        return -(-len(self._splits["train"]) // batch_size)  # iterate_batches keeps the last, short batch

    def eval_batches(self, split: str, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        return self.cached_eval_batches(split, batch_size, lambda: logic_data.iterate_batches(self._splits[split], batch_size, shuffle=False))

    def build_model(self, unit: str, arch: str, dim: int, input_dim: int, hparams: HParams) -> nn.Module:
        self.check_arch(arch)
        opts = self.options
        return PairModel(
            encoder_spec(unit, dim, opts.layers),
            arch,
            logic_data.VOCAB_SIZE,
            dim,
            input_dim,
            classes=2,
            pooling=opts.pooling,
            mlp_hidden=hparams.mlp_hidden,
            dropout=hparams.dropout,
            attention=opts.attention,
            modelling_unit=opts.modelling_unit,
        )

    def report_notes(self, arch: str) -> list[str]:
        return [describe_arch(arch, self.options)]

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(batch["a"], batch["a_mask"], batch["b"], batch["b_mask"])
        loss = F.cross_entropy(logits, batch["label"])
        correct = int((logits.argmax(-1) == batch["label"]).sum())
        return loss, {"correct": correct, "count": int(batch["label"].shape[0])}

    def describe(self) -> dict[str, Any]:
        self.prepare()
        return {f"{name}_pairs": len(rows) for name, rows in self._splits.items()}
