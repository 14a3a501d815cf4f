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

Layout: time-major. gx [T,B,d] (gate input incl. bias), fx [T,B,k,N] (input scores), R_slices
and U_slices [k, s, N], b0 [B,d]. Checked against the autograd loop and `gradcheck` in tests.
"""

from __future__ import annotations

import torch

NORM_EPS = 1e-12  # F.normalize's default: a filler row of all zeros stays zero instead of NaN


def fold_is_cheaper(hidden: int, roles: int, slices: int) -> bool:
    """FLOPs per sample and step: folded d·kN versus unfolded d·d + d·N."""
    return slices * roles <= hidden + roles


def _scores(pre: torch.Tensor, b: torch.Tensor, U_slices: torch.Tensor | None, d: int, k: int, N: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(f_b [B,k,N], z [B,d]) from the recurrent matmul's output."""
    B = pre.shape[0]
    if U_slices is None:
        return pre[:, d:].reshape(B, k, N), pre[:, d:]
    z = pre[:, d:] if pre.shape[1] > d else b  # V_b b, or b itself when V_b = I
    fb = torch.bmm(z.reshape(B, k, d // k).transpose(0, 1), U_slices).transpose(0, 1)
    return fb, z


class TPRURecurrence(torch.autograd.Function):
    """b_1..b_T from precomputed input projections; see the module docstring."""

    @staticmethod
    def forward(ctx, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, norm: str, tanh_candidate: bool):
        relu2 = norm == "relu2"
        T, B, d = gx.shape
        k, N = fx.shape[2], fx.shape[3]
        W_rec_T = W_rec.t()
        R_T = R_slices.transpose(1, 2)
        outs = gx.new_empty(T, B, d)
        gates = torch.empty_like(outs)
        cands = torch.empty_like(outs)
        fills = fx.new_empty(T, B, k, N)
        zs = gx.new_empty(T, B, d) if U_slices is not None else None
        # ReLU² keeps a = ReLU(f_b+c_b) + ReLU(f_x+c_x), the two ReLU masks and Σf̃; softmax needs only f.
        acts = torch.empty_like(fills) if relu2 else None
        mask_b = torch.empty_like(fills, dtype=torch.bool) if relu2 else None
        mask_x = torch.gt(fx, -c_x) if relu2 else None
        sums = fx.new_empty(T, B, k, 1) if relu2 else None
        b = b0
        for t in range(T):
            pre = b @ W_rec_T
            g = torch.sigmoid(torch.add(pre[:, :d], gx[t]), out=gates[t])
            fb, z = _scores(pre, b, U_slices, d, k, N)
            if zs is not None:
                zs[t] = z
            if relu2:
                pb = fb + c_b
                torch.gt(pb, 0, out=mask_b[t])
                a = torch.add(pb.relu_(), torch.relu(fx[t] + c_x), out=acts[t])
                a2 = a * a
                s = torch.clamp_min(a2.sum(-1, keepdim=True), NORM_EPS, out=sums[t])
                f = torch.div(a2, s, out=fills[t])
            else:
                f = fills[t]
                f.copy_(torch.softmax(fb + fx[t] + (c_b + c_x), dim=-1))
            cand = torch.bmm(f.transpose(0, 1), R_T).transpose(0, 1).reshape(B, d)
            if tanh_candidate:
                cand = torch.tanh(cand)
            cands[t] = cand
            b = torch.lerp(b, cand, g, out=outs[t])  # b_t = g ∘ b̃ + (1 − g) ∘ b_{t-1}
        ctx.relu2, ctx.use_tanh = relu2, tanh_candidate
        ctx.save_for_backward(W_rec, R_slices, U_slices, b0, outs, gates, cands, fills, zs, acts, mask_b, mask_x, sums)
        return outs

    @staticmethod
    def backward(ctx, grad_out):
        W_rec, R_slices, U_slices, b0, outs, gates, cands, fills, zs, acts, mask_b, mask_x, sums = ctx.saved_tensors
        relu2, use_tanh = ctx.relu2, ctx.use_tanh
        T, B, d = outs.shape
        k, s, N = R_slices.shape
        folded = U_slices is None
        rows = W_rec.shape[0]
        prev = torch.cat([b0.unsqueeze(0), outs[:-1]], 0)  # b_{t-1} for every t
        d_pre = outs.new_zeros(T, B, rows)
        d_fb_all = fills.new_empty(T, B, k, N)
        d_fx = torch.empty_like(fills)
        d_cand_all = torch.empty_like(outs)
        carry = torch.zeros_like(b0)
        for t in range(T - 1, -1, -1):
            dh = grad_out[t] + carry
            g, cand, f = gates[t], cands[t], fills[t]
            d_cand = dh * g
            torch.mul(dh * (cand - prev[t]), g * (1 - g), out=d_pre[t, :, :d])  # through the gate
            if use_tanh:
                d_cand = d_cand * (1 - cand * cand)
            d_cand_all[t] = d_cand
            # ∂f = Rᵀ ∂b̃ per slice: [k, B, s] × [k, s, N] → [B, k, N]
            d_f = torch.bmm(d_cand.view(B, k, s).transpose(0, 1), R_slices).transpose(0, 1)
            centred = d_f - (d_f * f).sum(-1, keepdim=True)
            if relu2:
                d_a = (2 * acts[t] / sums[t]) * centred
                d_fb = torch.mul(d_a, mask_b[t], out=d_fb_all[t])
                torch.mul(d_a, mask_x[t], out=d_fx[t])
            else:
                d_fb = torch.mul(f, centred, out=d_fb_all[t])
                d_fx[t] = d_fb
            carry = dh * (1 - g)
            if folded:
                d_pre[t, :, d:] = d_fb.reshape(B, k * N)
            else:
                # z → f_b: ∂z = U ∂f_b per slice; z is V_b b (in W_rec) or b itself.
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
        if relu2:
            d_c_b, d_c_x = d_fb_all.sum().reshape(()), d_fx.sum().reshape(())
        else:
            d_c_b = d_c_x = d_fx.sum().reshape(())
        d_gx = d_pre[:, :, :d]
        return d_gx, d_fx, d_W_rec, d_R, d_U, d_c_b, d_c_x, carry, None, None
