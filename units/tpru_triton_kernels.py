"""Triton kernels of the TPRU recurrence (forward and backward); launched by units/tpru_triton.py.

Only `@triton.jit` code lives here, so that `tpru_triton` can load this file a second time in
Triton's interpreter mode (CPU tensors) without touching the compiled copy: whether a kernel is
interpreted is fixed when `@triton.jit` runs, i.e. when this module is executed.

The design (and what it takes from FlashRNN) is in tpru_triton.py's docstring. Layout: time-major
and contiguous, every stride computed from the sizes:
    gx, gates, cands, zs, d_cand, grad_out  [T, B, D]       states  [T+1, B, D] (states[0] = b_0)
    fx, fills, relu_b, d_scores, d_fb       [T, B, K, N]    sums    [T, B, K]
    W (W_rec)                               [ROWS, D]       d_pre   [T, B, ROWS]
    R, U (R_slices, U_slices)               [K, S, N]       c_b [K, N], c_x a 0-d tensor
Every `tl.dot` operand has all sizes >= 16 (the GPU's minimum): the host pads N, S, d to powers
of two >= 16 and masks the padding (loads give 0, softmax logits -inf).
"""

from __future__ import annotations

import triton
import triton.language as tl

# Reductions name tl.standard's own combine functions (tl.sum and tl.max do exactly this): the
# interpreter recognises them and uses numpy, and, unlike tl.sum, tl.max, tl.sigmoid and tl.zeros
# (themselves @triton.jit functions, compiled or interpreted as triton.language was imported), they
# work in a kernel interpreted while triton.language was imported for the GPU.
_sum_combine = tl.standard._sum_combine
_max_combine = tl.standard._elementwise_max


@triton.jit
def _row_sum(x):
    return tl.reduce(x, 1, _sum_combine)


@triton.jit
def _row_max(x):
    return tl.reduce(x, 1, _max_combine)


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    # tl has no tanh the interpreter can run (libdevice is GPU-only); this form cannot overflow.
    e = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -y, y)


@triton.jit
def _lerp(start, end, weight):
    # torch.lerp's formula exactly (its two branches), so outputs match the CPU path to the last bits.
    diff = end - start
    return tl.where(weight < 0.5, start + weight * diff, end - diff * (1.0 - weight))


@triton.jit
def _normalise(score, f_x, cx, nmask, RELU2: tl.constexpr, EPS: tl.constexpr):
    """Fillers f [BLOCK_B, NP] from the recurrent score (incl. c_b) and the input score f_x.
    Returns (f, ReLU(f_b + c_b) or the score, the clamped Σf̃ per row (1 for softmax))."""
    if RELU2:
        relu_b = tl.maximum(score, 0.0)
        a = tl.where(nmask[None, :], relu_b + tl.maximum(f_x + cx, 0.0), 0.0)
        a2 = a * a
        total = tl.maximum(_row_sum(a2), EPS)  # the authors' clamp_min(1e-7)
        f = a2 / total[:, None]
    else:
        logits = tl.where(nmask[None, :], score + f_x + cx, float("-inf"))
        e = tl.exp(logits - _row_max(logits)[:, None])
        f = e / _row_sum(e)[:, None]
        relu_b = score
        total = _row_sum(f)
    return f, relu_b, total


@triton.jit
def _normalise_backward(d_f, f, proj, relu_b, f_x, cx, total, RELU2: tl.constexpr, EPS: tl.constexpr):
    """(∂ of the normaliser's input score, ∂f_b) from ∂f, with proj = Σ_n ∂f_n f_n over the whole
    row (a row may span several tiles); tpru_fused.TPRURecurrence.backward's algebra."""
    if RELU2:
        # f = f̃/max(Σf̃, eps): below the clamp the divisor is a constant and there is no coupling term.
        centred = d_f - tl.where(total > EPS, proj, 0.0)[:, None]
        a = relu_b + tl.maximum(f_x + cx, 0.0)
        d_a = 2.0 * a / total[:, None] * centred
        d_fb = tl.where(relu_b > 0, d_a, 0.0)
        d_score = d_a
    else:
        d_fb = f * (d_f - proj[:, None])
        d_score = d_fb
    return d_score, d_fb


