"""Padding and gradients, for every registered unit and the generic wrappers.

Right padding must be invisible: appending padding (with garbage inputs behind it) never
changes the outputs at real tokens nor the final state, and outputs at padding are zero. The
fused TPRU recurrence has a hand-written backward; `gradcheck` holds it to finite differences.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.func import functional_call

import units

BUILTINS = ["gru", "lstm", "tpgn", "tpr3", "tprn", "tpru", "tpru-mod1", "tpru-mod2", "tpru-mod3", "tpru-v1"]
TPRU_FAMILY = [n for n in BUILTINS if n.startswith("tpru")]
# Units whose options must fit D: tpr3's width is vec(F) = entity·relation·entity = 2·2·2 = D;
# tprn's is symbol dim × role_dim = 4 · 2 = D.
BASE_SPECS = {"tpr3": "tpr3[entity=2,relation=2]", "tprn": "tprn[symbols=3,roles=2,role_dim=2]"}
REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "tests.plugin_units:ElmanUnit"

D, DIN = 8, 5
SQUARE_D = 9  # units whose hidden size must be a perfect square (tpgn: d² with d = 3)
LENGTHS = [6, 3, 1, 0]  # includes an empty sequence


def _specs() -> list[str]:
    names = sorted(set(BUILTINS) | set(units.available()))
    specs = []
    for name in names:
        base = f"{name}[roles=4,slices=2]" if name.startswith("tpru") else BASE_SPECS.get(name, name)
        specs.append(base)
        for extra in ("bidirectional=true", "layers=2", "layers=2,bidirectional=true"):
            specs.append(base[:-1] + "," + extra + "]" if base.endswith("]") else f"{base}[{extra}]")
    specs += [
        "tpgn[impl=loop]",
        "tpgn[plan_size=3]",
        "tpru[roles=4,slices=1]",
        "tpru-v1[roles=3,slices=4,bidirectional=true]",
        "tpru[roles=4,slices=2,biases=code]",
        "tpru-mod1[roles=4,slices=4,biases=code]",
        "tpru[roles=3,biases=gate,layers=2]",
        PLUGIN,
        "tpr3[entity=2,relation=2,ops=w]",
        "tpr3[entity=2,relation=2,ops=wb,mlp_hidden=3]",
        "tprn[symbols=3,roles=2,role_dim=4,gated=true]",
        "tprn[symbols=3,roles=2,role_dim=2,gated=true,layers=2,bidirectional=true]",
        PLUGIN + "[nonlinearity=relu,bidirectional=true,layers=2]",
    ]
    return specs


SPECS = _specs()


@pytest.fixture(autouse=True)
def _repo_root_importable(monkeypatch):
    """`tests.plugin_units` must import however pytest was started (tests/ has no __init__.py)."""
    monkeypatch.syspath_prepend(str(REPO_ROOT))


def _mask(lengths, steps):
    return torch.arange(steps).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def _hidden(spec: str) -> int:
    return SQUARE_D if spec.startswith("tpgn") else D


def _build(spec: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return units.build(spec, DIN, _hidden(spec)).double().eval()


@pytest.mark.parametrize("spec", SPECS)
def test_padding_is_invisible(spec):
    module = _build(spec)
    gen = torch.Generator().manual_seed(1)
    T = max(LENGTHS)
    x = torch.randn(len(LENGTHS), T, DIN, generator=gen, dtype=torch.float64)
    mask = _mask(LENGTHS, T)
    x = torch.where(mask.unsqueeze(-1), x, torch.zeros_like(x))
    with torch.no_grad():
        out, state = module(x, mask)
        assert out.shape == (len(LENGTHS), T, module.output_size)
        assert state.shape == (len(LENGTHS), module.output_size)
        assert torch.all(out[~mask] == 0), "outputs at padding must be zero"
        assert torch.all(state[3] == 0) and torch.all(out[3] == 0), "an empty sequence has zero outputs and state"
        for extra in (1, 4):
            # garbage (large, non-zero) inputs behind the padding
            junk = torch.randn(len(LENGTHS), extra, DIN, generator=gen, dtype=torch.float64) * 50
            x_long = torch.cat([torch.where(mask.unsqueeze(-1), x, torch.full_like(x, 7.0)), junk], 1)
            mask_long = _mask(LENGTHS, T + extra)
            out_long, state_long = module(x_long, mask_long)
            torch.testing.assert_close(out_long[:, :T], out, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(state_long, state, rtol=1e-10, atol=1e-12)
            assert torch.all(out_long[~mask_long] == 0)
        # each sequence alone, unpadded, gives the same outputs and state as inside the batch
        for i, n in enumerate(LENGTHS):
            if n == 0:
                continue
            alone, alone_state = module(x[i : i + 1, :n], torch.ones(1, n, dtype=torch.bool))
            torch.testing.assert_close(alone[0], out[i, :n], rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(alone_state[0], state[i], rtol=1e-10, atol=1e-12)
        # the state is the output at the last real token (forward direction)
        d = _hidden(spec)
        for i, n in enumerate(LENGTHS):
            if n:
                torch.testing.assert_close(state[i, :d], out[i, n - 1, :d], rtol=0, atol=0)


@pytest.mark.parametrize("spec", SPECS)
def test_mask_none_equals_all_true(spec):
    module = _build(spec)
    x = torch.randn(2, 4, DIN, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a = module(x, None)
        b = module(x, torch.ones(2, 4, dtype=torch.bool))
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("spec", SPECS)
def test_bad_masks_raise_value_error(spec):
    module = _build(spec)
    x = torch.randn(2, 4, DIN, dtype=torch.float64)
    holes = torch.tensor([[True, False, True, False], [True, True, True, True]])
    with pytest.raises(ValueError, match="right-padded"):
        module(x, holes)
    left = torch.tensor([[False, False, True, True], [True, True, True, True]])
    with pytest.raises(ValueError, match="right-padded"):
        module(x, left)
    with pytest.raises(ValueError, match="shape"):
        module(x, torch.ones(2, 3, dtype=torch.bool))


def test_every_builtin_is_covered():
    covered = {s.split("[")[0] for s in SPECS}
    assert set(BUILTINS) <= covered
    assert set(units.available()) <= covered


# --------------------------------------------------------------------------------------------
# Gradients of the fused TPRU recurrence
# --------------------------------------------------------------------------------------------
def _gradcheck_unit(name: str, slices: int, impl: str = "fused", biases: str = "none"):
    torch.manual_seed(11)
    unit = units.lookup(name)(3, 4, roles=3, slices=slices, impl=impl, biases=biases).double()
    gen = torch.Generator().manual_seed(12)
    with torch.no_grad():
        for _pname, p in unit.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * (0.7 if p.dim() == 2 else 0.3) + (0.3 if p.dim() == 0 else 0.0))
    return unit


@pytest.mark.parametrize("biases", ["none", "gate", "code"])
@pytest.mark.parametrize("slices", [1, 2, 4])
@pytest.mark.parametrize("name", TPRU_FAMILY)
def test_fused_gradcheck(name, slices, biases):
    """slices=4 with d=4, N=3 takes the unfolded path (kN > d + N), 1 and 2 the folded one."""
    unit = _gradcheck_unit(name, slices, biases=biases)
    names = [n for n, _ in unit.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in unit.named_parameters())
    gen = torch.Generator().manual_seed(13)
    lengths = [3, 2]
    x = torch.randn(2, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = _mask(lengths, 3)

    def f(x, *ps):
        out, state = functional_call(unit, dict(zip(names, ps)), (x, mask))
        return out, state

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("biases", ["none", "code"])
@pytest.mark.parametrize("slices", [1, 4])
@pytest.mark.parametrize("name", TPRU_FAMILY)
def test_fused_and_loop_gradients_agree(name, slices, biases):
    """Larger than gradcheck can afford: the fused backward equals autograd through the loop
    (slices=4: unfolded path, kN > d + N; slices=1: folded)."""
    grads = {}
    gen = torch.Generator().manual_seed(14)
    x0 = torch.randn(3, 9, 6, generator=gen, dtype=torch.float64)
    mask = _mask([9, 5, 2], 9)
    upstream = torch.randn(3, 9, 16, generator=gen, dtype=torch.float64)
    for impl in ("fused", "loop"):
        torch.manual_seed(15)
        unit = units.lookup(name)(6, 16, roles=7, slices=slices, impl=impl, biases=biases).double()
        x = x0.clone().requires_grad_(True)
        out, state = unit(x, mask)
        ((out * upstream).sum() + state.pow(2).sum()).backward()
        grads[impl] = {"x": x.grad, **{n: p.grad for n, p in unit.named_parameters()}}
    assert grads["fused"].keys() == grads["loop"].keys()
    for key in grads["loop"]:
        torch.testing.assert_close(grads["fused"][key], grads["loop"][key], rtol=1e-9, atol=1e-11, msg=lambda m, key=key: f"{key}: {m}")


def test_gradients_where_the_normalisation_clamp_holds():
    """Σf̃ below the clamp (1e-7): f = f̃ / 1e-7 has no coupling term. The fused backward must
    agree with autograd through the loop (which differentiates clamp_min exactly) there too."""
    grads = {}
    gen = torch.Generator().manual_seed(16)
    x0 = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64) * 1e-3
    mask = _mask([5, 3], 5)
    upstream = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
    for impl in ("fused", "loop"):
        torch.manual_seed(16)
        unit = units.lookup("tpru")(3, 4, roles=3, slices=1, impl=impl).double()
        with torch.no_grad():
            for p in (unit.W_u, unit.V_b, unit.V_x):
                p.mul_(1e-3)  # tiny scores ...
            unit.c_b.fill_(5e-6)  # ... and tiny positive offsets: every ReLU open, Σf̃ ≈ 1e-10
            unit.c_x.fill_(5e-6)
            unit.W_r.mul_(300.0)  # large binding roles so the outputs (and their gradients) are O(1)
        x = x0.clone().requires_grad_(True)
        with torch.no_grad():
            f = unit.fillers(x, mask)[mask]
            assert (f.sum(-1) < 0.05).all(), "the clamp must hold for this test to mean anything"
            assert unit(x, mask)[0].abs().max() > 0.1
        out, state = unit(x, mask)
        ((out * upstream).sum() + state.pow(2).sum()).backward()
        grads[impl] = {"x": x.grad, **{n: p.grad for n, p in unit.named_parameters()}}
    for key in grads["loop"]:
        torch.testing.assert_close(grads["fused"][key], grads["loop"][key], rtol=1e-9, atol=0, msg=lambda m, key=key: f"{key}: {m}")


# --------------------------------------------------------------------------------------------
# forward_carry (language modelling's truncated BPTT)
# --------------------------------------------------------------------------------------------
CARRY_SPECS = [
    "gru",
    "lstm",
    "gru[layers=2]",
    "tpru[roles=4,slices=2]",
    "tpru[roles=3,biases=code,layers=2]",
    "tpru-v1[roles=3,slices=4]",
    "tpru-mod1[roles=4,biases=code]",
]


@pytest.mark.parametrize("spec", CARRY_SPECS)
def test_windows_with_carry_equal_the_whole_sequence(spec):
    """Two windows, the second starting from the first's carry, give the whole sequence's outputs;
    for TPRU the fused and the loop path agree with a non-zero carry too."""
    module = _build(spec)
    x = torch.randn(3, 7, DIN, generator=torch.Generator().manual_seed(20), dtype=torch.float64)
    with torch.no_grad():
        whole, _ = module.forward_carry(x)
        first, carry = module.forward_carry(x[:, :3])
        second, _ = module.forward_carry(x[:, 3:], carry)
        torch.testing.assert_close(torch.cat([first, second], 1), whole, rtol=1e-10, atol=1e-12)
        full, _ = module(x)  # and forward() on unpadded input is the same computation
        torch.testing.assert_close(full, whole, rtol=1e-10, atol=1e-12)
    if spec.startswith("tpru") and "layers" not in spec:
        module.impl = "loop"
        with torch.no_grad():
            loop_second, _ = module.forward_carry(x[:, 3:], carry)
        torch.testing.assert_close(loop_second, second, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["tpru", "tpru-v1", "tpru-mod2"])
def test_fused_gradcheck_through_the_carry(name):
    """The fused backward's gradient with respect to b_0 (the carry) against finite differences."""
    unit = _gradcheck_unit(name, 1, biases="code")
    x = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(21), dtype=torch.float64, requires_grad=True)
    b0 = torch.randn(2, 4, generator=torch.Generator().manual_seed(22), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b0: unit.forward_carry(x, b0)[0], (x, b0), eps=1e-6, atol=1e-7, rtol=1e-5)
