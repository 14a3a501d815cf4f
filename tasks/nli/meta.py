"""The `nli` task's declarations (options, architectures, metrics, paper defaults), torch-free:
what a study file is checked against (tasks/meta.py). The adapter is tasks/nli/adapter.py."""

from __future__ import annotations

from typing import Any

import pydantic

from ..arch_options import ARCHS, PairArchOptions
from ..bounds import COUNT_MAX, LENGTH_MAX
from ..meta import ReportLayout, TaskMeta
from ..registry import register_task_meta
from . import data as nli_data


class NLIOptions(PairArchOptions):
    train: list[str] = pydantic.Field(
        ["snli:test"],
        min_length=1,
        description=("training split(s) as source:split (mnli|snli|qnli), concatenated; the papers: ['mnli:train', 'snli:train']"),
    )
    valid: list[str] = pydantic.Field(
        ["snli:dev"],
        min_length=1,
        description=("validation split(s): the best epoch maximises their MEAN accuracy; the papers: ['mnli:dev_matched', 'mnli:dev_mismatched']"),
    )
    test: list[str] = pydantic.Field(["mnli:dev_matched", "mnli:dev_mismatched"], description="test splits")
    max_len: int | None = pydantic.Field(64, ge=1, le=LENGTH_MAX, description="truncate sentences to this many tokens")
    vocab_size: int | None = pydantic.Field(30000, ge=10, le=COUNT_MAX, description="most frequent training words kept")
    min_count: int = pydantic.Field(1, ge=1, le=COUNT_MAX)
    max_train: int | None = pydantic.Field(None, ge=10, le=COUNT_MAX, description="use only the first N training pairs")
    max_eval: int | None = pydantic.Field(
        None,
        ge=10,
        le=COUNT_MAX,
        description=("use only the first N pairs of every validation and test split (CPU-sized studies; reports must say so)"),
    )
    vectors: str | None = pydantic.Field(None, description="GloVe/fastText text file of pretrained word vectors")
    freeze_vectors: bool = False

    @pydantic.field_validator("train", "valid", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value  # a single split may be written as a string

    @pydantic.field_validator("train", "valid", "test")
    @classmethod
    def _refs(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"a split is named twice in {value}")
        return [_check_ref(v) for v in value]


def _check_ref(ref: str) -> str:
    source, _, split = ref.partition(":")
    if source not in nli_data.SOURCES or not split:
        raise ValueError(f"{ref!r} is not source:split with source one of {', '.join(nli_data.SOURCES)}")
    return ref


@register_task_meta("nli")
class NLIMeta(TaskMeta):
    archs = ARCHS
    Options = NLIOptions
    layouts = (
        "data root with mnli/ (dev CSV or official jsonl), senteval/SNLI or snli/ (SentEval s1/s2/labels "
        "or snli_1.0 jsonl), qnli/ (GLUE tsv); splits named source:split"
    )
    metric = "acc"
    report_layout = ReportLayout("nli")
    # lr 1e-4 constant (the authors' README command and main_mnli.py: Adam, no schedule), batch 64.
    defaults = {"lr": 1e-4, "schedule": "none", "clip": 5.0, "batch_size": 64, "dropout": 0.0}
