"""TPGN (units/tpgn.py) against its equations (Huang et al., NAACL 2018), transcribed here independently.

`transcribe` is a literal float64, one-sequence-at-a-time, one-step-at-a-time reading of the
equations in the paper's own tensor shapes: W_{s,G} as d×d×d, D_{s,G} as d×d×d_in, U_{s,G} as
d×d×d×d contracted with `einsum`, the U-LSTM's Ŝ_{t−1} w_{u,G}, u_t = tanh(W_u p_t + b_u) and
f_t = S_t u_t with S_t = I_d ⊗ Ŝ_t built explicitly as a block-diagonal d²×d² matrix. It reads only
the module's parameters (through the documented packing), never its helpers (lstm_weights,
_cell, _read_out, block_unbind), so a mistake in those cannot hide itself.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

import units
from units import tpgn as tpgn_module

D, DIN = 3, 4  # plan side d = 3: hidden size d² = 9
H = D * D
LENGTHS = [5, 3, 1]
GATE = {"i": 0, "f": 1, "c": 2, "o": 3}  # the module packs gates in torch's order (i, f, g = Ĉ, o)


def _unit(impl="fused", plan_size=0, seed=0, d=D, din=DIN):
    torch.manual_seed(seed)
    unit = units.build(f"tpgn[impl={impl},plan_size={plan_size}]", din, d * d).double()
    # larger than the default init so every nonlinearity is exercised away from its linear part
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 100)
        for p in unit.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.5)
    return unit


def _mask(lengths, steps):
    return torch.arange(steps).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def _random_carry(batch, d=D, seed=5):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64) * 0.5  # noqa: E731
    return r(batch, d, d), r(batch, d, d), r(batch, d), r(batch, d)


# --------------------------------------------------------------------------------------------
# The transcription
# --------------------------------------------------------------------------------------------
def paper_tensors(unit):
    """The parameters in the paper's shapes. The module stores −D (the paper subtracts D·W_e x)."""
    d, din = unit.d, unit.input_size
    P = {n: p.detach().double() for n, p in unit.named_parameters()}
    T = {}
    for name, g in GATE.items():
        T[f"W_s{name}"] = P["s_W"][g].reshape(d, d, d)  # (W·p)_ij = Σ_k W_ijk p_k
        T[f"D_s{name}"] = -P["s_D"][g].reshape(d, d, din)  # (D·x)_ij = Σ_k D_ijk x_k
        T[f"U_s{name}"] = P["s_U"][g].reshape(d, d, d, d)  # (U·Ŝ)_ij = Σ_kl U_ijkl Ŝ_kl
        T[f"b_s{name}"] = P["s_b"][g].reshape(d, d)
        T[f"w_u{name}"] = P["u_w"][g]  # Ŝ w ∈ R^d
        T[f"D_u{name}"] = -P["u_D"][g]
        T[f"U_u{name}"] = P["u_U"][g]
        T[f"b_u{name}"] = P["u_b"][g]
    T["W_u"], T["b_u"] = P["unbind_W"], P["unbind_b"]
    return T