# ------------------------------------------------------------------------------------------------
# Resident kernels: one slice, folded W_rec, small enough that W_b, Uᵀ V_b and R stay in registers
# for the whole sequence and b_{t-1} never leaves the chip.
# ------------------------------------------------------------------------------------------------
@triton.jit
def forward_resident(
    gx,
    fx,
    W,
    R,
    c_b,
    c_x,
    states,
    gates,
    cands,
    fills,
    relu_b,
    sums,
    T,
    B,
    D: tl.constexpr,
    N: tl.constexpr,
    RELU2: tl.constexpr,
    TANH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    DP: tl.constexpr,
    NP: tl.constexpr,
    PRECISION: tl.constexpr,
    EPS: tl.constexpr,
):
    rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    bmask = rb < B
    i = tl.arange(0, DP)
    imask = i < D
    n = tl.arange(0, NP)
    nmask = n < N
    mask_bi = bmask[:, None] & imask[None, :]
    mask_bn = bmask[:, None] & nmask[None, :]
    # The recurrent matrices, loaded once (FlashRNN's "load recurrent weights only once").
    WbT = tl.load(W + i[None, :] * D + i[:, None], mask=imask[:, None] & imask[None, :], other=0.0)  # [in, out] = W_bᵀ
    MT = tl.load(W + (D + n)[None, :] * D + i[:, None], mask=nmask[None, :] & imask[:, None], other=0.0)  # (Uᵀ V_b)ᵀ
    RT = tl.load(R + i[None, :] * N + n[:, None], mask=imask[None, :] & nmask[:, None], other=0.0)  # Rᵀ
    cb = tl.load(c_b + n, mask=nmask, other=0.0)
    cx = tl.load(c_x)
    prev = tl.load(states + rb[:, None] * D + i[None, :], mask=mask_bi, other=0.0)  # b_0
    for t in range(T):
        row = (t * B + rb).to(tl.int64)
        gpre = tl.dot(prev, WbT, input_precision=PRECISION)
        gpre += tl.load(gx + row[:, None] * D + i[None, :], mask=mask_bi, other=0.0)
        score = tl.dot(prev, MT, input_precision=PRECISION) + cb[None, :]
        f_x = tl.load(fx + row[:, None] * N + n[None, :], mask=mask_bn, other=0.0)
        f, rbv, total = _normalise(score, f_x, cx, nmask, RELU2, EPS)
        tl.store(fills + row[:, None] * N + n[None, :], f, mask=mask_bn)
        if RELU2:
            tl.store(relu_b + row[:, None] * N + n[None, :], rbv, mask=mask_bn)
            tl.store(sums + row, total, mask=bmask)
        cand = tl.dot(f, RT, input_precision=PRECISION)
        if TANH:
            cand = _tanh(cand)
        g = _sigmoid(gpre)
        b = _lerp(prev, cand, g)
        tl.store(gates + row[:, None] * D + i[None, :], g, mask=mask_bi)
        tl.store(cands + row[:, None] * D + i[None, :], cand, mask=mask_bi)
        tl.store(states + (row + B)[:, None] * D + i[None, :], b, mask=mask_bi)
        prev = b


