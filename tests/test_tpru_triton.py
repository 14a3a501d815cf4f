"""The Triton kernels of the TPRU recurrence (units/tpru_triton.py) against the autograd Function.

On CPU tensors the kernels run in Triton's interpreter (`tpru_triton.kernels(interpret=True)`
loads its own interpreted copy of the kernel module, so TRITON_INTERPRET is never set for other
tests); on CUDA, when present, the compiled kernels run too. float64 throughout on CPU: the
interpreter computes in numpy, so the kernels must equal `TPRURecurrence` to rounding.
Every variant (ReLU² / softmax, tanh candidate, V_b or identity), both kernels (resident: one
slice, weights in registers; tiled: any slices, folded or unfolded scores, several tiles of
each size), padded batches with variable lengths, gradcheck. Shapes are tiny: the interpreter
runs each tl op in Python.
"""

from __future__ import annotations

import logging
import os

import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed (pip install 'tprbench[gpu]'); the kernel tests need it")

import units  # noqa: E402
from units import tpru_triton  # noqa: E402
from units.tpru_fused import TPRURecurrence  # noqa: E402
from units.tpru_triton import TPRUTritonRecurrence, TritonConfig  # noqa: E402

pytestmark = pytest.mark.triton

VARIANTS = ["tpru", "tpru-v1", "tpru-mod1", "tpru-mod2", "tpru-mod3"]
D, DIN, ROLES = 16, 5, 8  # slices=1: resident kernel; 2: folded tiled (kN <= d+N); 4: unfolded tiled (kN > d+N)
LENGTHS = [3, 2, 1]
SMALL_TILES = TritonConfig(block_k=16, block_s=16, block_n=16, force_tiled=True)


def make_unit(name: str, slices: int, impl: str, biases: str, seed: int = 0, d: int = D):
    torch.manual_seed(seed)
    unit = units.lookup(name)(DIN, d, roles=ROLES, slices=slices, impl=impl, biases=biases).double()
    gen = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():
        for _, p in sorted(unit.named_parameters()):
            scale = 0.6 if p.dim() == 2 else 0.5 if p.dim() == 1 else 0.3
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale + (0.1 if p.dim() == 0 else 0))
    return unit


def padded_batch(seed: int = 0, lengths=LENGTHS):
    gen = torch.Generator().manual_seed(seed)
    T = max(lengths)
    x = torch.randn(len(lengths), T, DIN, generator=gen, dtype=torch.float64) * 1.5
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return x, mask


def run_unit(unit, x, mask):
    """Outputs, state and every gradient (x and parameters) of one forward+backward."""
    x = x.clone().requires_grad_()
    outputs, state = unit(x, mask)
    gen = torch.Generator().manual_seed(7)
    # drawn in float64 whatever the unit's dtype: randn draws different numbers per dtype, and a
    # float32 run must get the same upstream gradient as its float64 reference
    weights = torch.randn(outputs.shape, generator=gen, dtype=torch.float64).to(outputs.device, outputs.dtype)
    ((outputs * weights).sum() + state.pow(2).sum()).backward()
    grads = {"x": x.grad, **{n: p.grad for n, p in unit.named_parameters()}}
    return outputs.detach(), state.detach(), grads


def assert_same(got, expected, what: str, rtol=1e-10, atol=1e-12):
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def compare_units(name, slices, biases, x, mask, device="cpu", dtype=torch.float64, rtol=1e-10, atol=1e-12, atol_per_scale=False):
    """The kernels in `dtype` on `device` against the CPU loop (`TPRURecurrence`) in the same dtype.
    `atol_per_scale`: atol is relative to each expected tensor's largest entry (float32 rounding
    accumulated over the recurrence grows with the gradient's scale, not each element's)."""
    reference = make_unit(name, slices, "fused", biases)
    kernel = make_unit(name, slices, "triton", biases)
    kernel.load_state_dict(reference.state_dict())
    expected = run_unit(reference.to(dtype), x.to(dtype), mask)
    expected = (expected[0].double(), expected[1].double(), {k: v.double() for k, v in expected[2].items()})
    got = run_unit(kernel.to(device, dtype), x.to(device, dtype), mask.to(device))
    what = f"{name} slices={slices} biases={biases} on {device}"
    assert_same(got[0].cpu().double(), expected[0], f"{what}: outputs", rtol, atol)
    assert_same(got[1].cpu().double(), expected[1], f"{what}: state", rtol, atol)
    assert set(got[2]) == set(expected[2])
    for key in expected[2]:
        assert got[2][key] is not None, f"{what}: no gradient for {key}"
        scale = max(1.0, float(expected[2][key].abs().max())) if atol_per_scale else 1.0
        assert_same(got[2][key].cpu().double(), expected[2][key], f"{what}: ∂{key}", rtol, atol * scale)


