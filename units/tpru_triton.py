"""The TPRU recurrence as persistent Triton kernels: the GPU path of `tpru_fused.TPRURecurrence`.

Why: on a GPU the autograd Function launches ~30 small kernels per time step (29.8 per step
forward+backward measured on an H100, 5-10x cuDNN's GRU). Here the whole forward is one launch and
the whole backward recurrence another; the weight gradients stay single large matmuls after the
loop, as on CPU. `TPRUTritonRecurrence` takes and returns exactly what `TPRURecurrence` does,
so `units/tpru.py` picks one or the other per call (`select_recurrence`).

Design, and what it takes from FlashRNN (Pöppel, Beck, Hochreiter, ICLR 2025; NX-AI/flashrnn,
`flashrnn/triton_fused/lstm_fw.py`, `lstm_bw.py`, `fused/flashrnn_fused_forward.cu`):
- Persistent programs over a batch tile. FlashRNN's Triton kernels launch a grid
  (heads, batch tiles of 16) once; each program loads its head's recurrent matrix R once, then
  loops over all T steps keeping the state h in registers and writing every state (and the gates
  for backward) to global memory. We do the same with grid = (batch tiles,): each program owns
  BLOCK_B (>= 16, tl.dot's minimum) sequences and loops over time.
- Heads. FlashRNN splits the hidden state into heads: the recurrent matrix is block-diagonal,
  so a program needs only its head's d_head x d_head block (Triton backend: d_head <= 64), and
  heads run in parallel. TPRU's binding R is block-diagonal over slices (b̃ of slice j needs only
  f of slice j), but the gate's W_b and the unbinding Uᵀ V_b read the whole b_{t-1}: the
  recurrence is dense, so a program must see the whole state and we cannot split over heads.
  Slices are therefore a loop inside the program (scores of slice j, its normaliser, then its
  candidate and gate columns), not a grid axis.
- Recurrent weights on chip. FlashRNN's Triton path loads R into registers before the time
  loop; its fused CUDA path tiles R over several blocks (hidden and gate tiling counts) and keeps
  the tiles in registers and shared memory, with a grid-wide barrier per step. Here:
  * resident kernels (one slice, folded W_rec, (d_pad² + 2·d_pad·N_pad) <= `resident_max`
    elements): W_b, Uᵀ V_b and R are loaded into registers once, b_{t-1} and the backward carry
    never leave the chip, no barrier at all;
  * tiled kernels (everything else: many slices, the unfolded scores, large d): b_{t-1} is read
    back from the states just written (L1/L2), the weights stream through the cache in
    BLOCK_K x BLOCK_S tiles each step, and a CTA barrier separates steps (FlashRNN's Triton
    kernels have no tiled mode; its CUDA kernel's grid barrier would need every program resident
    at once, which Triton cannot promise and its interpreter, running programs one by one,
    would deadlock on).
- Backward as in FlashRNN's `lstm_bw.py`: one persistent program per batch tile walks time
  backwards with the recurrent gradient (our "carry", ∂L/∂b_t) on chip, reading the saved states
  and gate activations; FlashRNN accumulates ∂R inside the kernel per batch tile and sums tiles
  afterwards; we store the per-step pre-activation gradients instead and compute ∂W_rec, ∂R, ∂U
  after the loop as single large matmuls (cuBLAS), exactly as `TPRURecurrence.backward` does,
  which keeps the kernel's work per step minimal and the weight gradients deterministic.
- Masks: the Function, like `TPRURecurrence`, runs every step of the padded batch; units are
  causal and right-padded, so `TPRUBase.forward` masks the outputs afterwards and padding never
  reaches a real token (tested with variable lengths).

Precision: float32 (TF32 in tl.dot when torch allows TF32 for CUDA matmuls, else IEEE) and
float64. On CPU tensors the kernels run in Triton's interpreter (a second copy of
`tpru_triton_kernels.py` is loaded with the interpreter switched on; TRITON_INTERPRET need not be
set), which is how CI tests them; it is slow and only for tests.

Speed, measured on an H200 (docs/benchmarks.md, "TPRU on a GPU"): 1.6-1.7x cuDNN GRU at d = 64,
but 4-54x at d >= 256, where a step's d^2 work falls on only B/16 programs; the tile sizes in
`TritonConfig` are untuned starting points. There `kernel_for` now picks the persistent kernel of
units/tpru_persist.py instead: each step split into tiles over every SM, with a grid-wide barrier
between its phases (a cooperative launch, checked to be co-resident first); not yet measured. Exactness on the card: float64 equal to the CPU loop
to 2e-14.
"""