@triton.jit
def backward_resident(
    grad_out,
    states,
    gates,
    cands,
    fills,
    relu_b,
    sums,
    fx,
    W,
    R,
    c_x,
    d_pre,
    d_scores,
    d_cand,
    d_b0,
    T,
    B,
    D: tl.constexpr,
    N: tl.constexpr,
    RELU2: tl.constexpr,
    TANH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    DP: tl.constexpr,
    NP: tl.constexpr,
    PRECISION: tl.constexpr,
    EPS: tl.constexpr,
):
    ROWS: tl.constexpr = D + N
    rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    bmask = rb < B
    i = tl.arange(0, DP)
    imask = i < D
    n = tl.arange(0, NP)
    nmask = n < N
    mask_bi = bmask[:, None] & imask[None, :]
    mask_bn = bmask[:, None] & nmask[None, :]
    Wb = tl.load(W + i[:, None] * D + i[None, :], mask=imask[:, None] & imask[None, :], other=0.0)  # [out, in]
    M = tl.load(W + (D + n)[:, None] * D + i[None, :], mask=nmask[:, None] & imask[None, :], other=0.0)  # Uᵀ V_b
    Rm = tl.load(R + i[:, None] * N + n[None, :], mask=imask[:, None] & nmask[None, :], other=0.0)  # R
    cx = tl.load(c_x)
    carry = tl.full((BLOCK_B, DP), 0.0, states.dtype.element_ty)  # ∂L/∂b_t from the steps after t
    for tt in range(T):
        t = T - 1 - tt
        row = (t * B + rb).to(tl.int64)
        dh = tl.load(grad_out + row[:, None] * D + i[None, :], mask=mask_bi, other=0.0) + carry
        g = tl.load(gates + row[:, None] * D + i[None, :], mask=mask_bi, other=0.0)
        cand = tl.load(cands + row[:, None] * D + i[None, :], mask=mask_bi, other=0.0)
        prev = tl.load(states + row[:, None] * D + i[None, :], mask=mask_bi, other=0.0)
        d_gate = dh * (cand - prev) * g * (1.0 - g)
        dc = dh * g
        if TANH:
            dc = dc * (1.0 - cand * cand)
        tl.store(d_pre + row[:, None] * ROWS + i[None, :], d_gate, mask=mask_bi)
        tl.store(d_cand + row[:, None] * D + i[None, :], dc, mask=mask_bi)
        d_f = tl.dot(dc, Rm, input_precision=PRECISION)
        f = tl.load(fills + row[:, None] * N + n[None, :], mask=mask_bn, other=0.0)
        if RELU2:
            rbv = tl.load(relu_b + row[:, None] * N + n[None, :], mask=mask_bn, other=0.0)
            f_x = tl.load(fx + row[:, None] * N + n[None, :], mask=mask_bn, other=0.0)
            total = tl.load(sums + row, mask=bmask, other=1.0)
        else:
            rbv = f
            f_x = f
            total = _row_sum(f)
        d_score, d_fb = _normalise_backward(d_f, f, _row_sum(d_f * f), rbv, f_x, cx, total, RELU2, EPS)
        tl.store(d_scores + row[:, None] * N + n[None, :], d_score, mask=mask_bn)
        tl.store(d_pre + row[:, None] * ROWS + D + n[None, :], d_fb, mask=mask_bn)
        carry = dh * (1.0 - g) + tl.dot(d_gate, Wb, input_precision=PRECISION) + tl.dot(d_fb, M, input_precision=PRECISION)
    tl.store(d_b0 + rb[:, None] * D + i[None, :], carry, mask=mask_bi)


