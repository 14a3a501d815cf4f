"""The TPRU time loop as one autograd Function (how cuDNN does RNNs).

Autograd over a Python loop records ~15 nodes per step and replays them one by one. Here the
forward keeps only what backward needs, and the backward walks the loop only for the
recurrent dependency (∂b_t/∂b_{t-1}); every weight gradient is then a single large matmul over
all steps: ∂W_rec = Σ_t δpre_tᵀ b_{t-1}, ∂R = Σ_t δb̃_tᵀ f_t. Inputs that don't depend on
b_{t-1} (gate and filler input projections) arrive precomputed for all steps and get their
gradients back as whole tensors, so autograd handles the hoisted matmuls outside.

Layout: time-major. gx [T,B,d], fx [T,B,k,N], W_rec [(d+kN), d] = [W_b; Uᵀ V_b],
R_slices [k, s, N], b0 [B,d]. Checked against autograd with `gradcheck` in the tests.
"""

from __future__ import annotations

import torch

NORM_EPS = 1e-12  # F.normalize's default: a filler row of all zeros stays zero instead of NaN


def _forward_loop(gx, fx, W_rec, R_slices, c_b, c_x, b0, relu2: bool, use_tanh: bool):
    T, B, d = gx.shape
    k, N = fx.shape[2], fx.shape[3]
    W_rec_T = W_rec.t()
    b = b0
    outs, gates, cands, fills, fbs, sums = [], [], [], [], [], []
    for t in range(T):
        pre = b @ W_rec_T
        g = torch.sigmoid(pre[:, :d] + gx[t])
        fb = pre[:, d:].reshape(B, k, N)
        if relu2:
            a = torch.relu(fb + c_b) + torch.relu(fx[t] + c_x)
            a2 = a * a
            s = a2.sum(-1, keepdim=True).clamp_min(NORM_EPS)
            f = a2 / s
            sums.append(s)
        else:
            f = torch.softmax(fb + fx[t] + (c_b + c_x), dim=-1)
        cand = torch.bmm(f.transpose(0, 1), R_slices.transpose(1, 2)).transpose(0, 1).reshape(B, d)
        if use_tanh:
            cand = torch.tanh(cand)
        b = g * cand + (1 - g) * b
        outs.append(b)
        gates.append(g)
        cands.append(cand)
        fills.append(f)
        fbs.append(fb)
    stack = torch.stack
    return stack(outs), stack(gates), stack(cands), stack(fills), stack(fbs), (stack(sums) if relu2 else None)


class TPRURecurrence(torch.autograd.Function):
    """b_1..b_T from precomputed input projections; see the module docstring."""

    @staticmethod
    def forward(ctx, gx, fx, W_rec, R_slices, c_b, c_x, b0, norm: str, tanh_candidate: bool):
        relu2 = norm == "relu2"
        outs, gates, cands, fills, fbs, sums = _forward_loop(gx, fx, W_rec, R_slices, c_b, c_x, b0, relu2, tanh_candidate)
        ctx.relu2, ctx.use_tanh = relu2, tanh_candidate
        ctx.save_for_backward(fx, W_rec, R_slices, c_b, c_x, b0, outs, gates, cands, fills, fbs, sums)
        return outs

    @staticmethod
    def backward(ctx, grad_out):
        fx, W_rec, R_slices, c_b, c_x, b0, outs, gates, cands, fills, fbs, sums = ctx.saved_tensors
        relu2, use_tanh = ctx.relu2, ctx.use_tanh
        T, B, d = outs.shape
        k, s, N = R_slices.shape
        prev = torch.cat([b0.unsqueeze(0), outs[:-1]], 0)  # b_{t-1} for every t
        d_pre = outs.new_empty(T, B, d + k * N)
        d_cand_all = outs.new_empty(T, B, d)
        d_fx = torch.empty_like(fx)
        carry = torch.zeros_like(b0)
        for t in range(T - 1, -1, -1):
            dh = grad_out[t] + carry
            g, cand, bp, f = gates[t], cands[t], prev[t], fills[t]
            d_cand = dh * g
            d_gate_pre = dh * (cand - bp) * g * (1 - g)
            if use_tanh:
                d_cand = d_cand * (1 - cand * cand)
            d_cand_all[t] = d_cand
            # ∂f = Rᵀ ∂b̃ per slice: [k, B, s] × [k, s, N] → [B, k, N]
            d_f = torch.bmm(d_cand.view(B, k, s).transpose(0, 1), R_slices).transpose(0, 1)
            centred = d_f - (d_f * f).sum(-1, keepdim=True)
            if relu2:
                pb, px = fbs[t] + c_b, fx[t] + c_x
                a = torch.relu(pb) + torch.relu(px)
                d_a = 2 * a * centred / sums[t]
                d_fb = d_a * (pb > 0)
                d_fx[t] = d_a * (px > 0)
            else:
                d_fb = f * centred
                d_fx[t] = d_fb
            d_pre[t, :, :d] = d_gate_pre
            d_pre[t, :, d:] = d_fb.reshape(B, k * N)
            carry = dh * (1 - g) + d_pre[t] @ W_rec
        # Weight gradients after the loop: one large matmul each.
        d_W_rec = d_pre.reshape(T * B, -1).t() @ prev.reshape(T * B, d)
        d_R = torch.einsum("tbks,tbkn->ksn", d_cand_all.view(T, B, k, s), fills)
        d_fb_all = d_pre[:, :, d:]
        if relu2:
            d_c_b, d_c_x = d_fb_all.sum().reshape(c_b.shape), d_fx.sum().reshape(c_x.shape)
        else:
            d_c_b = d_c_x = d_fx.sum().reshape(c_b.shape)
        d_gx = d_pre[:, :, :d]
        return d_gx, d_fx, d_W_rec, d_R, d_c_b, d_c_x, carry, None, None
