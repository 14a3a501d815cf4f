"""The trainer's hooks: typed hyperparameters, the run's metric, optimisers and schedules,
warm-up with NaN restarts, auxiliary losses, determinism and host-side mask checks.

Each default reproduces the loop as it was (Adam, StepLR, clip 5, no aux, no warm-up)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tasks.errors import TaskError
from tasks.hparams import HParams, HParamsError, check_search_names
from tasks.meta import run_metric
from tasks.optim import Schedule, make_optimizer, optimizer_step
from tasks.registry import get_task
from tasks.result import CHECKPOINT
from tasks.training import TrainConfig, train

OPTIONS = {"train_size": 200, "eval_size": 40, "preset": "exam"}


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    task = get_task("logic")(OPTIONS, "generated", tmp_path_factory.mktemp("cache"))
    task.prepare()
    return task


def config(epochs=2, unit="gru", **hp):
    return TrainConfig(unit=unit, arch="plain", dim=8, input_dim=8, epochs=epochs, seed=0, hparams={"lr": 1e-2, "batch_size": 32, **hp})


# -- hyperparameters ---------------------------------------------------------------------------


def test_defaults_reproduce_the_old_loop_and_tasks_override_them():
    logic, lm = get_task("logic"), get_task("lm")
    hp = logic.resolve_hparams({})
    assert (hp.optimizer, hp.lr, hp.schedule, hp.lr_step, hp.lr_gamma, hp.clip, hp.batch_size) == ("adam", 1e-3, "step", 30, 0.1, 5.0, 64)
    assert (hp.warmup_steps, hp.nan_restarts, hp.dropout, hp.mlp_hidden) == (0, 0, 0.0, None)
    lm_hp = lm.resolve_hparams({"lr": 0.5})
    assert (lm_hp.lr, lm_hp.clip, lm_hp.batch_size, lm_hp.dropout) == (0.5, 0.25, 20, 0.2)


def test_unknown_or_bad_hyperparameters_are_one_clear_error():
    with pytest.raises(HParamsError, match=r"unknown hyperparameter 'lrr' \(did you mean 'lr'\?\)"):
        get_task("logic").resolve_hparams({"lrr": 1e-3})
    with pytest.raises(HParamsError, match="batch_size"):
        get_task("logic").resolve_hparams({"batch_size": 0})
    assert check_search_names(["dropout", "droput"])[0][0] == "droput"


def test_dropout_and_mlp_hidden_reach_the_model(adapter):
    model = adapter.build_model("gru", "plain", 8, 8, adapter.resolve_hparams({"dropout": 0.3, "mlp_hidden": 5}))
    assert model.dropout.p == 0.3 and model.head.mlp[0].out_features == 5


def test_resolved_hparams_are_in_the_result_and_the_fingerprint(adapter):
    a = train(adapter, config(epochs=1))
    assert a.hparams["lr"] == 1e-2 and a.hparams["optimizer"] == "adam" and a.hparams["lr_step"] == 30
    cfg = config(epochs=1)
    options = adapter.options.model_dump(mode="json")
    f1 = cfg.fingerprint("logic", options, adapter.resolve_hparams(cfg.hparams), "valid_acc", "maximize")
    f2 = cfg.fingerprint("logic", options, adapter.resolve_hparams({**cfg.hparams, "clip": 1.0}), "valid_acc", "maximize")
    assert f1 != f2


def test_a_checkpoint_from_before_typed_hparams_still_resumes(adapter, tmp_path):
    cfg = config(epochs=2)
    train(adapter, config(epochs=1), tmp_path)  # a checkpoint after epoch 1 ...
    (tmp_path / "result.json").unlink()
    state = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    state["fingerprint"] = cfg.legacy_fingerprint("logic", adapter.options.model_dump(mode="json"))
    torch.save(state, tmp_path / CHECKPOINT)  # ... as the old code fingerprinted it
    resumed = train(adapter, cfg, tmp_path)
    assert resumed.resumed_from_epoch == 1 and resumed.status == "finished"


# -- the run's metric ------------------------------------------------------------------------


def test_the_runs_metric_picks_the_best_epoch(adapter):
    result = train(
        adapter,
        TrainConfig(unit="gru", arch="plain", dim=8, input_dim=8, epochs=3, seed=0, hparams={"lr": 3e-2, "batch_size": 32}, metric="valid_loss"),
    )
    losses = [row["valid_loss"] for row in result.history]
    assert result.metric == "valid_loss" and result.direction == "minimize"
    assert result.best_valid == min(losses) and result.best_epoch == losses.index(min(losses)) + 1


def test_a_metric_the_task_does_not_log_is_rejected():
    with pytest.raises(TaskError, match=r"'valid_acc'"):
        run_metric(get_task("logic"), "valid_accuracy")
    with pytest.raises(TaskError, match="validation split"):
        run_metric(get_task("logic"), "train_loss")
    assert run_metric(get_task("lm")) == ("valid_ppl", "minimize")
    assert run_metric(get_task("logic"), "valid_loss") == ("valid_loss", "minimize")


# -- optimisers and schedules ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name,cls", [("adam", torch.optim.Adam), ("nadam", torch.optim.NAdam), ("sgd", torch.optim.SGD), ("adadelta", torch.optim.Adadelta)]
)
def test_each_optimizer_trains(adapter, name, cls):
    hp = HParams(optimizer=name, lr=0.5 if name in ("sgd", "adadelta") else 1e-2, betas=(0.6, 0.4), momentum=0.9)
    opt = make_optimizer([nn.Parameter(torch.zeros(2))], hp)
    assert isinstance(opt, cls)
    if name in ("adam", "nadam"):
        assert opt.defaults["betas"] == (0.6, 0.4)
    if name == "sgd":
        assert opt.defaults["momentum"] == 0.9
    result = train(adapter, config(epochs=1, optimizer=name, lr=hp.lr))
    assert result.status == "finished"


def test_step_schedule_is_the_old_steplr(adapter):
    result = train(adapter, config(epochs=3, lr_step=1, lr_gamma=0.5))
    assert [row["lr"] for row in result.history] == pytest.approx([1e-2, 5e-3, 2.5e-3])


def _schedule(**hp):
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    return opt, Schedule(opt, HParams(**hp), "valid_loss", "minimize")


def test_step_schedule_with_a_delayed_start():
    """lr_decay_start = 4: lr 1 for 4 epochs, then halved after every epoch (epoch 5 at 0.5, epoch 13
    at 2^-9; studies/hrr-ptb-paper.toml's run). Zaremba et al.'s code keeps lr 1 for 5 epochs (its
    `epoch > max_epoch` test with max_epoch = 4): lr_decay_start = 5. The lr of each epoch is what
    the optimiser holds while it trains."""
    opt, sched = _schedule(lr_decay_start=4, lr_step=1, lr_gamma=0.5)
    lrs = []
    for _epoch in range(13):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step({})
    assert lrs == [1.0] * 4 + [0.5**k for k in range(1, 10)]
    opt2, restored = _schedule(lr_decay_start=4, lr_step=1, lr_gamma=0.5)
    restored.load_state_dict(sched.state_dict())  # a resumed run continues the same sequence
    assert restored.torch.last_epoch == 13
    opt3, every2 = _schedule(lr_decay_start=2, lr_step=2, lr_gamma=0.1)
    seen = []
    for _epoch in range(6):
        seen.append(opt3.param_groups[0]["lr"])
        every2.step({})
    assert seen == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.01, 0.01])


def test_lr_decay_start_left_at_its_default_keeps_fingerprints():
    from tasks.hparams import fingerprint_params

    assert "lr_decay_start" not in fingerprint_params(HParams())
    assert fingerprint_params(HParams(lr_decay_start=4))["lr_decay_start"] == 4


def test_plateau_schedule_decays_after_patience_epochs_without_improvement():
    opt, sched = _schedule(schedule="plateau", factor=0.5, patience=1)
    lrs = []
    for loss in (1.0, 0.9, 0.95, 0.95, 0.8):
        sched.step({"valid_loss": loss})
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [1.0, 1.0, 1.0, 0.5, 0.5]


def test_threshold_schedule_decays_once_when_the_metric_crosses():
    opt, sched = _schedule(schedule="threshold", factor=0.5, threshold_metric="valid_loss", threshold_value=0.1)
    lrs = []
    for loss in (0.3, 0.09, 0.05, 0.2, 0.01):
        sched.step({"valid_loss": loss})
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [1.0, 0.5, 0.5, 0.5, 0.5]
    restored = _schedule(schedule="threshold")[1]
    restored.load_state_dict(sched.state_dict())
    assert restored.fired


def test_warmup_scales_the_first_steps_and_leaves_the_schedule_lr():
    seen = []
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    original = opt.step
    opt.step = lambda: (seen.append(opt.param_groups[0]["lr"]), original())  # type: ignore[method-assign]
    hp = HParams(warmup_steps=2, warmup_factor=0.1)
    for step in range(4):
        p.grad = torch.ones(1)
        optimizer_step(opt, hp, step)
    assert seen == pytest.approx([0.1, 0.1, 1.0, 1.0]) and opt.param_groups[0]["lr"] == 1.0


def test_nan_during_warmup_reinitialises_the_model(adapter, tmp_path, monkeypatch):
    calls = {"n": 0}
    real = type(adapter).loss

    def nan_once(self, model, batch):
        loss, stats = real(self, model, batch)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 2 else loss), stats

    monkeypatch.setattr(type(adapter), "loss", nan_once)
    lines = []
    result = train(adapter, config(epochs=1, warmup_steps=5, warmup_factor=0.1, nan_restarts=1), tmp_path, notice=lines.append)
    assert result.status == "finished" and len(lines) == 1 and "re-initialised (restart 1 of 1)" in lines[0]
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["restarts"] == 1
    calls["n"] = 0
    no_restart = train(adapter, config(epochs=1, warmup_steps=5, nan_restarts=0))
    assert no_restart.status == "diverged"


# -- auxiliary losses --------------------------------------------------------------------------


class AuxProbe(nn.Module):
    """A module that adds ‖w‖² as an auxiliary loss on every forward of the model it sits in."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((3,), 2.0))
        self.aux_loss = None


def test_aux_losses_are_added_logged_and_absent_otherwise(adapter, monkeypatch):
    plain = train(adapter, config(epochs=1))
    assert "train_aux" not in plain.history[0]
    real_build = type(adapter).build_model
    probes = []

    def build(self, *args):
        model = real_build(self, *args)
        model.probe = AuxProbe()
        probes.append(model.probe)

        def set_aux(module, inputs):
            module.probe.aux_loss = (module.probe.w**2).sum()

        model.register_forward_pre_hook(set_aux)
        return model

    monkeypatch.setattr(type(adapter), "build_model", build)
    result = train(adapter, config(epochs=1, lr=0.1))
    row = result.history[0]
    assert row["train_aux"] > 0 and row["train_aux"] < 12.0  # ‖w‖² starts at 12 and is pulled down
    assert probes[0].w.abs().max() < 2.0


# -- determinism and masks ------------------------------------------------------------------


def test_deterministic_mode_is_scoped_to_the_run(adapter):
    before = torch.are_deterministic_algorithms_enabled()
    result = train(adapter, config(epochs=1))
    assert result.reproducible is True and torch.are_deterministic_algorithms_enabled() == before
    assert train(adapter, TrainConfig(**{**config(epochs=1).__dict__, "deterministic": False})).reproducible is False


def test_an_op_without_a_deterministic_kernel_relaxes_instead_of_failing(adapter, monkeypatch):
    real = type(adapter).loss
    raised = {"n": 0}

    def nondeterministic(self, model, batch):
        if raised["n"] == 0:
            raised["n"] = 1
            raise RuntimeError("index_add_cuda_ does not have a deterministic implementation, but you set 'torch.use_deterministic_algorithms(True)'")
        return real(self, model, batch)

    monkeypatch.setattr(type(adapter), "loss", nondeterministic)
    lines = []
    result = train(adapter, config(epochs=1), notice=lines.append)
    assert result.status == "finished" and result.reproducible is False
    assert len(lines) == 1 and "not bitwise reproducible" in lines[0]


def test_masks_are_checked_once_per_batch_on_the_host(adapter, monkeypatch):
    real = type(adapter).train_batches

    def bad(self, *args):
        for batch in real(self, *args):
            batch["a_mask"][0, 0] = False  # a hole at the start: not right-padded
            yield batch

    monkeypatch.setattr(type(adapter), "train_batches", bad)
    with pytest.raises(TaskError, match="a_mask.*right-padded"):
        train(adapter, config(epochs=1))


# -- the same in a study worker ----------------------------------------------------------------


def test_a_worker_sets_a_corrupt_checkpoint_aside_and_reports_it(tmp_path):
    """harness.driver.worker.run_job (what Ray runs) with a truncated checkpoint.pt in its run directory:
    the run restarts, finishes, and the note comes back with the result for the driver to log."""
    from harness.driver.jobs import WorkerJob
    from harness.driver.worker import run_job

    run_dir = tmp_path / "trial-0000"
    run_dir.mkdir()
    (run_dir / CHECKPOINT).write_bytes(b"PK\x03\x04 truncated")
    job = WorkerJob(
        task="logic",
        task_options=OPTIONS,
        data="generated",
        unit="gru",
        arch="plain",
        dim=8,
        input_dim=8,
        epochs=1,
        metric="valid_acc",
        direction="maximize",
        seed=0,
        hparams={"batch_size": 32},
        run_dir=str(run_dir),
        cache_dir=str(tmp_path / "cache"),
    )
    out = run_job(job)
    assert out.status == "finished", out.reason
    assert len(out.notes) == 1 and "restarting the run" in out.notes[0]
    assert list(run_dir.glob(CHECKPOINT + ".corrupt-*"))
    assert out.splits.valid == "validate" and out.hparams["batch_size"] == 32


def test_a_worker_reports_an_exception_as_errored_not_diverged(tmp_path):
    from harness.driver.jobs import WorkerJob
    from harness.driver.worker import run_job

    job = WorkerJob(
        task="logic",
        task_options=OPTIONS,
        data="generated",
        unit="no_such_mod_xyz:Cell",
        arch="plain",
        dim=8,
        input_dim=8,
        epochs=1,
        metric="valid_acc",
        direction="maximize",
        seed=0,
        hparams={},
        run_dir=str(tmp_path / "run"),
        cache_dir=str(tmp_path / "cache"),
    )
    out = run_job(job)
    assert out.status == "errored" and "no_such_mod_xyz" in out.reason
