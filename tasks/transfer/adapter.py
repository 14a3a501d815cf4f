"""SentEval transfer as a task: train an NLI encoder, then evaluate its frozen sentence vectors.

The `transfer` task is the `nli` task with the SentEval tasks appended to its test splits: a
split `senteval_MR` runs SentEval's protocol (tasks/transfer/senteval.py) on the best model's
encoder, so a study records NLI accuracy and transfer results of the same run side by side
(000 Table 3). `tprbench transfer RUN_ID` does the same for a run that was already tracked.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..nli.adapter import NLITask
from ..registry import register_task
from .meta import TransferMeta
from .senteval import PROTOCOL
from .senteval import evaluate as senteval_evaluate
from .senteval_data import load_task

PREFIX = "senteval_"


def senteval_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numbers a table shows: accuracy (%) for classification, correlations ×100 otherwise."""
    if "acc" in result:
        return {"acc": float(result["acc"]) / 100.0} | ({"f1": float(result["f1"]) / 100.0} if "f1" in result else {})
    return {"pearson": float(result["pearson"]), "spearman": float(result["spearman"])}


@register_task("transfer")
class TransferTask(TransferMeta, NLITask):
    # archs, Options, metrics, defaults, ...: TransferMeta's (tasks/transfer/meta.py)

    @property
    def test_splits(self) -> list[str]:
        return super().test_splits + [PREFIX + t for t in self.options.senteval_tasks]

    def senteval_path(self) -> str | None:
        if self.options.senteval_path:
            return self.options.senteval_path
        return None if self.generated else f"{self.data}/senteval"

    def expand_for_senteval(self) -> int:
        """Grow the vocabulary once with the vectors of every word of every configured SentEval
        task (InferSent's way, `NLITask.expand_vocab`): one pass over the vector file, not one per task."""
        if getattr(self, "_senteval_expanded", None) is None:
            sentences = []
            for name in self.options.senteval_tasks:
                for part in load_task(name, self.senteval_path()).splits.values():
                    sentences.extend(part.a)
                    sentences.extend(part.b or [])
            self._senteval_expanded = self.expand_vocab(sentences)
        return self._senteval_expanded

    def evaluate(self, model: nn.Module, split: str, batch_size: int) -> dict[str, float]:
        if not split.startswith(PREFIX):
            return super().evaluate(model, split, batch_size)
        name = split[len(PREFIX) :]
        self.expand_for_senteval()
        results = senteval_evaluate(lambda sentences: self.encode_sentences(model, sentences), self.senteval_path(), [name], kfold=self.options.kfold)
        return senteval_metrics(results[name])

    def report_notes(self, arch: str) -> list[str]:
        return super().report_notes(arch) + [PROTOCOL]
