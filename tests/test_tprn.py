"""TPRN against the equations of Palangi et al. (AAAI 2018) and the authors' code (hamidpalangi/Grammatically_Interpretable_QA
my/tensorflow/tpr.py), transcribed here independently.

`transcribe` reads the equations one sequence and one step at a time in float64, from the
module's parameters only (W_S, b_S, W_R, b_R, S, R and, gated, the LSTM matrix), never from its
helpers (`_split_weights`, `_run`, `bind`), so a mistake in those cannot hide itself.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call

import units
from units.tprn import TPRN, quantization_penalty

DIN, N_S, N_R, D_S, D_R = 5, 4, 3, 3, 2
D = D_S * D_R
LENGTHS = [6, 3, 1, 0]


def _mask(lengths, steps):
    return torch.arange(steps).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def _unit(gated=False, quantization=0.1, seed=0, din=DIN, impl="fused") -> TPRN:
    torch.manual_seed(seed)
    unit = TPRN(din, D, symbols=N_S, roles=N_R, role_dim=D_R, quantization=quantization, gated=gated, impl=impl).double()
    with torch.no_grad():  # non-zero biases, so a transposed or dropped bias cannot pass
        for p in (unit.b_S, unit.b_R) + ((unit.b_lstm,) if gated else ()):
            p.copy_(torch.randn(p.shape, dtype=torch.float64) * 0.5)
    return unit


def _inputs(lengths=LENGTHS, din=DIN, seed=1):
    gen = torch.Generator().manual_seed(seed)
    T = max(lengths)
    x = torch.randn(len(lengths), T, din, generator=gen, dtype=torch.float64)
    return x, _mask(lengths, T)


def sig(z):
    return 1 / (1 + torch.exp(-z))


def Q(a):  # eq. 4, written out
    return sum(a[i] ** 2 * (1 - a[i]) ** 2 for i in range(a.shape[0])) + (sum(a[i] ** 2 for i in range(a.shape[0])) - 1) ** 2


def transcribe(unit: TPRN, x, lengths, gated: bool, c_q: float):
    """outputs [B,T,out], a_S, a_R [B,T,·] (zero at padding), aux loss."""
    P = {n: p.detach().double() for n, p in unit.named_parameters()}
    B, T = x.shape[0], x.shape[1]
    H = D
    out_w = 2 * H if gated else H
    outputs = torch.zeros(B, T, out_w, dtype=torch.float64)
    a_S_all = torch.zeros(B, T, N_S, dtype=torch.float64)
    a_R_all = torch.zeros(B, T, N_R, dtype=torch.float64)
    total_q = 0.0
    for b in range(B):
        v = torch.zeros(H, dtype=torch.float64)  # v_0 = 0
        h = torch.zeros(H, dtype=torch.float64)
        c = torch.zeros(H, dtype=torch.float64)
        for t in range(lengths[b]):
            z = torch.cat([x[b, t], h, v]) if gated else torch.cat([x[b, t], v])  # [x_t; (h_{t−1};) v_{t−1}]
            a_S = sig(P["W_S"] @ z + P["b_S"])  # logistic, not softmax
            a_R = sig(P["W_R"] @ z + P["b_R"])
            if gated:
                g = P["W_lstm"] @ z + P["b_lstm"]
                i, j, f, o = g[:H], g[H : 2 * H], g[2 * H : 3 * H], g[3 * H :]
                c = c * sig(f + 1.0) + sig(i) * torch.tanh(j)
                h = torch.tanh(c) * sig(o)
            s = P["S"] @ a_S  # symbol vector, d_S
            r = P["R"] @ a_R  # role vector, d_R
            v = torch.tensor([s[p] * r[q] for p in range(D_S) for q in range(D_R)], dtype=torch.float64)  # vec row-major
            outputs[b, t] = torch.cat([h, v]) if gated else v
            a_S_all[b, t], a_R_all[b, t] = a_S, a_R
            total_q += Q(a_S) + Q(a_R)
    return outputs, a_S_all, a_R_all, c_q * total_q / B


# (f) the transcription, ungated (fused and loop) and gated ---------------------------------------
VARIANTS = [(False, "fused"), (False, "loop"), (True, "loop")]


@pytest.mark.parametrize("gated, impl", VARIANTS)
def test_matches_transcription(gated, impl):
    unit = _unit(gated, impl=impl)
    x, mask = _inputs()
    out, state, (a_S, a_R) = unit(x, mask, return_attention=True)
    ref_out, ref_S, ref_R, ref_aux = transcribe(unit, x, LENGTHS, gated, 0.1)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(a_S, ref_S, rtol=0, atol=1e-12)
    torch.testing.assert_close(a_R, ref_R, rtol=0, atol=1e-12)
    torch.testing.assert_close(unit.aux_loss, torch.as_tensor(ref_aux, dtype=torch.float64), rtol=1e-12, atol=1e-14)
    for b, n in enumerate(LENGTHS):
        expected = ref_out[b, n - 1] if n else torch.zeros(unit.output_size, dtype=torch.float64)
        torch.testing.assert_close(state[b], expected, rtol=0, atol=1e-12)
    assert out.shape[-1] == unit.output_size == (2 * D if gated else D)


@pytest.mark.parametrize("gated, impl", VARIANTS)
def test_gradcheck_unit_and_aux_loss(gated, impl):
    unit = _unit(gated, quantization=0.3, impl=impl)
    names = [n for n, _ in unit.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in unit.named_parameters())
    x, mask = _inputs([3, 2], seed=2)
    x = x.requires_grad_(True)

    def f(x, *ps):
        module_params = dict(zip(names, ps, strict=True))
        out, state = functional_call(unit, module_params, (x, mask))
        return out, state, unit.aux_loss

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_fused_and_loop_gradients_agree():
    """Larger than gradcheck can afford: the fused backward equals autograd through the loop."""
    gen = torch.Generator().manual_seed(14)
    x0 = torch.randn(3, 9, 6, generator=gen, dtype=torch.float64)
    mask = _mask([9, 5, 2], 9)
    upstream = torch.randn(3, 9, 12, generator=gen, dtype=torch.float64)
    v0 = torch.randn(3, 12, generator=gen, dtype=torch.float64)
    grads = {}
    for impl in ("fused", "loop"):
        torch.manual_seed(15)
        unit = TPRN(6, 12, symbols=7, roles=5, role_dim=3, quantization=0.2, impl=impl).double()
        x = x0.clone().requires_grad_(True)
        carry = v0.clone().requires_grad_(True)
        out, state = unit(x, mask)
        windowed, last = unit.forward_carry(x[:, :4], carry)  # a non-zero initial state too
        loss = (out * upstream).sum() + state.pow(2).sum() + unit.aux_loss + windowed.sin().sum() + last.sum()
        loss.backward()
        grads[impl] = {"x": x.grad, "v0": carry.grad, **{n: p.grad for n, p in unit.named_parameters()}}
    for key in grads["loop"]:
        torch.testing.assert_close(grads["fused"][key], grads["loop"][key], rtol=1e-9, atol=1e-11, msg=lambda m, key=key: f"{key}: {m}")


# (a) binding identities ---------------------------------------------------------------------
def test_binding_identities():
    unit = _unit()
    gen = torch.Generator().manual_seed(3)
    a_S = torch.rand(N_S, generator=gen, dtype=torch.float64)
    a_R = torch.rand(N_R, generator=gen, dtype=torch.float64)
    S, R = unit.S.detach(), unit.R.detach()
    lhs = S @ torch.outer(a_S, a_R) @ R.T  # S B Rᵀ with B = a_S a_Rᵀ
    rhs = torch.outer(S @ a_S, R @ a_R)  # (S a_S)(R a_R)ᵀ
    torch.testing.assert_close(lhs, rhs, rtol=0, atol=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(unit.bind(a_S, a_R), rhs.reshape(-1), rtol=0, atol=1e-12)
        for j in range(N_S):
            for k in range(N_R):
                v = unit.bind(torch.eye(N_S, dtype=torch.float64)[j], torch.eye(N_R, dtype=torch.float64)[k])
                # one-hot attention binds exactly symbol j to role k, and vec is row-major
                for p in range(D_S):
                    for q in range(D_R):
                        assert v[p * D_R + q] == S[p, j] * R[q, k]


# (b) the quantisation penalty ---------------------------------------------------------------
def test_quantization_penalty_by_hand():
    cases = {
        (0.0, 1.0, 0.0): 0.0,  # one-hot
        (1.0,): 0.0,
        (0.5, 0.5): 0.375,  # 2·(0.25·0.25) + (0.5 − 1)²
        (0.0, 0.0, 0.0): 1.0,  # (0 − 1)²
        (1.0, 1.0): 1.0,  # (2 − 1)²
    }
    for a, value in cases.items():
        assert quantization_penalty(torch.tensor(a, dtype=torch.float64)).item() == pytest.approx(value, abs=1e-15)
    batch = torch.tensor([[0.5, 0.5], [1.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(quantization_penalty(batch), torch.tensor([0.375, 1.0], dtype=torch.float64))
    a = torch.rand(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(quantization_penalty, (a,))
    # the gradient vanishes at a one-hot vector (a minimum)
    onehot = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64, requires_grad=True)
    quantization_penalty(onehot).backward()
    assert torch.all(onehot.grad == 0)


# (c) the recurrence reads only v_{t−1} -------------------------------------------------------
def test_recurrence_reads_only_the_previous_tpr():
    unit = _unit()
    x, _ = _inputs([6], seed=4)
    with torch.no_grad():
        full, _ = unit.forward_carry(x)
        for t in range(1, 6):
            step, carry = unit.forward_carry(x[:, t : t + 1], full[:, t - 1])  # nothing but v_{t−1}
            torch.testing.assert_close(step[:, 0], full[:, t], rtol=0, atol=1e-13)
            assert torch.equal(carry, step[:, -1])
    # and the ungated cell has no other state: its only recurrent inputs are the v-columns of W_S, W_R
    assert {n for n, _ in unit.named_parameters()} == {"W_S", "b_S", "W_R", "b_R", "S", "R"}
    assert unit.W_S.shape == (N_S, DIN + D) and unit.W_R.shape == (N_R, DIN + D)


def test_gated_carry_is_c_h_v_and_windows_equal_one_pass():
    for gated in (False, True):
        unit = _unit(gated)
        x, _ = _inputs([7, 7], seed=5)
        with torch.no_grad():
            whole, _ = unit.forward_carry(x)
            aux_whole = unit.aux_loss.clone()
            first, carry = unit.forward_carry(x[:, :3])
            aux_first = unit.aux_loss.clone()
            second, _ = unit.forward_carry(x[:, 3:], carry)
            aux_second = unit.aux_loss.clone()
        torch.testing.assert_close(torch.cat([first, second], 1), whole, rtol=0, atol=1e-13)
        torch.testing.assert_close(aux_first + aux_second, aux_whole, rtol=1e-12, atol=1e-15)
        if gated:
            c, h, v = carry
            torch.testing.assert_close(torch.cat([h, v], -1), first[:, -1], rtol=0, atol=0)


# (d) parameter counts -----------------------------------------------------------------------
def test_parameter_count_of_the_interpreted_model():
    spec = "tprn[symbols=100,roles=20,role_dim=10]"
    counts = units.param_counts(spec, 200, 100)
    assert counts.total == 37_320  # (200 + 100)(100 + 20) + 100·10 + 20·10 + 120 biases
    assert counts.formula == 37_200
    assert TPRN.formula_params(200, 100) == 37_200  # the defaults are the interpreted model's sizes
    bi = units.param_counts(spec[:-1] + ",bidirectional=true]", 200, 100)
    assert (bi.formula, bi.total) == (2 * 37_200, 2 * 37_320)
    # gated: attention also reads h, plus the LSTM 4·d·(d_in + 2d); total = formula + biases
    gated = units.param_counts(spec[:-1] + ",gated=true]", 200, 100)
    assert gated.formula == (200 + 200) * 120 + 1000 + 200 + 4 * 100 * (200 + 200)
    assert gated.total == gated.formula + 120 + 400
    # stacked gated layers read the 2d-wide [h; v] of the layer below
    two = units.param_counts(spec[:-1] + ",gated=true,layers=2]", 200, 100)
    assert two.formula == gated.formula + TPRN.formula_params(200, 100, symbols=100, roles=20, role_dim=10, gated=True)


def test_paper_configuration_shapes():
    # TPRN_1 in the paper: n_S = 600, n_R = 100, d_S = 15, d_R = 10 → v is 150 wide
    unit = units.build("tprn[symbols=600,roles=100,role_dim=10]", 7, 150)
    assert unit.symbol_dim == 15 and unit.S.shape == (15, 600) and unit.R.shape == (10, 100)


def test_init_is_tf012_uniform_unit_scaling_and_zero_biases():
    torch.manual_seed(0)
    unit = TPRN(200, 100, symbols=100, roles=20, role_dim=10)
    for w, fan_in in ((unit.W_S, 300), (unit.W_R, 300), (unit.S, 100), (unit.R, 20)):
        bound = math.sqrt(3 / fan_in)
        assert w.abs().max() <= bound and w.abs().max() > 0.95 * bound
        assert abs(w.std().item() - bound / math.sqrt(3)) < 0.1 * bound  # uniform: sd = bound/√3
    assert torch.all(unit.b_S == 0) and torch.all(unit.b_R == 0)
    gated = TPRN(200, 100, gated=True)
    assert gated.W_lstm.abs().max() <= math.sqrt(3 / 400) and torch.all(gated.b_lstm == 0)


# (e) padding invariance, aux loss included ----------------------------------------------------
@pytest.mark.parametrize("gated", [False, True])
def test_padding_never_changes_outputs_or_aux_loss(gated):
    unit = _unit(gated)
    x, mask = _inputs()
    with torch.no_grad():
        out, state = unit(x, mask)
        aux = unit.aux_loss.clone()
        junk = torch.randn(len(LENGTHS), 3, DIN, dtype=torch.float64) * 50
        x_long = torch.cat([torch.where(mask.unsqueeze(-1), x, torch.full_like(x, 9.0)), junk], 1)
        out_long, state_long = unit(x_long, _mask(LENGTHS, x_long.shape[1]))
        torch.testing.assert_close(out_long[:, : x.shape[1]], out, rtol=0, atol=1e-12)
        torch.testing.assert_close(state_long, state, rtol=0, atol=1e-12)
        torch.testing.assert_close(unit.aux_loss, aux, rtol=1e-12, atol=1e-15)
        # mean over the batch of per-sequence sums: each sequence alone (B = 1) gives its own sum
        alone = []
        for b, n in enumerate(LENGTHS):
            if n:
                unit(x[b : b + 1, :n], None)
                alone.append(unit.aux_loss.item())
        assert aux.item() == pytest.approx(sum(alone) / len(LENGTHS), rel=1e-12)


def test_aux_loss_is_weighted_and_zero_when_off():
    x, mask = _inputs()
    unit = _unit(quantization=0.1)
    with torch.no_grad():
        unit(x, mask)
        a = unit.aux_loss.item()
        unit.quantization = 0.2
        unit(x, mask)
        assert unit.aux_loss.item() == pytest.approx(2 * a, rel=1e-12)
        unit.quantization = 0.0
        unit(x, mask)
    assert torch.is_tensor(unit.aux_loss) and unit.aux_loss.item() == 0.0
    assert TPRN(3, 100).quantization == 1e-5  # the code's c_F = c_R default


def test_aux_losses_of_inner_units_under_the_wrappers():
    """The training loop collects `aux_loss` from every submodule: both directions and every layer set one."""
    spec = f"tprn[symbols={N_S},roles={N_R},role_dim={D_R},quantization=0.1,layers=2,bidirectional=true]"
    torch.manual_seed(0)
    module = units.build(spec, DIN, D).double()
    x, mask = _inputs()
    with torch.no_grad():
        module(x, mask)
    inner = [m for m in module.modules() if isinstance(m, TPRN)]
    assert len(inner) == 4
    losses = [m.aux_loss for m in module.modules() if torch.is_tensor(getattr(m, "aux_loss", None))]
    assert len(losses) == 4 and all(v.item() > 0 for v in losses)
    # the backward unit's penalty is that of the reversed sequences, run alone
    bwd = module.layers[0].bwd
    from units.base import lengths_from_mask, reverse_padded

    with torch.no_grad():
        expected = bwd.aux_loss.clone()
        bwd(reverse_padded(x, lengths_from_mask(x, mask)), mask)
    torch.testing.assert_close(bwd.aux_loss, expected, rtol=0, atol=0)


# (f) logistic attention ---------------------------------------------------------------------
def test_attention_is_logistic_not_softmax():
    unit = _unit()
    x, mask = _inputs()
    with torch.no_grad():
        a_S, a_R = unit.attention(x, mask)
    assert a_S.shape == (len(LENGTHS), max(LENGTHS), N_S) and a_R.shape == (len(LENGTHS), max(LENGTHS), N_R)
    real_S, real_R = a_S[mask], a_R[mask]
    assert torch.all((real_S > 0) & (real_S < 1)) and torch.all((real_R > 0) & (real_R < 1))
    assert (real_S.sum(-1) - 1).abs().max() > 0.1  # independent entries: they need not sum to one
    assert torch.all(a_S[~mask] == 0) and torch.all(a_R[~mask] == 0)


# options --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec, message",
    [
        ("tprn[role_dim=3]", "role_dim=3 must divide the hidden size 100"),
        ("tprn[symbols=0]", "symbols and roles must be >= 1"),
        ("tprn[quantization=-1]", "quantization must be >= 0"),
    ],
)
def test_bad_options_are_spec_errors(spec, message):
    with pytest.raises(units.UnitSpecError, match=message):
        units.resolve(spec, 100)


def test_gated_stacks_and_runs_under_the_wrappers():
    torch.manual_seed(0)
    module = units.build(f"tprn[symbols={N_S},roles={N_R},role_dim={D_R},gated=true,layers=2,bidirectional=true]", DIN, D)
    assert module.output_size == 4 * D
    x = torch.randn(2, 4, DIN)
    out, state = module(x, torch.ones(2, 4, dtype=torch.bool))
    assert out.shape == (2, 4, 4 * D) and state.shape == (2, 4 * D)
    assert module.layers[1].fwd.input_size == 4 * D


# the quantisation penalty in training ---------------------------------------------------------
def test_aux_loss_is_declared_before_the_first_forward():
    """The training loop lists the modules with an `aux_loss` attribute when it builds the model,
    before any forward: a unit that set it only in forward would never be penalised."""
    unit = TPRN(3, 4, symbols=2, roles=2, role_dim=2)
    assert hasattr(unit, "aux_loss") and unit.aux_loss is None


@pytest.fixture(scope="module")
def logic_adapter(tmp_path_factory):
    from tasks.registry import get_task

    task = get_task("logic")({"train_size": 64, "eval_size": 16, "preset": "exam"}, "generated", tmp_path_factory.mktemp("cache"))
    task.prepare()
    return task


@pytest.mark.parametrize("quantization", [0.01, 0.0])
def test_the_training_loop_adds_and_logs_the_penalty(logic_adapter, quantization):
    from tasks.training import TrainConfig, train

    unit = f"tprn[symbols=3,roles=2,role_dim=2,quantization={quantization}]"
    result = train(logic_adapter, TrainConfig(unit=unit, arch="plain", dim=4, input_dim=4, epochs=1, seed=0, hparams={"lr": 1e-2, "batch_size": 32}))
    assert result.status == "finished"
    aux = result.history[0]["train_aux"]
    assert (aux > 0) if quantization else (aux == 0.0)


@pytest.mark.parametrize("arch", ["plain", "bidaf"])
def test_pair_models_weigh_the_penalty_per_pair_as_the_code(arch):
    """Both sides of a pair run as one batch of 2B; the authors' basic/model.py adds the batch mean
    over the questions and the batch mean over the passages, so the model's auxiliary loss is
    Σ over both sides' sequences / B: the unit run on each side alone (a mean over B) summed."""
    from tasks.architectures import PairModel

    spec = f"tprn[symbols={N_S},roles={N_R},role_dim={D_R},quantization=0.1,layers=1,bidirectional=true]"
    torch.manual_seed(0)
    model = PairModel(
        spec, arch, vocab_size=11, dim=D, input_dim=DIN, classes=3, attention="trilinear", modelling_unit="lstm" if arch == "bidaf" else None
    ).double()
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randint(1, 11, (3, 5), generator=gen), torch.randint(1, 11, (3, 4), generator=gen)
    a_mask, b_mask = _mask([5, 2, 4], 5), _mask([4, 4, 1], 4)
    with torch.no_grad():
        model(a * a_mask, a_mask, b * b_mask, b_mask)
        total = sum(m.aux_loss for m in model.modules() if torch.is_tensor(getattr(m, "aux_loss", None)))
        expected = 0.0
        for ids, mask in ((a, a_mask), (b, b_mask)):  # each side alone, B sequences
            model.encoder(model.embed(ids * mask), mask)
            expected += sum(m.aux_loss for m in model.encoder.modules() if isinstance(m, TPRN))
    assert total.item() == pytest.approx(expected.item(), rel=1e-12)
    assert total.item() > 0


