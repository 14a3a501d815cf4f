"""The gradient tool (tasks/analysis/gradients.py): on a linear recurrence with known A the
Jacobian spectrum and the gradient decay are A's; finite differences agree with ∂L/∂s_t on a
tiny TPRU; every built-in unit with a carry can be analysed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import units
from tasks.analysis.carry import CarryError
from tasks.analysis.gradients import record, state_gradients
from units.base import RecurrentUnit


class LinearRecurrence(RecurrentUnit):
    """b_t = A b_{t−1} + x_t (input size = state size): J_t = A at every step."""

    def __init__(self, A: torch.Tensor) -> None:
        super().__init__(A.shape[0], A.shape[0])
        self.A = nn.Parameter(A.clone())

    def forward_carry(self, x, carry=None):
        b = carry if carry is not None else x.new_zeros(x.shape[0], self.hidden_size)
        outs = []
        for t in range(x.shape[1]):
            b = b @ self.A.T + x[:, t]
            outs.append(b)
        return torch.stack(outs, 1), b

    def forward(self, x, mask=None):
        out, b = self.forward_carry(x)
        return out, b


def test_linear_recurrence_spectrum_and_decay_are_As():
    torch.manual_seed(0)
    D, T, B = 5, 7, 3
    A = torch.randn(D, D, dtype=torch.float64) * 0.4
    unit = LinearRecurrence(A)
    x = torch.randn(B, T, D, dtype=torch.float64)
    w = torch.randn(D, dtype=torch.float64)
    stats = state_gradients(unit, x, None, lambda outputs, state: (state @ w).sum())
    sigma = torch.linalg.svdvals(A)[0].item()
    rho = torch.linalg.eigvals(A).abs().max().item()
    assert len(stats.sigma_all) == B * (T - 1)
    np.testing.assert_allclose(stats.sigma_all, sigma, rtol=1e-10)
    np.testing.assert_allclose(stats.radius_all, rho, rtol=1e-10)
    # L = Σ_b w·b_T: ∂L/∂b_t = (Aᵀ)^{T−t} w for every sequence
    expected = [torch.linalg.matrix_power(A.T, T - t) @ w for t in range(1, T + 1)]
    np.testing.assert_allclose(stats.grad_norm, [e.norm().item() for e in expected], rtol=1e-10)
    np.testing.assert_allclose(stats.grad_count, [B] * T)
    assert stats.state_size == D


def test_linear_recurrence_respects_lengths():
    """Padding steps carry no gradient and no Jacobian: only real steps are counted."""
    torch.manual_seed(1)
    A = torch.eye(3, dtype=torch.float64) * 0.5
    unit = LinearRecurrence(A)
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    stats = state_gradients(unit, x, mask, lambda outputs, state: outputs.sum())
    assert stats.grad_count.tolist() == [2, 2, 1, 1]
    assert len(stats.sigma_all) == 3 + 1
    np.testing.assert_allclose(stats.sigma_all, 0.5)


def _run_steps(unit, x, delta_at=None, delta=None):
    """b_1..b_T by forward_carry, adding `delta` to the state right after step `delta_at`."""
    carry, outs = None, []
    for t in range(x.shape[1]):
        out, carry = unit.forward_carry(x[:, t : t + 1], carry)
        if t == delta_at:
            carry = carry + delta
            out = carry.unsqueeze(1)
        outs.append(out[:, -1])
    return torch.stack(outs, 1)


@pytest.mark.parametrize("spec", ["tpru[roles=3]", "tpru-mod2[roles=3]"])
def test_finite_differences_agree_with_state_gradients(spec):
    torch.manual_seed(2)
    unit = units.build(spec, 3, 4).double()
    B, T = 2, 5
    x = torch.randn(B, T, 3, dtype=torch.float64)
    W = torch.randn(B, T, 4, dtype=torch.float64)
    loss_fn = lambda outputs, state: (outputs * W).sum() + state.pow(2).sum()  # noqa: E731
    with record(unit) as rec:
        outputs, state = unit(x, None)
        loss = loss_fn(outputs, state)
    loss.backward()
    grads = rec.calls[0].grads()
    eps = 1e-6
    for t in (0, 2, 4):
        for i in range(4):
            delta = torch.zeros(B, 4, dtype=torch.float64)
            delta[:, i] = eps
            up = _run_steps(unit, x, t, delta)
            down = _run_steps(unit, x, t, -delta)
            fd = (loss_fn(up, up[:, -1]) - loss_fn(down, down[:, -1])) / (2 * eps)
            assert torch.allclose(grads[:, t, i].sum(), fd, rtol=1e-6, atol=1e-8), (t, i)


def test_recorded_forward_equals_the_units_forward():
    torch.manual_seed(3)
    for spec in ("tpru[roles=4]", "gru", "lstm", "tprn[symbols=5,roles=3,role_dim=2]"):
        unit = units.build(spec, 3, 4)
        x = torch.randn(2, 5, 3)
        mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], dtype=torch.bool)
        ref_out, ref_state = unit(x, mask)
        with record(unit):
            out, state = unit(x, mask)
        assert torch.allclose(out, ref_out, atol=1e-5), spec
        assert torch.allclose(state, ref_state, atol=1e-5), spec
        assert "forward" not in vars(unit)  # the patch is gone


@pytest.mark.parametrize(
    "spec,D",
    [
        ("tpru[roles=4]", 4),
        ("tpru-mod1[roles=4]", 4),
        ("tpru-mod3[roles=4,slices=2]", 4),
        ("tpru-v1[roles=4]", 4),
        ("gru", 4),
        ("lstm", 8),
        ("tprn[symbols=5,roles=3,role_dim=2]", 4),
        ("tpgn", 4 + 2 + 4 + 2),
    ],
)
def test_every_unit_with_a_carry_is_analysed(spec, D):
    torch.manual_seed(4)
    unit = units.build(spec, 3, 4)
    x = torch.randn(2, 4, 3)
    stats = state_gradients(unit, x, None, lambda outputs, state: outputs.pow(2).sum())
    assert stats.state_size == D
    assert len(stats.sigma_all) == 2 * 3 and np.isfinite(stats.sigma_all).all()
    # TPGN's output f_t is computed from its state, not part of it: s_T gets no gradient (module docstring)
    assert (stats.grad_norm[:-1] > 0).all() and (stats.grad_norm[-1] > 0) == (spec != "tpgn")
    if spec.startswith("tpru"):
        assert stats.candidate_proj is not None and len(stats.candidate_proj) == 6
        k = 2 if "slices=2" in spec else 1
        assert len(stats.filler_max) == 2 * 4 * k and ((stats.filler_max > 0) & (stats.filler_max <= 1 + 1e-6)).all()
    else:
        assert stats.candidate_proj is None


def test_mod1_candidate_keeps_a_positive_part_of_the_old_state():
    """ICLR §4, Mod I/II: with W_r = W_u and softmax, ⟨b̃_t, V_b b_{t−1}⟩ = E_f[score] ≥ mean score;
    with V_b = I (Mod I) and random inputs the candidate's projection on b_{t−1} is mostly positive."""
    torch.manual_seed(5)
    unit = units.build("tpru-mod1[roles=16]", 8, 16)
    x = torch.randn(8, 12, 8)
    stats = state_gradients(unit, x, None, lambda outputs, state: outputs.sum())
    assert np.mean(stats.candidate_proj > 0) > 0.9