from __future__ import annotations

import logging
import os

import torch

from . import tpru_ext, tpru_persist
from .tpru_fused import TPRURecurrence
from .tpru_triton_layout import (  # DEFAULT_CONFIG, Layout, TritonConfig, kernels: also used from here
    _IMPORT_ERROR,
    DEFAULT_CONFIG,
    KERNELS,
    SUPPORTED_DTYPES,
    Layout,
    TritonConfig,
    _interpreting,
    kernels,
    ptxas_report,
    triton,  # None without Triton (the optional dependency): `available` reads this module's name
)

log = logging.getLogger(__name__)


def available() -> bool:
    return triton is not None


def unsupported_reason(gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0) -> str | None:
    """Why these inputs cannot take the Triton path, or None when they can."""
    if _IMPORT_ERROR:
        return _IMPORT_ERROR
    tensors = [t for t in (gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0) if t is not None]
    if gx.dtype not in SUPPORTED_DTYPES:
        return f"dtype {gx.dtype} (the kernel runs float32 and float64)"
    if any(t.dtype != gx.dtype for t in tensors):
        return "inputs of mixed dtypes"
    if any(t.device != gx.device for t in tensors):
        return "inputs on different devices"
    return None


KERNEL_ENV = "TPRBENCH_TRITON_KERNEL"


def kernel_for(layout: Layout, batch: int, device: torch.device) -> str:
    """The kernel a call runs: "resident" or "tiled" (the batch kernels above: a program per 16
    sequences) or "persistent" (units/tpru_persist.py: every step spread over the card). Asked by
    `TritonConfig.kernel`, else by TPRBENCH_TRITON_KERNEL in the environment, else "auto", which takes
    the persistent kernel where `tpru_persist.preferred` says (a CUDA device, weights too large for the
    resident kernel, fewer batch tiles than SMs); "batch" never takes it, "persistent" always does.
    A persistent grid found unable to be co-resident on the device falls back to the batch kernel."""
    asked = layout.config.kernel or os.environ.get(KERNEL_ENV) or "auto"
    if asked not in KERNELS:
        raise ValueError(f"unknown Triton kernel {asked!r} (TritonConfig.kernel or {KERNEL_ENV}): one of {', '.join(KERNELS)}")
    batch_kernel = "resident" if layout.resident else "tiled"
    if asked == "batch" or (asked == "auto" and not tpru_persist.preferred(layout, batch, device)):
        return batch_kernel
    return batch_kernel if tpru_persist.unfit_reason(layout, batch, device) else "persistent"


def forward_recurrence(gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, relu2: bool, tanh_candidate: bool, config: TritonConfig = DEFAULT_CONFIG):
    """One launch for all T steps. Returns states [T+1,B,d] (states[0] = b0) and what backward needs."""
    L = Layout.of(W_rec, R_slices, U_slices, relu2, tanh_candidate, config)
    T, B, d = gx.shape
    k, N = L.slices, L.roles
    states = gx.new_empty(T + 1, B, d)
    states[0] = b0
    gates, cands = torch.empty_like(gx), torch.empty_like(gx)
    fills = fx.new_empty(T, B, k, N)
    zs = gx.new_empty(T, B, d) if not L.folded else None
    relu_b = fx.new_empty(T, B, k, N) if relu2 else None
    sums = fx.new_empty(T, B, k) if relu2 else None
    if kernel_for(L, B, gx.device) == "persistent":
        try:
            tpru_persist.forward(L, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, states, gates, cands, fills, zs, relu_b, sums)
            return states, gates, cands, fills, zs, relu_b, sums
        except tpru_persist.NotCoResident as why:
            _notice_once(str(why), "the batch kernel, not the persistent one")
    dummy = gx.new_empty(1)  # pointer for buffers a variant does not use
    opt = lambda t: t if t is not None else dummy  # noqa: E731
    name, constants = L.kernel_constants("forward")
    kernel = getattr(kernels(_interpreting(gx.device)), name)[L.grid(B)]
    if L.resident:
        kernel(
            gx,
            fx,
            W_rec,
            R_slices,
            c_b,
            c_x,
            states,
            gates,
            cands,
            fills,
            opt(relu_b),
            opt(sums),
            T,
            B,
            **constants,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )
    else:
        kernel(
            gx,
            fx,
            W_rec,
            R_slices,
            opt(U_slices),
            c_b,
            c_x,
            states,
            gates,
            cands,
            fills,
            opt(zs),
            opt(relu_b),
            opt(sums),
            T,
            B,
            **constants,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )
    return states, gates, cands, fills, zs, relu_b, sums


