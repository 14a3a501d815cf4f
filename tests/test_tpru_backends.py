"""Both CPU loops of the fused TPRU recurrence: the C++ one (units/csrc, the default when it builds)
and the Python one (the fallback). Each gets the transcription and gradcheck tests of
test_units_equations.py / test_units_padding.py, and the two must agree with each other in float64
at sizes gradcheck cannot afford (every variant, folded and unfolded slice paths, every bias option).
"""

from __future__ import annotations

import pytest
import torch

import units
from tests import test_units_equations as eq
from tests import test_units_padding as pad
from units import tpru_ext

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
