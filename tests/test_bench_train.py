"""`tprbench bench train --study`: each cell of a study timed as its seed runs train it, with the
projections a study's cost is estimated from. What it reports, not how fast anything is; the
logic mode is tested in tests/test_bench_units.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from harness.bench.train import seed_params
from harness.cli import main
from harness.study.cells import expand
from harness.study.load import parse_study
from tasks.registry import get_task
from tasks.training import Diverged, TrainConfig, TrainingSteps, load_best_model, train

LOGIC_STUDY = """
[study]
name = "bench-tiny"
trials = {trials}
seeds = 2
epochs = 3

[[tasks]]
name = "logic"
data = "generated"
[tasks.options]
train_size = 96
eval_size = 16
preset = "exam"
layers = 1

[matrix]
arch = "plain"
dim = 8
units = ["gru", "tpru"]

[search]
lr = {{ log_uniform = [1e-4, 1e-2] }}
batch_size = 32
"""


def _study(tmp_path: Path, trials: int = 0) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(LOGIC_STUDY.format(trials=trials))
    return path


def _bench(tmp_path: Path, *extra: str) -> int:
    return main(["bench", "train", "--batches", "2", "--repeats", "1", "--cache", str(tmp_path / "cache"), *extra])


def test_study_rows_ratios_and_projections(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "bench.json"
    assert _bench(tmp_path, "--study", str(_study(tmp_path, trials=2)), "--json", str(out)) == 0
    text = capsys.readouterr().out
    assert "baseline (× baseline = 1.00): the first selected cell, logic · plain · gru · d8" in text
    assert "core-hours" in text and "timed at the search space's defaults lr=0.001" in text
    record = json.loads(out.read_text())
    assert record["meta"]["study"] == str(tmp_path / "tiny.toml") and record["meta"]["batches"] == 2
    assert record["meta"]["threads"] == 1 and {"load_start", "load_end", "torch", "clock"} <= set(record["meta"])
    rows = record["rows"]
    assert [r["label"] for r in rows] == ["logic · plain · gru · d8", "logic · plain · tpru · d8"]
    assert rows[0]["time_to_baseline"] == 1.0 and rows[1]["time_to_baseline"] > 0
    for row in rows:
        assert row["skipped"] is None and row["counted"] == "examples" and row["batch_size"] == 32
        assert row["batches"] == 2 and row["batches_per_epoch"] == math.ceil(96 / 32)
        assert row["seconds_per_batch"] > 0 and row["per_s"] > 0 and row["params_model"] > row["params_units"] > 0
        assert row["epoch_seconds"] == pytest.approx(3 * row["seconds_per_batch"])
        assert row["runs"] == 2 + 2 and row["epochs"] == 3
        assert row["cell_hours"] == pytest.approx(4 * 3 * row["epoch_seconds"] / 3600) and row["cell_hours"] > 0


def test_seed_params_are_the_seed_phase_values(tmp_path: Path):
    cell = expand(parse_study(LOGIC_STUDY.format(trials=0), "t.toml"))[0]
    params, note = seed_params(parse_study(LOGIC_STUDY.format(trials=0), "t.toml"), cell)
    assert params == {"lr": 0.001, "batch_size": 32} and note is None  # trials = 0: exactly what the seeds train with
    study = parse_study(LOGIC_STUDY.format(trials=5), "t.toml")
    params, note = seed_params(study, expand(study)[0])
    assert params["lr"] == 0.001 and note == "searched (5 trials); timed at the search space's defaults lr=0.001"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "unit=lstm"], "tiny.toml: --only unit=lstm: matches no cell of the study (unit: gru, tpru)"),
        (["--only", "colour=red"], "unknown key 'colour'"),
        (["--dim", "16"], "--dim: options of the logic mode"),
    ],
)
def test_study_errors_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str):
    assert _bench(tmp_path, "--study", str(_study(tmp_path)), *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_study_file_and_missing_data_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert _bench(tmp_path, "--only", "unit=gru") == 2
    assert "--only selects cells of a study: give --study FILE" in capsys.readouterr().err
    assert _bench(tmp_path, "--study", str(tmp_path / "absent.toml")) == 2
    assert "absent.toml: study file not found" in capsys.readouterr().err
    study = tmp_path / "lm.toml"
    study.write_text(
        f'[study]\nepochs = 1\n[[tasks]]\nname = "lm"\ndata = "{tmp_path / "no-ptb"}"\noptions = {{ corpus = "ptb" }}\n'
        '[matrix]\narch = "lm"\ndim = 8\nunits = ["lstm"]\n'
    )
    assert _bench(tmp_path, "--study", str(study)) == 2
    err = capsys.readouterr().err
    assert f"{study}: task 'lm':" in err and "no-ptb" in err and "Traceback" not in err


# -- the trainer's step, outside a run ------------------------------------------------------------


@pytest.fixture(scope="module")
def logic(tmp_path_factory):
    task = get_task("logic")({"train_size": 96, "eval_size": 16, "preset": "exam", "layers": 1}, "generated", tmp_path_factory.mktemp("cache"))
    task.prepare()
    return task


def _config(**hp) -> TrainConfig:
    return TrainConfig("gru", "plain", 8, 8, epochs=1, hparams={"lr": 1e-2, "batch_size": 32, **hp})


def test_steps_train_exactly_as_the_trainer(logic, tmp_path: Path):
    """One epoch through `TrainingSteps` ends with the weights `train`'s first epoch ends with."""
    train(logic, _config(), tmp_path)
    trained = load_best_model(logic, _config(), tmp_path)
    steps = TrainingSteps(logic, _config())
    carry = None
    with steps.determinism:
        for batch in steps.batches(1):
            _, carry = steps.step(batch, carry)
    for name, value in trained.state_dict().items():
        assert torch.equal(value, steps.model.state_dict()[name]), name