def test_a_unit_without_carry_is_refused():
    class NoCarry(RecurrentUnit):
        def forward(self, x, mask=None):
            return x, x[:, -1]

    with pytest.raises(CarryError, match="NoCarry"):
        state_gradients(NoCarry(2, 2), torch.randn(1, 3, 2), None, lambda o, s: o.sum())


@pytest.mark.parametrize("spec", ["gru", "lstm"])
def test_written_out_torch_rnn_step_equals_the_module(spec):
    """The vmap-able step used for LSTM/GRU Jacobians computes what nn.LSTM/nn.GRU compute."""
    from tasks.analysis.carry import first_step, step_function

    torch.manual_seed(6)
    unit = units.build(spec, 3, 4).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    ref, _ = unit.rnn(x)
    out, s, layout = first_step(unit, x[:, 0])
    step = step_function(unit, layout)
    outs = [out]
    for t in range(1, 5):
        out, s = step(s, x[:, t])
        outs.append(out)
    assert torch.allclose(torch.stack(outs, 1), ref, atol=1e-12)


def test_recorded_forward_carry_continues_from_the_given_carry():
    """The contiguous LM runs its unit through forward_carry with the previous window's carry:
    recorded, it computes the same outputs and carry and keeps ∂L/∂s_t of every step."""
    torch.manual_seed(5)
    for spec in ("tpru[roles=4]", "lstm", "gru"):
        unit = units.build(spec, 3, 4)
        x1, x2 = torch.randn(2, 4, 3), torch.randn(2, 3, 3)
        _, carry = unit.forward_carry(x1, None)
        ref_out, ref_carry = unit.forward_carry(x2, carry)
        with record(unit) as rec:
            out, new_carry = unit.forward_carry(x2, carry)
            (out.sum() + sum(c.sum() for c in torch.utils._pytree.tree_leaves(new_carry))).backward()
        assert torch.allclose(out, ref_out, atol=1e-5), spec
        for a, b in zip(torch.utils._pytree.tree_leaves(new_carry), torch.utils._pytree.tree_leaves(ref_carry)):
            assert torch.allclose(a, b, atol=1e-5), spec
        (call,) = rec.calls
        assert len(call.states) == 3 and call.grads().abs().sum() > 0
        assert "forward_carry" not in vars(unit) and "forward" not in vars(unit)