def backward_recurrence(
    grad_out,
    states,
    gates,
    cands,
    fills,
    zs,
    relu_b,
    sums,
    fx,
    W_rec,
    R_slices,
    U_slices,
    c_x,
    relu2: bool,
    tanh_candidate: bool,
    config: TritonConfig = DEFAULT_CONFIG,
):
    """One launch walks time backwards; returns (d_pre [T,B,rows], d_scores, d_fb [T,B,k,N], d_cand, d_b0)."""
    L = Layout.of(W_rec, R_slices, U_slices, relu2, tanh_candidate, config)
    T, B, d = gates.shape
    k, N = L.slices, L.roles
    d_pre = gates.new_empty(T, B, L.rows)
    d_scores = fills.new_empty(T, B, k, N)
    d_fb = None if L.folded else fills.new_empty(T, B, k, N)
    d_cand = torch.empty_like(gates)
    if kernel_for(L, B, gates.device) == "persistent":
        try:
            args = (grad_out, states, gates, cands, fills, relu_b, sums, fx, W_rec, R_slices, U_slices, c_x, d_pre, d_scores, d_fb, d_cand)
            return d_pre, d_scores, d_fb, d_cand, tpru_persist.backward(L, *args)
        except tpru_persist.NotCoResident as why:
            _notice_once(str(why), "the batch kernel, not the persistent one")
    dummy = gates.new_empty(1)
    opt = lambda t: t if t is not None else dummy  # noqa: E731
    name, constants = L.kernel_constants("backward")
    kernel = getattr(kernels(_interpreting(gates.device)), name)[L.grid(B)]
    if L.resident:
        d_b0 = gates.new_empty(B, d)
        kernel(
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
            c_x,
            d_pre,
            d_scores,
            d_cand,
            d_b0,
            T,
            B,
            **constants,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )
    else:
        carry = gates.new_zeros(2, B, d)
        dz = gates.new_empty(B, d) if not L.folded and L.rows == d else None
        kernel(
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
            carry,
            opt(dz),
            T,
            B,
            **constants,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )
        d_b0 = carry[T % 2]
    return d_pre, d_scores, d_fb, d_cand, d_b0


def compile_report(layout: Layout, direction: str, arch: int = 90, dtype: str = "fp32") -> dict:
    """Compile one kernel for an NVIDIA target with no GPU present (Triton ships ptxas) and report
    what ptxas says: registers per thread, spill stores, and the shared memory the launch needs.
    This is how the kernels were checked to build for an H100 (sm_90) in a session without one;
    it says nothing about speed."""
    name, constants = layout.kernel_constants(direction)
    options = dict(num_warps=layout.config.num_warps, num_stages=layout.config.num_stages)
    return dict(kernel=name, **ptxas_report(getattr(kernels(False), name), constants, {"T": "i32", "B": "i32"}, options, arch, dtype))


