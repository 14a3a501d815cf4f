"""TPRU and its ablations (Tang, Smolensky & de Sa: the NeurIPS-2018 workshop paper, arXiv 1810.12456, and the
ICLR-2020 submission "A simple recurrent unit with reduced tensor product representations"; the authors' code,
shuaitang/TPRU models/TPRU.py).

Per step, with the binding complex b ∈ R^d, N roles, k slices of size s = d/k:

    g_t  = σ(W_b b_{t-1} + W_x x_t)                       one gate
    f_b  = Uᵀ V_b b_{t-1},   f_x = Uᵀ V_x x_t             unbinding (per slice: N×k fillers)
    f̃    = (ReLU(f_b + c_b) + ReLU(f_x + c_x))²           ReLU² ...
    f_t  = f̃ / Σ_n f̃_n                                    ... normalised over roles, per slice
    b̃_t  = R f_t                                           binding, slice-wise
    b_t  = g_t ∘ b̃_t + (1 − g_t) ∘ b_{t-1}

with U = W_u E, R = W_r E and E ∈ R^{d×N} a fixed standard-normal basis (a buffer, never trained).
Variants switch three things: V_b present or identity, W_r shared with W_u, ReLU² or
softmax normalisation; `tpru-v1` also passes the candidate through tanh.

`biases`: "none" (default) is the equations above; "gate" adds one gate bias b_g; "code" adds
every bias the authors' code has (its layers are nn.Linear): U = W_u E + b_u 1ᵀ, R = W_r E + b_r 1ᵀ,
V_b b + b_Vb, V_x x + b_Vx, and W_b b + b_Wb, W_x x + b_Wx in the gate. Init is the authors' code's
(nn.Linear's default). Sources of every choice: docs/science-tpru.md.

Speed: everything that does not depend on b_{t-1} is hoisted out of the loop (gate and filler
input projections for all steps in one matmul each), Uᵀ V_b is folded into the recurrent
matrix once per forward, and the loop itself runs in `tpru_fused.TPRURecurrence`, whose
backward computes all weight gradients after the loop as single large matmuls. On CUDA tensors
`impl=fused` runs the same Function's Triton kernels instead (`tpru_triton`: one launch for the
forward loop, one for the backward loop; by shape, a kernel with a program per 16 sequences or the
persistent one of `tpru_persist` spread over every SM) when Triton is installed; `impl=triton` forces
them (CPU tensors then run in Triton's interpreter: for tests only).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from . import tpru_triton
from .base import RecurrentUnit, last_state, lengths_from_mask, mask_outputs
from .meta import TPRUMeta
from .registry import register_unit
from .tpru_fused import NORM_EPS, TPRUSlicesRecurrence, fold_is_cheaper, fused_slices_available


def normalise_fillers(fb: torch.Tensor, fx: torch.Tensor, c_b: torch.Tensor, c_x: torch.Tensor, norm: str) -> torch.Tensor:
    """Fillers f from unbinding scores [..., N]: ReLU² normalisation or softmax, over roles."""
    if norm == "relu2":
        a = (F.relu(fb + c_b) + F.relu(fx + c_x)).pow(2)
        return a / a.sum(-1, keepdim=True).clamp_min(NORM_EPS)  # as the authors' code (clamp 1e-7)
    # Softmax: the scalars shift every role equally, so they cancel; kept so Mod III differs from tpru only here.
    return torch.softmax(fb + c_b + fx + c_x, dim=-1)


class TPRUBase(RecurrentUnit, TPRUMeta):
    """The TPRU family. Subclasses fix the variant; `roles`, `slices` and `impl` are options."""

    has_vb: bool = True  # False: V_b = I (tpru-v1, Mod I)
    share_binding: bool = False  # True: W_r = W_u (Mod I, Mod II)
    norm: str = "relu2"  # or "softmax" (Mod I–III)
    tanh_candidate: bool = False  # tpru-v1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        roles: int = 64,
        slices: int = 1,
        biases: Literal["none", "gate", "code"] = "none",
        impl: Literal["fused", "loop", "triton"] = "fused",
        basis_seed: int | None = None,
    ) -> None:
        super().__init__(input_size, hidden_size)
        self.check_options(hidden_size, roles=roles, slices=slices, impl=impl)
        self.roles, self.slices, self.biases, self.impl = roles, slices, biases, impl
        d, din = hidden_size, input_size
        generator = torch.Generator().manual_seed(basis_seed) if basis_seed is not None else None
        # E: fixed random role basis, d × N, standard-normal entries (workshop paper §3.3; the
        # authors' models/TPRU.py: torch.randn(n_roles, d_hidden), frozen). A buffer: saved, never trained.
        self.register_buffer("E", torch.randn(d, roles, generator=generator))
        self.W_u = nn.Parameter(torch.empty(d, d))
        self.W_r = None if self.share_binding else nn.Parameter(torch.empty(d, d))
        self.W_b = nn.Parameter(torch.empty(d, d))
        self.V_b = nn.Parameter(torch.empty(d, d)) if self.has_vb else None
        self.W_x = nn.Parameter(torch.empty(d, din))
        self.V_x = nn.Parameter(torch.empty(d, din))
        self.c_b = nn.Parameter(torch.ones(()))  # the two scalar filler biases, 1 at init
        self.c_x = nn.Parameter(torch.ones(()))  # (the authors' code: bias_h, bias_x = ones(1))
        # Biases (docs/science-tpru.md, "TPRU: defaults and their sources"): "none" is the papers'
        # equations; "gate" one gate bias b_g; "code" every bias of the authors' nn.Linear layers.
        code = biases == "code"
        vector = lambda on: nn.Parameter(torch.empty(d)) if on else None  # noqa: E731
        self.gate_bias = nn.Parameter(torch.zeros(d)) if biases == "gate" else None
        self.b_u = vector(code)  # U = W_u E + b_u 1ᵀ  (v2ru's bias)
        self.b_r = vector(code and not self.share_binding)  # R = W_r E + b_r 1ᵀ
        self.b_Wb = vector(code)  # W_b b + b_Wb        (h2fg's bias)
        self.b_Vb = vector(code and self.has_vb)  # V_b b + b_Vb
        self.b_Wx = vector(code)  # W_x x + b_Wx        (x2fg's bias)
        self.b_Vx = vector(code)  # V_x x + b_Vx
        self.reset_parameters()
        # Which recurrence the last forward ran ("cpp", "triton/persistent", …: tpru_triton.recurrence_name;
        # "cpp-slices", "loop"): `tprbench bench units` shows it. Diagnostic only; not saved.
        self.last_recurrence: str | None = None

    def reset_parameters(self) -> None:
        """nn.Linear's default init, as the authors' code (every matrix there is an nn.Linear):
        weights and biases U(−1/√fan_in, 1/√fan_in), fan_in = d for W_u, W_r, W_b, V_b and their
        biases, d' for W_x, V_x and theirs. The papers do not state an init."""
        d, din = self.hidden_size, self.input_size
        for weight in (self.W_u, self.W_r, self.W_b, self.V_b, self.W_x, self.V_x):
            if weight is not None:
                nn.init.kaiming_uniform_(weight, a=math.sqrt(5))  # what nn.Linear.reset_parameters does
        for bias, fan_in in ((self.b_u, d), (self.b_r, d), (self.b_Wb, d), (self.b_Vb, d), (self.b_Wx, din), (self.b_Vx, din)):
            if bias is not None:
                nn.init.uniform_(bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))
        with torch.no_grad():
            self.c_b.fill_(1.0)
            self.c_x.fill_(1.0)
            if self.gate_bias is not None:
                self.gate_bias.zero_()

    # check_options: TPRUMeta's (units/meta.py), read by study files without torch

    @classmethod
    def formula_params(cls, input_size: int, hidden_size: int, **options: object) -> int:
        d, din = hidden_size, input_size
        square = 2 + (not cls.share_binding) + cls.has_vb  # W_u, W_b, [W_r], [V_b]
        return square * d * d + 2 * d * din  # W_x, V_x

    # -- the pieces of the equations, as matrices -------------------------------------------
    def role_matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """U = W_u E (unbinding) and R = W_r E (binding), each d × N; with the code's biases
        every role vector also gets b_u (b_r): U = W_u E + b_u 1ᵀ."""
        U = self.W_u @ self.E
        if self.b_u is not None:
            U = U + self.b_u.unsqueeze(1)
        if self.W_r is None:
            return U, U
        R = self.W_r @ self.E
        if self.b_r is not None:
            R = R + self.b_r.unsqueeze(1)
        return U, R

    def filler_offset(self, U: torch.Tensor) -> torch.Tensor:
        """Everything in f_b + c_b that does not depend on b_{t-1}, per slice and role [k, N]:
        c_b, plus Uᵀ b_Vb per slice when V_b has the code's bias."""
        k = self.slices
        offset = self.c_b.expand(k, self.roles)
        if self.b_Vb is not None:
            offset = offset + torch.einsum("ksn,ks->kn", self._slice_T(U), self.b_Vb.view(k, -1))
        return offset

    def gate_offset(self) -> torch.Tensor | None:
        """The gate's biases summed (they only ever enter as a sum): b_g, or b_Wb + b_Wx, or None."""
        if self.gate_bias is not None:
            return self.gate_bias
        if self.b_Wb is not None:
            return self.b_Wb + self.b_Wx
        return None

    def _slice_T(self, M: torch.Tensor) -> torch.Tensor:
        """d × N role matrix → [k, s, N]: slice j holds rows j·s … (j+1)·s − 1."""
        return M.view(self.slices, self.hidden_size // self.slices, self.roles)

    def recurrent_matrix(self, U: torch.Tensor) -> torch.Tensor:
        """[W_b; Uᵀ V_b per slice] as one (d + kN) × d matrix: both b_{t-1} products in one matmul."""
        d, k = self.hidden_size, self.slices
        V_b = self.V_b if self.V_b is not None else torch.eye(d, dtype=U.dtype, device=U.device)
        M_b = torch.einsum("ksn,ksd->knd", self._slice_T(U), V_b.view(k, d // k, d)).reshape(k * self.roles, d)
        return torch.cat([self.W_b, M_b], dim=0)

    def input_projections(self, x: torch.Tensor, U: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gate pre-activations W_x x + (gate biases) [B,T,d] and input scores Uᵀ (V_x x [+ b_Vx])
        [B,T,k,N], all steps at once (the recurrent gate bias b_Wb is constant, so it goes here too)."""
        B, T, _ = x.shape
        k, s = self.slices, self.hidden_size // self.slices
        gx, zx = self.input_linear(x)
        fx = torch.einsum("btks,ksn->btkn", zx.reshape(B, T, k, s), self._slice_T(U))
        return gx, fx

    def input_linear(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gate pre-activations W_x x + (gate biases) and zx = V_x x [+ b_Vx], each [B,T,d], in one matmul."""
        gate = self.gate_offset()
        bias = None
        if gate is not None or self.b_Vx is not None:
            zeros = self.W_x.new_zeros(self.hidden_size)
            bias = torch.cat([gate if gate is not None else zeros, self.b_Vx if self.b_Vx is not None else zeros])
        proj = F.linear(x, torch.cat([self.W_x, self.V_x], 0), bias)
        gx, zx = proj.split(self.hidden_size, dim=-1)
        return gx, zx

    # -- forward ----------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_fillers: bool = False) -> tuple[torch.Tensor, ...]:
        lengths = lengths_from_mask(x, mask)
        outputs, fillers = self._run(x, x.new_zeros(x.shape[0], self.hidden_size), return_fillers)
        outputs = mask_outputs(outputs, lengths)
        state = last_state(outputs, lengths)
        if return_fillers:
            return outputs, state, fillers
        return outputs, state

    def forward_carry(self, x: torch.Tensor, carry: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        b0 = carry if carry is not None else x.new_zeros(x.shape[0], self.hidden_size)
        outputs, _ = self._run(x, b0, False)
        return outputs, outputs[:, -1]

    def _run(self, x: torch.Tensor, b0: torch.Tensor, return_fillers: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """b_1..b_T from b0 (and the fillers when asked, through the reference loop)."""
        U, R = self.role_matrices()
        R_slices = self._slice_T(R)
        c_b = self.filler_offset(U)
        folded = fold_is_cheaper(self.hidden_size, self.roles, self.slices)
        if self.impl == "fused" and not return_fillers and fused_slices_available(x, self.norm, folded):
            # many slices, ReLU², C++: the fused unbind → normalise → bind step; it takes V_x x, not Uᵀ V_x x
            gx, zx = self.input_linear(x)
            W_fused = self.W_b if self.V_b is None else torch.cat([self.W_b, self.V_b], 0)
            args = (gx.transpose(0, 1), zx.transpose(0, 1), W_fused, R_slices, self._slice_T(U), c_b, self.c_x, b0)
            self.last_recurrence = "cpp-slices"
            return TPRUSlicesRecurrence.apply(*args, self.tanh_candidate).transpose(0, 1), None
        gx, fx = self.input_projections(x, U)
        if self.impl != "loop" and not return_fillers:
            if folded:
                W_fused, U_slices = self.recurrent_matrix(U), None
            else:  # many slices: keep z = V_b b and dot it with U slice by slice inside the loop
                W_fused = self.W_b if self.V_b is None else torch.cat([self.W_b, self.V_b], 0)
                U_slices = self._slice_T(U)
            # time-major views: the C++ loop reads them strided, the others copy only if they must
            args = (gx.transpose(0, 1), fx.transpose(0, 1), W_fused, R_slices, U_slices, c_b, self.c_x, b0)
            # fused: the Triton kernel on CUDA when it can run, else the autograd Function (CPU path)
            recurrence = tpru_triton.select_recurrence(self.impl, *args)
            outputs = recurrence.apply(*args, self.norm, self.tanh_candidate).transpose(0, 1)
            self.last_recurrence = tpru_triton.recurrence_name(recurrence, *args, self.norm, self.tanh_candidate)
            fillers = None
        else:
            outputs, fillers = self._loop(gx, fx, self.recurrent_matrix(U), R_slices, c_b, b0)
            self.last_recurrence = "loop"
        return outputs, fillers

    def _loop(self, gx, fx, W_rec, R_slices, c_b, b):
        """Plain autograd loop: the readable reference path, and the one that records fillers."""
        d, k, N = self.hidden_size, self.slices, self.roles
        outputs, fillers = [], []
        for t in range(gx.shape[1]):
            pre = b @ W_rec.T
            g = torch.sigmoid(pre[:, :d] + gx[:, t])  # g_t
            f = normalise_fillers(pre[:, d:].view(-1, k, N), fx[:, t], c_b, self.c_x, self.norm)  # f_t
            cand = torch.einsum("bkn,ksn->bks", f, R_slices).reshape(-1, d)  # b̃_t = R f_t
            if self.tanh_candidate:
                cand = torch.tanh(cand)
            b = g * cand + (1 - g) * b  # b_t
            outputs.append(b)
            fillers.append(f)
        return torch.stack(outputs, 1), torch.stack(fillers, 1)

    def fillers(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """f_t for every step: [B, T, slices, roles]. argmax over roles = the role a token takes."""
        return self.forward(x, mask, return_fillers=True)[2]

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, roles={self.roles}, slices={self.slices}, biases={self.biases}, impl={self.impl}"


@register_unit("tpru")
class TPRU(TPRUBase):
    """ICLR-2020 TPRU: six matrices (4d² + 2dd'), ReLU² normalisation."""


@register_unit("tpru-v1")
class TPRUv1(TPRUBase):
    """NeurIPS-workshop TPRU: no V_b, tanh on the candidate; 3d² + 2dd'."""

    has_vb = False
    tanh_candidate = True


@register_unit("tpru-mod1")
class TPRUMod1(TPRUBase):
    """Modification I: W_r = W_u, V_b = I, softmax; 2d² + 2dd'."""

    has_vb = False
    share_binding = True
    norm = "softmax"


@register_unit("tpru-mod2")
class TPRUMod2(TPRUBase):
    """Modification II: W_r = W_u, softmax; 3d² + 2dd'."""

    share_binding = True
    norm = "softmax"


@register_unit("tpru-mod3")
class TPRUMod3(TPRUBase):
    """Modification III: softmax only; 4d² + 2dd'."""

    norm = "softmax"