# ------------------------------------------------------------------------------------------------
# Tiled kernels: any size and any number of slices. Nothing is held whole: b_{t-1} is read back
# from `states` (L1/L2) in BLOCK_K-wide tiles, roles go BLOCK_N at a time (two passes: scores
# and row statistics, then the normalised fillers), columns BLOCK_S at a time, and W_rec, R, U
# stream through the cache in tiles every step. Values a program writes and then reads in
# another layout (states, fillers, ∂f, ...) are separated by a CTA barrier (tl.debug_barrier).
# ------------------------------------------------------------------------------------------------
@triton.jit
def _prev_times(states, prev_row, bmask, W, out_rows, out_mask, acc, D: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    """acc + b_{t-1} @ W[out_rows]ᵀ, the reduction over d in BLOCK_K tiles."""
    for k0 in range(0, D, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        kmask = kk < D
        p = tl.load(states + prev_row[:, None] + kk[None, :], mask=bmask[:, None] & kmask[None, :], other=0.0)
        w = tl.load(W + out_rows[None, :] * D + kk[:, None], mask=out_mask[None, :] & kmask[:, None], other=0.0)
        acc += tl.dot(p, w, input_precision=PRECISION)
    return acc


@triton.jit
def forward_tiled(
    gx,
    fx,
    W,
    R,
    U,
    c_b,
    c_x,
    states,
    gates,
    cands,
    fills,
    zs,
    relu_b,
    sums,
    T,
    B,
    D: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    S: tl.constexpr,
    FOLDED: tl.constexpr,
    HAS_VB: tl.constexpr,
    RELU2: tl.constexpr,
    TANH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    EPS: tl.constexpr,
):
    dtype = states.dtype.element_ty
    rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    bmask = rb < B
    cx = tl.load(c_x)
    for t in range(T):
        row = (t * B + rb).to(tl.int64)
        prev_row = row * D  # states[t] holds b_{t-1}
        next_row = (row + B) * D  # states[t+1] receives b_t
        for j in range(K):
            zbase = states + prev_row  # V_b = I: z is b_{t-1} itself
            if not FOLDED:
                if HAS_VB:  # z = V_b b_{t-1}, slice j: rows D + j·S … of W_rec = [W_b; V_b]
                    for c0 in range(0, S, BLOCK_S):
                        c = c0 + tl.arange(0, BLOCK_S)
                        cmask = c < S
                        z = _prev_times(
                            states, prev_row, bmask, W, D + j * S + c, cmask, tl.full((BLOCK_B, BLOCK_S), 0.0, dtype), D, BLOCK_K, PRECISION
                        )
                        tl.store(zs + row[:, None] * D + (j * S + c)[None, :], z, mask=bmask[:, None] & cmask[None, :])
                    tl.debug_barrier()
                    zbase = zs + row * D
                else:
                    for c0 in range(0, S, BLOCK_S):
                        c = c0 + tl.arange(0, BLOCK_S)
                        mask_bc = bmask[:, None] & (c < S)[None, :]
                        z = tl.load(states + prev_row[:, None] + (j * S + c)[None, :], mask=mask_bc, other=0.0)
                        tl.store(zs + row[:, None] * D + (j * S + c)[None, :], z, mask=mask_bc)
            # Pass 1: scores of slice j, BLOCK_N roles at a time; f̃ (ReLU²) or the logits go to
            # `fills` for now, with the row statistics (Σf̃; softmax's running max and Σexp).
            stat = tl.full((BLOCK_B,), 0.0, dtype)
            row_max = tl.full((BLOCK_B,), float("-inf"), dtype)
            for n0 in range(0, N, BLOCK_N):
                n = n0 + tl.arange(0, BLOCK_N)
                nmask = n < N
                mask_bn = bmask[:, None] & nmask[None, :]
                if FOLDED:
                    score = _prev_times(
                        states, prev_row, bmask, W, D + j * N + n, nmask, tl.full((BLOCK_B, BLOCK_N), 0.0, dtype), D, BLOCK_K, PRECISION
                    )
                else:  # Uᵀ z per slice, the reduction over the slice's S entries
                    score = tl.full((BLOCK_B, BLOCK_N), 0.0, dtype)
                    for c0 in range(0, S, BLOCK_S):
                        c = c0 + tl.arange(0, BLOCK_S)
                        cmask = c < S
                        z = tl.load(zbase[:, None] + (j * S + c)[None, :], mask=bmask[:, None] & cmask[None, :], other=0.0)
                        u = tl.load(U + (j * S + c)[:, None] * N + n[None, :], mask=cmask[:, None] & nmask[None, :], other=0.0)
                        score += tl.dot(z, u, input_precision=PRECISION)
                score += tl.load(c_b + j * N + n, mask=nmask, other=0.0)[None, :]
                fn_off = (row * K + j)[:, None] * N + n[None, :]
                f_x = tl.load(fx + fn_off, mask=mask_bn, other=0.0)
                if RELU2:
                    rbv = tl.maximum(score, 0.0)
                    tl.store(relu_b + fn_off, rbv, mask=mask_bn)
                    a = tl.where(nmask[None, :], rbv + tl.maximum(f_x + cx, 0.0), 0.0)
                    a2 = a * a
                    tl.store(fills + fn_off, a2, mask=mask_bn)
                    stat += _row_sum(a2)
                else:
                    logits = tl.where(nmask[None, :], score + f_x + cx, float("-inf"))
                    tl.store(fills + fn_off, logits, mask=mask_bn)
                    new_max = tl.maximum(row_max, _row_max(logits))
                    stat = stat * tl.exp(row_max - new_max) + _row_sum(tl.exp(logits - new_max[:, None]))
                    row_max = new_max
            if RELU2:
                stat = tl.maximum(stat, EPS)  # the authors' clamp_min(1e-7)
                tl.store(sums + row * K + j, stat, mask=bmask)
            tl.debug_barrier()
            # Pass 2: normalise in place.
            for n0 in range(0, N, BLOCK_N):
                n = n0 + tl.arange(0, BLOCK_N)
                mask_bn = bmask[:, None] & (n < N)[None, :]
                fn_off = (row * K + j)[:, None] * N + n[None, :]
                raw = tl.load(fills + fn_off, mask=mask_bn, other=0.0)
                if RELU2:
                    f = raw / stat[:, None]
                else:
                    f = tl.exp(raw - row_max[:, None]) / stat[:, None]
                tl.store(fills + fn_off, f, mask=mask_bn)
            tl.debug_barrier()
            # Pass 3: candidate b̃ = R f, gate and new state for slice j's columns, BLOCK_S at a time.
            for c0 in range(0, S, BLOCK_S):
                c = c0 + tl.arange(0, BLOCK_S)
                cmask = c < S
                col = j * S + c
                mask_bc = bmask[:, None] & cmask[None, :]
                cand = tl.full((BLOCK_B, BLOCK_S), 0.0, dtype)
                for n0 in range(0, N, BLOCK_N):
                    n = n0 + tl.arange(0, BLOCK_N)
                    nmask = n < N
                    f = tl.load(fills + (row * K + j)[:, None] * N + n[None, :], mask=bmask[:, None] & nmask[None, :], other=0.0)
                    r = tl.load(R + col[None, :] * N + n[:, None], mask=cmask[None, :] & nmask[:, None], other=0.0)
                    cand += tl.dot(f, r, input_precision=PRECISION)
                if TANH:
                    cand = _tanh(cand)
                gpre = tl.load(gx + row[:, None] * D + col[None, :], mask=mask_bc, other=0.0)
                gpre = _prev_times(states, prev_row, bmask, W, col, cmask, gpre, D, BLOCK_K, PRECISION)
                g = _sigmoid(gpre)
                pc = tl.load(states + prev_row[:, None] + col[None, :], mask=mask_bc, other=0.0)
                tl.store(gates + row[:, None] * D + col[None, :], g, mask=mask_bc)
                tl.store(cands + row[:, None] * D + col[None, :], cand, mask=mask_bc)
                tl.store(states + next_row[:, None] + col[None, :], _lerp(pc, cand, g), mask=mask_bc)
        tl.debug_barrier()


@triton.jit
def backward_tiled(
    grad_out,
    states,
    gates,
    cands,
    fills,
    relu_b,
    sums,
    fx,
    W,
    R,
    U,
    c_x,
    d_pre,
    d_scores,
    d_fb_all,
    d_cand,
    carry,
    dz,
    T,
    B,
    D: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    S: tl.constexpr,
    ROWS: tl.constexpr,
    FOLDED: tl.constexpr,
    HAS_VB: tl.constexpr,
    RELU2: tl.constexpr,
    TANH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    EPS: tl.constexpr,
):
    """`carry` is [2, B, D], zero on entry: step t reads ∂L/∂b_t's recurrent part from one half and
    writes ∂L/∂b_{t-1}'s into the other; at the end the half T % 2 holds ∂L/∂b_0. `dz` [B, D] is
    scratch for V_b = I with unfolded scores (∂z goes straight into the carry)."""
    dtype = states.dtype.element_ty
    rb = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    bmask = rb < B
    cx = tl.load(c_x)
    for tt in range(T):
        t = T - 1 - tt
        row = (t * B + rb).to(tl.int64)
        cur = carry + (tt % 2) * B * D + rb[:, None] * D
        nxt = carry + ((tt + 1) % 2) * B * D + rb[:, None] * D
        for j in range(K):
            # A: ∂ gate pre-activation and ∂b̃ for slice j's columns.
            for c0 in range(0, S, BLOCK_S):
                c = c0 + tl.arange(0, BLOCK_S)
                col = j * S + c
                mask_bc = bmask[:, None] & (c < S)[None, :]
                off = row[:, None] * D + col[None, :]
                dh = tl.load(grad_out + off, mask=mask_bc, other=0.0) + tl.load(cur + col[None, :], mask=mask_bc, other=0.0)
                g = tl.load(gates + off, mask=mask_bc, other=0.0)
                cand = tl.load(cands + off, mask=mask_bc, other=0.0)
                prev = tl.load(states + off, mask=mask_bc, other=0.0)
                dc = dh * g
                if TANH:
                    dc = dc * (1.0 - cand * cand)
                tl.store(d_pre + row[:, None] * ROWS + col[None, :], dh * (cand - prev) * g * (1.0 - g), mask=mask_bc)
                tl.store(d_cand + off, dc, mask=mask_bc)
            tl.debug_barrier()
            # B: ∂f = Rᵀ ∂b̃ per role tile (parked in d_scores) and Σ_n ∂f_n f_n per row.
            proj = tl.full((BLOCK_B,), 0.0, dtype)
            for n0 in range(0, N, BLOCK_N):
                n = n0 + tl.arange(0, BLOCK_N)
                nmask = n < N
                mask_bn = bmask[:, None] & nmask[None, :]
                d_f = tl.full((BLOCK_B, BLOCK_N), 0.0, dtype)
                for c0 in range(0, S, BLOCK_S):
                    c = c0 + tl.arange(0, BLOCK_S)
                    cmask = c < S
                    dc = tl.load(d_cand + row[:, None] * D + (j * S + c)[None, :], mask=bmask[:, None] & cmask[None, :], other=0.0)
                    r = tl.load(R + (j * S + c)[:, None] * N + n[None, :], mask=cmask[:, None] & nmask[None, :], other=0.0)
                    d_f += tl.dot(dc, r, input_precision=PRECISION)
                fn_off = (row * K + j)[:, None] * N + n[None, :]
                f = tl.load(fills + fn_off, mask=mask_bn, other=0.0)
                proj += _row_sum(d_f * f)
                tl.store(d_scores + fn_off, d_f, mask=mask_bn)
            tl.debug_barrier()
            # C: through the normaliser, to ∂ of its input score and ∂f_b.
            if RELU2:
                total = tl.load(sums + row * K + j, mask=bmask, other=1.0)
            else:
                total = proj
            for n0 in range(0, N, BLOCK_N):
                n = n0 + tl.arange(0, BLOCK_N)
                nmask = n < N
                mask_bn = bmask[:, None] & nmask[None, :]
                fn_off = (row * K + j)[:, None] * N + n[None, :]
                d_f = tl.load(d_scores + fn_off, mask=mask_bn, other=0.0)
                f = tl.load(fills + fn_off, mask=mask_bn, other=0.0)
                if RELU2:
                    rbv = tl.load(relu_b + fn_off, mask=mask_bn, other=0.0)
                    f_x = tl.load(fx + fn_off, mask=mask_bn, other=0.0)
                else:
                    rbv = f
                    f_x = f
                d_score, d_fb = _normalise_backward(d_f, f, proj, rbv, f_x, cx, total, RELU2, EPS)
                tl.store(d_scores + fn_off, d_score, mask=mask_bn)
                if FOLDED:
                    tl.store(d_pre + row[:, None] * ROWS + (D + j * N + n)[None, :], d_fb, mask=mask_bn)
                else:
                    tl.store(d_fb_all + fn_off, d_fb, mask=mask_bn)
            if not FOLDED:
                tl.debug_barrier()
                # D: ∂z = U ∂f_b for slice j, BLOCK_S columns at a time.
                for c0 in range(0, S, BLOCK_S):
                    c = c0 + tl.arange(0, BLOCK_S)
                    cmask = c < S
                    d_z = tl.full((BLOCK_B, BLOCK_S), 0.0, dtype)
                    for n0 in range(0, N, BLOCK_N):
                        n = n0 + tl.arange(0, BLOCK_N)
                        nmask = n < N
                        d_fb = tl.load(d_fb_all + (row * K + j)[:, None] * N + n[None, :], mask=bmask[:, None] & nmask[None, :], other=0.0)
                        ut = tl.load(U + (j * S + c)[None, :] * N + n[:, None], mask=cmask[None, :] & nmask[:, None], other=0.0)
                        d_z += tl.dot(d_fb, ut, input_precision=PRECISION)
                    if HAS_VB:
                        tl.store(d_pre + row[:, None] * ROWS + (D + j * S + c)[None, :], d_z, mask=bmask[:, None] & cmask[None, :])
                    else:
                        tl.store(dz + rb[:, None] * D + (j * S + c)[None, :], d_z, mask=bmask[:, None] & cmask[None, :])
        tl.debug_barrier()
        # ∂L/∂b_{t-1} = ∂b_t (1 − g) + ∂pre W_rec (+ ∂z when V_b = I), BLOCK_S columns at a time.
        for c0 in range(0, D, BLOCK_S):
            col = c0 + tl.arange(0, BLOCK_S)
            cmask = col < D
            mask_bc = bmask[:, None] & cmask[None, :]
            off = row[:, None] * D + col[None, :]
            dh = tl.load(grad_out + off, mask=mask_bc, other=0.0) + tl.load(cur + col[None, :], mask=mask_bc, other=0.0)
            acc = dh * (1.0 - tl.load(gates + off, mask=mask_bc, other=0.0))
            if not FOLDED:
                if not HAS_VB:
                    acc += tl.load(dz + rb[:, None] * D + col[None, :], mask=mask_bc, other=0.0)
            for r0 in range(0, ROWS, BLOCK_K):
                rr = r0 + tl.arange(0, BLOCK_K)
                rmask = rr < ROWS
                dp = tl.load(d_pre + row[:, None] * ROWS + rr[None, :], mask=bmask[:, None] & rmask[None, :], other=0.0)
                w = tl.load(W + rr[:, None] * D + col[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0)
                acc += tl.dot(dp, w, input_precision=PRECISION)
            tl.store(nxt + col[None, :], acc, mask=mask_bc)
        tl.debug_barrier()