def test_steps_reinitialise_on_nan_in_warmup_then_diverge(logic, monkeypatch):
    real = type(logic).loss
    nan_at = {2, 5}
    calls = {"n": 0}

    def nan_sometimes(self, model, batch):
        loss, stats = real(self, model, batch)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] in nan_at else loss), stats

    monkeypatch.setattr(type(logic), "loss", nan_sometimes)
    steps = TrainingSteps(logic, _config(warmup_steps=2, nan_restarts=3))
    first = steps.model
    batches = list(steps.batches(1)) * 2
    steps.step(batches[0])
    _, carry = steps.step(batches[1])  # NaN at step 1 < warm-up: a fresh model (restart 1), the carry dropped
    assert steps.model is not first and steps.session.restarts == 1 and carry is None
    steps.step(batches[2])
    steps.step(batches[3])
    with pytest.raises(Diverged, match="nan"):  # past warm-up (2 steps of this model done): a divergence, as `train` says
        steps.step(batches[4])


@pytest.mark.realdata
def test_ptb_baseline_and_hrr_arm(data_root: Path, tmp_path: Path):
    """Two of hrr-ptb-paper's arms at d = 16 on the real PTB: tokens counted, the LM's windows per epoch."""
    study = tmp_path / "ptb.toml"
    arm = '[[tasks]]\nname = "lm"\nlabel = "{label}"\ndata = "{data}"\n[tasks.options]\ncorpus = "ptb"\nbptt = 20\nprojection = false\n{extra}\n'
    study.write_text(
        "[study]\ntrials = 0\nseeds = 1\nepochs = 13\n"
        + arm.format(label="baseline", data=data_root / "ptb", extra="")
        + arm.format(
            label="hrr-fixed-big", data=data_root / "ptb", extra='embedding = "hrr"\nhrr_fillers = 8\nhrr_basis = "fixed"\nhrr_anneal_steps = 15000'
        )
        + '[matrix]\narch = "lm"\ndim = 16\nunits = ["lstm"]\n'
        + '[search]\noptimizer = "sgd"\nlr = 20.0\nclip = 0.25\nbatch_size = 20\ndropout = 0.0\n'
    )
    out = tmp_path / "ptb.json"
    assert _bench(tmp_path, "--study", str(study), "--json", str(out)) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["label"] for r in rows] == ["baseline · lm · lstm · d16", "hrr-fixed-big · lm · lstm · d16"]
    assert rows[0]["time_to_baseline"] == 1.0 and rows[1]["time_to_baseline"] > 0
    assert rows[0]["params_model"] != rows[1]["params_model"]  # the HRR embedding is another size
    for row in rows:
        assert row["skipped"] is None and row["counted"] == "tokens" and row["batches"] == 2
        assert row["per_s"] == pytest.approx(20 * 20 / row["seconds_per_batch"], rel=1e-3)  # batch × bptt tokens a window
        assert 2000 < row["batches_per_epoch"] < 2600  # PTB's ~929k training tokens in windows of 20 × 20
        assert row["epoch_seconds"] > 0 and row["cell_hours"] == pytest.approx(13 * row["epoch_seconds"] / 3600)


def test_a_task_filter_that_matches_nothing_lists_the_labels_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """`task=` selects a task by name or label, so the error lists both (bAbI's are qa1 … qa20)."""
    path = tmp_path / "tiny.toml"
    path.write_text(LOGIC_STUDY.format(trials=0).replace('name = "logic"', 'name = "logic"\nlabel = "small"'))
    assert _bench(tmp_path, "--study", str(path), "--only", "task=big") == 2
    assert "--only task=big: matches no cell of the study (task: logic, small)" in capsys.readouterr().err
