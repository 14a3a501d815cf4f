"""The `transfer` task's declarations (the `nli` task's plus SentEval's), torch-free: what a
study file is checked against (tasks/meta.py). The adapter is tasks/transfer/adapter.py."""

from __future__ import annotations

import pydantic

from ..bounds import FOLDS_MAX
from ..meta import ReportLayout
from ..nli.meta import NLIMeta, NLIOptions
from ..registry import register_task_meta

SENTEVAL_TASKS = (
    "MR",
    "CR",
    "SUBJ",
    "MPQA",
    "SST2",
    "SST5",
    "TREC",
    "MRPC",
    "SICKEntailment",
    "SICKRelatedness",
    "STS12",
    "STS13",
    "STS14",
    "STS15",
    "STS16",
    "STSBenchmark",
)


class TransferOptions(NLIOptions):
    senteval_tasks: list[str] = pydantic.Field(
        ["MR", "CR", "SUBJ", "MPQA", "TREC", "SICKEntailment", "STSBenchmark"], description="SentEval tasks evaluated on the best model"
    )
    senteval_path: str | None = pydantic.Field(None, description="SentEval data/downstream folder (default <data>/senteval)")
    kfold: int = pydantic.Field(10, ge=2, le=FOLDS_MAX, description="folds of the cross-validated SentEval tasks")

    @pydantic.field_validator("senteval_tasks")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [t for t in value if t not in SENTEVAL_TASKS]
        if unknown:
            raise ValueError(f"unknown SentEval task(s) {unknown}; known: {', '.join(SENTEVAL_TASKS)}")
        return value


@register_task_meta("transfer")
class TransferMeta(NLIMeta):
    Options = TransferOptions
    layouts = NLIMeta.layouts + "; plus SentEval's data/downstream layout (<data>/senteval)"
    report_layout = ReportLayout("senteval")
