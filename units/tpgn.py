"""TPGN: the Tensor Product Generation Network decoder (Huang, Smolensky, He, Deng, Wu, NAACL 2018,
arXiv 1709.09118v5), as a recurrent unit. Spec and sources: docs/science-tpr-family.md, "TPGN".

Two LSTMs interact. The S-LSTM keeps a plan Ŝ_t ∈ R^{d×d}; the U-LSTM keeps p_t ∈ R^d, from which
an unbinding vector u_t ∈ R^{d²} is read; the output is the filler f_t = S_t u_t with
S_t = I_d ⊗ Ŝ_t (block-diagonal, d copies of Ŝ_t), i.e. f^(k) = Ŝ_t u^(k) per d-sized block k.
The lexical layer x_t = softmax(W_x f_t) is left to the task (the LM adapter's projection and tied
decoder play it). The input at step t is the embedding of the previous word, W_e x_{t−1}.

    S-LSTM, gates G ∈ {i, f, o, Ĉ}:  G = σ(W_{s,G}·p_{t−1} − D_{s,G}·W_e x_{t−1} + U_{s,G}·Ŝ_{t−1} + b_{s,G})
                                    (tanh for Ĉ);  C_t = f⊙C_{t−1} + i⊙Ĉ;  Ŝ_t = o⊙tanh(C_t)
    U-LSTM, gates G:                 G = σ(Ŝ_{t−1} w_{u,G} − D_{u,G} W_e x_{t−1} + U_{u,G} p_{t−1} + b_{u,G})
                                    c̃_t = f⊙c̃_{t−1} + i⊙Ĉ;  p_t = o⊙tanh(c̃_t)
    u_t = tanh(W_u p_t + b_u);  f_t = (I_d ⊗ Ŝ_t) u_t

The contractions W_{s,G} ∈ R^{d×d×d}, D_{s,G} ∈ R^{d×d×d_in}, U_{s,G} ∈ R^{d×d×d×d} are linear maps into
d×d, so the S-LSTM is exactly an LSTM cell of hidden size d² on input [W_e x_{t−1}; p_{t−1}] (the
minus sign is absorbed by the learned D). Because both LSTMs read only step t−1 states, the two
together are exactly ONE LSTM of hidden size d² + d over h = [vec Ŝ; p] with a structured recurrent
matrix: the U-gate rows that read Ŝ are I_d ⊗ w_{u,G}ᵀ (d weights per gate, not d·d²). `fused`
therefore runs the whole sequence in torch's LSTM kernel (`torch.lstm`, the op `nn.LSTM` calls;
it takes the weight tensors we assemble, so gradients reach the structured parameters), and the
unbinding and block product are hoisted out of the time loop. `loop` is the plain step-by-step
reference (and `step` is its one step, for free generation).

Layouts: vec is row-major (Ŝ[i, j] = vec[i·d + j]); block k of u and f is entries k·d … k·d + d − 1.
Parameters are packed over the gates in torch's order (i, f, g=Ĉ, o), dimension 0 of size 4:

    s_D [4, d², d_in]  = D_{s,G}     s_W [4, d², d] = W_{s,G}     s_U [4, d², d²] = U_{s,G}    s_b [4, d²] = b_{s,G}
    u_D [4, d,  d_in]  = D_{u,G}     u_U [4, d,  d] = U_{u,G}     u_w [4, d]      = w_{u,G}    u_b [4, d]  = b_{u,G}
    unbind_W [d², d]   = W_u         unbind_b [d²]  = b_u
    plan (plan_size > 0 only): Linear(plan_size → 2d²) giving (Ŝ_0, C_0) for `initial_carry`

The carry is the tuple (Ŝ [B,d,d], C [B,d,d], p [B,d], c̃ [B,d]); None means all zeros.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from .base import RecurrentUnit, last_state, lengths_from_mask, mask_outputs
from .meta import TPGNMeta, plan_side
from .registry import register_unit

Carry = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
GATES = 4  # i, f, g (= Ĉ), o: torch.nn.LSTM's order


def block_unbind(S_hat: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """f = (I_d ⊗ Ŝ) u for batches: S_hat [..., d, d], u [..., d²] → f [..., d²], f^(k) = Ŝ u^(k)."""
    d = S_hat.shape[-1]
    return (u.unflatten(-1, (d, d)) @ S_hat.transpose(-1, -2)).flatten(-2)


@register_unit("tpgn")
class TPGN(RecurrentUnit, TPGNMeta):
    """TPGN decoder unit: x_t (previous word's embedding) → f_t = (I ⊗ Ŝ_t) u_t ∈ R^{d²}."""

    def __init__(self, input_size: int, hidden_size: int, plan_size: int = 0, impl: Literal["fused", "loop"] = "fused") -> None:
        super().__init__(input_size, hidden_size)
        self.check_options(hidden_size, plan_size=plan_size)
        d = self.d = plan_side(hidden_size)
        din = input_size
        self.plan_size, self.impl = plan_size, impl
        self.s_D = nn.Parameter(torch.empty(GATES, d * d, din))
        self.s_W = nn.Parameter(torch.empty(GATES, d * d, d))
        self.s_U = nn.Parameter(torch.empty(GATES, d * d, d * d))
        self.s_b = nn.Parameter(torch.empty(GATES, d * d))
        self.u_D = nn.Parameter(torch.empty(GATES, d, din))
        self.u_U = nn.Parameter(torch.empty(GATES, d, d))
        self.u_w = nn.Parameter(torch.empty(GATES, d))
        self.u_b = nn.Parameter(torch.empty(GATES, d))
        self.unbind_W = nn.Parameter(torch.empty(d * d, d))
        self.unbind_b = nn.Parameter(torch.empty(d * d))
        self.plan = nn.Linear(plan_size, 2 * d * d) if plan_size else None
        # The paper gives no initialisation (the text read: docs/science-tpr-family.md); these are torch's
        # defaults for the equivalent layers: LSTM weights and biases U(±1/√H) with H = d² for the
        # S-LSTM and H = d for the U-LSTM (so the S-LSTM starts as nn.LSTMCell(d_in + d, d²) would),
        # W_u and b_u as nn.Linear(d, d²): U(±1/√d).
        for p in (self.s_D, self.s_W, self.s_U, self.s_b):
            nn.init.uniform_(p, -1.0 / d, 1.0 / d)
        for p in (self.u_D, self.u_U, self.u_w, self.u_b, self.unbind_W, self.unbind_b):
            nn.init.uniform_(p, -1.0 / math.sqrt(d), 1.0 / math.sqrt(d))

    # check_options: TPGNMeta's (units/meta.py), read by study files without torch

    @classmethod
    def formula_params(cls, input_size: int, hidden_size: int, **options: object) -> int:
        """Weights only (the project's convention): S-LSTM 4d²(d_in + d + d²), U-LSTM 4(d + d·d_in + d²),
        W_u d³. Biases add 4d² + 4d + d²; the optional plan projection is conditioning, not the unit."""
        d, din = plan_side(hidden_size), input_size
        return 4 * d * d * (din + d + d * d) + 4 * (d + d * din + d * d) + d**3

    # -- the recurrence as one LSTM of hidden size d² + d ---------------------------------------
    def lstm_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W_ih [4H, d_in], W_hh [4H, H], bias [4H]) with H = d² + d over h = [vec Ŝ; p], torch's layout."""
        d = self.d
        eye = torch.eye(d, dtype=self.u_w.dtype, device=self.u_w.device)
        u_from_S = torch.einsum("ik,gj->gikj", eye, self.u_w).reshape(GATES, d, d * d)  # (Ŝ w_{u,G})_i rows
        s_rows = torch.cat([self.s_U, self.s_W], dim=2)  # [4, d², d² + d]
        u_rows = torch.cat([u_from_S, self.u_U], dim=2)  # [4, d,  d² + d]
        H = d * d + d
        W_hh = torch.cat([s_rows, u_rows], dim=1).reshape(GATES * H, H)
        W_ih = torch.cat([self.s_D, self.u_D], dim=1).reshape(GATES * H, self.input_size)
        bias = torch.cat([self.s_b, self.u_b], dim=1).reshape(GATES * H)
        return W_ih, W_hh, bias

    def _pack(self, carry: Carry | None, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, c) [B, d² + d] from a carry (None: zeros)."""
        B, d = x.shape[0], self.d
        if carry is None:
            zeros = x.new_zeros(B, d * d + d)
            return zeros, zeros
        if not (isinstance(carry, (tuple, list)) and len(carry) == 4):
            raise ValueError("tpgn carry must be the tuple (Ŝ [B,d,d], C [B,d,d], p [B,d], c̃ [B,d])")
        S, C, p, c = carry
        return torch.cat([S.reshape(B, d * d), p], -1), torch.cat([C.reshape(B, d * d), c], -1)

    def _unpack(self, h: torch.Tensor, c: torch.Tensor) -> Carry:
        d = self.d
        return h[:, : d * d].unflatten(-1, (d, d)), c[:, : d * d].unflatten(-1, (d, d)), h[:, d * d :], c[:, d * d :]

    @staticmethod
    def _cell(x_proj: torch.Tensor, h: torch.Tensor, c: torch.Tensor, W_hh: torch.Tensor):
        """One LSTM step on the packed state; x_proj = W_ih x + bias already computed."""
        i, f, g, o = (x_proj + h @ W_hh.T).chunk(GATES, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def _recur(self, x: torch.Tensor, carry: Carry | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """h_1..h_T [B, T, d² + d] and the last (h, c)."""
        h, c = self._pack(carry, x)
        W_ih, W_hh, bias = self.lstm_weights()
        if self.impl == "fused":
            # torch.lstm is the kernel nn.LSTM runs (cuDNN on GPU, a C++ loop on CPU). Called with our
            # assembled tensors (bias_hh = 0: the paper has one bias per gate) so the structured
            # parameters get the gradients; an nn.LSTM module would hold a second, dead copy.
            hs, h_T, c_T = torch.lstm(
                x, (h.unsqueeze(0), c.unsqueeze(0)), (W_ih, W_hh, bias, torch.zeros_like(bias)), True, 1, 0.0, self.training, False, True
            )
            return hs, h_T[0], c_T[0]
        x_proj = F.linear(x, W_ih, bias)  # hoisted: every step's input projection in one matmul
        outs = []
        for t in range(x.shape[1]):
            h, c = self._cell(x_proj[:, t], h, c, W_hh)
            outs.append(h)
        return (torch.stack(outs, 1) if outs else x.new_zeros(x.shape[0], 0, h.shape[-1])), h, c

    def _read_out(self, hs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(u_t, f_t) from h_t = [vec Ŝ_t; p_t], for any leading shape: u = tanh(W_u p + b_u), f = (I ⊗ Ŝ) u."""
        d = self.d
        u = torch.tanh(F.linear(hs[..., d * d :], self.unbind_W, self.unbind_b))
        return u, block_unbind(hs[..., : d * d].unflatten(-1, (d, d)), u)

    # -- the unit interface -----------------------------------------------------------------------
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, carry: Carry | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """f_t for every step [B, T, d²] (zero at padding) and f at each sequence's last real token.

        `carry` starts the recurrence (e.g. `initial_carry(z)`); None = zeros."""
        lengths = lengths_from_mask(x, mask)
        hs, _, _ = self._recur(x, carry)
        f = mask_outputs(self._read_out(hs)[1], lengths)
        return f, last_state(f, lengths)

    def forward_carry(self, x: torch.Tensor, carry: Carry | None = None) -> tuple[torch.Tensor, Carry]:
        """Unpadded sequences continuing from `carry`: (f [B, T, d²], the carry after the last step)."""
        hs, h, c = self._recur(x, carry)
        return self._read_out(hs)[1], self._unpack(h, c)

    def step(self, x_t: torch.Tensor, carry: Carry | None = None) -> tuple[torch.Tensor, Carry]:
        """One step for free generation: x_t [B, d_in] (the previous word's embedding) → (f_t [B, d²], carry)."""
        W_ih, W_hh, bias = self.lstm_weights()
        h, c = self._pack(carry, x_t)
        h, c = self._cell(F.linear(x_t, W_ih, bias), h, c, W_hh)
        return self._read_out(h)[1], self._unpack(h, c)

    def unbinding(self, x: torch.Tensor, mask: torch.Tensor | None = None, carry: Carry | None = None) -> torch.Tensor:
        """The unbinding vectors u_t [B, T, d²] (zero at padding): what the paper's POS analysis reads (§5.3)."""
        lengths = lengths_from_mask(x, mask)
        hs, _, _ = self._recur(x, carry)
        return mask_outputs(self._read_out(hs)[0], lengths)

    def initial_carry(self, z: torch.Tensor) -> Carry:
        """The carry that starts generation from a plan vector z [B, plan_size]: (Ŝ_0, C_0) = Linear(z),
        p_0 = c̃_0 = 0 (docs/science-tpr-family.md, TPGN: how the paper's image feature initialises S)."""
        if self.plan is None:
            raise ValueError(
                "tpgn was built without a plan projection; build it with plan_size=N (N = the size of the plan vectors) to use initial_carry"
            )
        if z.dim() != 2 or z.shape[-1] != self.plan_size:
            raise ValueError(f"initial_carry expects z of shape [B, {self.plan_size}], got {tuple(z.shape)}")
        d = self.d
        S0, C0 = self.plan(z).chunk(2, dim=-1)
        zeros = z.new_zeros(z.shape[0], d)
        return S0.unflatten(-1, (d, d)), C0.unflatten(-1, (d, d)), zeros, zeros

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size} (d={self.d}), plan_size={self.plan_size}, impl={self.impl}"