@pytest.fixture(scope="module")
def logic(tmp_path_factory):
    from tasks.registry import get_task

    task = get_task("logic")({"train_size": 200, "eval_size": 64, "preset": "exam", "layers": 1}, "generated", tmp_path_factory.mktemp("cache"))
    task.prepare()
    return task


def _train(adapter, unit, **hp):
    from tasks.training import TrainConfig, train

    cfg = TrainConfig(unit=unit, arch="plain", dim=8, input_dim=8, epochs=2, seed=0, hparams={"lr": 1e-2, "batch_size": 32, **hp})
    return train(adapter, cfg)


@pytest.mark.parametrize("unit", ["tpru-mod1[roles=4]", "lstm"])
def test_per_epoch_gradient_summary_is_logged_and_changes_nothing(logic, unit):
    """grad_log_batches > 0: every epoch's metrics have the three grad_* keys; the run is the same
    run as without them (eval mode, RNG restored)."""
    from tasks.analysis.gradients import EPOCH_METRICS

    plain = _train(logic, unit)
    logged = _train(logic, unit, grad_log_batches=1)
    assert plain.status == logged.status == "finished"
    for a, b in zip(plain.history, logged.history):
        assert set(EPOCH_METRICS) <= set(b) and not set(EPOCH_METRICS) & set(a)
        assert 0 <= b["grad_frac_sigma_gt_1"] <= 1 and b["grad_sigma_max_mean"] > 0 and b["grad_ratio_first_last"] > 0
        for key in ("train_loss", "valid_loss", "valid_acc"):
            assert a[key] == b[key], key
    assert plain.test == logged.test


def test_per_epoch_summary_equals_the_gradients_tool(logic):
    """The logged numbers are the analysis's own (tasks/analysis/gradients.py on_batches)."""
    from tasks.analysis.gradients import EPOCH_BATCH_SIZE, EPOCH_MAX_PAIRS, epoch_summary, on_batches
    from tasks.analysis.readout import encoder_layers

    torch.manual_seed(0)
    model = logic.build_model("gru", "plain", 8, 8, logic.resolve_hparams({}))
    got = epoch_summary(model, logic, 1)
    stats = on_batches(model, encoder_layers(model)[0], logic, logic.valid_split, 1, EPOCH_BATCH_SIZE, EPOCH_MAX_PAIRS)
    s = stats.summary()
    assert got == pytest.approx(
        {
            "grad_ratio_first_last": s["grad_ratio_first_last"],
            "grad_frac_sigma_gt_1": s["frac_sigma_gt_1"],
            "grad_sigma_max_mean": s["sigma_max_mean"],
        }
    )


def test_a_unit_that_cannot_be_stepped_is_said_once_and_the_run_goes_on(logic, monkeypatch):
    from tasks.analysis import gradients

    def refuse(*a, **k):
        raise CarryError("no forward_carry")

    monkeypatch.setattr(gradients, "epoch_summary", refuse)
    result = _train(logic, "gru", grad_log_batches=1)
    assert result.status == "finished"
    assert sum("grad_log_batches" in n for n in result.notes) == 1
    assert not any(k.startswith("grad_") for row in result.history for k in row)
