"""The `logic` task's declarations (options, architectures, metrics, paper defaults), torch-free:
what a study file is checked against (tasks/meta.py). The adapter is tasks/logic/adapter.py."""

from __future__ import annotations

from typing import Literal

import pydantic

from ..arch_options import ARCHS, PairArchOptions
from ..bounds import COUNT_MAX, LENGTH_MAX, SEED_MAX
from ..meta import ReportLayout, TaskMeta
from ..registry import register_task_meta


class LogicOptions(PairArchOptions):
    train_size: int = pydantic.Field(100_000, ge=4, le=COUNT_MAX, description="generated training pairs (when the data has no train.txt)")
    eval_size: int = pydantic.Field(
        5_000, ge=1, le=COUNT_MAX, description="pairs per generated validate/test split (data = generated; an empty one leaves no best epoch)"
    )
    data_seed: int = pydantic.Field(0, ge=0, le=SEED_MAX, description="seed of the data generator")
    svp: bool = pydantic.Field(True, description="Symbolic Vocabulary Permutation during training")
    max_len: int | None = pydantic.Field(None, ge=1, le=LENGTH_MAX, description="drop training pairs with a formula longer than this")
    preset: Literal["easy", "hard", "big", "massive", "exam"] = pydantic.Field(
        "easy",
        description="generator preset for train (and, with generated data, validate/test_easy); easy matches the real train/validate distribution",
    )


@register_task_meta("logic")
class LogicMeta(TaskMeta):
    archs = ARCHS
    Options = LogicOptions
    layouts = (
        "DeepMind logical-entailment directory: train.txt (optional: generated if absent), validate.txt, "
        'test_{easy,hard,big,massive,exam}.txt, lines `A,B,E,H1,H2,H3`; or data = "generated"'
    )
    metric = "acc"
    report_layout = ReportLayout(
        "logic", unit_columns=("roles",), split_order=("easy", "hard", "big", "massive", "exam")
    )  # the papers' Table 1: roles beside every unit
    defaults = {"lr": 1e-3, "lr_step": 30, "lr_gamma": 0.1, "clip": 5.0, "batch_size": 64, "dropout": 0.0}
