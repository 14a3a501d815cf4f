"""The TPRU recurrence as persistent Triton kernels: the GPU path of `tpru_fused.TPRURecurrence`.

Why: on a GPU the autograd Function launches ~30 small kernels per time step (issue 22: 29.8 per
step forward+backward on an H100, 5-10x cuDNN's GRU). Here the whole forward is one launch and
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

Not measured here: nothing about GPU speed (no GPU was available when this was written); the
tile sizes in `TritonConfig` are untuned starting points. docs/benchmarks.md says how to measure.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from .tpru_fused import NORM_EPS, TPRURecurrence

log = logging.getLogger(__name__)

try:
    import triton
except ImportError as error:  # optional dependency: pip install 'tprbench[gpu]'
    triton = None
    _IMPORT_ERROR: str | None = f"Triton is not installed ({error}; pip install 'tprbench[gpu]')"
else:
    _IMPORT_ERROR = None

SUPPORTED_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class TritonConfig:
    """Tile sizes and launch settings (untuned: no GPU measured them yet)."""

    block_b: int = 16          # sequences per program (>= 16: tl.dot's minimum)
    block_k: int = 32          # reduction tile over d (tiled kernels)
    block_s: int = 64          # column tile of a slice (tiled kernels)
    block_n: int = 64          # role tile (tiled kernels)
    resident_max: int = 16384  # elements of W_b, Uᵀ V_b and R together that stay in registers
    num_warps: int = 4
    force_tiled: bool = False  # tests: exercise the tiled kernels on small shapes


DEFAULT_CONFIG = TritonConfig()


def available() -> bool:
    return triton is not None


def _pow2(n: int) -> int:
    return max(16, 1 << (max(1, n) - 1).bit_length())


_KERNELS: dict[bool, ModuleType] = {}


def kernels(interpret: bool) -> ModuleType:
    """The kernel module, compiled (CUDA tensors) or interpreted (CPU tensors)."""
    if interpret not in _KERNELS:
        if not interpret:
            _KERNELS[False] = importlib.import_module(f"{__package__}.tpru_triton_kernels")
        else:
            path = Path(__file__).with_name("tpru_triton_kernels.py")
            spec = importlib.util.spec_from_file_location(f"{__package__}._tpru_triton_kernels_interpreted", path)
            module = importlib.util.module_from_spec(spec)
            with triton.knobs.runtime.scope():  # restores TRITON_INTERPRET afterwards: nothing leaks
                triton.knobs.runtime.interpret = True
                spec.loader.exec_module(module)
            _KERNELS[True] = module
    return _KERNELS[interpret]


def _dot_precision(dtype: torch.dtype) -> str:
    """IEEE for float64; for float32 TF32 exactly when torch uses it for CUDA matmuls."""
    if dtype != torch.float32:
        return "ieee"
    matmul = torch.backends.cuda.matmul
    setting = getattr(matmul, "fp32_precision", None)
    if setting in ("tf32", "ieee"):
        return setting
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return "tf32" if matmul.allow_tf32 else "ieee"


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


def _interpreting(device: torch.device) -> bool:
    if device.type == "cuda":
        return bool(triton.knobs.runtime.interpret)
    if device.type == "cpu":
        return True
    raise RuntimeError(f"the Triton TPRU kernel runs on CUDA tensors (or CPU tensors in Triton's interpreter), not {device}")


def _layout(gx, fx, W_rec, R_slices, U_slices, config: TritonConfig) -> dict:
    T, B, d = gx.shape
    k, s, N = R_slices.shape
    folded = U_slices is None
    resident = (folded and k == 1 and not config.force_tiled
                and _pow2(d) ** 2 + 2 * _pow2(d) * _pow2(N) <= config.resident_max)
    return dict(T=T, B=B, D=d, N=N, K=k, S=s, ROWS=W_rec.shape[0], folded=folded, has_vb=W_rec.shape[0] > d,
                resident=resident, grid=(triton.cdiv(B, config.block_b),), NP=_pow2(N), DP=_pow2(d),
                BLOCK_K=min(config.block_k, _pow2(max(d, W_rec.shape[0]))), BLOCK_S=min(config.block_s, _pow2(s)),
                BLOCK_N=min(config.block_n, _pow2(N)))


def forward_recurrence(gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, relu2: bool, tanh_candidate: bool,
                       config: TritonConfig = DEFAULT_CONFIG):
    """One launch for all T steps. Returns states [T+1,B,d] (states[0] = b0) and what backward needs."""
    L = _layout(gx, fx, W_rec, R_slices, U_slices, config)
    T, B, d, k, N = L["T"], L["B"], L["D"], L["K"], L["N"]
    K = kernels(_interpreting(gx.device))
    states = gx.new_empty(T + 1, B, d)
    states[0] = b0
    gates, cands = torch.empty_like(gx), torch.empty_like(gx)
    fills = fx.new_empty(T, B, k, N)
    zs = gx.new_empty(T, B, d) if not L["folded"] else None
    relu_b = fx.new_empty(T, B, k, N) if relu2 else None
    sums = fx.new_empty(T, B, k) if relu2 else None
    dummy = gx.new_empty(1)  # pointer for buffers a variant does not use
    common = dict(RELU2=relu2, TANH=tanh_candidate, BLOCK_B=config.block_b,
                  PRECISION=_dot_precision(gx.dtype), EPS=NORM_EPS, num_warps=config.num_warps)
    if L["resident"]:
        K.forward_resident[L["grid"]](
            gx, fx, W_rec, R_slices, c_b, c_x, states, gates, cands, fills,
            relu_b if relu2 else dummy, sums if relu2 else dummy, T, B, D=d, N=N, DP=L["DP"], NP=L["NP"], **common)
    else:
        K.forward_tiled[L["grid"]](
            gx, fx, W_rec, R_slices, U_slices if U_slices is not None else dummy, c_b, c_x, states, gates, cands,
            fills, zs if zs is not None else dummy, relu_b if relu2 else dummy, sums if relu2 else dummy, T, B,
            D=d, N=N, K=k, S=L["S"], FOLDED=L["folded"], HAS_VB=L["has_vb"], BLOCK_K=L["BLOCK_K"],
            BLOCK_S=L["BLOCK_S"], BLOCK_N=L["BLOCK_N"], **common)
    return states, gates, cands, fills, zs, relu_b, sums


def backward_recurrence(grad_out, states, gates, cands, fills, zs, relu_b, sums, fx, W_rec, R_slices, U_slices, c_x,
                        relu2: bool, tanh_candidate: bool, config: TritonConfig = DEFAULT_CONFIG):
    """One launch walks time backwards; returns (d_pre [T,B,rows], d_scores, d_fb [T,B,k,N], d_cand, d_b0)."""
    L = _layout(gates, fx, W_rec, R_slices, U_slices, config)
    T, B, d, k, N, rows = L["T"], L["B"], L["D"], L["K"], L["N"], L["ROWS"]
    K = kernels(_interpreting(gates.device))
    d_pre = gates.new_empty(T, B, rows)
    d_scores = fills.new_empty(T, B, k, N)
    d_fb = None if L["folded"] else fills.new_empty(T, B, k, N)
    d_cand = torch.empty_like(gates)
    dummy = gates.new_empty(1)
    common = dict(RELU2=relu2, TANH=tanh_candidate, BLOCK_B=config.block_b,
                  PRECISION=_dot_precision(gates.dtype), EPS=NORM_EPS, num_warps=config.num_warps)
    sums_arg, relu_arg = (sums, relu_b) if relu2 else (dummy, dummy)
    if L["resident"]:
        d_b0 = gates.new_empty(B, d)
        K.backward_resident[L["grid"]](
            grad_out, states, gates, cands, fills, relu_arg, sums_arg, fx, W_rec, R_slices, c_x,
            d_pre, d_scores, d_cand, d_b0, T, B, D=d, N=N, DP=L["DP"], NP=L["NP"], **common)
    else:
        carry = gates.new_zeros(2, B, d)
        dz = gates.new_empty(B, d) if not L["folded"] and not L["has_vb"] else dummy
        K.backward_tiled[L["grid"]](
            grad_out, states, gates, cands, fills, relu_arg, sums_arg, fx, W_rec, R_slices,
            U_slices if U_slices is not None else dummy, c_x, d_pre, d_scores, d_fb if d_fb is not None else dummy,
            d_cand, carry, dz, T, B, D=d, N=N, K=k, S=L["S"], ROWS=rows, FOLDED=L["folded"], HAS_VB=L["has_vb"],
            BLOCK_K=L["BLOCK_K"], BLOCK_S=L["BLOCK_S"], BLOCK_N=L["BLOCK_N"], **common)
        d_b0 = carry[T % 2]
    return d_pre, d_scores, d_fb, d_cand, d_b0


class TPRUTritonRecurrence(torch.autograd.Function):
    """`TPRURecurrence` with the time loops in Triton kernels: same inputs, same output b_1..b_T [T,B,d].
    The trailing `config` (tile sizes) is optional and not differentiable."""

    @staticmethod
    def forward(ctx, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, norm: str, tanh_candidate: bool,
                config: TritonConfig | None = None):
        config = config or DEFAULT_CONFIG
        relu2 = norm == "relu2"
        contiguous = [t.contiguous() if t is not None else None for t in (gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0)]
        gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0 = contiguous
        states, gates, cands, fills, zs, relu_b, sums = forward_recurrence(
            gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, relu2, tanh_candidate, config)
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
            grad_out.contiguous(), states, gates, cands, fills, zs, relu_b, sums, fx, W_rec, R_slices, U_slices, c_x,
            relu2, ctx.use_tanh, ctx.config)
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


def _notice_once(reason: str) -> None:
    if reason not in _NOTICES:
        _NOTICES.add(reason)
        log.warning("TPRU on CUDA uses the autograd-Function path, not the Triton kernel: %s", reason)


def select_recurrence(impl: str, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0):
    """The autograd Function for one call. `fused`: the Triton kernel for CUDA tensors it supports
    (else the CPU Function, with a one-time notice on CUDA saying why); `triton`: always the kernel
    (CPU tensors run in Triton's interpreter), an error when it cannot run."""
    if impl == "triton":
        reason = unsupported_reason(gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0)
        if reason:
            raise RuntimeError(f"impl=triton cannot run this call: {reason}")
        return TPRUTritonRecurrence
    if gx.is_cuda and gx.shape[0] > 0 and gx.shape[1] > 0:
        reason = unsupported_reason(gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0)
        if reason is None:
            return TPRUTritonRecurrence
        _notice_once(reason)
    return TPRURecurrence
