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
        out, carry = unit.forward_carry(x[:, t:t + 1], carry)
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


@pytest.mark.parametrize("spec,D", [("tpru[roles=4]", 4), ("tpru-mod1[roles=4]", 4), ("tpru-mod3[roles=4,slices=2]", 4),
                                    ("tpru-v1[roles=4]", 4), ("gru", 4), ("lstm", 8),
                                    ("tprn[symbols=5,roles=3,role_dim=2]", 4), ("tpgn", 4 + 2 + 4 + 2)])
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
