"""The persistent TPRU kernel (units/tpru_persist.py) against the CPU loop, and how it is chosen.

On CPU tensors the kernel runs in Triton's interpreter, where one program plays every program of
the grid in turn, phase by phase (a grid barrier cannot open when programs run one after another):
each tile computes what it computes on a card, so these tests check the tile decomposition and its
indexing. Shapes are tiny but make several tiles of every kind: 16-wide tiles over d = 32 (two
column tiles in a slice, or two slices), 20 roles (two role tiles), B = 19 (two batch tiles), and 3
programs, so most programs own several tiles. float64 must equal `TPRURecurrence` to rounding
(the same tolerance as tests/test_tpru_triton.py). The CUDA tests at the end run on a card
(scripts/gpu_check.sh persist): realistic sizes, determinism, the grid barrier against one program,
and the launch-time co-residency check.
"""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed (pip install 'tprbench[gpu]'); the kernel tests need it")

import units  # noqa: E402
from harness.bench import units as bench_units  # noqa: E402
from tests.test_tpru_triton import DIN, compare_functions, compare_units, function_inputs, padded_batch, run_unit  # noqa: E402
from units import tpru_persist, tpru_triton  # noqa: E402
from units.tpru_fused import TPRURecurrence  # noqa: E402
from units.tpru_triton import TPRUTritonRecurrence  # noqa: E402
from units.tpru_triton_layout import Layout, PersistentConfig, TritonConfig  # noqa: E402

pytestmark = pytest.mark.triton

SMALL = PersistentConfig(block_c=16, block_n=16, block_k=16, programs=3)
PERSISTENT = TritonConfig(kernel="persistent", persistent=SMALL)
H100 = tpru_persist.SMLimits(sms=132)


@pytest.fixture
def persistent_units(monkeypatch):
    """Units (impl=triton) take the persistent kernel with the small tiles above."""
    monkeypatch.setattr(tpru_triton, "DEFAULT_CONFIG", PERSISTENT)


def layout(d, roles, slices=1, folded=True, has_vb=True, relu2=True, config=tpru_triton.DEFAULT_CONFIG) -> Layout:
    rows = d + slices * roles if folded else (2 * d if has_vb else d)
    return Layout(d, roles, slices, rows, folded, relu2, False, "ieee", config)


# --------------------------------------------------------------------------------------------
# 1. The Function: every score layout, several tiles of each kind, float64 equal to the CPU loop
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "layout_name,k,norm,tanh",
    [
        ("folded", 1, "relu2", False),  # two column tiles in one slice
        ("folded", 2, "softmax", True),  # scores of two slices folded into W_rec
        ("unfolded", 2, "softmax", False),  # z = V_b b, then per-slice scores: three barriers a step
        ("unfolded", 2, "relu2", True),
        ("identity", 2, "relu2", True),  # V_b = I: scores from b itself, ∂z straight into the carry
        ("identity", 2, "softmax", False),
    ],
)
def test_function_equals_cpu_loop(layout_name, k, norm, tanh):
    args = function_inputs(T=3, B=19, d=32, k=k, N=20, layout=layout_name, seed=k + len(layout_name))
    plan = tpru_persist.Plan.of(Layout.of(args[2], args[3], args[4], norm == "relu2", tanh, PERSISTENT), 19, torch.device("cpu"))
    assert plan.programs == 3 and min(plan.column_tiles, plan.role_tiles) > plan.programs and not plan.grid_sync
    compare_functions(args, norm, tanh, PERSISTENT)


def test_grid_barrier_with_one_program_in_the_interpreter():
    """The barrier itself (atomics, its arrival targets), with the one program it can wait for here:
    a target counted wrong hangs this test or (too low) is caught on a card by the CUDA tests."""
    one = TritonConfig(kernel="persistent", persistent=PersistentConfig(block_c=16, block_n=16, block_k=16, programs=1, grid_sync=True))
    compare_functions(function_inputs(T=3, B=19, d=32, k=2, N=20, layout="unfolded", seed=3), "relu2", False, one)