# the CLI ------------------------------------------------------------------------------------
def test_tprbench_units_shows_tprn_counts(capsys):
    """`tprbench units` lists tprn with its formula and total counts: at the default d = 64, which
    role_dim = 10 does not divide, sized by `bench units`' rule; named at d = 100, the paper's sizes."""
    from harness.cli import main

    assert main(["units"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "tprn[" in line)
    formula = TPRN.formula_params(64, 64, symbols=160, roles=32, role_dim=8)  # (64 + 64)(160 + 32) + 160·8 + 32·8
    assert "tprn[role_dim=8,roles=32,symbols=160]" in row
    assert f"{formula:,}" in row and f"{formula + 160 + 32:,}" in row
    assert main(["units", "tprn", "--dim", "100", "--input-dim", "200"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "tprn" in line)
    assert "37,200" in row and "37,320" in row
    assert main(["units", "tprn"]) == 2  # a spec the user names is counted as written, or refused: one line
    assert "role_dim=10 must divide the hidden size 64" in capsys.readouterr().err


# The ungated loop's C++ port (units/csrc/tprn_recurrence.cpp, the default on CPU when it builds)
# against the Python loop of TPRNRecurrence (the fallback), float64, padded batch -----------------
def _fused_run(use_cpp: bool, with_attention_grad: bool):
    from units import tpru_ext

    previous = tpru_ext.set_enabled(use_cpp)
    try:
        gen = torch.Generator().manual_seed(24)
        x = torch.randn(3, 9, 6, generator=gen, dtype=torch.float64, requires_grad=True)
        mask = _mask([9, 5, 2], 9)
        upstream = torch.randn(3, 9, 12, generator=gen, dtype=torch.float64)
        carry = torch.randn(3, 12, generator=gen, dtype=torch.float64, requires_grad=True)
        torch.manual_seed(25)
        unit = TPRN(6, 12, symbols=7, roles=5, role_dim=3, quantization=0.2 if with_attention_grad else 0.0).double()
        out, state = unit(x, mask)
        windowed, last = unit.forward_carry(x[:, :4], carry)
        loss = (out * upstream).sum() + state.pow(2).sum() + unit.aux_loss + windowed.sin().sum() + last.sum()
        loss.backward()
        return out.detach(), {"x": x.grad, "v0": carry.grad, **{n: p.grad for n, p in unit.named_parameters()}}
    finally:
        tpru_ext.set_enabled(previous)


@pytest.mark.parametrize("with_attention_grad", [True, False])
def test_cpp_and_python_fused_loops_agree(with_attention_grad):
    from units import tpru_ext

    if tpru_ext.ops() is None:
        pytest.skip("the C++ extension did not build here")
    out_c, grads_c = _fused_run(True, with_attention_grad)
    out_p, grads_p = _fused_run(False, with_attention_grad)
    torch.testing.assert_close(out_c, out_p, rtol=1e-12, atol=1e-13)
    assert grads_c.keys() == grads_p.keys()
    for key in grads_p:
        torch.testing.assert_close(grads_c[key], grads_p[key], rtol=1e-10, atol=1e-12, msg=lambda m, key=key: f"{key}: {m}")


def test_python_fallback_gradcheck():
    from units import tpru_ext

    previous = tpru_ext.set_enabled(False)
    try:
        test_gradcheck_unit_and_aux_loss(False, "fused")
    finally:
        tpru_ext.set_enabled(previous)
