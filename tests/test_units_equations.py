"""The TPRU family against its papers' equations (Tang, Smolensky & de Sa: the NeurIPS-2018 workshop paper and the
ICLR-2020 submission), transcribed here independently.

`transcribe` below is a literal float64, one-sequence-at-a-time, one-step-at-a-time reading of
the equations. It uses only the module's *parameters* (and the buffer E); it never calls the
module's helpers (role_matrices, recurrent_matrix, input_projections, _loop), so a mistake in
those helpers cannot hide itself. Variant properties (V_b or identity, shared W_r, ReLU² or
softmax, tanh candidate) come from the table VARIANTS, written from the two papers, and the module's
structure is checked against the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import units
from units import tpru as tpru_module

D, DIN, ROLES = 16, 6, 5
LENGTHS = [7, 4, 1]  # a padded batch: T = 7, two sequences padded
EPS = 1e-7  # the normalisation's clamp, as the authors' code


@dataclass(frozen=True)
class Variant:
    has_vb: bool  # False: V_b = I
    shared: bool  # True: W_r = W_u
    norm: str  # "relu2" or "softmax"
    tanh: bool  # candidate passed through tanh (tpru-v1)
    square: int  # number of d×d matrices in the papers' formula


VARIANTS = {
    "tpru": Variant(has_vb=True, shared=False, norm="relu2", tanh=False, square=4),
    "tpru-v1": Variant(has_vb=False, shared=False, norm="relu2", tanh=True, square=3),
    "tpru-mod1": Variant(has_vb=False, shared=True, norm="softmax", tanh=False, square=2),
    "tpru-mod2": Variant(has_vb=True, shared=True, norm="softmax", tanh=False, square=3),
    "tpru-mod3": Variant(has_vb=True, shared=False, norm="softmax", tanh=False, square=4),
}


# --------------------------------------------------------------------------------------------
# The transcription
# --------------------------------------------------------------------------------------------
def transcribe(unit, variant: Variant, x: torch.Tensor, lengths: list[int], biases: str = "none"):
    """Outputs [B,T,d], final state [B,d], fillers [B,T,k,N] (zero at padding), f̃ sums [B,T,k].

    `biases`: "none" = the equations; "gate" = + b_g in the gate; "code" = the authors' code's
    nn.Linear biases: u_n = W_u e_n + b_u, r_n = W_r e_n + b_r, V_b b + b_Vb, V_x x + b_Vx,
    g = σ(W_b b + b_Wb + W_x x + b_Wx)."""
    P = {name: p.detach().double() for name, p in unit.named_parameters()}
    E = unit.E.detach().double()
    x = x.double()
    d, N, k = E.shape[0], E.shape[1], unit.slices
    s = d // k
    zero = torch.zeros(d, dtype=torch.float64)
    code = biases == "code"
    code_names = {"b_u", "b_Wb", "b_Wx", "b_Vx"} | (set() if variant.shared else {"b_r"}) | ({"b_Vb"} if variant.has_vb else set())
    expected_names = {"none": set(), "gate": {"gate_bias"}, "code": code_names}[biases]
    assert {n for n in P if n.startswith("b_") or n == "gate_bias"} == expected_names
    W_u, W_b, W_x, V_x = P["W_u"], P["W_b"], P["W_x"], P["V_x"]
    W_r = W_u if variant.shared else P["W_r"]
    V_b = P["V_b"] if variant.has_vb else torch.eye(d, dtype=torch.float64)
    c_b, c_x = P["c_b"], P["c_x"]
    b_u = P["b_u"] if code else zero
    b_r = (b_u if variant.shared else P["b_r"]) if code else zero
    b_Vb = P["b_Vb"] if code and variant.has_vb else zero
    b_Vx = P["b_Vx"] if code else zero
    gate_b = P["gate_bias"] if biases == "gate" else (P["b_Wb"] + P["b_Wx"] if code else zero)
    U = torch.stack([W_u @ E[:, n] + b_u for n in range(N)], 1)  # unbinding role vectors u_n, d × N
    R = torch.stack([W_r @ E[:, n] + b_r for n in range(N)], 1)  # binding role vectors r_n, d × N
    bias = gate_b

    B, T = x.shape[0], x.shape[1]
    outputs = torch.zeros(B, T, d, dtype=torch.float64)
    fillers = torch.zeros(B, T, k, N, dtype=torch.float64)
    sums = torch.zeros(B, T, k, dtype=torch.float64)
    state = torch.zeros(B, d, dtype=torch.float64)
    for i in range(B):
        b = torch.zeros(d, dtype=torch.float64)  # b_0 = 0
        for t in range(lengths[i]):
            x_t = x[i, t]
            g = torch.sigmoid(W_b @ b + W_x @ x_t + bias)  # g_t = σ(W_b b_{t-1} + W_x x_t)
            zb, zx = V_b @ b + b_Vb, V_x @ x_t + b_Vx
            f = torch.zeros(k, N, dtype=torch.float64)
            for j in range(k):  # slice j = rows j·s … (j+1)·s − 1
                rows = slice(j * s, (j + 1) * s)
                for n in range(N):
                    f_b = torch.dot(U[rows, n], zb[rows])  # (Uᵀ V_b b_{t-1}) per slice
                    f_x = torch.dot(U[rows, n], zx[rows])  # (Uᵀ V_x x_t) per slice
                    if variant.norm == "relu2":
                        f[j, n] = (torch.relu(f_b + c_b) + torch.relu(f_x + c_x)) ** 2  # f̃
                    else:
                        f[j, n] = f_b + c_b + f_x + c_x  # softmax logits
                if variant.norm == "relu2":
                    total = f[j].sum()
                    sums[i, t, j] = total
                    f[j] = f[j] / torch.clamp(total, min=EPS)  # f = f̃ / Σ_n f̃_n
                else:
                    f[j] = torch.exp(f[j] - f[j].max()) / torch.exp(f[j] - f[j].max()).sum()
                    sums[i, t, j] = 1.0
            cand = torch.zeros(d, dtype=torch.float64)
            for j in range(k):
                rows = slice(j * s, (j + 1) * s)
                for n in range(N):
                    cand[rows] += R[rows, n] * f[j, n]  # b̃_t = R f_t, slice-wise
            if variant.tanh:
                cand = torch.tanh(cand)
            b = g * cand + (1 - g) * b  # b_t = g ∘ b̃ + (1 − g) ∘ b_{t-1}
            outputs[i, t] = b
            fillers[i, t] = f
        state[i] = b
    return outputs, state, fillers, sums


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def make_unit(name: str, slices: int, impl: str = "fused", seed: int = 0, d: int = D, din: int = DIN, roles: int = ROLES, biases: str = "none"):
    torch.manual_seed(seed)
    # impl is passed to the class, not through the spec: see test_units_registry.py::test_impl_option_parses
    unit = units.lookup(name)(din, d, roles=roles, slices=slices, impl=impl, biases=biases).double()
    randomise(unit, seed)
    return unit


def randomise(unit, seed: int) -> None:
    """Parameters off their initial values (gate bias, c_b, c_x included) so every term matters."""
    gen = torch.Generator().manual_seed(1000 + seed)
    with torch.no_grad():
        for _name, p in sorted(unit.named_parameters()):
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.6)
            elif p.dim() == 1:  # gate_bias and the code's biases
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
            else:  # c_b, c_x: small, so some ReLU² terms are cut off and some are not
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3 + 0.1)


def batch(seed: int = 0, lengths=LENGTHS, din: int = DIN):
    gen = torch.Generator().manual_seed(seed)
    T = max(lengths)
    x = torch.randn(len(lengths), T, din, generator=gen, dtype=torch.float64)
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    x = x * 1.5
    return x, mask


def assert_close(actual, expected, what: str):
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-11, msg=lambda m: f"{what}: {m}")


# --------------------------------------------------------------------------------------------
# 1. Outputs, state and fillers equal the transcription
# --------------------------------------------------------------------------------------------
BIASES = ["none", "gate", "code"]


@pytest.mark.parametrize("biases", BIASES)
@pytest.mark.parametrize("impl", ["fused", "loop"])
@pytest.mark.parametrize("slices", [1, 2, 8])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_matches_transcription(name, slices, impl, biases):
    variant = VARIANTS[name]
    unit = make_unit(name, slices, impl, seed=slices, biases=biases)
    x, mask = batch(seed=slices)
    expected_out, expected_state, expected_f, _ = transcribe(unit, variant, x, LENGTHS, biases)
    with torch.no_grad():
        out, state = unit(x, mask)
    assert out.shape == (len(LENGTHS), max(LENGTHS), D) and state.shape == (len(LENGTHS), D)
    what = f"{name} slices={slices} impl={impl} biases={biases}"
    assert_close(out, expected_out, f"{what} outputs")
    assert_close(state, expected_state, f"{what} final state")
    # the expected outputs are zero at padding, so the comparison above covers it; be explicit:
    assert torch.all(out[~mask] == 0)


@pytest.mark.parametrize("biases", BIASES)
@pytest.mark.parametrize("impl", ["fused", "loop"])
@pytest.mark.parametrize("slices", [1, 2, 8])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_fillers_match_transcription_and_sum_to_one(name, slices, impl, biases):
    variant = VARIANTS[name]
    unit = make_unit(name, slices, impl, seed=10 + slices, biases=biases)
    x, mask = batch(seed=10 + slices)
    expected_out, expected_state, expected_f, sums = transcribe(unit, variant, x, LENGTHS, biases)
    with torch.no_grad():
        out, state, fillers = unit(x, mask, return_fillers=True)
    assert fillers.shape == (len(LENGTHS), max(LENGTHS), slices, ROLES)
    assert_close(out, expected_out, "outputs with return_fillers=True")
    assert_close(state, expected_state, "state with return_fillers=True")
    assert_close(fillers[mask], expected_f[mask], f"{name} slices={slices} fillers at real tokens")
    real = fillers[mask]  # [tokens, k, N]
    assert torch.all(real >= 0)
    live = sums[mask] > 0  # ReLU² leaves a slice all-zero only if every f̃_n is cut off
    assert live.float().mean() > 0.9, "the random draw should exercise the ordinary case"
    torch.testing.assert_close(real.sum(-1)[live], torch.ones_like(real.sum(-1)[live]), rtol=0, atol=1e-12)
    assert torch.all(real.sum(-1)[~live] == 0)
    # the `fillers` convenience method gives the same thing
    with torch.no_grad():
        assert_close(unit.fillers(x, mask)[mask], expected_f[mask], "unit.fillers()")


@pytest.mark.parametrize("name", ["tpru", "tpru-v1"])
@pytest.mark.parametrize("impl", ["fused", "loop"])
def test_relu2_all_cut_off_gives_zero_fillers_not_nan(name, impl):
    """f = f̃ / max(Σ f̃, 1e-12): when every ReLU is cut off the fillers are 0, b̃ = 0, no NaN."""
    unit = make_unit(name, 2, impl, seed=3)
    with torch.no_grad():
        unit.c_b.fill_(-1e3)
        unit.c_x.fill_(-1e3)
    x, mask = batch(seed=3)
    expected_out, expected_state, expected_f, sums = transcribe(unit, VARIANTS[name], x, LENGTHS)
    assert torch.all(sums == 0)
    with torch.no_grad():
        out, state, fillers = unit(x, mask, return_fillers=True)
        out_plain, state_plain = unit(x, mask)
    for tensor in (out, state, fillers, out_plain, state_plain):
        assert torch.isfinite(tensor).all()
    assert torch.all(fillers[mask] == 0)
    assert_close(out_plain, expected_out, "outputs with all fillers cut off")
    assert_close(state_plain, expected_state, "state with all fillers cut off")
    assert torch.all(out_plain == 0)  # b̃ = 0 and b_0 = 0 → b_t = (1 − g) b_{t-1} = 0 (tanh(0) = 0 too)


def test_float32_close_to_transcription():
    """The default dtype path (float32) agrees with the float64 transcription to float32 accuracy."""
    torch.manual_seed(0)
    unit = units.build(f"tpru[roles={ROLES},slices=2]", DIN, D)
    randomise(unit, 0)
    x, mask = batch(seed=0)
    expected_out, expected_state, _, _ = transcribe(unit, VARIANTS["tpru"], x, LENGTHS)
    with torch.no_grad():
        out, state = unit(x.float(), mask)
    torch.testing.assert_close(out.double(), expected_out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(state.double(), expected_state, rtol=1e-4, atol=1e-5)


def test_mask_none_means_every_token_is_real():
    unit = make_unit("tpru", 2, seed=4)
    x, _ = batch(seed=4, lengths=[5, 5])
    expected_out, expected_state, _, _ = transcribe(unit, VARIANTS["tpru"], x, [5, 5])
    with torch.no_grad():
        out, state = unit(x)
    assert_close(out, expected_out, "outputs with mask=None")
    assert_close(state, expected_state, "state with mask=None")


# --------------------------------------------------------------------------------------------
# 2. Parameter counts
# --------------------------------------------------------------------------------------------
SIZES = [(8, 8), (16, 5), (32, 300), (64, 17)]  # (d, d')


def bias_count(variant: Variant, biases: str, d: int) -> int:
    """Bias entries per unit: none; one gate bias; or the authors' code's: b_u, [b_r], b_Wb, [b_Vb], b_Wx, b_Vx."""
    if biases == "code":
        return (4 + (not variant.shared) + variant.has_vb) * d
    return d if biases == "gate" else 0


@pytest.mark.parametrize("biases", BIASES)
@pytest.mark.parametrize("d, din", SIZES)
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_tpru_param_counts(name, d, din, biases):
    counts = units.param_counts(f"{name}[roles=7,biases={biases}]", din, d)
    assert counts.formula == VARIANTS[name].square * d * d + 2 * d * din  # the papers' count: weights only
    assert counts.total == counts.formula + bias_count(VARIANTS[name], biases, d) + 2  # + biases + c_b, c_x
    # total counts every trainable parameter of what build() returns; E is not among them
    unit = units.build(f"{name}[roles=7,biases={biases}]", din, d)
    assert counts.total == sum(p.numel() for p in unit.parameters())


def test_code_biases_count_equals_the_authors_layers():
    """tpru[biases=code] has exactly the parameters of the authors' TPRU cell: v2ru = Linear(d, 2d),
    h2fg = Linear(d, 2d), x2fg = Linear(d', 2d), bias_h, bias_x (models/TPRU.py)."""
    d, din = 64, 300
    authors = sum(p.numel() for p in (torch.nn.Linear(d, 2 * d), torch.nn.Linear(d, 2 * d), torch.nn.Linear(din, 2 * d)) for p in p.parameters()) + 2
    assert units.param_counts("tpru[biases=code]", din, d).total == authors


def test_tpru_formula_does_not_depend_on_roles_or_slices():
    a = units.param_counts("tpru[roles=4,slices=1]", 10, 16)
    b = units.param_counts("tpru[roles=64,slices=8]", 10, 16)
    assert a == b


@pytest.mark.parametrize("d, din", SIZES)
@pytest.mark.parametrize("name, gates, torch_class", [("lstm", 4, torch.nn.LSTM), ("gru", 3, torch.nn.GRU)])
def test_torch_rnn_param_counts(name, gates, torch_class, d, din):
    counts = units.param_counts(name, din, d)
    assert counts.formula == gates * d * d + gates * d * din  # LSTM 4d² + 4dd', GRU 3d² + 3dd'
    reference = torch_class(din, d)
    assert counts.total == sum(p.numel() for p in reference.parameters())
    assert counts.total == counts.formula + 2 * gates * d  # torch has two bias vectors per gate


@pytest.mark.parametrize("layers, bidirectional", [(1, True), (2, False), (3, True)])
@pytest.mark.parametrize("name, torch_class", [("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)])
def test_torch_rnn_counts_with_wrappers_equal_torch(name, torch_class, layers, bidirectional):
    d, din = 12, 7
    spec = f"{name}[layers={layers},bidirectional={str(bidirectional).lower()}]"
    counts = units.param_counts(spec, din, d)
    reference = torch_class(din, d, num_layers=layers, bidirectional=bidirectional)
    assert counts.total == sum(p.numel() for p in reference.parameters())
    gates = 4 if name == "lstm" else 3
    dirs = 2 if bidirectional else 1
    layer_inputs = [din] + [dirs * d] * (layers - 1)
    assert counts.formula == sum(dirs * gates * (d * d + d * i) for i in layer_inputs)


@pytest.mark.parametrize("layers, bidirectional", [(1, True), (2, False), (2, True)])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_tpru_counts_with_wrappers(name, layers, bidirectional):
    d, din = 16, 5
    spec = f"{name}[roles=6,layers={layers},bidirectional={str(bidirectional).lower()}]"
    counts = units.param_counts(spec, din, d)
    dirs = 2 if bidirectional else 1
    layer_inputs = [din] + [dirs * d] * (layers - 1)
    square = VARIANTS[name].square
    assert counts.formula == sum(dirs * (square * d * d + 2 * d * i) for i in layer_inputs)
    assert counts.total == counts.formula + layers * dirs * 2  # default biases="none": only c_b, c_x


# --------------------------------------------------------------------------------------------
# 3. Structure of the variants
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_parameter_set_matches_variant(name):
    v = VARIANTS[name]
    unit = units.build(f"{name}[roles=5,biases=gate]", DIN, D)
    expected = {"W_u", "W_b", "W_x", "V_x", "gate_bias", "c_b", "c_x"}
    if not v.shared:
        expected.add("W_r")
    if v.has_vb:
        expected.add("V_b")
    assert {n for n, _ in unit.named_parameters()} == expected
    assert (unit.W_r is None) == v.shared
    assert (unit.V_b is None) == (not v.has_vb)
    shapes = {n: tuple(p.shape) for n, p in unit.named_parameters()}
    for square in expected & {"W_u", "W_r", "W_b", "V_b"}:
        assert shapes[square] == (D, D)
    assert shapes["W_x"] == shapes["V_x"] == (D, DIN)
    assert shapes["gate_bias"] == (D,) and shapes["c_b"] == shapes["c_x"] == ()


@pytest.mark.parametrize("name", ["tpru-mod1", "tpru-mod2"])
def test_shared_binding_really_shares(name):
    unit = make_unit(name, 1, seed=5)
    assert unit.W_r is None
    U, R = unit.role_matrices()
    assert torch.equal(U, R)
    # and the binding really follows W_u: perturbing W_u changes the outputs through R as well
    x, mask = batch(seed=5)
    before = transcribe(unit, VARIANTS[name], x, LENGTHS)[0]
    with torch.no_grad():
        unit.W_u.mul_(1.5)
        out, _ = unit(x, mask)
    assert_close(out, transcribe(unit, VARIANTS[name], x, LENGTHS)[0], "after changing W_u")
    assert not torch.allclose(out, before)


def test_mod1_has_identity_vb_and_mod2_has_vb():
    assert units.build("tpru-mod1[roles=3]", 4, 8).V_b is None
    mod2 = units.build("tpru-mod2[roles=3]", 4, 8)
    assert isinstance(mod2.V_b, torch.nn.Parameter) and mod2.V_b.shape == (8, 8)


@pytest.mark.parametrize("impl", ["fused", "loop"])
def test_mod3_differs_from_tpru_only_in_normalisation(impl):
    tpru = make_unit("tpru", 2, impl, seed=6)
    mod3 = units.lookup("tpru-mod3")(DIN, D, roles=ROLES, slices=2, impl=impl).double()
    # same parameter set and the same weights (E included: it is in the state dict)
    assert tpru.state_dict().keys() == mod3.state_dict().keys()
    mod3.load_state_dict(tpru.state_dict(), strict=True)
    x, mask = batch(seed=6)
    with torch.no_grad():
        out_tpru, _ = tpru(x, mask)
        out_mod3, state_mod3 = mod3(x, mask)
    assert not torch.allclose(out_tpru, out_mod3, atol=1e-6)
    softmax_tpru = Variant(has_vb=True, shared=False, norm="softmax", tanh=False, square=4)
    expected_out, expected_state, _, _ = transcribe(mod3, softmax_tpru, x, LENGTHS)
    assert_close(out_mod3, expected_out, "Mod III with tpru's weights")
    assert_close(state_mod3, expected_state, "Mod III state with tpru's weights")
    # and tpru itself with those weights is the ReLU² transcription
    assert_close(out_tpru, transcribe(tpru, VARIANTS["tpru"], x, LENGTHS)[0], "tpru")


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_role_basis_is_a_saved_buffer_not_a_parameter(name):
    unit = units.build(f"{name}[roles=5]", DIN, D)
    assert "E" not in dict(unit.named_parameters())
    assert "E" in dict(unit.named_buffers())
    assert not unit.E.requires_grad
    assert unit.E.shape == (D, 5)
    assert "E" in unit.state_dict()
    other = units.build(f"{name}[roles=5]", DIN, D)
    assert not torch.equal(other.E, unit.E)  # a fresh random basis ...
    other.load_state_dict(unit.state_dict())
    assert torch.equal(other.E, unit.E)  # ... that a checkpoint restores


def test_role_basis_not_trained():
    unit = make_unit("tpru", 1, seed=7)
    E_before = unit.E.clone()
    opt = torch.optim.SGD(unit.parameters(), lr=0.1)
    x, mask = batch(seed=7)
    out, state = unit(x, mask)
    (out.sum() + state.sum()).backward()
    opt.step()
    assert torch.equal(unit.E, E_before)
    assert all(p.grad is not None for p in unit.parameters())


def test_basis_seed_fixes_the_basis():
    a = units.build("tpru[roles=5,basis_seed=3]", DIN, D)
    b = units.build("tpru[roles=5,basis_seed=3]", DIN, D)
    c = units.build("tpru[roles=5,basis_seed=4]", DIN, D)
    assert torch.equal(a.E, b.E) and not torch.equal(a.E, c.E)


def test_normalise_fillers_is_relu2_or_softmax():
    """The module-level normaliser on its own, against the definitions (it is public API)."""
    gen = torch.Generator().manual_seed(8)
    fb, fx = torch.randn(4, 3, 6, generator=gen, dtype=torch.float64), torch.randn(4, 3, 6, generator=gen, dtype=torch.float64)
    c_b, c_x = torch.tensor(0.2, dtype=torch.float64), torch.tensor(-0.1, dtype=torch.float64)
    a = (torch.clamp(fb + c_b, min=0) + torch.clamp(fx + c_x, min=0)) ** 2
    expected = a / torch.clamp(a.sum(-1, keepdim=True), min=EPS)
    assert_close(tpru_module.normalise_fillers(fb, fx, c_b, c_x, "relu2"), expected, "relu2")
    logits = fb + fx + c_b + c_x
    expected = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    assert_close(tpru_module.normalise_fillers(fb, fx, c_b, c_x, "softmax"), expected, "softmax")


# --------------------------------------------------------------------------------------------
# 4. Scale of the basis and the init (docs/science-tpru.md, "TPRU: defaults and their sources")
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_role_basis_is_standard_normal(name):
    """E ~ N(0, 1) (workshop §3.3; the authors' torch.randn(n_roles, d_hidden)), not N(0, 1/d):
    at d = 256 its std is within 10% of 1 (65,536 draws: the sampling error is ~0.3%)."""
    torch.manual_seed(0)
    E = units.build(f"{name}[roles=256]", 32, 256).E
    assert abs(E.std().item() - 1) < 0.1
    assert abs(E.mean().item()) < 0.05


@pytest.mark.parametrize("biases", BIASES)
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_init_is_nn_linear_default(name, biases):
    """Every weight and bias U(−1/√fan_in, 1/√fan_in) (nn.Linear's default, as the authors' code):
    fan_in = d for W_u, W_r, W_b, V_b (and b_u, b_r, b_Wb, b_Vb), d' for W_x, V_x (b_Wx, b_Vx);
    c_b = c_x = 1; the single gate bias of biases=gate starts at 0."""
    d, din = 256, 48
    torch.manual_seed(1)
    unit = units.build(f"{name}[roles=8,biases={biases}]", din, d)
    fan_in = {"W_u": d, "W_r": d, "W_b": d, "V_b": d, "b_u": d, "b_r": d, "b_Wb": d, "b_Vb": d, "W_x": din, "V_x": din, "b_Wx": din, "b_Vx": din}
    for pname, p in unit.named_parameters():
        if pname in ("c_b", "c_x"):
            assert p.item() == 1.0
        elif pname == "gate_bias":
            assert torch.all(p == 0)
        else:
            bound = 1 / fan_in[pname] ** 0.5
            assert p.abs().max() <= bound, pname
            assert abs(p.std().item() / (bound / 3**0.5) - 1) < 0.1, pname  # uniform: std = bound/√3
