"""NLI's `max_eval`: the first N pairs of every validation and test split (CPU-sized studies such
as studies/tprn-nli-cpu.toml); training data and vocabulary are unchanged."""

from __future__ import annotations

import pytest

from tasks.registry import get_task


@pytest.mark.realdata
def test_max_eval_keeps_the_first_pairs_of_each_evaluation_split(data_root, tmp_path):
    options = {"max_train": 300, "test": ["mnli:dev_matched"]}
    full = get_task("nli")(options, str(data_root), tmp_path)
    full.prepare()
    cut = get_task("nli")({**options, "max_eval": 50}, str(data_root), tmp_path)
    cut.prepare()
    assert cut.vocab.itos == full.vocab.itos
    assert cut._encoded["train"] == full._encoded["train"]
    for split in ("snli_dev", "mnli_dev_matched"):
        assert len(full._encoded[split][2]) > 9000
        assert all(len(part) == 50 for part in cut._encoded[split])
        assert all(c == f[:50] for c, f in zip(cut._encoded[split], full._encoded[split], strict=True))
