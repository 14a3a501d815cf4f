"""The shared training loop and the pair architectures, on tiny generated logic data."""

from __future__ import annotations

import json

import pytest
import torch

import units
from tasks.architectures import PairModel
from tasks.registry import get_task
from tasks.training import CheckpointMismatch, TrainConfig, load_best_model, train

# `exam`-preset pairs are tiny formulas: a 2-epoch run can learn them, unlike validate-like pairs.
# One encoder layer: at d = 16 the papers' two layers (the default) with a 16-wide MLP stay at
# chance for the first epochs (measured: 0.5 after 4 epochs), which says nothing about the loop.
OPTIONS = {"train_size": 2000, "eval_size": 100, "preset": "exam", "layers": 1}


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    task = get_task("logic")(OPTIONS, "generated", tmp_path_factory.mktemp("cache"))
    task.prepare()
    return task


def config(unit="lstm", epochs=2, **hp):
    return TrainConfig(unit=unit, arch="plain", dim=16, input_dim=16, epochs=epochs, seed=0, hparams={"lr": 1e-2, "batch_size": 32, **hp})


def test_two_epoch_run_learns_above_chance(adapter):
    result = train(adapter, config())
    assert result.status == "finished" and result.best_epoch in (1, 2)
    assert result.best_valid > 0.6, result.history  # chance is 0.5: classes are balanced by construction
    assert set(result.test) == {"test_easy", "test_hard", "test_big", "test_massive", "test_exam"}
    assert result.history[-1]["train_acc"] > 0.6


def test_resume_from_checkpoint_equals_uninterrupted(adapter, tmp_path):
    cfg = config(unit="tpru[roles=4]", epochs=3, dropout=0.2)
    straight = train(adapter, cfg, tmp_path / "straight")

    class Killed(Exception):
        pass

    def die_after_two(epoch, row):
        if epoch == 2:
            raise Killed  # the process dies right after epoch 2's checkpoint was written

    with pytest.raises(Killed):
        train(adapter, cfg, tmp_path / "resumed", progress=die_after_two)
    resumed = train(adapter, cfg, tmp_path / "resumed")
    assert resumed.resumed_from_epoch == 2
    strip = lambda h: [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in h]  # noqa: E731
    assert strip(resumed.history) == strip(straight.history)
    assert resumed.test == straight.test and resumed.best_epoch == straight.best_epoch


def test_finished_run_is_not_recomputed(adapter, tmp_path):
    first = train(adapter, config(epochs=1), tmp_path)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["status"] == "finished"
    again = train(adapter, config(epochs=1), tmp_path, progress=lambda *a: pytest.fail("retrained"))
    assert again.test == first.test


def test_nan_loss_ends_the_run_as_diverged(adapter, tmp_path, monkeypatch):
    calls = {"n": 0}
    real_loss = type(adapter).loss

    def exploding(self, model, batch):
        loss, stats = real_loss(self, model, batch)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 5 else loss), stats

    monkeypatch.setattr(type(adapter), "loss", exploding)
    result = train(adapter, config(), tmp_path)
    assert result.status == "diverged" and "nan" in result.reason and "epoch 1, step 4" in result.reason
    assert not result.test


def test_checkpoint_of_another_configuration_is_refused(adapter, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        train(adapter, config(unit="gru"), tmp_path, progress=lambda e, r: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(CheckpointMismatch, match="checkpoint.pt"):
        train(adapter, config(unit="lstm"), tmp_path)


def test_best_model_reloads_with_the_same_scores(adapter, tmp_path):
    cfg = config(epochs=1)
    result = train(adapter, cfg, tmp_path)
    model = load_best_model(adapter, cfg, tmp_path)
    assert adapter.evaluate(model, "test_exam", 256)["acc"] == pytest.approx(result.test["test_exam"]["acc"])


@pytest.mark.parametrize("arch", ["plain", "bidaf"])
@pytest.mark.parametrize(
    "unit", ["gru", "lstm[bidirectional=true]", "tpru[roles=4]", "tpru-v1[roles=4,slices=2]", "tpru-mod1[roles=4,bidirectional=true,layers=2]"]
)
def test_architectures_take_every_unit_and_ignore_padding(arch, unit):
    torch.manual_seed(0)
    model = PairModel(unit, arch, vocab_size=10, dim=8, input_dim=6, classes=3, pooling="max").eval()
    a = torch.randint(1, 10, (4, 7))
    b = torch.randint(1, 10, (4, 5))
    a_mask = torch.arange(7) < torch.tensor([7, 3, 5, 1]).unsqueeze(1)
    b_mask = torch.arange(5) < torch.tensor([2, 5, 4, 3]).unsqueeze(1)
    a, b = a * a_mask, b * b_mask
    logits = model(a, a_mask, b, b_mask)
    assert logits.shape == (4, 3) and torch.isfinite(logits).all()
    pad = lambda t, n: torch.cat([t, torch.zeros(t.shape[0], n, dtype=t.dtype)], 1)  # noqa: E731
    padded = model(pad(a, 3), pad(a_mask, 3), pad(b, 2), pad(b_mask, 2))
    torch.testing.assert_close(padded, logits, rtol=1e-5, atol=1e-6)
    assert isinstance(units.build(unit, 6, 8), torch.nn.Module)
