"""The TPRU time loop as one autograd Function (how cuDNN does RNNs).

Autograd over a Python loop records ~15 nodes per step and replays them one by one. Here the
forward keeps only what backward needs, and the backward walks the loop only for the
recurrent dependency (∂b_t/∂b_{t-1}); every weight gradient is then a single large matmul over
all steps: ∂W_rec = Σ_t δpre_tᵀ b_{t-1}, ∂R = Σ_t δb̃_tᵀ f_t, ∂U = Σ_t z_tᵀ δf_b,t. Inputs that
don't depend on b_{t-1} (gate and filler input projections) arrive precomputed for all steps
and get their gradients back as whole tensors, so autograd handles the hoisted matmuls outside.

Two ways to get the recurrent unbinding scores f_b = Uᵀ V_b b_{t-1} (per slice), chosen by cost:
- folded (`U_slices is None`): W_rec = [W_b; Uᵀ V_b] (d + kN rows), one matmul gives the gate
  pre-activation and f_b together — cheapest when kN ≤ d + N (always for one slice);
- unfolded: W_rec = [W_b; V_b] (or just W_b when V_b = I), then z = V_b b_{t-1} is dotted with U
  slice by slice (a batched matmul) — k× fewer FLOPs with many slices.

Layout: time-major (strided views are fine). gx [T,B,d] (gate input incl. every gate bias), fx [T,B,k,N] (input scores),
R_slices and U_slices [k, s, N], c_b [k, N] (the scalar c_b plus, with the authors' code biases,
the per-role constant Uᵀ b_Vb: everything in f_b + c_b that does not depend on b_{t-1}), c_x a
scalar, b0 [B,d]. Checked against the autograd loop and `gradcheck` in tests.

On CPU the two loops run in C++ (units/csrc/tpru_recurrence.cpp, loaded by units/tpru_ext.py):
the same computation without the interpreter between the ops of a step, with each step's
elementwise work fused into one pass. The Python loops below are the fallback (no compiler,
TPRBENCH_CPP=0, other devices) and are tested to give the same results to float rounding (not bit
for bit: the summation order differs; tests/test_tpru_backends.py).
"""

from __future__ import annotations

import torch

from . import tpru_ext

NORM_EPS = 1e-7  # the authors' code: f̃ / Σf̃.clamp_min(1e-7) (models/TPRU.py); an all-zero row stays 0, not NaN


def fold_is_cheaper(hidden: int, roles: int, slices: int) -> bool:
    """FLOPs per sample and step: folded d·kN versus unfolded d·d + d·N."""
    return slices * roles <= hidden + roles