def transcribe(unit, x, lengths, carry=None):
    """f [B,T,d²], u [B,T,d²] (zero at padding) and the final (Ŝ, C, p, c̃) of each sequence."""
    T = paper_tensors(unit)
    d = unit.d
    x = x.double()
    sig, tanh = torch.sigmoid, torch.tanh
    B, steps = x.shape[0], x.shape[1]
    f_out = torch.zeros(B, steps, d * d, dtype=torch.float64)
    u_out = torch.zeros_like(f_out)
    finals = []
    for n in range(B):
        if carry is None:
            S, C, p, c = (
                torch.zeros(d, d, dtype=torch.float64),
                torch.zeros(d, d, dtype=torch.float64),
                torch.zeros(d, dtype=torch.float64),
                torch.zeros(d, dtype=torch.float64),
            )
        else:
            S, C, p, c = (t[n].double() for t in carry)
        for t in range(lengths[n]):
            e = x[n, t]  # W_e x_{t−1}: the previous word's embedding

            def s_gate(g, act):  # S-LSTM gate, a d×d matrix
                return act(
                    torch.einsum("ijk,k->ij", T[f"W_s{g}"], p)
                    - torch.einsum("ijk,k->ij", T[f"D_s{g}"], e)
                    + torch.einsum("ijkl,kl->ij", T[f"U_s{g}"], S)
                    + T[f"b_s{g}"]
                )

            def u_gate(g, act):  # U-LSTM gate, a d-vector; reads Ŝ_{t−1}
                return act(S @ T[f"w_u{g}"] - T[f"D_u{g}"] @ e + T[f"U_u{g}"] @ p + T[f"b_u{g}"])

            fs, is_, os_, cs = s_gate("f", sig), s_gate("i", sig), s_gate("o", sig), s_gate("c", tanh)
            fu, iu, ou, cu = u_gate("f", sig), u_gate("i", sig), u_gate("o", sig), u_gate("c", tanh)
            C = fs * C + is_ * cs
            S_new = os_ * tanh(C)
            c = fu * c + iu * cu
            p = ou * tanh(c)
            S = S_new
            u = tanh(T["W_u"] @ p + T["b_u"])
            S_big = torch.block_diag(*([S] * d))  # S_t = I_d ⊗ Ŝ_t
            f_out[n, t] = S_big @ u
            u_out[n, t] = u
        finals.append((S, C, p, c))
    return f_out, u_out, finals


def _inputs(lengths=LENGTHS, din=DIN, seed=1):
    gen = torch.Generator().manual_seed(seed)
    steps = max(lengths)
    x = torch.randn(len(lengths), steps, din, generator=gen, dtype=torch.float64)
    return x, _mask(lengths, steps)