def test_two_runs_identical():
    """No atomics touch data: every row statistic is summed in role-tile order by each reader."""
    args = function_inputs(T=3, B=19, d=32, k=1, N=20, layout="folded", seed=8)
    upstream = torch.randn(3, 19, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    runs = []
    for _ in range(2):
        out = TPRUTritonRecurrence.apply(*args, "softmax", False, PERSISTENT)
        runs.append((out, *torch.autograd.grad(out, [a for a in args if a is not None], upstream)))
    assert all(torch.equal(a, b) for a, b in zip(*runs))


# --------------------------------------------------------------------------------------------
# 2. Through the units: every variant, padded batches, bidirectional, float32
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,slices", [("tpru", 4), ("tpru-v1", 4), ("tpru-mod1", 1), ("tpru-mod2", 2), ("tpru-mod3", 1)])
def test_unit_equals_cpu_loop(name, slices, persistent_units):
    """Every variant once, on a padded batch (lengths 3, 2, 1), each `biases` option somewhere; the
    slice counts give V_b unfolded (tpru), V_b = I unfolded (v1), folded one and two slices."""
    biases = {"tpru": "code", "tpru-v1": "gate", "tpru-mod1": "none", "tpru-mod2": "code", "tpru-mod3": "gate"}[name]
    x, mask = padded_batch(seed=slices)
    compare_units(name, slices, biases, x, mask)


def test_bidirectional_unit_equals_cpu_loop(persistent_units):
    spec = "tpru-v1[bidirectional=true,roles=8,biases=code]"
    reference = units.build(spec.replace("]", ",impl=fused]"), DIN, 16).double()
    kernel = units.build(spec.replace("]", ",impl=triton]"), DIN, 16).double()
    kernel.load_state_dict(reference.state_dict())
    x, mask = padded_batch(seed=6)
    expected, got = run_unit(reference, x, mask), run_unit(kernel, x, mask)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-10, atol=1e-12)
    for key in expected[2]:
        torch.testing.assert_close(got[2][key], expected[2][key], rtol=1e-10, atol=1e-12, msg=lambda m, key=key: f"∂{key}: {m}")
    assert bench_units.recurrence_of(kernel) == "triton/persistent"


@pytest.mark.parametrize("name", ["tpru", "tpru-mod1"])
def test_float32_close_to_the_cpu_loop(name, persistent_units):
    """float32 (interpreted) against the CPU loop in float32, the batch kernels' tolerance."""
    x, mask = padded_batch(seed=1)
    compare_units(name, 1, "none", x, mask, dtype=torch.float32, rtol=1e-3, atol=1e-4, atol_per_scale=True)


# --------------------------------------------------------------------------------------------
# 3. Which kernel runs: the rule, the knob, the co-residency check, what bench units shows
# --------------------------------------------------------------------------------------------
def test_selection_rule_on_a_132_sm_card(monkeypatch):
    monkeypatch.setattr(tpru_persist, "sm_limits", lambda device: H100)
    monkeypatch.delenv(tpru_triton.KERNEL_ENV, raising=False)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert tpru_triton.kernel_for(layout(64, 64), 64, cuda) == "resident"  # small d: weights in registers
    assert tpru_triton.kernel_for(layout(256, 256), 64, cuda) == "persistent"
    assert tpru_triton.kernel_for(layout(1024, 1024), 256, cuda) == "persistent"
    assert tpru_triton.kernel_for(layout(64, 64, 8, folded=False), 64, cuda) == "persistent"  # slices=8: tiled
    assert tpru_triton.kernel_for(layout(256, 256), 16 * 132, cuda) == "tiled"  # the batch grid fills the card
    assert tpru_triton.kernel_for(layout(256, 256), 64, cpu) == "tiled"  # CPU tensors: as before
    monkeypatch.setenv(tpru_triton.KERNEL_ENV, "batch")
    assert tpru_triton.kernel_for(layout(256, 256), 64, cuda) == "tiled"
    monkeypatch.setenv(tpru_triton.KERNEL_ENV, "persistent")
    assert tpru_triton.kernel_for(layout(64, 64), 64, cpu) == "persistent"
    assert tpru_triton.kernel_for(layout(64, 64, config=TritonConfig(kernel="batch")), 64, cpu) == "resident"  # config first
    monkeypatch.setenv(tpru_triton.KERNEL_ENV, "fast")
    with pytest.raises(ValueError, match="unknown Triton kernel 'fast'.*auto, batch, persistent"):
        tpru_triton.kernel_for(layout(64, 64), 64, cpu)