class TPRURecurrence(torch.autograd.Function):
    """b_1..b_T from precomputed input projections; see the module docstring."""

    @staticmethod
    def forward(ctx, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, norm: str, tanh_candidate: bool):
        relu2 = norm == "relu2"
        folded = U_slices is None
        ext = tpru_ext.ops() if gx.device.type == "cpu" else None
        ctx.cpp = ext is not None
        if ext is not None:
            U_arg = U_slices if U_slices is not None else W_rec.new_empty(0)
            outs, pres, cands, fills, sums, scores = ext.tpru_forward(gx, fx, W_rec, R_slices, U_arg, c_b, c_x, b0, relu2, tanh_candidate)
            ctx.relu2, ctx.use_tanh, ctx.folded = relu2, tanh_candidate, folded
            ctx.save_for_backward(fx, W_rec, R_slices, U_arg, c_x, b0, outs, pres, cands, fills, sums, scores)
            return outs
        gx, fx = gx.contiguous(), fx.contiguous()
        T, B, d = gx.shape
        k, N = fx.shape[2], fx.shape[3]
        rows = W_rec.shape[0]
        W_rec_T = W_rec.t()
        R_T = R_slices.transpose(1, 2)
        # Everything that does not depend on b_{t-1}, for all steps at once: the matmul's bias
        # (gate input; with folding also c_b, or for softmax the whole input score) and ReLU(f_x + c_x).
        bias = gx.new_zeros(T, B, rows)
        bias[:, :, :d] = gx
        if folded:
            bias[:, :, d:] = c_b.reshape(k * N) if relu2 else (fx + (c_b + c_x)).reshape(T, B, k * N)
        relu_x = torch.relu(fx + c_x) if relu2 else None
        score_x = None if (relu2 or folded) else fx + (c_b + c_x)
        outs = gx.new_empty(T, B, d)
        gates = torch.empty_like(outs)
        cands = torch.empty_like(outs)
        fills = fx.new_empty(T, B, k, N)
        zs = gx.new_empty(T, B, d) if not folded else None
        relu_b = torch.empty_like(fills) if relu2 else None  # ReLU(f_b + c_b): gives a and its mask in backward
        sums = fx.new_empty(T, B, k, 1) if relu2 else None
        b = b0
        for t in range(T):
            pre = torch.addmm(bias[t], b, W_rec_T)  # [W_b b + W_x x | f_b (+c_b)]
            g = torch.sigmoid(pre[:, :d], out=gates[t])  # g_t
            if folded:
                score = pre[:, d:].view(B, k, N)
            else:
                z = pre[:, d:] if rows > d else b  # V_b b, or b when V_b = I
                zs[t] = z
                score = torch.bmm(z.reshape(B, k, d // k).transpose(0, 1), U_slices).transpose(0, 1)
                score = score + c_b if relu2 else score + score_x[t]
            if relu2:
                a = torch.clamp_min(score, 0, out=relu_b[t]) + relu_x[t]  # ReLU(f_b+c_b) + ReLU(f_x+c_x)
                a2 = a * a
                f = torch.div(a2, torch.clamp_min(a2.sum(-1, keepdim=True), NORM_EPS, out=sums[t]), out=fills[t])
            else:
                f = fills[t]
                f.copy_(torch.softmax(score, dim=-1))
            cand = torch.bmm(f.transpose(0, 1), R_T).transpose(0, 1).reshape(B, d)  # b̃ = R f
            if tanh_candidate:
                cand = torch.tanh(cand)
            cands[t] = cand
            b = torch.lerp(b, cand, g, out=outs[t])  # b_t = g ∘ b̃ + (1 − g) ∘ b_{t-1}
        ctx.relu2, ctx.use_tanh = relu2, tanh_candidate
        ctx.save_for_backward(W_rec, R_slices, U_slices, b0, outs, gates, cands, fills, zs, relu_b, relu_x, sums)
        return outs

    @staticmethod
    def backward(ctx, grad_out):
        if ctx.cpp:
            fx, W_rec, R_slices, U_arg, c_x, b0, outs, pres, cands, fills, sums, scores = ctx.saved_tensors
            d_gx, d_fx, d_W_rec, d_R, d_U, d_c_b, d_c_x, d_b0 = tpru_ext.ops().tpru_backward(
                grad_out, fx, W_rec, R_slices, U_arg, c_x, b0, outs, pres, cands, fills, sums, scores, ctx.relu2, ctx.use_tanh
            )
            return d_gx, d_fx, d_W_rec, d_R, None if ctx.folded else d_U, d_c_b, d_c_x, d_b0, None, None
        W_rec, R_slices, U_slices, b0, outs, gates, cands, fills, zs, relu_b, relu_x, sums = ctx.saved_tensors
        relu2, use_tanh = ctx.relu2, ctx.use_tanh
        T, B, d = outs.shape
        k, s, N = R_slices.shape
        folded = U_slices is None
        rows = W_rec.shape[0]
        prev = torch.cat([b0.unsqueeze(0), outs[:-1]], 0)  # b_{t-1} for every t
        # Per-step factors that need no gradient yet, computed for all steps at once.
        keep = 1 - gates  # ∂b_t/∂b_{t-1} through the lerp
        gate_coef = (cands - prev) * gates * keep  # ∂b_t/∂(gate pre-activation)
        cand_coef = 1 - cands * cands if use_tanh else None
        if relu2:
            relu_coef = 2 * (relu_b + relu_x) / sums  # ∂f̃/∂a = 2a, divided by Σf̃
            mask_b = relu_b > 0
            # Where Σf̃ < NORM_EPS the divisor is the constant NORM_EPS: f = f̃/eps, no coupling term.
            coupled = (sums > NORM_EPS).to(sums.dtype)
        d_pre = outs.new_zeros(T, B, rows)
        d_scores = fills.new_empty(T, B, k, N)  # ∂ of the role scores (ReLU² input a, or softmax input)
        d_fb_all = d_pre[:, :, d:].view(T, B, k, N) if folded else fills.new_empty(T, B, k, N)
        d_cand_all = torch.empty_like(outs)
        carry = torch.zeros_like(b0)
        for t in range(T - 1, -1, -1):
            dh = grad_out[t] + carry
            torch.mul(dh, gate_coef[t], out=d_pre[t, :, :d])
            d_cand = torch.mul(dh, gates[t], out=d_cand_all[t])
            if use_tanh:
                d_cand.mul_(cand_coef[t])
            # ∂f = Rᵀ ∂b̃ per slice: [k, B, s] × [k, s, N] → [B, k, N]; then through the normalisation.
            d_f = torch.bmm(d_cand.view(B, k, s).transpose(0, 1), R_slices).transpose(0, 1)
            f = fills[t]
            if relu2:
                centred = d_f - (d_f * f).sum(-1, keepdim=True) * coupled[t]
            else:
                centred = d_f - (d_f * f).sum(-1, keepdim=True)
            if relu2:
                d_a = torch.mul(relu_coef[t], centred, out=d_scores[t])
                d_fb = torch.mul(d_a, mask_b[t], out=d_fb_all[t])
            else:
                d_fb = torch.mul(f, centred, out=d_scores[t])
                d_fb_all[t] = d_fb  # the softmax input score is f_b + f_x: one gradient for both
            carry = dh * keep[t]
            if not folded:
                # z → f_b: ∂z = U ∂f_b per slice; z is V_b b (part of W_rec) or b itself.
                d_z = torch.bmm(d_fb.transpose(0, 1), U_slices.transpose(1, 2)).transpose(0, 1).reshape(B, d)
                if rows > d:
                    d_pre[t, :, d:] = d_z
                else:
                    carry = carry + d_z
            carry = torch.addmm(carry, d_pre[t], W_rec)
        # Weight gradients after the loop: one large matmul each.
        d_W_rec = d_pre.reshape(T * B, rows).t() @ prev.reshape(T * B, d)
        d_R = torch.einsum("tbks,tbkn->ksn", d_cand_all.view(T, B, k, s), fills)
        d_U = None if folded else torch.einsum("tbks,tbkn->ksn", zs.view(T, B, k, s), d_fb_all)
        d_fx = d_scores * (relu_x > 0) if relu2 else d_scores
        # c_b is [k, N] (per-role), c_x a scalar; for softmax both enter the one score f_b + f_x.
        d_c_b, d_c_x = d_fb_all.sum((0, 1)), d_fx.sum().reshape(())
        if not relu2:
            d_c_b = d_fx.sum((0, 1))
        d_gx = d_pre[:, :, :d]
        return d_gx, d_fx, d_W_rec, d_R, d_U, d_c_b, d_c_x, carry, None, None


def fused_slices_available(x: torch.Tensor, norm: str, folded: bool) -> bool:
    """The C++ fused slice step (TPRUSlicesRecurrence) runs this call: CPU tensors, ReLU², the
    unfolded slice path, and the extension built (else TPRURecurrence, same results)."""
    return x.device.type == "cpu" and norm == "relu2" and not folded and tpru_ext.ops() is not None


class TPRUSlicesRecurrence(torch.autograd.Function):
    """The unfolded ReLU² slice path in one C++ op (units/csrc/tpru_recurrence.cpp, "Slices, fused"):
    takes zx = V_x x (+ b_Vx) [T, B, d] instead of the input scores f_x = Uᵀ zx [T, B, k, N], so no
    k·N-sized tensor — scores, fillers or their gradients — is written to memory or kept for backward;
    each step's unbind → ReLU² normalise → bind runs in reused cache-sized buffers, and backward
    recomputes the step's scores from z_t and zx_t. Same results as TPRURecurrence fed with
    f_x = Uᵀ zx (tests/test_tpru_backends.py)."""

    @staticmethod
    def forward(ctx, gx, zx, W_rec, R_slices, U_slices, c_b, c_x, b0, tanh_candidate: bool):
        outs, pres, cands, sums = tpru_ext.ops().tpru_slices_forward(gx, zx, W_rec, R_slices, U_slices, c_b, c_x, b0, tanh_candidate)
        ctx.use_tanh = tanh_candidate
        ctx.save_for_backward(zx, W_rec, R_slices, U_slices, c_b, c_x, b0, outs, pres, cands, sums)
        return outs

    @staticmethod
    def backward(ctx, grad_out):
        zx, W_rec, R_slices, U_slices, c_b, c_x, b0, outs, pres, cands, sums = ctx.saved_tensors
        d_gx, d_zx, d_W_rec, d_R, d_U, d_c_b, d_c_x, d_b0 = tpru_ext.ops().tpru_slices_backward(
            grad_out, zx, W_rec, R_slices, U_slices, c_b, c_x, b0, outs, pres, cands, sums, ctx.use_tanh
        )
        return d_gx, d_zx, d_W_rec, d_R, d_U, d_c_b, d_c_x, d_b0, None
