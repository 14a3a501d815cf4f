"""Both CPU loops of the fused TPRU recurrence: the C++ one (units/csrc, the default when it builds)
and the Python one (the fallback). Each gets the transcription and gradcheck tests of
test_units_equations.py / test_units_padding.py, and the two must agree with each other in float64
at sizes gradcheck cannot afford (every variant, folded and unfolded slice paths, every bias option).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import units
from tests import test_units_equations as eq
from tests import test_units_padding as pad
from units import tpru_ext

ROOT = Path(__file__).resolve().parents[1]

CPP = tpru_ext.ops()
needs_cpp = pytest.mark.skipif(CPP is None, reason=f"the C++ TPRU recurrence did not build here: {tpru_ext._state.error}")


@pytest.fixture
def backend(request):
    """Run the test with the C++ loop ("cpp") or the Python loop ("python")."""
    if request.param == "cpp" and CPP is None:
        pytest.skip(f"the C++ TPRU recurrence did not build here: {tpru_ext._state.error}")
    previous = tpru_ext.set_enabled(request.param == "cpp")
    yield request.param
    tpru_ext.set_enabled(previous)


BACKENDS = pytest.mark.parametrize("backend", ["cpp", "python"], indirect=True)


@BACKENDS
@pytest.mark.parametrize("biases", eq.BIASES)
@pytest.mark.parametrize("slices", [1, 2, 8])
@pytest.mark.parametrize("name", sorted(eq.VARIANTS))
def test_each_backend_matches_transcription(backend, name, slices, biases):
    eq.test_matches_transcription(name, slices, "fused", biases)


@BACKENDS
@pytest.mark.parametrize("name", ["tpru", "tpru-v1"])
def test_each_backend_all_cut_off(backend, name):
    eq.test_relu2_all_cut_off_gives_zero_fillers_not_nan(name, "fused")


@BACKENDS
@pytest.mark.parametrize("biases", ["none", "gate", "code"])
@pytest.mark.parametrize("slices", [1, 2, 4])
@pytest.mark.parametrize("name", pad.TPRU_FAMILY)
def test_each_backend_gradcheck(backend, name, slices, biases):
    pad.test_fused_gradcheck(name, slices, biases)


@BACKENDS
def test_each_backend_gradients_below_the_clamp(backend):
    pad.test_gradients_where_the_normalisation_clamp_holds()


def _run(name: str, slices: int, biases: str, use_cpp: bool, dtype=torch.float64, randomise: bool = True):
    previous = tpru_ext.set_enabled(use_cpp)
    try:
        torch.manual_seed(21)
        unit = units.lookup(name)(7, 24, roles=6, slices=slices, biases=biases).to(dtype)
        if randomise:  # large weights: every term matters (and rounding differences grow over steps)
            eq.randomise(unit, 21)
        gen = torch.Generator().manual_seed(22)
        x = torch.randn(4, 11, 7, generator=gen, dtype=dtype).requires_grad_(True)
        mask = pad._mask([11, 7, 3, 1], 11)
        upstream = torch.randn(4, 11, 24, generator=gen, dtype=dtype)
        out, state = unit(x, mask)
        ((out * upstream).sum() + state.pow(3).sum()).backward()
        return out.detach(), {"x": x.grad, **{n: p.grad for n, p in unit.named_parameters()}}
    finally:
        tpru_ext.set_enabled(previous)


@needs_cpp
@pytest.mark.parametrize("biases", ["none", "code"])
@pytest.mark.parametrize("slices", [1, 2, 8])  # d=24, N=6: slices 1, 2 fold (kN ≤ d + N), 8 does not
@pytest.mark.parametrize("name", sorted(eq.VARIANTS))
def test_cpp_and_python_loops_agree(name, slices, biases):
    out_c, grads_c = _run(name, slices, biases, True)
    out_p, grads_p = _run(name, slices, biases, False)
    torch.testing.assert_close(out_c, out_p, rtol=1e-10, atol=1e-11)  # the summation order differs
    assert grads_c.keys() == grads_p.keys()
    for key in grads_p:  # atol: softmax's c_b, c_x have a true gradient of 0 (a shift of every score), here ~1e-12 noise
        torch.testing.assert_close(grads_c[key], grads_p[key], rtol=1e-9, atol=1e-9, msg=lambda m: f"{key}: {m}")


@needs_cpp
@pytest.mark.parametrize("name", ["tpru", "tpru-mod1"])
def test_cpp_float32_close_to_python(name):
    out_c, grads_c = _run(name, 2, "gate", True, torch.float32, randomise=False)
    out_p, grads_p = _run(name, 2, "gate", False, torch.float32, randomise=False)
    torch.testing.assert_close(out_c, out_p, rtol=1e-5, atol=1e-6)
    for key in grads_p:
        torch.testing.assert_close(grads_c[key], grads_p[key], rtol=1e-4, atol=1e-5, msg=lambda m: f"{key}: {m}")


@needs_cpp
def test_default_cpu_path_is_cpp():
    """A plain CPU forward uses the C++ loop when it built (the test of what users get)."""
    assert tpru_ext.backend() == "cpp"
    unit = units.build("tpru[roles=4]", 3, 8)
    calls = []
    original = CPP.tpru_forward

    class Spy:
        def __getattr__(self, attr):
            return getattr(CPP, attr)

        def tpru_forward(self, *args):
            calls.append(1)
            return original(*args)

    saved = tpru_ext._state.ops
    tpru_ext._state.ops = Spy()
    try:
        unit(torch.randn(2, 5, 3))
    finally:
        tpru_ext._state.ops = saved
    assert calls == [1]


def test_failed_build_falls_back_with_one_line(monkeypatch, capsys):
    """No compiler (or any build failure): one line on stderr naming the cause, then the Python loop."""
    monkeypatch.setattr(tpru_ext, "_state", type(tpru_ext._state)(ops=None, tried=False, error=None, enabled=True))

    def broken(verbose):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(tpru_ext, "_load", broken)
    assert tpru_ext.ops() is None
    assert tpru_ext.ops() is None  # tried once, said once
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unavailable" in err[0] and "Ninja is required" in err[0] and "Python loop" in err[0]
    assert tpru_ext.backend() == "python"
    unit = units.build("tpru[roles=4]", 3, 8)
    out, state = unit(torch.randn(2, 5, 3))  # runs on the Python loop
    assert out.shape == (2, 5, 8)


def test_disabled_by_environment(monkeypatch, capsys):
    monkeypatch.setattr(tpru_ext, "_state", type(tpru_ext._state)(ops=None, tried=False, error=None, enabled=False))
    monkeypatch.setattr(tpru_ext, "_load", lambda verbose: pytest.fail("must not build when disabled"))
    assert tpru_ext.ops() is None
    assert capsys.readouterr().err == ""


def test_build_dir_is_keyed_and_configurable(monkeypatch, tmp_path):
    monkeypatch.setenv("TPRBENCH_EXT_DIR", str(tmp_path))
    path = tpru_ext.build_dir()
    assert path.parent == tmp_path and path.name.startswith(tpru_ext.NAME + "-")
    monkeypatch.setattr(tpru_ext, "CFLAGS", tpru_ext.CFLAGS + ["-DX"])
    assert tpru_ext.build_dir() != path  # other flags, other build


def test_the_target_is_native_unless_tprbench_march_names_one():
    """TPRBENCH_MARCH / TPRBENCH_MTUNE (the quickstart's numerics pins) are read when the module loads:
    a fresh process each."""

    def cflags(**pins):
        env = {k: v for k, v in os.environ.items() if k not in ("TPRBENCH_MARCH", "TPRBENCH_MTUNE")}
        env.update({f"TPRBENCH_{name.upper()}": value for name, value in pins.items()})
        code = "from units import tpru_ext; print(' '.join(tpru_ext.CFLAGS))"
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()

    default = cflags()
    assert "-march=native" in default and not any(f.startswith("-mtune") for f in default)
    assert "-march=native" in cflags(march=" ")
    assert "-march=x86-64-v3" in cflags(march="x86-64-v3") and "-march=native" not in cflags(march="x86-64-v3")
    assert "-mtune=znver3" in cflags(march="x86-64-v3", mtune="znver3")


# -- the fused slice step (tpru_slices_forward / tpru_slices_backward: unfolded ReLU² path) -----------


def _spy_calls(monkeypatch):
    """Count calls of each C++ op through the extension handle the Function uses."""
    calls = {}

    class Spy:
        def __getattr__(self, attr):
            target = getattr(CPP, attr)

            def counted(*args):
                calls[attr] = calls.get(attr, 0) + 1
                return target(*args)

            return counted

    monkeypatch.setattr(tpru_ext._state, "ops", Spy())
    return calls


@needs_cpp
@pytest.mark.parametrize("name", ["tpru", "tpru-v1", "tpru-mod3"])
def test_unfolded_relu2_slices_take_the_fused_step(monkeypatch, name):
    """ReLU² with kN > d + N runs the fused slice step both ways; softmax and folded slices do not."""
    calls = _spy_calls(monkeypatch)
    unit = units.lookup(name)(5, 16, roles=8, slices=4)  # kN = 32 > d + N = 24: unfolded
    out, state = unit(torch.randn(3, 6, 5), pad._mask([6, 4, 1], 6))
    (out.sum() + state.sum()).backward()
    fused = units.lookup(name).norm == "relu2"
    assert calls.get("tpru_slices_forward", 0) == int(fused) and calls.get("tpru_slices_backward", 0) == int(fused)
    assert calls.get("tpru_forward", 0) == int(not fused)
    calls.clear()
    folded = units.lookup(name)(5, 16, roles=8, slices=2)  # kN = 16 ≤ 24: folded, the general loop
    folded(torch.randn(2, 3, 5))[0].sum().backward()
    assert "tpru_slices_forward" not in calls and calls["tpru_forward"] == 1


@needs_cpp
@pytest.mark.parametrize("name", ["tpru", "tpru-v1"])
def test_fused_slices_reuse_buffers_across_calls_and_shapes(name):
    """The fused step keeps its scratch buffers between calls: calls that alternate batch size,
    roles and dtype (float32 ↔ float64) still equal the Python loop, outputs and gradients."""
    configs = [
        (4, 8, torch.float64),
        (2, 8, torch.float64),
        (5, 12, torch.float32),
        (3, 6, torch.float64),
        (5, 12, torch.float32),
        (4, 8, torch.float64),
    ]
    for batch, roles, dtype in configs:
        results = []
        for use_cpp in (True, False):
            previous = tpru_ext.set_enabled(use_cpp)
            try:
                torch.manual_seed(roles)
                unit = units.lookup(name)(7, 24, roles=roles, slices=8).to(dtype)  # 8·roles > 24 + roles: unfolded
                eq.randomise(unit, roles)
                gen = torch.Generator().manual_seed(batch)
                x = torch.randn(batch, 9, 7, generator=gen, dtype=dtype).requires_grad_(True)
                lengths = [9] + [max(1, 9 - 2 * i) for i in range(1, batch)]
                out, state = unit(x, pad._mask(lengths, 9))
                upstream = torch.randn(out.shape, generator=gen, dtype=dtype)
                ((out * upstream).sum() + state.pow(3).sum()).backward()
                results.append((out.detach(), {"x": x.grad, **{n: p.grad for n, p in unit.named_parameters()}}))
            finally:
                tpru_ext.set_enabled(previous)
        (out_c, grads_c), (out_p, grads_p) = results
        tol = dict(rtol=1e-10, atol=1e-11) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out_c, out_p, **tol)
        for key in grads_p:
            gtol = dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=2e-3, atol=1e-4)
            torch.testing.assert_close(grads_c[key], grads_p[key], **gtol, msg=lambda m: f"{key} {batch} {roles} {dtype}: {m}")


@needs_cpp
@pytest.mark.parametrize("name", ["tpru", "tpru-v1"])
def test_fused_slices_gradcheck_through_the_carry(name):
    """The fused slice backward's gradient with respect to b_0 and x against finite differences."""
    torch.manual_seed(3)
    unit = units.lookup(name)(3, 4, roles=3, slices=4, biases="code").double()  # kN = 12 > 7: unfolded
    x = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(21), dtype=torch.float64, requires_grad=True)
    b0 = torch.randn(2, 4, generator=torch.Generator().manual_seed(22), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b0: unit.forward_carry(x, b0)[0], (x, b0), eps=1e-6, atol=1e-7, rtol=1e-5)