def test_plan_spreads_a_step_over_the_sms(monkeypatch):
    monkeypatch.setattr(tpru_persist, "sm_limits", lambda device: H100)
    plan = tpru_persist.Plan.of(layout(1024, 1024), 64, torch.device("cuda"))
    assert plan.counts == (4, 64, 64) and plan.programs == 264 and plan.grid_sync  # 256 column tiles: 2 programs an SM
    assert plan.first_phase_tiles == 512 and plan.column_tiles == plan.role_tiles == 256  # ≤ 2 tiles a program
    small = tpru_persist.Plan.of(layout(64, 64, 8, folded=False), 16, torch.device("cuda"))
    assert small.block_c == 16 and small.counts == (1, 1, 4) and small.programs == 32  # no more programs than tiles
    with pytest.raises(ValueError, match="needs programs=1"):
        tpru_persist.Plan.of(layout(64, 64, config=TritonConfig(persistent=PersistentConfig(grid_sync=True))), 16, torch.device("cpu"))


def test_blocks_per_sm():
    assert tpru_persist.blocks_per_sm(64, 0, 4, H100) == 8  # registers: 2048 per warp, 32 warps
    assert tpru_persist.blocks_per_sm(255, 0, 8, H100) == 1
    assert tpru_persist.blocks_per_sm(32, 200 * 1024, 4, H100) == 1  # shared memory
    assert tpru_persist.blocks_per_sm(32, 230 * 1024, 4, H100) == 0
    assert tpru_persist.blocks_per_sm(16, 0, 1, H100) == 16  # the hardware's block limit


class FakeKernel:
    """What check_co_resident reads from a compiled kernel: registers and shared memory."""

    def __init__(self, registers, shared):
        self.n_regs, self.metadata = registers, type("Metadata", (), {"shared": shared})()

    def warmup(self, *args, grid, **options):
        return self

    def _init_handles(self):
        pass


def test_co_residency_check_falls_back_to_the_batch_kernel(monkeypatch):
    monkeypatch.setattr(tpru_persist, "sm_limits", lambda device: H100)
    monkeypatch.setattr(tpru_persist, "_UNFIT", {})
    monkeypatch.delenv(tpru_triton.KERNEL_ENV, raising=False)
    cuda = torch.device("cuda")
    two_per_sm = layout(256, 256, config=TritonConfig(persistent=PersistentConfig(programs_per_sm=2)))
    plan = tpru_persist.Plan.of(two_per_sm, 256, cuda)
    assert plan.programs == 264
    options = dict(num_warps=4)
    tpru_persist.check_co_resident(plan, "forward", cuda, FakeKernel(128, 0), (), {}, options)  # 4 a SM fit
    assert tpru_triton.kernel_for(two_per_sm, 256, cuda) == "persistent"
    with pytest.raises(tpru_persist.NotCoResident, match=r"264 programs cannot all be resident \(255 registers/thread.*1 per SM × 132 SMs"):
        tpru_persist.check_co_resident(plan, "backward", cuda, FakeKernel(255, 0), (), {}, dict(num_warps=8))
    assert tpru_triton.kernel_for(two_per_sm, 256, cuda) == "tiled"  # remembered: the batch kernel from now on


@pytest.mark.parametrize(
    "d,slices,batch,programs",
    [
        (256, 1, 64, 128),  # 64 column + 64 role tiles: one program a tile, fewer than the SMs
        (512, 1, 64, 132),  # 128 column tiles: under 1 an SM -> one program an SM
        (1024, 1, 64, 264),  # 256 column tiles: 2 an SM
        (1024, 1, 20, 132),  # a language model's batch: 128 column tiles
        (512, 1, 256, 528),  # 512 column tiles: 4 an SM
        (1024, 1, 256, 528),  # 1,024 column tiles: 4 an SM, not more
        (512, 8, 64, 132),  # 128 column tiles (1,024 role tiles, each over one 64-wide slice): one an SM
        (1024, 8, 64, 264),
        (512, 8, 256, 528),
    ],
)
def test_programs_per_sm_follows_the_column_tiles_of_a_step(monkeypatch, d, slices, batch, programs):
    """The default grid on an H100 (the rule measured there: tpru_persist.programs_per_sm)."""
    monkeypatch.setattr(tpru_persist, "sm_limits", lambda device: H100)
    plan = tpru_persist.Plan.of(layout(d, d, slices, config=TritonConfig()), batch, torch.device("cuda"))
    assert plan.programs == programs
    pinned = layout(d, d, slices, config=TritonConfig(persistent=PersistentConfig(programs_per_sm=1)))
    assert tpru_persist.Plan.of(pinned, batch, torch.device("cuda")).programs == min(programs, 132)