# --------------------------------------------------------------------------------------------
# 1. Every variant, through the unit, on a padded batch: equal to the autograd Function
# --------------------------------------------------------------------------------------------
CASES = [(name, slices) for name in VARIANTS for slices in (1, 2, 4)]


@pytest.mark.parametrize("name,slices", CASES)
def test_unit_equals_autograd_function(name, slices):
    biases = ["none", "gate", "code"][(VARIANTS.index(name) + slices) % 3]  # every (slices, biases) pair occurs
    x, mask = padded_batch(seed=slices)
    compare_units(name, slices, biases, x, mask)


def test_cases_cover_both_kernels_and_all_score_layouts():
    """The unit cases above exercise the resident kernel, folded tiled, and unfolded tiled (with
    V_b and with V_b = I): checked here so a change of thresholds cannot silently drop one."""
    seen = set()
    for name, slices in CASES:
        unit = units.lookup(name)(DIN, D, roles=ROLES, slices=slices)
        folded = units.tpru.fold_is_cheaper(D, ROLES, slices)
        rows = D + slices * ROLES if folded else (2 * D if unit.V_b is not None else D)
        layout = tpru_triton.Layout(D, ROLES, slices, rows, folded, unit.norm == "relu2", unit.tanh_candidate, "ieee", tpru_triton.DEFAULT_CONFIG)
        seen.add((layout.resident, folded, rows))
    assert seen == {(True, True, D + ROLES), (False, True, D + 2 * ROLES), (False, False, 2 * D), (False, False, D)}


