"""The ungated TPRN time loop as one autograd Function (the TPRU trick of units/tpru_fused.py).

Forward, per step (pre_x holds W_x x_t + b for every step, computed before the loop):

    a_t = σ(pre_x[t] + v_{t−1} W_vᵀ),   s_t = a_S,t Sᵀ,   r_t = a_R,t Rᵀ,   v_t = vec(s_t r_tᵀ)

Backward walks time only for ∂v_t/∂v_{t−1}; the gradients of W_v, S and R are single large
matmuls over all steps after the loop, and no autograd graph is built per step (the plain loop
in units/tprn.py builds ~10 nodes per step, which dominated its time). The attention A is an
output too, so the quantisation penalty computed from it outside still gets its gradient.
Checked against the plain loop and with gradcheck in tests/test_tprn.py.

On CPU the two loops run in C++ (units/csrc/tprn_recurrence.cpp, built with the TPRU recurrence by
units/tpru_ext.py): the same ATen calls per step without the interpreter between them; the Python
loops below are the fallback (no compiler, TPRBENCH_CPP=0, other devices), tested equal.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from . import tpru_ext


class TPRNRecurrence(torch.autograd.Function):
    """(pre_x [T,B,n], W_v [n,d], S [d_S,n_S], R [d_R,n_R], v0 [B,d], n_S) → V [T,B,d], A [T,B,n]."""

    @staticmethod
    def forward(ctx, pre_x, W_v, S, R, v0, n_S: int):
        # An output nobody used (A, unless the quantisation penalty reads it) comes to backward as
        # None, not as a zero-filled [T, B, n] that backward would then add step by step.
        ctx.set_materialize_grads(False)
        ext = tpru_ext.ops() if pre_x.device.type == "cpu" else None
        ctx.cpp = ext is not None
        if ext is not None:  # the same loop in C++ (units/csrc/tprn_recurrence.cpp)
            V, A, Sv, Rv = ext.tprn_forward(pre_x, W_v, S, R, v0, n_S)
            ctx.n_S = n_S
            ctx.save_for_backward(W_v, S, R, v0, A, Sv, Rv, V)
            return V, A
        steps, batch, n = pre_x.shape
        d_S, d_R = S.shape[0], R.shape[0]
        V = pre_x.new_empty(steps, batch, d_S * d_R)
        A = pre_x.new_empty(steps, batch, n)
        Sv = pre_x.new_empty(steps, batch, d_S)
        Rv = pre_x.new_empty(steps, batch, d_R)
        W_vT, S_T, R_T = W_v.T, S.T, R.T
        v = v0
        for t in range(steps):
            torch.sigmoid(torch.addmm(pre_x[t], v, W_vT), out=A[t])
            torch.mm(A[t, :, :n_S], S_T, out=Sv[t])
            torch.mm(A[t, :, n_S:], R_T, out=Rv[t])
            torch.mul(Sv[t].unsqueeze(2), Rv[t].unsqueeze(1), out=V[t].view(batch, d_S, d_R))
            v = V[t]
        ctx.n_S = n_S
        ctx.save_for_backward(W_v, S, R, v0, A, Sv, Rv, V)
        return V, A

    @staticmethod
    @once_differentiable
    def backward(ctx, gV, gA):
        W_v, S, R, v0, A, Sv, Rv, V = ctx.saved_tensors
        n_S = ctx.n_S
        if ctx.cpp:
            empty = A.new_empty(0)
            GZ, g_Wv, g_S, g_R, gv = tpru_ext.ops().tprn_backward(
                empty if gV is None else gV, empty if gA is None else gA, W_v, S, R, v0, A, Sv, Rv, V, n_S
            )
            return GZ, g_Wv, g_S, g_R, gv, None
        steps, batch, n = A.shape
        d_S, d_R = S.shape[0], R.shape[0]
        GZ = A.new_empty(steps, batch, n)
        GS = A.new_empty(steps, batch, d_S)
        GR = A.new_empty(steps, batch, d_R)
        gv = v0.new_zeros(batch, d_S * d_R)  # ∂L/∂v_t arriving from step t+1
        for t in range(steps - 1, -1, -1):
            g = gv if gV is None else gv + gV[t]
            G = g.view(batch, d_S, d_R)
            torch.bmm(G, Rv[t].unsqueeze(2), out=GS[t].unsqueeze(2))  # ∂/∂s = G r
            torch.bmm(Sv[t].unsqueeze(1), G, out=GR[t].unsqueeze(1))  # ∂/∂r = sᵀ G
            ga = torch.cat([GS[t] @ S, GR[t] @ R], 1)
            if gA is not None:
                ga = ga + gA[t]
            a = A[t]
            torch.mul(ga, a * (1 - a), out=GZ[t])  # σ'
            gv = GZ[t] @ W_v
        flat_gz = GZ.reshape(steps * batch, n)
        V_prev = torch.cat([v0.unsqueeze(0), V[:-1]], 0).reshape(steps * batch, -1)
        g_Wv = flat_gz.T @ V_prev
        flat_A = A.reshape(steps * batch, n)
        g_S = GS.reshape(steps * batch, d_S).T @ flat_A[:, :n_S]
        g_R = GR.reshape(steps * batch, d_R).T @ flat_A[:, n_S:]
        return GZ, g_Wv, g_S, g_R, gv, None
