"""The `babi` task's declarations (options, architectures, metrics, paper defaults, published
numbers, which units `tpr-rnn` takes), torch-free: what a study file is checked against
(tasks/meta.py). The adapter is tasks/babi/adapter.py."""

from __future__ import annotations

import re
from typing import Any, Literal

import pydantic

from ..bounds import LENGTH_MAX
from ..errors import TaskError
from ..hparams import HParams
from ..meta import ReportLayout, TaskMeta
from ..registry import register_task_meta

TASK_IDS = range(1, 21)


def parse_tasks(text: str | int | list | tuple) -> tuple[int, ...]:
    """ "1-20", "1,2", "1-3,7", 3 or [1, 2] → sorted distinct task ids in 1..20."""
    if isinstance(text, int):
        parts = [str(text)]
    elif isinstance(text, (list, tuple)):
        parts = [str(p) for p in text]
    else:
        parts = [p.strip() for p in str(text).split(",")]
    ids: set[int] = set()
    for part in parts:
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise TaskError(f"babi tasks {text!r}: cannot read {part!r}; write ids 1..20 like '1-20', '1,2' or '1-3,7'")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if lo > hi or lo not in TASK_IDS or hi not in TASK_IDS:
            raise TaskError(f"babi tasks {text!r}: {part!r} is outside 1..20")
        ids.update(range(lo, hi + 1))
    if not ids:
        raise TaskError(f"babi tasks {text!r}: no task ids")
    return tuple(sorted(ids))


class BabiOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    tasks: str = pydantic.Field("1-20", description='task ids 1..20: "1-20" (one all-task model), "3", "1,2", "1-3,7"')
    size: Literal["10k", "1k"] = pydantic.Field("10k", description="training set: 10k (en-10k/) or 1k (en/) examples per task")
    valid_fraction: float = pydantic.Field(
        0.1, gt=0, lt=1, description="validation = the last fraction of each task's train stories (no en-valid split here)"
    )
    max_story: int | None = pydantic.Field(
        None, ge=1, le=LENGTH_MAX, description="statements kept per question (default: the authors' 70, and 130 for qa3)"
    )
    fallback_1k: bool = pydantic.Field(
        False,
        description="train a task whose 10k train file is missing (qa3 in ../shared/data) on its 1k file; "
        "marked in the record (test_summary_fallback_1k_qaN) and in reports",
    )
    symbol_size: Literal["vocab", "input_dim"] = pydantic.Field(
        "vocab", description="sentence vector size S: the vocabulary size (the authors' S = V) or the cell's input_dim"
    )

    @pydantic.field_validator("tasks", mode="before")
    @classmethod
    def _tasks(cls, value: Any) -> str:
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str):
            raise ValueError(f'expected task ids as text like "1-20" or "1,2", got {value!r}')
        parse_tasks(text)  # a TaskError (ValueError) names what is wrong
        return text


class BabiHParams(HParams):
    """bAbI's own hyperparameter: the input module's embedding initialisation."""

    embed_init: float = pydantic.Field(0.01, gt=0, description="word embeddings D ~ U(±embed_init): 0.01 the paper, 0.1 the authors' code")


@register_task_meta("babi")
class BabiMeta(TaskMeta):
    archs = ("tpr-rnn", "plain")
    Options = BabiOptions
    HParams = BabiHParams
    layouts = (
        "bAbI v1.2 (Weston et al.): a folder holding en/ and en-10k/ with qa{N}_*_{train,test}.txt "
        '(data = its path; "generated" means $TPRBENCH_DATA/babi)'
    )
    metric = "acc"  # the paper keeps the epoch of best validation accuracy
    metrics = ("loss", "acc", "error")
    report_layout = ReportLayout("babi", pivot=True)
    defaults = {
        "optimizer": "nadam-tf",
        "lr": 0.008,
        "betas": (0.6, 0.4),
        "batch_size": 128,
        "clip": 5.0,
        "warmup_steps": 50,
        "warmup_factor": 0.1,
        "nan_restarts": 10,
        "schedule": "threshold",
        "threshold_metric": "valid_loss",
        "threshold_value": 0.1,
        "threshold_mode": "below",
        "factor": 0.5,
    }
    #: Published single-task numbers (test error %, 10k) printed beside ours: {column: {row: text}}.
    references = {
        "paper single-task, 10k (Schlag & Schmidhuber 2018)": {
            "qa3": "1.78",
            "qa7": "2.78",
            "qa19": "12.64 ± 17.39",
            "mean error": "1.12 ± 1.19",
        },
        "PyTorch port, Adam, single-task, 10k (APodolskiy/TPR-RNN-Torch README)": {
            f"qa{t}": v
            for t, v in zip(
                range(1, 21),
                (
                    "0.0",
                    "0.1",
                    "1.1",
                    "0.0",
                    "0.3",
                    "2.5",
                    "0.4",
                    "0.4",
                    "2.2",
                    "0.1",
                    "0.3",
                    "0.2",
                    "1.6",
                    "0.4",
                    "0.0",
                    "0.0",
                    "3.9",
                    "2.3",
                    "0.2",
                    "0.0",
                ),
            )
        }
        | {"mean error": "0.80", "failed": "0"},
    }

    @classmethod
    def check_unit(cls, arch: str, unit: str) -> None:
        if arch != "tpr-rnn":
            return
        import units

        resolved = units.resolve(unit)
        # "tpr3" itself needs no import; an import path or entry point is compared by class (imports it)
        is_tpr3 = resolved.spec.name == "tpr3" or resolved.cls is units.lookup("tpr3")
        if not (is_tpr3 and resolved.layers == 1 and not resolved.bidirectional):
            raise TaskError(
                f"babi arch 'tpr-rnn' is TPR-RNN's own model around its update module and needs a single "
                f"tpr3 unit (e.g. 'tpr3' or 'tpr3[entity=15,relation=10]'), got {unit!r}; use arch "
                "'plain' (the sentence-level baseline) for other units"
            )
