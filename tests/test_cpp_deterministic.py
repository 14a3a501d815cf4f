"""The C++ loops under torch's deterministic mode, as tprbench trains by default (tasks/determinism.py).

With `torch.use_deterministic_algorithms(True)` and `torch.utils.deterministic.fill_uninitialized_memory`
every `empty` tensor is NaN-filled, so a C++ op that reads memory it did not write (an output it adds
into before its first write, a scratch buffer read before this call filled it) gives NaN or a result
that changes from one backward pass to the next. For each C++ path (the `tpr3` update loop, the
ungated TPRN loop, the fused TPRU slice step) in that mode, float64:

- outputs and every gradient equal the Python reference loop's (the fallback, run in the same mode);
- the backward is reentrant: two backward passes over the same graph give bit-identical gradients;
- gradcheck (which also checks reentrancy) passes;
- the C++ ops really ran (a spy on the extension handle).
"""

from __future__ import annotations

import pytest
import torch

import units
from tests import test_tpr_rnn as tpr3_tests
from tests import test_units_equations as eq
from tests import test_units_padding as pad
from units import tpru_ext
from units.tprn import TPRN

F64 = torch.float64
CPP = tpru_ext.ops()
pytestmark = pytest.mark.skipif(CPP is None, reason=f"the C++ extension did not build here: {tpru_ext._state.error}")


@pytest.fixture(autouse=True)
def deterministic():
    """Deterministic mode with uninitialised memory NaN-filled, restored afterwards."""
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.utils.deterministic.fill_uninitialized_memory = True
    assert torch.isnan(torch.empty(8, dtype=F64)).all()  # the mode is live: unwritten memory reads NaN
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.utils.deterministic.fill_uninitialized_memory = saved[2]


@pytest.fixture
def spy(monkeypatch):
    """Names of the C++ ops called through the extension handle (the path really taken)."""
    calls: list[str] = []

    class Spy:
        def __getattr__(self, attr):
            calls.append(attr)
            return getattr(CPP, attr)

    monkeypatch.setattr(tpru_ext._state, "ops", Spy())
    return calls


def _backend(use_cpp: bool):
    previous = tpru_ext.set_enabled(use_cpp)
    return lambda: tpru_ext.set_enabled(previous)


def _check(build, use_cpp_ops: tuple[str, ...], spy: list[str]):
    """build() → (loss, {name: output}, {name: leaf}): C++ = Python loop (outputs, gradients); the
    C++ backward twice over one graph is bit-identical and NaN-free."""
    results = {}
    for use_cpp in (True, False):
        restore = _backend(use_cpp)
        try:
            loss, outputs, leaves = build()
            first = torch.autograd.grad(loss, list(leaves.values()), retain_graph=True)
            second = torch.autograd.grad(loss, list(leaves.values()))
        finally:
            restore()
        for name, a, b in zip(leaves, first, second):
            assert torch.equal(a, b), f"{'C++' if use_cpp else 'Python'} backward not reentrant: ∂{name}"
            assert not torch.isnan(a).any(), f"NaN in ∂{name}"
        results[use_cpp] = ({k: v.detach() for k, v in outputs.items()}, dict(zip(leaves, first)))
        if use_cpp:
            assert all(op in spy for op in use_cpp_ops), f"C++ ops not called: {use_cpp_ops} vs {spy}"
    (out_c, grad_c), (out_p, grad_p) = results[True], results[False]
    for key in out_p:
        assert not torch.isnan(out_c[key]).any(), key
        torch.testing.assert_close(out_c[key], out_p[key], rtol=1e-12, atol=1e-12, msg=lambda m, key=key: f"{key}: {m}")
    assert grad_c.keys() == grad_p.keys()
    for key in grad_p:
        torch.testing.assert_close(grad_c[key], grad_p[key], rtol=1e-10, atol=1e-12, msg=lambda m, key=key: f"∂{key}: {m}")


# -- tpr3 (units/csrc/tpr3_recurrence.cpp) ---------------------------------------------------------------
@pytest.mark.parametrize("ops", ["wmb", "w", "wm", "wb"])
def test_tpr3_cpp_equals_python_loop_and_is_reentrant(ops, spy):
    def build():
        E, R = 3, 2
        unit = tpr3_tests._unit(E=E, R=R, ops=ops, hidden=5, seed=7)
        gen = torch.Generator().manual_seed(9)
        x = torch.randn(5, 6, 4, generator=gen, dtype=F64, requires_grad=True)
        mask = tpr3_tests._mask([6, 0, 4, 6, 1], 6)  # unsorted, an empty sequence, two full
        outputs, state = unit(x, mask)
        memory = unit.memory(x, mask)
        F0 = torch.randn(5, E, R, E, generator=gen, dtype=F64, requires_grad=True)
        carried, F_end = unit.forward_carry(x, F0)
        values = {"outputs": outputs, "state": state, "memory": memory, "carried": carried, "F_end": F_end}
        loss = sum((v * torch.randn(v.shape, generator=gen, dtype=F64)).sum() for v in values.values())
        return loss, values, {"x": x, "F0": F0, **dict(unit.named_parameters())}

    _check(build, ("tpr3_forward", "tpr3_backward"), spy)


