"""Triton kernels of the persistent TPRU recurrence; launched by units/tpru_persist.py (design there).

Only `@triton.jit` code lives here, so that `tpru_triton.kernels` can load this file a second time in
Triton's interpreter (CPU tensors), as it does for tpru_triton_kernels.py. The elementwise helpers
(gate, lerp, the normaliser's backward) are the batch kernels' own, imported, so both kernels compute
every value with the same formula.

One launch runs all T steps. Each step is a few *phases*; a phase is a list of *tiles*, and tile i
belongs to program i mod NPROG for the whole sequence (so a program reads the same weight tiles every
step, from L2 or its SM's L1). Between phases the programs meet at a grid-wide barrier
(`_grid_barrier`). With GRID_SYNC off (Triton's interpreter, which runs programs one after another,
and would spin forever at the first barrier) one program plays every program's part in turn: for
each phase it runs the tiles of program 0, 1, …, NPROG-1, then the next phase. Each tile computes
exactly what it computes on the card; only the order in which tiles run differs, and no tile reads
what another tile of the same phase writes, so both orders give the same numbers.

A tile is (work item, batch tile): BLOCK_B sequences and either BLOCK_C state columns of one slice
("column tiles": gate, z, candidate, carry) or BLOCK_N roles of one slice ("role tiles": scores,
∂fillers). Tile index = work item · NB + batch tile. Layouts are the batch kernels' (time-major,
contiguous; tpru_triton_kernels.py's docstring); scratch, rewritten every step:
    raw   [B, K, N]   f̃ (ReLU²) or the softmax logits, before normalisation   (forward)
    dfs   [B, K, N]   ∂f = Rᵀ ∂b̃, before the normaliser's backward             (backward)
    part  [B, K, NT]  per role tile: Σf̃, or Σexp(logit − tile max), or Σ ∂f·f
    pmax  [B, K, NT]  per role tile: the largest logit (softmax)
    carry [2, B, D]   ∂L/∂b_t's recurrent part, ping-pong between steps
Row statistics are combined from `part` in role-tile order by every tile that needs them: no atomics
touch data, so a run is deterministic.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .tpru_triton_kernels import _lerp, _normalise_backward, _row_max, _row_sum, _sigmoid, _tanh


@triton.jit
def _grid_barrier(counter, target, GRID_SYNC: tl.constexpr):
    """Wait until every program has arrived here: `counter` (int32, zero at launch) only grows, by one
    per program per barrier, so the k-th barrier of the launch is passed when it reads k · NPROG =
    `target` (no reset, hence no race between one barrier's leavers and the next one's arrivals).

    Memory ordering, what makes a program's stores of one phase visible to every program in the next:
    - tl.debug_barrier() (bar.sync) first: every thread of this program has issued its stores before
      its one arrival is counted (Triton executes a scalar atomic on one thread);
    - the arrival is a *release* at GPU scope: it is ordered after those stores, made cumulative by
      the bar.sync, as CUDA's cooperative-groups grid.sync orders them with __threadfence();
    - the spin reads with *acquire* at GPU scope (an atomic add of 0: Triton has no acquire load): once
      it sees every arrival, all stores released before them are visible to the reading thread, and
      the SM's L1 holds no stale line of them;
    - tl.debug_barrier() last: the other threads of the program wait for that acquire before loading.
    For sm_90 Triton 3.9 lowers this to `red.global.gpu.release.add` and a spin on
    `ld.global.gpu.acquire`, both on one thread, its value passed on through shared memory between two
    bar.syncs — cooperative groups' grid.sync (tests/test_tpru_persist.py checks the PTX).
    Deadlock-free only if all NPROG programs are resident at once: the launch is cooperative and is
    checked against the SM count and the kernel's occupancy first (tpru_persist.check_co_resident).
    Without GRID_SYNC (one program plays all of them in turn) there is nothing to wait for."""
    if GRID_SYNC:
        tl.debug_barrier()
        tl.atomic_add(counter, 1, sem="release", scope="gpu")
        while tl.atomic_add(counter, 0, sem="acquire", scope="gpu") < target:
            pass
        tl.debug_barrier()


@triton.jit
def _dot_acc(acc, a, a_row, bmask, a_col0, KS, b, b_k_stride, b_out, out_mask, BK: tl.constexpr, PRECISION: tl.constexpr):
    """acc + A @ Bm, reduced over KS in BK-wide chunks: A[r, k] = a[a_row[r] + a_col0 + k] (rows of a
    row-major activation), Bm[k, o] = b[k · b_k_stride + b_out[o]] (a weight tile in any layout)."""
    for k0 in range(0, KS, BK):
        kk = k0 + tl.arange(0, BK)
        kmask = kk < KS
        x = tl.load(a + a_row[:, None] + (a_col0 + kk)[None, :], mask=bmask[:, None] & kmask[None, :], other=0.0)
        w = tl.load(b + kk[:, None] * b_k_stride + b_out[None, :], mask=kmask[:, None] & out_mask[None, :], other=0.0)
        acc += tl.dot(x, w, input_precision=PRECISION)
    return acc


@triton.jit
def _batch_rows(bt, t, B, BLOCK_B: tl.constexpr):
    """Sequences of batch tile bt, their mask and their row index in a [T, B, …] tensor at step t."""
    rb = bt * BLOCK_B + tl.arange(0, BLOCK_B)
    return rb, rb < B, (t * B + rb).to(tl.int64)


# ------------------------------------------------------------------------------------------------
# Forward tiles
# ------------------------------------------------------------------------------------------------
@triton.jit
def _gate_tile(
    w,
    bt,
    t,
    gx,
    W,
    states,
    gates,
    zs,
    B,
    D,
    S,
    CT,
    COPY_Z: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BK_D: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """g_t = σ(W_b b_{t-1} + gx_t) for BLOCK_C columns of slice w // CT (and z = b_{t-1} when V_b = I)."""
    rb, bmask, row = _batch_rows(bt, t, B, BLOCK_B)
    c = (w % CT) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < S
    col = (w // CT) * S + c
    mask = bmask[:, None] & cmask[None, :]
    pre = tl.load(gx + row[:, None] * D + col[None, :], mask=mask, other=0.0)
    pre = _dot_acc(pre, states, row * D, bmask, 0, D, W, 1, col * D, cmask, BK_D, PRECISION)
    tl.store(gates + row[:, None] * D + col[None, :], _sigmoid(pre), mask=mask)
    if COPY_Z:  # unfolded scores with V_b = I: backward's ∂U needs z_t = b_{t-1}
        prev = tl.load(states + row[:, None] * D + col[None, :], mask=mask, other=0.0)
        tl.store(zs + row[:, None] * D + col[None, :], prev, mask=mask)


@triton.jit
def _z_tile(w, bt, t, W, states, zs, B, D, S, CT, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr, BK_D: tl.constexpr, PRECISION: tl.constexpr):
    """z_t = V_b b_{t-1} for BLOCK_C columns of slice w // CT: rows D + column of W_rec = [W_b; V_b]."""
    rb, bmask, row = _batch_rows(bt, t, B, BLOCK_B)
    c = (w % CT) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < S
    col = (w // CT) * S + c
    z = tl.full((BLOCK_B, BLOCK_C), 0.0, zs.dtype.element_ty)
    z = _dot_acc(z, states, row * D, bmask, 0, D, W, 1, (D + col) * D, cmask, BK_D, PRECISION)
    tl.store(zs + row[:, None] * D + col[None, :], z, mask=bmask[:, None] & cmask[None, :])


@triton.jit
def _score_tile(
    w,
    bt,
    t,
    fx,
    W,
    U,
    c_b,
    cx,
    states,
    zs,
    relu_b,
    raw,
    part,
    pmax,
    B,
    D,
    N,
    K,
    S,
    NT,
    FOLDED: tl.constexpr,
    HAS_VB: tl.constexpr,
    RELU2: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BK_D: tl.constexpr,
    BK_S: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Scores of BLOCK_N roles of slice j = w // NT, before normalisation, and this role tile's share
    of the row statistics (the normaliser needs the whole row: it is finished by `_cand_tile`)."""
    rb, bmask, row = _batch_rows(bt, t, B, BLOCK_B)
    j = w // NT
    nt = w % NT
    n = nt * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    mask = bmask[:, None] & nmask[None, :]
    score = tl.full((BLOCK_B, BLOCK_N), 0.0, raw.dtype.element_ty)
    if FOLDED:  # f_b = (Uᵀ V_b)_j b_{t-1}: rows D + j·N + n of W_rec
        score = _dot_acc(score, states, row * D, bmask, 0, D, W, 1, (D + j * N + n) * D, nmask, BK_D, PRECISION)
    elif HAS_VB:  # f_b = U_jᵀ z_j, z = V_b b_{t-1} from this step's z tiles
        score = _dot_acc(score, zs, row * D, bmask, j * S, S, U + j * S * N, N, n, nmask, BK_S, PRECISION)
    else:  # V_b = I: f_b = U_jᵀ (b_{t-1})_j
        score = _dot_acc(score, states, row * D, bmask, j * S, S, U + j * S * N, N, n, nmask, BK_S, PRECISION)
    score += tl.load(c_b + j * N + n, mask=nmask, other=0.0)[None, :]
    fn_off = (row * K + j)[:, None] * N + n[None, :]
    scratch = (rb * K + j)[:, None] * N + n[None, :]
    stat = (rb * K + j) * NT + nt
    f_x = tl.load(fx + fn_off, mask=mask, other=0.0)
    if RELU2:
        rbv = tl.maximum(score, 0.0)
        tl.store(relu_b + fn_off, rbv, mask=mask)
        a = tl.where(nmask[None, :], rbv + tl.maximum(f_x + cx, 0.0), 0.0)
        a2 = a * a
        tl.store(raw + scratch, a2, mask=mask)
        tl.store(part + stat, _row_sum(a2), mask=bmask)
    else:
        logits = tl.where(nmask[None, :], score + f_x + cx, float("-inf"))
        tl.store(raw + scratch, logits, mask=mask)
        tile_max = _row_max(logits)
        tl.store(pmax + stat, tile_max, mask=bmask)
        tl.store(part + stat, _row_sum(tl.exp(logits - tile_max[:, None])), mask=bmask)


@triton.jit
def _cand_tile(
    w,
    bt,
    t,
    R,
    states,
    gates,
    cands,
    fills,
    sums,
    raw,
    part,
    pmax,
    B,
    D,
    N,
    K,
    S,
    CT,
    NT,
    RELU2: tl.constexpr,
    TANH: tl.constexpr,
    EPS: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """b̃ = R_j f_j and b_t = g ∘ b̃ + (1 − g) ∘ b_{t-1} for BLOCK_C columns of slice j = w // CT. The
    fillers are normalised on the fly from `raw` and the row statistics of every role tile; the
    slice's first column tile also stores them (and Σf̃) for backward."""
    rb, bmask, row = _batch_rows(bt, t, B, BLOCK_B)
    j = w // CT
    ct = w % CT
    c = ct * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < S
    col = j * S + c
    mask_c = bmask[:, None] & cmask[None, :]
    stat = (rb * K + j) * NT
    dtype = raw.dtype.element_ty
    total = tl.full((BLOCK_B,), 0.0, dtype)
    if RELU2:
        for i in range(NT):
            total += tl.load(part + stat + i, mask=bmask, other=0.0)
        total = tl.maximum(total, EPS)  # the authors' clamp_min(1e-7)
    else:
        row_max = tl.full((BLOCK_B,), float("-inf"), dtype)
        for i in range(NT):
            row_max = tl.maximum(row_max, tl.load(pmax + stat + i, mask=bmask, other=0.0))
        for i in range(NT):
            total += tl.load(part + stat + i, mask=bmask, other=0.0) * tl.exp(tl.load(pmax + stat + i, mask=bmask, other=0.0) - row_max)
        total = tl.where(bmask, total, 1.0)
    cand = tl.full((BLOCK_B, BLOCK_C), 0.0, dtype)
    for n0 in range(0, N, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        nmask = n < N
        mask_n = bmask[:, None] & nmask[None, :]
        r = tl.load(raw + (rb * K + j)[:, None] * N + n[None, :], mask=mask_n, other=0.0)
        if RELU2:
            f = r / total[:, None]
        else:
            f = tl.where(mask_n, tl.exp(r - row_max[:, None]), 0.0) / total[:, None]
        if ct == 0:
            tl.store(fills + (row * K + j)[:, None] * N + n[None, :], f, mask=mask_n)
        rt = tl.load(R + col[None, :] * N + n[:, None], mask=cmask[None, :] & nmask[:, None], other=0.0)  # R_jᵀ tile
        cand += tl.dot(f, rt, input_precision=PRECISION)
    if RELU2:
        if ct == 0:
            tl.store(sums + row * K + j, total, mask=bmask)
    if TANH:
        cand = _tanh(cand)
    g = tl.load(gates + row[:, None] * D + col[None, :], mask=mask_c, other=0.0)
    prev = tl.load(states + row[:, None] * D + col[None, :], mask=mask_c, other=0.0)
    tl.store(cands + row[:, None] * D + col[None, :], cand, mask=mask_c)
    tl.store(states + (row + B)[:, None] * D + col[None, :], _lerp(prev, cand, g), mask=mask_c)


@triton.jit
def forward_persistent(  # noqa: C901 — one branch per phase of a step, in the order they run
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
    raw,
    part,
    pmax,
    counter,
    T,
    B,
    D,
    N,
    K,
    S,
    NB,
    CT,
    NT,
    NPROG,
    FOLDED: tl.constexpr,
    HAS_VB: tl.constexpr,
    RELU2: tl.constexpr,
    TANH: tl.constexpr,
    GRID_SYNC: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BK_D: tl.constexpr,
    BK_S: tl.constexpr,
    PRECISION: tl.constexpr,
    EPS: tl.constexpr,
):
    """All T forward steps. Per step: [gate and score tiles (with V_b: gate and z tiles) | barrier |
    (with V_b: score tiles | barrier |) candidate and state tiles | barrier]."""
    if GRID_SYNC:
        first = tl.program_id(0)
        last = first + 1
    else:
        first = 0
        last = NPROG
    column_tiles = K * CT * NB
    role_tiles = K * NT * NB
    if HAS_VB:  # first phase: gate tiles, then z tiles (scores need the whole z) or score tiles
        SYNCS: tl.constexpr = 3  # barriers per step
        first_phase = 2 * column_tiles
    else:
        SYNCS: tl.constexpr = 2
        first_phase = column_tiles + role_tiles
    cx = tl.load(c_x)
    for t in range(T):
        for p in range(first, last):
            for tile in range(p, first_phase, NPROG):
                if tile < column_tiles:
                    _gate_tile(
                        tile // NB, tile % NB, t, gx, W, states, gates, zs, B, D, S, CT, not FOLDED and not HAS_VB, BLOCK_B, BLOCK_C, BK_D, PRECISION
                    )
                else:
                    other = tile - column_tiles
                    if HAS_VB:
                        _z_tile(other // NB, other % NB, t, W, states, zs, B, D, S, CT, BLOCK_B, BLOCK_C, BK_D, PRECISION)
                    else:
                        _score_tile(
                            other // NB,
                            other % NB,
                            t,
                            fx,
                            W,
                            U,
                            c_b,
                            cx,
                            states,
                            zs,
                            relu_b,
                            raw,
                            part,
                            pmax,
                            B,
                            D,
                            N,
                            K,
                            S,
                            NT,
                            FOLDED,
                            HAS_VB,
                            RELU2,
                            BLOCK_B,
                            BLOCK_N,
                            BK_D,
                            BK_S,
                            PRECISION,
                        )
        _grid_barrier(counter, NPROG * (SYNCS * t + 1), GRID_SYNC)
        if HAS_VB:
            for p in range(first, last):
                for tile in range(p, role_tiles, NPROG):
                    _score_tile(
                        tile // NB,
                        tile % NB,
                        t,
                        fx,
                        W,
                        U,
                        c_b,
                        cx,
                        states,
                        zs,
                        relu_b,
                        raw,
                        part,
                        pmax,
                        B,
                        D,
                        N,
                        K,
                        S,
                        NT,
                        FOLDED,
                        HAS_VB,
                        RELU2,
                        BLOCK_B,
                        BLOCK_N,
                        BK_D,
                        BK_S,
                        PRECISION,
                    )
            _grid_barrier(counter, NPROG * (SYNCS * t + 2), GRID_SYNC)
        for p in range(first, last):
            for tile in range(p, column_tiles, NPROG):
                _cand_tile(
                    tile // NB,
                    tile % NB,
                    t,
                    R,
                    states,
                    gates,
                    cands,
                    fills,
                    sums,
                    raw,
                    part,
                    pmax,
                    B,
                    D,
                    N,
                    K,
                    S,
                    CT,
                    NT,
                    RELU2,
                    TANH,
                    EPS,
                    BLOCK_B,
                    BLOCK_C,
                    BLOCK_N,
                    PRECISION,
                )
        _grid_barrier(counter, NPROG * (SYNCS * t + SYNCS), GRID_SYNC)


# ------------------------------------------------------------------------------------------------
# Backward tiles
# ------------------------------------------------------------------------------------------------
@triton.jit
def _step_grads(dh, t, rb, bmask, col, cmask, states, gates, cands, d_pre, d_cand, B, D, ROWS, TANH: tl.constexpr):
    """From ∂L/∂b_t (dh, for some columns): ∂ of the gate pre-activation (into d_pre) and ∂b̃ (d_cand)."""
    row = (t * B + rb).to(tl.int64)
    mask = bmask[:, None] & cmask[None, :]
    off = row[:, None] * D + col[None, :]
    g = tl.load(gates + off, mask=mask, other=0.0)
    cand = tl.load(cands + off, mask=mask, other=0.0)
    prev = tl.load(states + off, mask=mask, other=0.0)
    dc = dh * g
    if TANH:
        dc = dc * (1.0 - cand * cand)
    tl.store(d_pre + row[:, None] * ROWS + col[None, :], dh * (cand - prev) * g * (1.0 - g), mask=mask)
    tl.store(d_cand + off, dc, mask=mask)


@triton.jit
def _column(w, CT, S, BLOCK_C: tl.constexpr):
    """Slice, offsets within it, mask and state columns of column tile w."""
    j = w // CT
    c = (w % CT) * BLOCK_C + tl.arange(0, BLOCK_C)
    return j, c, c < S, j * S + c


@triton.jit
def _dfill_tile(
    w,
    bt,
    t,
    R,
    fills,
    d_cand,
    dfs,
    part,
    B,
    D,
    N,
    K,
    S,
    NT,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BK_S: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """∂f = R_jᵀ ∂b̃_j for BLOCK_N roles of slice j = w // NT (parked in `dfs`), and this tile's part
    of Σ_n ∂f_n f_n, which the normaliser's backward needs over the whole row."""
    rb, bmask, row = _batch_rows(bt, t, B, BLOCK_B)
    j = w // NT
    nt = w % NT
    n = nt * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    mask = bmask[:, None] & nmask[None, :]
    d_f = tl.full((BLOCK_B, BLOCK_N), 0.0, dfs.dtype.element_ty)
    d_f = _dot_acc(d_f, d_cand, row * D, bmask, j * S, S, R + j * S * N, N, n, nmask, BK_S, PRECISION)
    f = tl.load(fills + (row * K + j)[:, None] * N + n[None, :], mask=mask, other=0.0)
    tl.store(dfs + (rb * K + j)[:, None] * N + n[None, :], d_f, mask=mask)
    tl.store(part + (rb * K + j) * NT + nt, _row_sum(d_f * f), mask=bmask)


@triton.jit
def _dscore_tile(
    w,
    bt,
    t,
    fills,
    relu_b,
    sums,
    fx,
    cx,
    d_pre,
    d_scores,
    d_fb_all,
    dfs,
    part,
    B,
    D,
    N,
    K,
    NT,
    ROWS,
    FOLDED: tl.constexpr,
    RELU2: tl.constexpr,
    EPS: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Through the normaliser for BLOCK_N roles of slice j: ∂ of its input score (d_scores) and ∂f_b
    (into d_pre's score rows when folded, else d_fb_all)."""
    rb, bmask, row = _batch_rows(bt, t, B, BLOCK_B)
    j = w // NT
    n = (w % NT) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = bmask[:, None] & (n < N)[None, :]
    proj = tl.full((BLOCK_B,), 0.0, dfs.dtype.element_ty)
    for i in range(NT):
        proj += tl.load(part + (rb * K + j) * NT + i, mask=bmask, other=0.0)
    fn_off = (row * K + j)[:, None] * N + n[None, :]
    d_f = tl.load(dfs + (rb * K + j)[:, None] * N + n[None, :], mask=mask, other=0.0)
    f = tl.load(fills + fn_off, mask=mask, other=0.0)
    if RELU2:
        rbv = tl.load(relu_b + fn_off, mask=mask, other=0.0)
        f_x = tl.load(fx + fn_off, mask=mask, other=0.0)
        total = tl.load(sums + row * K + j, mask=bmask, other=1.0)
    else:
        rbv = f
        f_x = f
        total = proj
    d_score, d_fb = _normalise_backward(d_f, f, proj, rbv, f_x, cx, total, RELU2, EPS)
    tl.store(d_scores + fn_off, d_score, mask=mask)
    if FOLDED:
        tl.store(d_pre + row[:, None] * ROWS + (D + j * N + n)[None, :], d_fb, mask=mask)
    else:
        tl.store(d_fb_all + fn_off, d_fb, mask=mask)


@triton.jit
def _dz_tile(
    w, bt, t, U, d_fb_all, d_pre, B, D, N, K, S, CT, ROWS, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr, BK_N: tl.constexpr, PRECISION: tl.constexpr
):
    """∂z = U_j ∂f_b,j for BLOCK_C columns of slice j (z = V_b b: into d_pre's V_b rows)."""
    rb, bmask, row = _batch_rows(bt, t, B, BLOCK_B)
    j, c, cmask, col = _column(w, CT, S, BLOCK_C)
    dz = tl.full((BLOCK_B, BLOCK_C), 0.0, d_pre.dtype.element_ty)
    dz = _dot_acc(dz, d_fb_all, (row * K + j) * N, bmask, 0, N, U + j * S * N, 1, c * N, cmask, BK_N, PRECISION)
    tl.store(d_pre + row[:, None] * ROWS + (D + col)[None, :], dz, mask=bmask[:, None] & cmask[None, :])


@triton.jit
def _carry_tile(
    w,
    bt,
    t,
    tt,
    grad_out,
    states,
    gates,
    cands,
    W,
    U,
    d_pre,
    d_fb_all,
    d_cand,
    carry,
    B,
    D,
    N,
    K,
    S,
    CT,
    ROWS,
    IDENTITY: tl.constexpr,
    TANH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BK_R: tl.constexpr,
    BK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """∂L/∂b_{t-1}'s recurrent part for BLOCK_C columns: ∂b_t (1 − g) + ∂pre W_rec (+ U ∂f_b when V_b = I,
    where z is b_{t-1} itself), into the other half of `carry`; then, for step t − 1, the same
    columns' gate and candidate gradients (`_step_grads`), which need nothing but these columns."""
    rb, bmask, row = _batch_rows(bt, t, B, BLOCK_B)
    j, c, cmask, col = _column(w, CT, S, BLOCK_C)
    mask = bmask[:, None] & cmask[None, :]
    off = row[:, None] * D + col[None, :]
    here = rb[:, None] * D + col[None, :]
    dh = tl.load(grad_out + off, mask=mask, other=0.0) + tl.load(carry + (tt % 2) * B * D + here, mask=mask, other=0.0)
    acc = dh * (1.0 - tl.load(gates + off, mask=mask, other=0.0))
    acc = _dot_acc(acc, d_pre, row * ROWS, bmask, 0, ROWS, W, D, col, cmask, BK_R, PRECISION)
    if IDENTITY:
        acc = _dot_acc(acc, d_fb_all, (row * K + j) * N, bmask, 0, N, U + j * S * N, 1, c * N, cmask, BK_N, PRECISION)
    tl.store(carry + ((tt + 1) % 2) * B * D + here, acc, mask=mask)
    if t > 0:
        dh_prev = tl.load(grad_out + off - B * D, mask=mask, other=0.0) + acc
        _step_grads(dh_prev, t - 1, rb, bmask, col, cmask, states, gates, cands, d_pre, d_cand, B, D, ROWS, TANH)


@triton.jit
def backward_persistent(  # noqa: C901 — one branch per phase of a step, in the order they run
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
    dfs,
    part,
    counter,
    T,
    B,
    D,
    N,
    K,
    S,
    NB,
    CT,
    NT,
    ROWS,
    NPROG,
    FOLDED: tl.constexpr,
    HAS_VB: tl.constexpr,
    RELU2: tl.constexpr,
    TANH: tl.constexpr,
    GRID_SYNC: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BK_S: tl.constexpr,
    BK_N: tl.constexpr,
    BK_R: tl.constexpr,
    PRECISION: tl.constexpr,
    EPS: tl.constexpr,
):
    """All T backward steps, t = T−1 … 0, after a prologue (step T−1's gate and candidate gradients).
    Per step: [∂f tiles | barrier | normaliser tiles | barrier | (with V_b: ∂z tiles | barrier |)
    carry tiles, which also start step t − 1 | barrier]. `carry` is [2, B, D], zero on entry; at the
    end the half T % 2 holds ∂L/∂b_0."""
    if GRID_SYNC:
        first = tl.program_id(0)
        last = first + 1
    else:
        first = 0
        last = NPROG
    column_tiles = K * CT * NB
    role_tiles = K * NT * NB
    if HAS_VB:
        SYNCS: tl.constexpr = 4  # barriers per step
    else:
        SYNCS: tl.constexpr = 3
    cx = tl.load(c_x)
    for p in range(first, last):
        for tile in range(p, column_tiles, NPROG):
            rb, bmask, row = _batch_rows(tile % NB, T - 1, B, BLOCK_B)
            _, _, cmask, col = _column(tile // NB, CT, S, BLOCK_C)
            dh = tl.load(grad_out + row[:, None] * D + col[None, :], mask=bmask[:, None] & cmask[None, :], other=0.0)
            _step_grads(dh, T - 1, rb, bmask, col, cmask, states, gates, cands, d_pre, d_cand, B, D, ROWS, TANH)
    _grid_barrier(counter, NPROG, GRID_SYNC)
    for tt in range(T):
        t = T - 1 - tt
        done = 1 + SYNCS * tt  # barriers passed before this step
        for p in range(first, last):
            for tile in range(p, role_tiles, NPROG):
                _dfill_tile(tile // NB, tile % NB, t, R, fills, d_cand, dfs, part, B, D, N, K, S, NT, BLOCK_B, BLOCK_N, BK_S, PRECISION)
        _grid_barrier(counter, NPROG * (done + 1), GRID_SYNC)
        for p in range(first, last):
            for tile in range(p, role_tiles, NPROG):
                _dscore_tile(
                    tile // NB,
                    tile % NB,
                    t,
                    fills,
                    relu_b,
                    sums,
                    fx,
                    cx,
                    d_pre,
                    d_scores,
                    d_fb_all,
                    dfs,
                    part,
                    B,
                    D,
                    N,
                    K,
                    NT,
                    ROWS,
                    FOLDED,
                    RELU2,
                    EPS,
                    BLOCK_B,
                    BLOCK_N,
                )
        _grid_barrier(counter, NPROG * (done + 2), GRID_SYNC)
        if HAS_VB:
            for p in range(first, last):
                for tile in range(p, column_tiles, NPROG):
                    _dz_tile(tile // NB, tile % NB, t, U, d_fb_all, d_pre, B, D, N, K, S, CT, ROWS, BLOCK_B, BLOCK_C, BK_N, PRECISION)
            _grid_barrier(counter, NPROG * (done + 3), GRID_SYNC)
        for p in range(first, last):
            for tile in range(p, column_tiles, NPROG):
                _carry_tile(
                    tile // NB,
                    tile % NB,
                    t,
                    tt,
                    grad_out,
                    states,
                    gates,
                    cands,
                    W,
                    U,
                    d_pre,
                    d_fb_all,
                    d_cand,
                    carry,
                    B,
                    D,
                    N,
                    K,
                    S,
                    CT,
                    ROWS,
                    not FOLDED and not HAS_VB,
                    TANH,
                    BLOCK_B,
                    BLOCK_C,
                    BK_R,
                    BK_N,
                    PRECISION,
                )
        _grid_barrier(counter, NPROG * (done + SYNCS), GRID_SYNC)