class TPRUTritonRecurrence(torch.autograd.Function):
    """`TPRURecurrence` with the time loops in Triton kernels: same inputs, same output b_1..b_T [T,B,d].
    The trailing `config` (tile sizes) is optional and not differentiable."""

    @staticmethod
    def forward(ctx, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, norm: str, tanh_candidate: bool, config: TritonConfig | None = None):
        config = config or DEFAULT_CONFIG
        relu2 = norm == "relu2"
        contiguous = [t.contiguous() if t is not None else None for t in (gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0)]
        gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0 = contiguous
        states, gates, cands, fills, zs, relu_b, sums = forward_recurrence(
            gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, relu2, tanh_candidate, config
        )
        ctx.relu2, ctx.use_tanh, ctx.config = relu2, tanh_candidate, config
        ctx.save_for_backward(W_rec, R_slices, U_slices, c_x, fx, states, gates, cands, fills, zs, relu_b, sums)
        return states[1:]

    @staticmethod
    def backward(ctx, grad_out):
        W_rec, R_slices, U_slices, c_x, fx, states, gates, cands, fills, zs, relu_b, sums = ctx.saved_tensors
        relu2 = ctx.relu2
        T, B, d = gates.shape
        k, s, N = R_slices.shape
        rows = W_rec.shape[0]
        d_pre, d_scores, d_fb, d_cand, d_b0 = backward_recurrence(
            grad_out.contiguous(), states, gates, cands, fills, zs, relu_b, sums, fx, W_rec, R_slices, U_slices, c_x, relu2, ctx.use_tanh, ctx.config
        )
        # Weight gradients after the loop, one large matmul each (as TPRURecurrence.backward).
        prev = states[:-1]
        d_W_rec = d_pre.reshape(T * B, rows).t() @ prev.reshape(T * B, d)
        d_fb_all = d_pre[:, :, d:].reshape(T, B, k, N) if U_slices is None else d_fb
        d_R = torch.einsum("tbks,tbkn->ksn", d_cand.view(T, B, k, s), fills)
        d_U = None if U_slices is None else torch.einsum("tbks,tbkn->ksn", zs.view(T, B, k, s), d_fb_all)
        d_fx = d_scores * (fx + c_x > 0) if relu2 else d_scores
        d_c_b = d_fb_all.sum((0, 1)) if relu2 else d_fx.sum((0, 1))
        d_c_x = d_fx.sum().reshape(())
        return d_pre[:, :, :d], d_fx, d_W_rec, d_R, d_U, d_c_b, d_c_x, d_b0, None, None, None


_NOTICES: set[str] = set()


def _notice_once(reason: str, instead: str = "the autograd-Function path, not the Triton kernel") -> None:
    if reason not in _NOTICES:
        _NOTICES.add(reason)
        log.warning("TPRU on CUDA uses %s: %s", instead, reason)


def select_recurrence(impl: str, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0):
    """The autograd Function for one call. `fused`: the Triton kernel for CUDA tensors it supports
    (else the CPU Function, with a one-time notice on CUDA saying why; TPRBENCH_TRITON=0 in the
    environment keeps the CPU Function, to compare or to rule the kernel out); `triton`: always the
    kernel (CPU tensors run in Triton's interpreter), an error when it cannot run."""
    if impl == "triton":
        reason = unsupported_reason(gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0)
        if reason:
            raise RuntimeError(f"impl=triton cannot run this call: {reason}")
        return TPRUTritonRecurrence
    if gx.is_cuda and gx.shape[0] > 0 and gx.shape[1] > 0 and os.environ.get("TPRBENCH_TRITON", "1") != "0":
        reason = unsupported_reason(gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0)
        if reason is None:
            return TPRUTritonRecurrence
        _notice_once(reason)
    return TPRURecurrence


def recurrence_name(recurrence, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, norm: str, tanh_candidate: bool) -> str:
    """What a call of `recurrence` (select_recurrence's choice) runs, as `bench units` shows it:
    "triton/resident", "triton/tiled", "triton/persistent", or the autograd Function's "cpp" (its C++
    loop, CPU tensors) or "python" loop."""
    if recurrence is TPRUTritonRecurrence:
        layout = Layout.of(W_rec, R_slices, U_slices, norm == "relu2", tanh_candidate, DEFAULT_CONFIG)
        return f"triton/{kernel_for(layout, gx.shape[1], gx.device)}"
    return "cpp" if gx.device.type == "cpu" and tpru_ext.ops() is not None else "python"