def test_not_co_resident_runs_the_batch_kernel_with_a_notice(monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise tpru_persist.NotCoResident("the persistent forward kernel's 264 programs cannot all be resident")

    monkeypatch.setattr(tpru_persist, "forward", refuse)
    monkeypatch.setattr(tpru_triton, "_NOTICES", set())
    args = function_inputs(T=2, B=3, d=16, k=1, N=5, layout="folded", seed=2)
    with caplog.at_level(logging.WARNING, logger="units.tpru_triton"):
        out = TPRUTritonRecurrence.apply(*args[:8], "relu2", False, TritonConfig(kernel="persistent"))
    torch.testing.assert_close(out, TPRURecurrence.apply(*args[:8], "relu2", False), rtol=1e-10, atol=1e-12)
    assert [r.getMessage() for r in caplog.records] == [
        "TPRU on CUDA uses the batch kernel, not the persistent one: the persistent forward kernel's 264 programs cannot all be resident"
    ]


def test_cpu_runs_keep_their_recurrence_and_bench_shows_it():
    """Training on CPU tensors never reaches Triton; bench units names what each TPRU row ran."""
    rows = bench_units.bench(["gru", "tpru", "tpru[impl=loop]"], [8], seq=3, batch=2, repeats=1, warmup=0, threads=[1])
    by_unit = {r.unit: r.recurrence for r in rows}
    assert by_unit["gru"] is None and by_unit["tpru[impl=loop]"] == "loop"
    assert by_unit["tpru"] == ("cpp" if units.tpru_ext.ops() is not None else "python")


def test_interpreted_copies_leave_the_compiled_modules_alone():
    """Loading the interpreted kernels (whose helpers come from the interpreted batch module) must not
    touch the compiled modules a card run uses in the same process."""
    import importlib
    import sys

    interpreted = tpru_triton.kernels(True, "tpru_persist_kernels")
    assert type(interpreted.forward_persistent).__name__ == "InterpretedFunction"
    assert type(interpreted._lerp).__name__ == "InterpretedFunction"
    compiled = importlib.import_module("units.tpru_persist_kernels")
    assert type(compiled.forward_persistent).__name__ == "JITFunction" and type(compiled._lerp).__name__ == "JITFunction"
    assert sys.modules["units.tpru_triton_kernels"] is tpru_triton.kernels(False)


@pytest.mark.slow
def test_persistent_kernels_compile_for_sm90(monkeypatch):
    """Both directions at d = 1024 with 8 slices and V_b (the three- and four-barrier steps), through
    Triton and ptxas for sm_90 with no GPU: they build, spill nothing, the default grid (2 programs an SM here)
    passes the co-residency check on an H100 (registers and shared memory: docs/benchmarks.md), and
    the barrier's atomics keep their memory order in the PTX."""
    monkeypatch.setattr(tpru_persist, "sm_limits", lambda device: H100)
    plan = tpru_persist.Plan.of(layout(1024, 1024, 8, folded=False), 64, torch.device("cuda"))
    assert plan.has_vb and plan.programs == 264  # 256 column tiles: the default grid is 2 programs an SM
    for direction in ("forward", "backward"):
        report = tpru_persist.compile_report(plan, direction, limits=H100)
        ptx = report.pop("ptx")
        assert report["spill_stores"] == 0 and report["co_resident"] and report["blocks_per_sm"] >= 1, report
        # the barrier: a release arrival and an acquire spin at GPU scope (`_grid_barrier`)
        assert "red.global.gpu.release.add" in ptx and "ld.global.gpu.acquire" in ptx


# --------------------------------------------------------------------------------------------
# 4. On a card (scripts/gpu_check.sh persist)
# --------------------------------------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def realistic_unit(name, d, slices, device, dtype, seed=0):
    """A unit at its default init (what a training run has), roles = d, and a full batch of 64."""
    torch.manual_seed(seed)
    unit = units.lookup(name)(d, d, roles=d, slices=slices, impl="triton").to(device, dtype)
    x = torch.randn(64, 12, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(device, dtype)
    return unit, x


def cuda_against_cpu(name, d, slices, dtype, rtol, atol):
    unit, x = realistic_unit(name, d, slices, "cuda", dtype)
    mask = torch.ones(x.shape[:2], dtype=torch.bool, device="cuda")
    mask[1:, 9:] = False  # padded
    got = run_unit(unit, x, mask)
    assert unit.last_recurrence == "triton/persistent"
    reference = units.lookup(name)(d, d, roles=d, slices=slices, impl="fused").to(dtype)
    reference.load_state_dict({k: v.cpu() for k, v in unit.state_dict().items()})
    expected = run_unit(reference, x.cpu(), mask.cpu())
    for what, g, e in [("outputs", got[0], expected[0]), ("state", got[1], expected[1])] + [(f"∂{k}", got[2][k], v) for k, v in expected[2].items()]:
        scale = max(1.0, float(e.abs().max()))
        torch.testing.assert_close(g.cpu().double(), e.double(), rtol=rtol, atol=atol * scale, msg=lambda m, what=what: f"{name} d={d}: {what}: {m}")


@cuda
@pytest.mark.parametrize(
    "name,d,slices", [("tpru", 256, 1), ("tpru-v1", 256, 1), ("tpru-mod1", 256, 1), ("tpru-mod2", 512, 1), ("tpru", 256, 8), ("tpru", 1024, 1)]
)
def test_cuda_float64_equals_cpu_loop(name, d, slices):
    cuda_against_cpu(name, d, slices, torch.float64, rtol=1e-9, atol=1e-11)


@cuda
@pytest.mark.parametrize("name", ["tpru", "tpru-mod3"])
def test_cuda_float32_close_to_the_cpu_loop(name, monkeypatch):
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    cuda_against_cpu(name, 256, 1, torch.float32, rtol=1e-3, atol=1e-4)


@cuda
def test_cuda_runs_identical_and_the_barrier_equals_one_program(monkeypatch):
    """Twice the same bits; and the grid-synchronised kernel gives the bits of one program playing the
    whole grid in turn (no barrier at all): a phase that read a tile before it was written differs."""
    args = [a.detach().cuda().requires_grad_() if a is not None else None for a in function_inputs(T=6, B=64, d=256, k=1, N=256, layout="folded")]
    upstream = torch.randn(6, 64, 256, generator=torch.Generator().manual_seed(2), dtype=torch.float64).cuda()

    def run(config):
        out = TPRUTritonRecurrence.apply(*args, "relu2", True, config)
        return (out, *torch.autograd.grad(out, [a for a in args if a is not None], upstream))

    synced = TritonConfig(kernel="persistent")
    first, second = run(synced), run(synced)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    programs = tpru_persist.Plan.of(Layout.of(args[2], args[3], None, True, True, synced), 64, args[0].device).programs
    one = run(TritonConfig(kernel="persistent", persistent=PersistentConfig(programs=programs, grid_sync=False)))
    for a, b in zip(first, one):  # two compiled kernels: equal up to the compiler's choices, not necessarily in every bit
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@cuda
def test_cuda_co_residency_is_checked_at_launch(caplog, monkeypatch):
    """The default grid passes the check and runs; a grid of 100,000 programs cannot be co-resident:
    the check refuses it before the launch, and the batch kernel runs instead, with a notice."""
    monkeypatch.setattr(tpru_triton, "_NOTICES", set())
    args = [a.detach().cuda() if a is not None else None for a in function_inputs(T=3, B=64, d=256, k=1, N=256, layout="folded")]
    device = args[0].device
    notices = lambda: [r.getMessage() for r in caplog.records if r.name == "units.tpru_triton"]  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="units.tpru_triton"):
        TPRUTritonRecurrence.apply(*args, "relu2", False, TritonConfig(kernel="persistent"))
        assert not notices()
        default = Layout.of(args[2], args[3], None, True, False, tpru_triton.DEFAULT_CONFIG)
        assert tpru_persist.unfit_reason(default, 64, device) is None and tpru_triton.kernel_for(default, 64, device) == "persistent"
        too_many = TritonConfig(kernel="persistent", persistent=PersistentConfig(programs=100_000))
        out = TPRUTritonRecurrence.apply(*args, "relu2", False, too_many)
    assert any("cannot all be resident" in message for message in notices())
    assert tpru_triton.kernel_for(Layout.of(args[2], args[3], None, True, False, too_many), 64, device) == "tiled"
    torch.testing.assert_close(out, TPRUTritonRecurrence.apply(*args, "relu2", False, TritonConfig(kernel="batch")), rtol=1e-12, atol=1e-12)
