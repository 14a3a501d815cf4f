"""The persistent TPRU recurrence: each step's d² work spread over every SM of the card (issue 46).

Why: the batch kernels (tpru_triton.py) give each program BLOCK_B sequences and the whole of every
step, so a card runs B/16 programs — 4 of an H100's 132 SMs at B = 64 — each streaming all of W_rec
and R every step. Nsight Compute measured <1% SM and <3% memory throughput there (docs/benchmarks.md):
latency-bound, 4.7–54× cuDNN's GRU at d = 256…1024. cuDNN's persistent RNNs, Diamos et al. (2016) and
FlashRNN (Pöppel, Beck, Hochreiter 2024) split a step over the whole grid instead and synchronise
the grid once per step; so does this kernel (tpru_persist_kernels.py):

- Tiles. A step is a few phases, each a list of tiles: (BLOCK_C state columns of one slice, or
  BLOCK_N roles of one slice) × (BLOCK_B sequences). Forward: gate and score tiles (W_b b and the
  unbinding scores, reduced over d; with V_b first z = V_b b, then the scores), then candidate tiles
  (normalise the fillers, b̃ = R f, gate, new state). Backward: ∂f = Rᵀ∂b̃ tiles, normaliser tiles,
  (with V_b ∂z tiles,) then carry tiles (∂L/∂b_{t-1} = ∂b_t(1 − g) + ∂pre W_rec), which also start
  the next step's gate and candidate gradients. The normaliser needs a whole row of roles: every role
  tile writes its part of the row statistics and every tile that needs them sums the parts in the
  same order, so runs are deterministic.
- Residency. Tile i belongs to program i mod P for the whole sequence, with P = the SM count × 1, 2
  or 4 programs an SM (by the column tiles of a step: `programs_per_sm`), so each SM reads only its
  own slice of W_rec, R and U, the same every step (d = 1024: 12 MB of float32 in all, ~90 KB per
  SM). They stay in the card's L2 (50 MB on an H100), and in the SM's L1 unless the barrier's
  acquire invalidates it (a card will show which).
  Not pinned in registers: a d = 1024 row block would not fit one program's registers beside its
  working set (FlashRNN's Triton kernels stop at 64-wide heads for that reason).
- One grid barrier per phase: 2 per forward step (3 with V_b and several slices), 3 per backward step
  (4). `_grid_barrier`'s docstring gives its memory ordering. A barrier across programs deadlocks
  unless all of them are resident at once, so the launch is *cooperative* (the driver refuses a grid
  that cannot be co-resident instead of hanging), and before it `check_co_resident` compiles the
  kernel and compares P with SMs × the blocks per SM its registers and shared memory allow; a grid
  that does not fit raises `NotCoResident`, and the caller runs the batch kernel instead.
- Triton's interpreter runs programs one after another, so the same kernel has a path without the
  barrier (`grid_sync=False`): one program plays programs 0 … P−1 in turn, phase by phase. Each tile
  does exactly the arithmetic it does on the card; this is what CI tests on CPU tensors.

Buffers: exactly the batch kernels' (tpru_triton.forward_recurrence / backward_recurrence allocate
them and call `forward` / `backward` here), so either kernel may run either direction, and
`TPRUTritonRecurrence` computes the weight gradients after the loop as before.

Which calls take this kernel: `tpru_triton.kernel_for` (the rule is `preferred` below; env
TPRBENCH_TRITON_KERNEL=auto|batch|persistent or `TritonConfig.kernel` overrides it). Speed on a card:
not measured yet (docs/benchmarks.md, "The persistent kernel").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from .tpru_fused import NORM_EPS
from .tpru_triton_layout import Layout, _interpreting, _pow2, kernels, ptxas_report


class NotCoResident(RuntimeError):
    """The persistent grid cannot have all its programs resident at once on this device."""


@dataclass(frozen=True)
class SMLimits:
    """What one SM holds at once (CUDA occupancy calculator inputs)."""

    sms: int
    threads: int = 2048
    registers: int = 65536
    shared: int = 233472  # bytes (an H100's 228 KiB)
    blocks: int = 16  # resident blocks per SM (32 on sm_80/sm_90, 16 or 24 on others: the lower bound)


SHARED_RESERVED = 1024  # bytes the driver reserves per block (sm_80 and later)


def blocks_per_sm(registers: int, shared: int, num_warps: int, limits: SMLimits) -> int:
    """How many blocks of a kernel fit on one SM at once: by threads, by registers (allocated per warp
    in units of 256), by shared memory, and the hardware's block limit."""
    threads = num_warps * 32
    per_warp = math.ceil(max(registers, 1) * 32 / 256) * 256
    by_registers = (limits.registers // per_warp) // num_warps
    by_shared = limits.shared // (shared + SHARED_RESERVED)
    return max(0, min(limits.threads // threads, by_registers, by_shared, limits.blocks))


def sm_limits(device: torch.device) -> SMLimits:
    props = torch.cuda.get_device_properties(device)
    return SMLimits(
        sms=props.multi_processor_count,
        threads=getattr(props, "max_threads_per_multi_processor", SMLimits.threads),
        registers=getattr(props, "regs_per_multiprocessor", SMLimits.registers),
        shared=getattr(props, "shared_memory_per_multiprocessor", SMLimits.shared),
    )


def preferred(layout: Layout, batch: int, device: torch.device) -> bool:
    """The selection rule (`kernel_for`'s `auto`): the persistent kernel where the batch kernel leaves
    the card idle — on a CUDA device (not Triton's interpreter), when the batch kernel would not keep
    its weights in registers (not `layout.resident`: one slice with d² + 2dN ≤ 16384 at powers of two,
    i.e. d = roles ≤ 64, where it is within 1.6–1.7× cuDNN's GRU) and its grid of ceil(B / 16)
    programs is smaller than the SM count (B < 2112 on an H100). Measured on an H100 (docs/gpu/
    crossover_*.json, docs/benchmarks.md): the resident batch kernel wins at d = 64 (1.74× GRU
    against 2.02×), the persistent one everywhere it tiles (d = 128, 256, slices = 8; B 64 and 256)."""
    if device.type != "cuda" or _interpreting(device) or layout.resident:
        return False
    return triton.cdiv(batch, layout.config.block_b) < sm_limits(device).sms


def programs_per_sm(column_tiles: int, sms: int) -> int:
    """Programs per SM when `PersistentConfig.programs_per_sm` is None, from a step's column tiles (state
    columns × batch tiles over every slice; each reduces over d, so they count the step's work, where
    role tiles of a sliced unit reduce over one slice only): 4 where there are ≥ 2 a SM, 2 where ≥ 1,
    else 1. Measured on an H100 at 11 shapes (scripts/gpu_tune_persist.py, 20 rounds each; docs/
    benchmarks.md, "Tuned"), each the fastest or within 5% of it: more programs hide the latency of a
    program's tiles run one after another (d = 512 / 1024 at B 256: 29-36% faster at 4 an SM; d = 1024
    at B 64: 15% at 2), while at few column tiles they only add barrier participants (slices = 8, d = 512,
    B 64: 24% slower at 4 an SM than at 1)."""
    for per_sm, tiles_per_sm in ((4, 2), (2, 1)):
        if column_tiles >= tiles_per_sm * sms:
            return per_sm
    return 1


@dataclass(frozen=True)
class Plan:
    """Tile sizes and counts of one call, the number of programs, and how they synchronise."""

    layout: Layout
    batch: int
    programs: int
    grid_sync: bool

    @classmethod
    def of(cls, layout: Layout, batch: int, device: torch.device) -> Plan:
        config = layout.config.persistent
        interpreting = _interpreting(device)
        grid_sync = not interpreting if config.grid_sync is None else config.grid_sync
        if grid_sync and interpreting and config.programs != 1:
            raise ValueError(
                "grid_sync=True in Triton's interpreter needs programs=1: it runs programs one after another, so a barrier of several never opens"
            )
        plan = cls(layout, batch, 1, grid_sync)
        widest = max(plan.first_phase_tiles, plan.column_tiles, plan.role_tiles)
        if config.programs:
            programs = config.programs
        elif interpreting:
            programs = widest  # a card with enough SMs: one tile per program
        else:
            sms = sm_limits(device).sms
            programs = min(widest, sms * (config.programs_per_sm or programs_per_sm(plan.column_tiles, sms)))
        return cls(layout, batch, programs, grid_sync)

    @property
    def slice_size(self) -> int:
        return self.layout.d // self.layout.slices

    @property
    def has_vb(self) -> bool:  # unfolded scores through z = V_b b (W_rec = [W_b; V_b])
        return not self.layout.folded and self.layout.rows > self.layout.d

    @property
    def block_c(self) -> int:
        return min(self.layout.config.persistent.block_c, _pow2(self.slice_size))

    @property
    def block_n(self) -> int:
        return min(self.layout.config.persistent.block_n, _pow2(self.layout.roles))

    @property
    def counts(self) -> tuple[int, int, int]:
        """(batch tiles, column tiles per slice, role tiles per slice)."""
        return (
            triton.cdiv(self.batch, self.layout.config.block_b),
            triton.cdiv(self.slice_size, self.block_c),
            triton.cdiv(self.layout.roles, self.block_n),
        )

    @property
    def column_tiles(self) -> int:
        nb, ct, _ = self.counts
        return self.layout.slices * ct * nb

    @property
    def role_tiles(self) -> int:
        nb, _, nt = self.counts
        return self.layout.slices * nt * nb

    @property
    def first_phase_tiles(self) -> int:
        return self.column_tiles + (self.column_tiles if self.has_vb else self.role_tiles)

    def sizes(self, T: int) -> tuple[int, ...]:
        """The kernels' runtime sizes T, B, D, N, K, S, NB, CT, NT."""
        L = self.layout
        return (T, self.batch, L.d, L.roles, L.slices, self.slice_size, *self.counts)

    def constants(self, direction: str) -> dict:
        L = self.layout
        block_k = L.config.persistent.block_k
        common = dict(
            FOLDED=L.folded,
            HAS_VB=self.has_vb,
            RELU2=L.relu2,
            TANH=L.tanh,
            GRID_SYNC=self.grid_sync,
            BLOCK_B=L.config.block_b,
            BLOCK_C=self.block_c,
            BLOCK_N=self.block_n,
            BK_S=min(block_k, _pow2(self.slice_size)),
            PRECISION=L.precision,
            EPS=NORM_EPS,
        )
        if direction == "forward":
            return dict(common, BK_D=min(block_k, _pow2(L.d)))
        return dict(common, BK_N=min(block_k, _pow2(L.roles)), BK_R=min(block_k, _pow2(L.rows)))

    def launch(self, direction: str, device: torch.device, args: tuple) -> None:
        fn = getattr(kernels(_interpreting(device), "tpru_persist_kernels"), f"{direction}_persistent")
        constants = self.constants(direction)
        options = dict(num_warps=self.layout.config.persistent.num_warps, num_stages=1)
        if self.grid_sync and not _interpreting(device):
            options["launch_cooperative_grid"] = True
            check_co_resident(self, direction, device, fn, args, constants, options)
        fn[(self.programs if self.grid_sync else 1,)](*args, **constants, **options)


_UNFIT: dict[tuple, str] = {}  # (plan, direction, device index) → why its grid cannot be co-resident


def unfit_reason(layout: Layout, batch: int, device: torch.device) -> str | None:
    """Why a launch of this shape was found not co-resident on this device (None: not found so)."""
    plan = Plan.of(layout, batch, device)
    return next((_UNFIT[key] for key in ((plan, d, device.index) for d in ("forward", "backward")) if key in _UNFIT), None)


def check_co_resident(plan: Plan, direction: str, device: torch.device, fn, args: tuple, constants: dict, options: dict) -> None:
    """Raise NotCoResident unless all `plan.programs` programs of this kernel fit on the device at once:
    compile it for these arguments (what the launch then reuses), read its registers and shared
    memory, and compare the grid with SMs × blocks per SM. The cooperative launch checks the same
    again in the driver; this check turns its error into a fallback to the batch kernel."""
    key = (plan, direction, device.index)
    if key in _UNFIT:
        raise NotCoResident(_UNFIT[key])
    compiled = fn.warmup(*args, grid=(plan.programs,), **constants, **options)
    compiled._init_handles()
    limits = sm_limits(device)
    per_sm = blocks_per_sm(compiled.n_regs, compiled.metadata.shared, options["num_warps"], limits)
    if plan.programs > per_sm * limits.sms:
        _UNFIT[key] = (
            f"the persistent {direction} kernel's {plan.programs} programs cannot all be resident "
            f"({compiled.n_regs} registers/thread, {compiled.metadata.shared} B shared: {per_sm} per SM × {limits.sms} SMs)"
        )
        raise NotCoResident(_UNFIT[key])


def forward(layout: Layout, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, states, gates, cands, fills, zs, relu_b, sums) -> None:
    """All T forward steps into the batch kernel's buffers (states[0] = b_0 already set)."""
    T, B, _ = gx.shape
    if T == 0:
        return
    plan = Plan.of(layout, B, gx.device)
    k, N = layout.slices, layout.roles
    _, _, nt = plan.counts
    raw = fx.new_empty(B, k, N)
    part = fx.new_empty(B, k, nt)
    pmax = None if layout.relu2 else fx.new_empty(B, k, nt)
    dummy = gx.new_empty(1)
    opt = lambda t: t if t is not None else dummy  # noqa: E731
    counter = torch.zeros(1, dtype=torch.int32, device=gx.device)
    args = (gx, fx, W_rec, R_slices, opt(U_slices), c_b, c_x, states, gates, cands, fills, opt(zs), opt(relu_b), opt(sums))
    plan.launch("forward", gx.device, (*args, raw, part, opt(pmax), counter, *plan.sizes(T), plan.programs))


def backward(layout: Layout, grad_out, states, gates, cands, fills, relu_b, sums, fx, W_rec, R_slices, U_slices, c_x, d_pre, d_scores, d_fb, d_cand):
    """All T backward steps into the batch kernel's buffers; returns ∂L/∂b_0."""
    T, B, d = gates.shape
    carry = gates.new_zeros(2, B, d)
    if T == 0:
        return carry[0]
    plan = Plan.of(layout, B, gates.device)
    _, _, nt = plan.counts
    dfs = fills.new_empty(B, layout.slices, layout.roles)
    part = fills.new_empty(B, layout.slices, nt)
    dummy = gates.new_empty(1)
    opt = lambda t: t if t is not None else dummy  # noqa: E731
    counter = torch.zeros(1, dtype=torch.int32, device=gates.device)
    args = (
        grad_out,
        states,
        gates,
        cands,
        fills,
        opt(relu_b),
        opt(sums),
        fx,
        W_rec,
        R_slices,
        opt(U_slices),
        c_x,
        d_pre,
        d_scores,
        opt(d_fb),
        d_cand,
    )
    plan.launch("backward", gates.device, (*args, carry, dfs, part, counter, *plan.sizes(T), layout.rows, plan.programs))
    return carry[T % 2]


H100 = SMLimits(sms=132)  # an H100 SXM's SM count, for reports made without a card


def compile_report(plan: Plan, direction: str, arch: int = 90, dtype: str = "fp32", limits: SMLimits = H100) -> dict:
    """Compile one persistent kernel for an NVIDIA target with no GPU (tpru_triton.ptxas_report) and
    say whether its grid would pass the co-residency check on a card with these limits (an H100's)."""
    fn = getattr(kernels(False, "tpru_persist_kernels"), f"{direction}_persistent")
    ints = ("T", "B", "D", "N", "K", "S", "NB", "CT", "NT", "ROWS", "NPROG")
    types = dict({name: "i32" for name in ints}, counter="*i32")
    options = dict(num_warps=plan.layout.config.persistent.num_warps, num_stages=1)
    report = ptxas_report(fn, plan.constants(direction), types, options, arch, dtype)
    per_sm = blocks_per_sm(report["registers"], report["shared_bytes"], options["num_warps"], limits)
    return dict(report, kernel=f"{direction}_persistent", blocks_per_sm=per_sm, co_resident=plan.programs <= per_sm * limits.sms)