# --------------------------------------------------------------------------------------------
# 2. The Function itself: several tiles of every size, two programs, both kernels
# --------------------------------------------------------------------------------------------
def function_inputs(T, B, d, k, N, layout: str, seed: int = 0, dtype=torch.float64):
    """Inputs of TPRURecurrence; layout: folded | unfolded (W_rec = [W_b; V_b]) | identity (V_b = I)."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape, scale=1.0: torch.randn(*shape, generator=gen, dtype=dtype) * scale  # noqa: E731
    s = d // k
    rows = {"folded": d + k * N, "unfolded": 2 * d, "identity": d}[layout]
    U = None if layout == "folded" else rand(k, s, N, scale=0.5)
    tensors = [
        rand(T, B, d),
        rand(T, B, k, N),
        rand(rows, d, scale=0.4),
        rand(k, s, N, scale=0.5),
        U,
        rand(k, N, scale=0.3),
        torch.tensor(0.2, dtype=dtype),
        rand(B, d, scale=0.3),
    ]
    return [t.requires_grad_() if t is not None else None for t in tensors]


def compare_functions(args, norm, tanh, config, rtol=1e-10, atol=1e-12):
    out = TPRUTritonRecurrence.apply(*args, norm, tanh, config)
    expected = TPRURecurrence.apply(*args, norm, tanh)
    assert_same(out, expected, "outputs")
    inputs = [a for a in args if a is not None]
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype)
    got = torch.autograd.grad(out, inputs, upstream)
    want = torch.autograd.grad(expected, inputs, upstream)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"gradient of input {i}", rtol, atol)


@pytest.mark.parametrize(
    "layout,norm,tanh",
    [
        ("folded", "relu2", False),
        ("folded", "softmax", True),
        ("unfolded", "softmax", False),
        ("unfolded", "relu2", True),
        ("identity", "relu2", True),
        ("identity", "softmax", False),
    ],
)
def test_tiled_kernel_with_many_tiles(layout, norm, tanh):
    """d = 32 in two K tiles, slices of 16 columns in one, 20 roles in two role tiles, B = 19 in
    two programs (the second one mostly padding)."""
    args = function_inputs(T=2, B=19, d=32, k=2, N=20, layout=layout, seed=len(layout))
    compare_functions(args, norm, tanh, SMALL_TILES)


@pytest.mark.parametrize("norm,tanh", [("relu2", False), ("softmax", True)])
def test_resident_kernel_two_programs(norm, tanh):
    args = function_inputs(T=3, B=19, d=16, k=1, N=5, layout="folded", seed=5)
    assert tpru_triton.Layout.of(args[2], args[3], None, norm == "relu2", tanh, tpru_triton.DEFAULT_CONFIG).resident
    compare_functions(args, norm, tanh, None)


@pytest.mark.parametrize("config", [None, SMALL_TILES], ids=["resident", "tiled"])
def test_relu2_all_cut_off_gives_zero_fillers_not_nan(config):
    """Σf̃ below the clamp (1e-7): f = 0 and b̃ = 0, with the exact backward below the clamp."""
    args = function_inputs(T=3, B=4, d=16, k=1, N=5, layout="folded", seed=9)
    with torch.no_grad():
        args[5].fill_(-50.0)  # c_b
        args[6].fill_(-50.0)  # c_x
    out = TPRUTritonRecurrence.apply(*args, "relu2", False, config)
    assert torch.isfinite(out).all()
    compare_functions(args, "relu2", False, config)


# --------------------------------------------------------------------------------------------
# 3. gradcheck (float64) of the Triton Function
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "layout,k,norm,tanh,config",
    [
        ("folded", 1, "relu2", True, None),
        ("folded", 2, "softmax", True, SMALL_TILES),
        ("unfolded", 2, "relu2", False, SMALL_TILES),
    ],
    ids=["resident-relu2-tanh", "tiled-folded-softmax-tanh", "tiled-unfolded-relu2"],
)
def test_gradcheck(layout, k, norm, tanh, config):
    """fast_mode: a random projection of the Jacobian per input, numerical against analytical
    (the unfolded case with V_b = I differs only in where ∂z goes, checked in section 2)."""
    args = function_inputs(T=2, B=2, d=8, k=k, N=3, layout=layout, seed=k)
    fn = lambda *a: TPRUTritonRecurrence.apply(*a, norm, tanh, config)  # noqa: E731
    assert torch.autograd.gradcheck(fn, tuple(args), fast_mode=True, eps=1e-6, atol=1e-7, check_undefined_grad=False)


# --------------------------------------------------------------------------------------------
# 4. Padding, selection, fallback notice, no leaked interpreter setting
# --------------------------------------------------------------------------------------------
def test_padding_never_reaches_real_tokens():
    unit = make_unit("tpru", 1, "triton", "code", seed=4)
    x, mask = padded_batch(seed=4)
    outputs, state = unit(x, mask)
    for i, length in enumerate(LENGTHS):
        alone, alone_state = unit(x[i : i + 1, :length], mask[i : i + 1, :length])
        assert_same(outputs[i, :length], alone[0], f"sequence {i}")
        assert_same(state[i], alone_state[0], f"state {i}")
        assert (outputs[i, length:] == 0).all()


def test_fused_on_cpu_keeps_the_autograd_function():
    args = function_inputs(T=2, B=2, d=8, k=1, N=3, layout="folded")
    assert tpru_triton.select_recurrence("fused", *args) is TPRURecurrence
    assert tpru_triton.select_recurrence("triton", *args) is TPRUTritonRecurrence


def test_unsupported_dtype_names_the_reason():
    args = [a.detach().to(torch.bfloat16) if a is not None else None for a in function_inputs(T=2, B=2, d=8, k=1, N=3, layout="folded")]
    assert "bfloat16" in tpru_triton.unsupported_reason(*args)
    with pytest.raises(RuntimeError, match="impl=triton cannot run this call: dtype torch.bfloat16"):
        tpru_triton.select_recurrence("triton", *args)


def test_fallback_notice_is_logged_once(caplog, monkeypatch):
    monkeypatch.setattr(tpru_triton, "_NOTICES", set())
    with caplog.at_level(logging.WARNING, logger="units.tpru_triton"):
        for _ in range(3):
            tpru_triton._notice_once("dtype torch.bfloat16 (the kernel runs float32 and float64)")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "TPRU on CUDA uses the autograd-Function path, not the Triton kernel: dtype torch.bfloat16 (the kernel runs float32 and float64)"
    ]


def test_impl_triton_without_triton_is_a_spec_error(monkeypatch):
    monkeypatch.setattr(tpru_triton, "triton", None)
    with pytest.raises(units.UnitSpecError, match=r"impl=triton needs Triton.*pip install 'tprbench\[gpu\]'"):
        units.resolve("tpru[impl=triton]", 16)


def test_interpreter_setting_does_not_leak():
    tpru_triton.kernels(interpret=True)
    import triton

    assert os.environ.get("TRITON_INTERPRET") in (None, "0", "")
    assert not triton.knobs.runtime.interpret
    assert type(tpru_triton.kernels(interpret=True).forward_tiled).__name__ == "InterpretedFunction"


# --------------------------------------------------------------------------------------------
# 5. On a GPU, when there is one
# --------------------------------------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@cuda
@pytest.mark.parametrize("name,slices", CASES)
def test_cuda_float64_equals_cpu(name, slices):
    x, mask = padded_batch(seed=slices)
    compare_units(name, slices, "code", x, mask, device="cuda", rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", VARIANTS)
def test_float32_close_to_the_cpu_loop_in_the_interpreter(name):
    """The float32 kernels (interpreted, on CPU) against the CPU loop in float32, with the tolerance
    the card's test uses: a float32 path with a wrong scratch dtype or upstream gradient shows here
    without a GPU."""
    x, mask = padded_batch(seed=1)
    compare_units(name, 1, "none", x, mask, dtype=torch.float32, rtol=1e-3, atol=1e-4, atol_per_scale=True)


@cuda
@pytest.mark.parametrize("name", VARIANTS)
def test_cuda_float32_close_to_the_cpu_loop(name, monkeypatch):
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    """The card in float32 against the CPU loop in float32. Both round differently (the card fuses
    multiply-adds and sums in another order); the difference grows with each gradient's scale, so
    atol is relative to it. (Against float64, float32 itself is off by more: tpru-mod1 ∂x 5e-4 at
    max |∂x| 96 on the CPU loop alone.)"""
    x, mask = padded_batch(seed=1)
    compare_units(name, 1, "none", x, mask, device="cuda", dtype=torch.float32, rtol=1e-3, atol=1e-4, atol_per_scale=True)


@cuda
def test_cuda_fused_selects_the_kernel():
    args = [a.detach().cuda().float() if a is not None else None for a in function_inputs(T=2, B=2, d=8, k=1, N=3, layout="folded")]
    assert tpru_triton.select_recurrence("fused", *args) is TPRUTritonRecurrence


# --------------------------------------------------------------------------------------------
# 6. The compiled kernels build for an H100 (sm_90) and fit its shared memory, with no GPU
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """All four kernels, the tiled ones at the largest benchmarked size (d = N = 1024, 8 slices,
    unfolded), through Triton and ptxas for sm_90: they build and fit a block's shared memory.
    (Registers and spills: `compile_report`; measured numbers in docs/benchmarks.md.)"""
    config = tpru_triton.DEFAULT_CONFIG
    resident = tpru_triton.Layout(64, 64, 1, 128, True, True, True, "tf32", config)
    tiled = tpru_triton.Layout(1024, 1024, 8, 2048, False, False, False, "tf32", config)
    assert resident.resident and not tiled.resident
    for layout in (resident, tiled):
        for direction in ("forward", "backward"):
            report = tpru_triton.compile_report(layout, direction, arch=90)
            assert report["registers"] is not None, report
            assert report["shared_bytes"] <= 227 * 1024, report  # an H100 block's shared memory
