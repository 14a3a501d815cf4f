"""The `autoencode` task's declarations (options, architecture, metrics, defaults), torch-free:
what a study file is checked against (tasks/meta.py). The adapter is tasks/autoencode/adapter.py."""

from __future__ import annotations

from typing import Literal

import pydantic

from ..bounds import BATCH_MAX, COUNT_MAX, DIM_MAX, LENGTH_MAX
from ..meta import TaskMeta
from ..registry import register_task_meta

BLEU_ORDERS = (1, 2, 3, 4)


class AutoencodeOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    corpus: Literal["ptb", "wikitext2"] = "ptb"
    max_len: int = pydantic.Field(30, ge=1, le=LENGTH_MAX, description="sentences of 1..max_len words are kept (longer ones dropped)")
    max_train_sentences: int | None = pydantic.Field(None, ge=1, le=COUNT_MAX, description="use only the first N train sentences (CPU runs)")
    max_eval_sentences: int | None = pydantic.Field(None, ge=1, le=COUNT_MAX, description="use only the first N valid/test sentences")
    max_vocab: int | None = pydantic.Field(
        None, ge=5, le=COUNT_MAX, description="keep the N most frequent train words (specials included), the rest become <unk> (CPU runs)"
    )
    encoder_dim: int | None = pydantic.Field(None, ge=1, le=DIM_MAX, description="encoder LSTM size = plan vector size (None: = dim)")
    readout: Literal["tied", "full"] = pydantic.Field(
        "tied", description="tied: Linear(width, d_embed) + decoder tied to the embedding (as lm); full: Linear(width, V), the paper's W_x"
    )
    eval_batch_size: int = pydantic.Field(64, ge=1, le=BATCH_MAX)
    bleu: bool = pydantic.Field(True, description="greedy-decode every evaluated split for BLEU-1..4")


@register_task_meta("autoencode")
class AutoencodeMeta(TaskMeta):
    archs = ("seq2seq",)
    Options = AutoencodeOptions
    layouts = (
        "PTB folder (ptb.train.txt, ptb.valid.txt, ptb.test.txt: one sentence per line) or WikiText-2 folder "
        "(paragraphs cut after . ? !); sentences of 1..max_len words"
    )
    metric = "ppl"
    metrics = ("loss", "ppl", *(f"bleu{n}" for n in BLEU_ORDERS))
    defaults = {"lr": 1e-3, "batch_size": 32, "clip": 5.0, "dropout": 0.0, "schedule": "none"}