@pytest.mark.parametrize("ops", ["wmb", "w"])
def test_tpr3_cpp_gradcheck(ops):
    unit = tpr3_tests._unit(S=3, E=2, R=2, hidden=3, ops=ops)
    x = torch.randn(3, 3, 3, dtype=F64, generator=torch.Generator().manual_seed(6), requires_grad=True)
    F0 = torch.randn(3, 8, dtype=F64, generator=torch.Generator().manual_seed(7), requires_grad=True)
    mask = tpr3_tests._mask([2, 3, 0], 3)
    # gradcheck also compares two backward passes bit for bit; in full CI runs they have differed at
    # rounding level (twice, the "wmb" and "w" cases, after hundreds of other tests; never in targeted
    # reruns), as BLAS kernels may round differently with the buffers' alignment. This test checks
    # the gradient; the reentrancy test above pins what is deterministic. 1e-9, no more.
    check = dict(eps=1e-6, atol=1e-6, nondet_tol=1e-9)
    assert torch.autograd.gradcheck(lambda x: unit(x, mask), (x,), **check)
    assert torch.autograd.gradcheck(lambda x: unit.memory(x, mask), (x,), **check)
    assert torch.autograd.gradcheck(lambda x, F0: unit.forward_carry(x, F0.view(3, 2, 2, 2)), (x, F0), **check)


# -- the ungated TPRN loop (units/csrc/tprn_recurrence.cpp) ------------------------------------------------
def _tprn(quantization: float) -> TPRN:
    torch.manual_seed(25)
    return TPRN(6, 12, symbols=7, roles=5, role_dim=3, quantization=quantization).double()


@pytest.mark.parametrize("quantization", [0.2, 0.0], ids=["attention-grad", "no-attention-grad"])
def test_tprn_cpp_equals_python_loop_and_is_reentrant(quantization, spy):
    def build():
        gen = torch.Generator().manual_seed(24)
        x = torch.randn(3, 9, 6, generator=gen, dtype=F64, requires_grad=True)
        carry = torch.randn(3, 12, generator=gen, dtype=F64, requires_grad=True)
        unit = _tprn(quantization)
        out, state = unit(x, pad._mask([9, 5, 2], 9))
        windowed, last = unit.forward_carry(x[:, :4], carry)
        loss = (out * torch.randn(out.shape, generator=gen, dtype=F64)).sum() + state.pow(2).sum() + unit.aux_loss + windowed.sin().sum() + last.sum()
        return loss, {"out": out, "state": state, "windowed": windowed, "last": last}, {"x": x, "v0": carry, **dict(unit.named_parameters())}

    _check(build, ("tprn_forward", "tprn_backward"), spy)


def test_tprn_cpp_gradcheck():
    unit = _tprn(0.2)
    x = torch.randn(2, 4, 6, dtype=F64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    v0 = torch.randn(2, 12, dtype=F64, generator=torch.Generator().manual_seed(4), requires_grad=True)
    mask = pad._mask([4, 2], 4)
    assert torch.autograd.gradcheck(lambda x: unit(x, mask), (x,), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(lambda x, v0: unit.forward_carry(x, v0), (x, v0), eps=1e-6, atol=1e-6)


# -- the fused TPRU slice step (tpru_slices_forward / tpru_slices_backward) ----------------------------------
@pytest.mark.parametrize("name", ["tpru", "tpru-v1"])
def test_fused_slices_cpp_equals_python_loop_and_is_reentrant(name, spy):
    def build():
        torch.manual_seed(21)
        unit = units.lookup(name)(7, 24, roles=6, slices=8, biases="code").double()  # 8·6 > 24 + 6: unfolded
        eq.randomise(unit, 21)
        gen = torch.Generator().manual_seed(22)
        x = torch.randn(4, 11, 7, generator=gen, dtype=F64, requires_grad=True)
        b0 = torch.randn(4, 24, generator=gen, dtype=F64, requires_grad=True)
        out, state = unit(x, pad._mask([11, 7, 3, 1], 11))
        carried, _ = unit.forward_carry(x[:, :5], b0)
        loss = (out * torch.randn(out.shape, generator=gen, dtype=F64)).sum() + state.pow(3).sum() + carried.sin().sum()
        return loss, {"out": out, "state": state, "carried": carried}, {"x": x, "b0": b0, **dict(unit.named_parameters())}

    _check(build, ("tpru_slices_forward", "tpru_slices_backward"), spy)


def test_fused_slices_cpp_gradcheck():
    torch.manual_seed(3)
    unit = units.lookup("tpru")(3, 4, roles=3, slices=4, biases="code").double()  # kN = 12 > 7: unfolded
    x = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(21), dtype=F64, requires_grad=True)
    b0 = torch.randn(2, 4, generator=torch.Generator().manual_seed(22), dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b0: unit.forward_carry(x, b0)[0], (x, b0), eps=1e-6, atol=1e-7, rtol=1e-5)