@pytest.mark.parametrize("impl", ["fused", "loop"])
@pytest.mark.parametrize("with_carry", [False, True])
def test_matches_transcription(impl, with_carry):
    unit = _unit(impl)
    x, mask = _inputs()
    carry = _random_carry(len(LENGTHS)) if with_carry else None
    f_ref, u_ref, _ = transcribe(unit, x, LENGTHS, carry)
    with torch.no_grad():
        f, state = unit(x, mask, carry=carry)
        u = unit.unbinding(x, mask, carry=carry)
    torch.testing.assert_close(f, f_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(u, u_ref, rtol=1e-10, atol=1e-12)
    for n, L in enumerate(LENGTHS):
        torch.testing.assert_close(state[n], f_ref[n, L - 1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("impl", ["fused", "loop"])
def test_forward_carry_matches_transcription_and_returns_final_carry(impl):
    unit = _unit(impl)
    lengths = [4, 4]
    x, _ = _inputs(lengths)
    carry = _random_carry(2)
    f_ref, _, finals = transcribe(unit, x, lengths, carry)
    with torch.no_grad():
        f, out_carry = unit.forward_carry(x, carry)
    torch.testing.assert_close(f, f_ref, rtol=1e-10, atol=1e-12)
    for n in range(2):
        for got, want in zip(out_carry, finals[n]):
            torch.testing.assert_close(got[n], want, rtol=1e-10, atol=1e-12)
    # the carry's documented shapes
    assert [tuple(t.shape) for t in out_carry] == [(2, D, D), (2, D, D), (2, D), (2, D)]


def test_float32_close_to_transcription():
    unit = _unit().float()
    x, mask = _inputs()
    f_ref, _, _ = transcribe(unit, x, LENGTHS)
    with torch.no_grad():
        f, _ = unit(x.float(), mask)
    torch.testing.assert_close(f.double(), f_ref, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------------------
# §4.5 (a): the block product; (b): the S-LSTM is an LSTMCell
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 5])
def test_block_product_equals_per_block_products(d):
    gen = torch.Generator().manual_seed(d)
    S = torch.randn(3, d, d, generator=gen, dtype=torch.float64)
    u = torch.randn(3, d * d, generator=gen, dtype=torch.float64)
    f = tpgn_module.block_unbind(S, u)
    for n in range(3):
        kron = torch.kron(torch.eye(d, dtype=torch.float64), S[n])  # I_d ⊗ Ŝ
        torch.testing.assert_close(f[n], kron @ u[n], rtol=1e-12, atol=1e-12)
        for k in range(d):  # f^(k) = Ŝ u^(k)
            torch.testing.assert_close(f[n, k * d : (k + 1) * d], S[n] @ u[n, k * d : (k + 1) * d], rtol=1e-12, atol=1e-12)
    eye = torch.eye(d, dtype=torch.float64).expand(3, d, d)
    torch.testing.assert_close(tpgn_module.block_unbind(eye, u), u, rtol=0, atol=0)  # Ŝ = I → f = u


def test_s_lstm_equals_torch_lstm_cell_with_copied_weights():
    """Ŝ_t, C_t of the unit == nn.LSTMCell(d_in + d, d²) on [W_e x_{t−1}; p_{t−1}] from (Ŝ_{t−1}, C_{t−1})."""
    unit = _unit("loop")
    cell = nn.LSTMCell(DIN + D, D * D).double()
    with torch.no_grad():
        P = dict(unit.named_parameters())
        cell.weight_ih.copy_(torch.cat([P["s_D"], P["s_W"]], dim=2).reshape(4 * H, DIN + D))
        cell.weight_hh.copy_(P["s_U"].reshape(4 * H, H))
        cell.bias_ih.copy_(P["s_b"].reshape(4 * H))
        cell.bias_hh.zero_()  # the paper has one bias per gate
    x, _ = _inputs([5, 5])
    carry = _random_carry(2)
    with torch.no_grad():
        for t in range(5):
            S, C, p, _ = carry
            h_ref, c_ref = cell(torch.cat([x[:, t], p], -1), (S.reshape(2, H), C.reshape(2, H)))
            _, carry = unit.step(x[:, t], carry)
            torch.testing.assert_close(carry[0].reshape(2, H), h_ref, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(carry[1].reshape(2, H), c_ref, rtol=1e-12, atol=1e-12)


def test_whole_recurrence_is_one_lstm_of_hidden_d2_plus_d():
    """The assembled weights run in nn.LSTM give the unit's [vec Ŝ_t; p_t] (what `fused` relies on)."""
    unit = _unit()
    lstm = nn.LSTM(DIN, H + D, batch_first=True).double()
    with torch.no_grad():
        W_ih, W_hh, bias = unit.lstm_weights()
        lstm.weight_ih_l0.copy_(W_ih)
        lstm.weight_hh_l0.copy_(W_hh)
        lstm.bias_ih_l0.copy_(bias)
        lstm.bias_hh_l0.zero_()
        # the U-gate rows reading Ŝ hold d weights per gate (I_d ⊗ w_{u,G}ᵀ), nothing else
        rows = W_hh.view(4, H + D, H + D)[:, H:, :H]
        for g in range(4):
            torch.testing.assert_close(rows[g], torch.kron(torch.eye(D, dtype=torch.float64), unit.u_w[g].unsqueeze(0)))
        x, _ = _inputs([4, 4])
        hs, _ = lstm(x)
        _, _, finals = transcribe(unit, x, [4, 4])
    for n in range(2):
        S, _, p, _ = finals[n]
        torch.testing.assert_close(hs[n, -1], torch.cat([S.reshape(-1), p]), rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------------------------
# §4.5 (d): generation step == teacher-forced step; carries
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", ["fused", "loop"])
def test_free_generation_step_equals_first_teacher_forced_step(impl):
    unit = _unit(impl, plan_size=5)
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    x, _ = _inputs([6, 6])
    with torch.no_grad():
        carry0 = unit.initial_carry(z)
        f_tf, carry_tf = unit.forward_carry(x, carry0)
        f_1, carry = unit.step(x[:, 0], carry0)
        torch.testing.assert_close(f_1, f_tf[:, 0], rtol=1e-12, atol=1e-12)
        for t in range(1, 6):  # feeding the same words step by step reproduces the whole teacher-forced run
            f_t, carry = unit.step(x[:, t], carry)
            torch.testing.assert_close(f_t, f_tf[:, t], rtol=1e-10, atol=1e-12)
        for a, b in zip(carry, carry_tf):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_carry_splits_a_sequence_into_windows():
    unit = _unit()
    x, _ = _inputs([7, 7])
    with torch.no_grad():
        whole, c_whole = unit.forward_carry(x)
        first, c = unit.forward_carry(x[:, :3])
        second, c2 = unit.forward_carry(x[:, 3:], c)
    torch.testing.assert_close(torch.cat([first, second], 1), whole, rtol=1e-12, atol=1e-12)
    for a, b in zip(c2, c_whole):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_initial_carry_from_a_plan_vector():
    unit = _unit(plan_size=6)
    z = torch.randn(4, 6, dtype=torch.float64)
    S0, C0, p0, c0 = unit.initial_carry(z)
    assert S0.shape == (4, D, D) and C0.shape == (4, D, D)
    assert torch.all(p0 == 0) and torch.all(c0 == 0)
    lin = unit.plan(z)
    torch.testing.assert_close(S0.reshape(4, H), lin[:, :H])
    torch.testing.assert_close(C0.reshape(4, H), lin[:, H:])
    # the plan shapes the whole sentence: gradients reach the projection through every step
    f, _ = unit(torch.randn(4, 5, DIN, dtype=torch.float64), carry=(S0, C0, p0, c0))
    f[:, -1].sum().backward()
    assert unit.plan.weight.grad is not None and unit.plan.weight.grad.abs().sum() > 0


def test_initial_carry_needs_plan_size():
    unit = _unit()
    with pytest.raises(ValueError, match="plan_size"):
        unit.initial_carry(torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\[B, 6\]"):
        _unit(plan_size=6).initial_carry(torch.zeros(2, 5, dtype=torch.float64))


def test_bad_carry_is_refused():
    unit = _unit()
    with pytest.raises(ValueError, match="carry"):
        unit.forward_carry(torch.zeros(1, 2, DIN, dtype=torch.float64), (torch.zeros(1, D, D),))


def test_stacked_tpgn_carries_per_layer():
    """The LM drop-in: `tpgn[layers=2]` continues from a list of per-layer carries."""
    torch.manual_seed(0)
    model = units.build("tpgn[layers=2]", 5, 4).double()
    x = torch.randn(2, 6, 5, dtype=torch.float64)
    with torch.no_grad():
        whole, _ = model.forward_carry(x)
        a, carry = model.forward_carry(x[:, :2])
        carry = [tuple(t.detach() for t in c) for c in carry]
        b, _ = model.forward_carry(x[:, 2:], carry)
    torch.testing.assert_close(torch.cat([a, b], 1), whole, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", ["fused", "loop"])
def test_gradcheck(impl):
    unit = _unit(impl, plan_size=2, d=2, din=3)
    names = [n for n, _ in unit.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in unit.named_parameters())
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.randn(2, 2, generator=gen, dtype=torch.float64)
    mask = _mask([3, 2], 3)

    class PlanThenRun(nn.Module):  # initial_carry(z) then forward, so gradcheck covers the plan too
        def __init__(self):
            super().__init__()
            self.unit = unit

        def forward(self, x):
            return self.unit(x, mask, carry=self.unit.initial_carry(z))

    wrapper = PlanThenRun()

    def run(x, *ps):
        return functional_call(wrapper, {f"unit.{n}": p for n, p in zip(names, ps)}, (x,))

    assert torch.autograd.gradcheck(run, (x, *params), eps=1e-6, atol=1e-6)


def test_fused_and_loop_gradients_agree():
    grads = {}
    for impl in ("fused", "loop"):
        unit = _unit(impl)
        x, mask = _inputs()
        f, state = unit(x, mask, carry=_random_carry(len(LENGTHS)))
        (f.pow(2).sum() + state.sum()).backward()
        grads[impl] = {n: p.grad.clone() for n, p in unit.named_parameters()}
    for n in grads["fused"]:
        torch.testing.assert_close(grads["fused"][n], grads["loop"][n], rtol=1e-9, atol=1e-11)


# --------------------------------------------------------------------------------------------
# §4.5 (c): parameter counts
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d,din", [(2, 3), (4, 7), (5, 1)])
def test_param_counts(d, din):
    counts = units.param_counts("tpgn", din, d * d)
    s_lstm = 4 * d * d * (din + d + d * d)  # D_s, W_s, U_s
    u_lstm = 4 * (d + d * din + d * d)  # w_u, D_u, U_u
    unbind = d**3  # W_u
    assert counts.formula == s_lstm + u_lstm + unbind
    assert counts.total == counts.formula + 4 * d * d + 4 * d + d * d  # + b_s, b_u (gates), b_u (unbinding)
    with_plan = units.param_counts("tpgn[plan_size=11]", din, d * d)
    assert with_plan.formula == counts.formula  # the plan projection is conditioning, not the unit
    assert with_plan.total == counts.total + 11 * 2 * d * d + 2 * d * d


def test_param_counts_at_the_papers_sizes():
    """d = 25 (625-d u_t, f_t), d_e = 300 (GloVe), V = 8,791: Huang et al.'s sizes, counted per component."""
    d, de, V = 25, 300, 8791
    unit = units.build("tpgn", de, d * d)
    n = lambda *names: sum(dict(unit.named_parameters())[k].numel() for k in names)  # noqa: E731
    assert n("s_D", "s_W", "s_U", "s_b") == 2_377_500
    assert n("u_D", "u_U", "u_w", "u_b") == 32_700
    assert n("unbind_W", "unbind_b") == 16_250
    lexical = V * d * d + V  # W_x (and its bias): the task's lexical layer, not the unit
    assert lexical == 5_503_166
    counts = units.param_counts("tpgn", de, d * d)
    assert counts.total == 2_377_500 + 32_700 + 16_250 == 2_426_450
    assert counts.formula == 2_423_225


# --------------------------------------------------------------------------------------------
# §4.5 (e): an untrained model is near-uniform over the vocabulary
# --------------------------------------------------------------------------------------------
def test_untrained_perplexity_is_on_the_order_of_the_vocabulary():
    V, E, d = 500, 16, 4
    torch.manual_seed(0)
    embed = nn.Embedding(V, E)
    unit = units.build("tpgn", E, d * d)
    lexical = nn.Linear(d * d, V)  # the lexical layer L: x_t = softmax(W_x f_t)
    tokens = torch.randint(0, V, (8, 21), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        f, _ = unit(embed(tokens[:, :-1]))
        nll = nn.functional.cross_entropy(lexical(f).reshape(-1, V), tokens[:, 1:].reshape(-1))
    ppl = math.exp(nll.item())
    assert V / 2 < ppl < 2 * V, ppl


# --------------------------------------------------------------------------------------------
# Options and errors
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hidden,nearest", [(200, "196 (d=14) or 225 (d=15)"), (8, "4 (d=2) or 9 (d=3)"), (2, "1 (d=1) or 4 (d=2)")])
def test_hidden_size_must_be_a_perfect_square(hidden, nearest):
    with pytest.raises(units.UnitSpecError, match="perfect square") as info:
        units.resolve("tpgn", hidden)
    assert nearest in str(info.value) and "tpgn" in str(info.value)
    with pytest.raises(units.UnitSpecError, match="perfect square"):
        units.build("tpgn", 5, hidden)


def test_negative_plan_size_is_refused():
    with pytest.raises(units.UnitSpecError, match="plan_size"):
        units.resolve("tpgn[plan_size=-1]", 9)


def test_registered_with_options():
    resolved = units.resolve("tpgn[plan_size=7]", 16)
    assert resolved.cls is tpgn_module.TPGN
    assert resolved.identity == "tpgn[plan_size=7]"
    assert units.resolve("tpgn", 16).identity == "tpgn"
    assert units.build("tpgn", 3, 16).output_size == 16
