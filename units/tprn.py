"""TPRN: the Tensor Product Recurrent Network cell (Palangi et al., AAAI 2018; the
authors' code, hamidpalangi/Grammatically_Interpretable_QA my/tensorflow/tpr.py).

Per step, with n_S symbols of size d_S (the columns of S), n_R roles of size d_R (columns of R)
and d = d_S·d_R:

    a_S,t = σ(W_S [x_t; v_{t−1}] + b_S) ∈ (0,1)^{n_S}      logistic attention over symbols
    a_R,t = σ(W_R [x_t; v_{t−1}] + b_R) ∈ (0,1)^{n_R}      ... and over roles (not softmax)
    T_t   = (S a_S,t)(R a_R,t)ᵀ = S (a_S,t a_R,tᵀ) Rᵀ       one symbol bound to one role
    v_t   = vec(T_t)  (row-major, d_S × d_R → d),  v_0 = 0

The whole state is v_{t−1}: the released run uses this ungated cell (`TPRCellReg` in
my/tensorflow/tpr.py, with `--justTPR True --TPRregularizer1 True`). `gated=true` is the code's
`TPRLSTMCell`: an LSTM of `hidden_size` cells runs beside the TPR, both read [x_t; h_{t−1}; v_{t−1}],
and the output is [h_t; v_t] (2·hidden_size wide), the state (c, h, v).

The quantisation penalty (paper eq. 4, basic/Regularizers.py `Reg_eq_1_4`) pushes each attention
vector towards one-hot: Q(a) = Σ_i a_i²(1 − a_i)² + (Σ_i a_i² − 1)². Every forward sets
`self.aux_loss = quantization · (1/B) Σ_b Σ_{t real} [Q(a_S,t) + Q(a_R,t)]` (summed over real tokens,
mean over the batch, as the code's `reduce_mean(loss_mask · (c_F Σ_t Q(a_F) + c_R Σ_t Q(a_R)))`
with c_F = c_R), which the training loop adds to the task loss. Under the `bidirectional` and
`layers` wrappers each inner unit sets its own, and the loop sums them (the code adds both
directions).

Speed: the input halves of W_S, W_R (and of the LSTM matrix) act on all steps in one matmul
before the loop; each step then does one matmul with the recurrent halves and two small ones
with S and R. The ungated loop runs in `tprn_fused.TPRNRecurrence` (no per-step autograd graph,
weight gradients as single matmuls after the loop); `impl=loop` is the plain autograd reference,
and the gated variant always runs it.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from .base import RecurrentUnit, last_state, lengths_from_mask, mask_from_lengths, mask_outputs
from .binding import outer_bind
from .meta import TPRNMeta
from .registry import register_unit
from .tprn_fused import TPRNRecurrence

FORGET_BIAS = 1.0  # TPRLSTMCell(forget_bias=1.0): added to the forget gate's pre-activation, not a parameter


def quantization_penalty(a: torch.Tensor) -> torch.Tensor:
    """Q(a) over the last dimension: Σ a_i²(1 − a_i)² + (Σ a_i² − 1)². Zero exactly at one-hot vectors."""
    a2 = a * a
    return (a2 * (1 - a) ** 2).sum(-1) + (a2.sum(-1) - 1) ** 2


def _uniform_unit_scaling_(weight: torch.Tensor, fan_in: int) -> None:
    """TensorFlow 0.12's default initializer (`uniform_unit_scaling_initializer`, factor 1): U(±√(3/fan_in)).

    The authors' code creates every TPRN variable with `tf.get_variable` and no initializer; under
    the TensorFlow it needs (0.12: `tf.batch_matmul`, `tf.concat(axis, values)`, `tf.multiply`),
    that default is unit scaling with fan_in = the product of all but the last dimension of the
    TF shape (Glorot-uniform became the default only in TF 1.0)."""
    bound = math.sqrt(3.0 / fan_in)
    nn.init.uniform_(weight, -bound, bound)


@register_unit("tprn")
class TPRN(RecurrentUnit, TPRNMeta):
    """Palangi et al.'s TPRN: logistic symbol/role attention, v_t = vec((S a_S)(R a_R)ᵀ); quantisation aux loss."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        symbols: int = 100,
        roles: int = 20,
        role_dim: int = 10,
        quantization: float = 1e-5,
        gated: bool = False,
        impl: Literal["fused", "loop"] = "fused",
    ) -> None:
        super().__init__(input_size, hidden_size)
        self.check_options(hidden_size, symbols=symbols, roles=roles, role_dim=role_dim, quantization=quantization)
        self.symbols, self.roles, self.role_dim = symbols, roles, role_dim
        self.symbol_dim = hidden_size // role_dim
        self.quantization, self.gated, self.impl = quantization, gated, impl
        rec = self.recurrent_width(hidden_size, gated)  # v, or [h; v] when gated
        # Column order of the weight matrices is the code's `_linear([inputs, state])`: [x; v] or [x; h; v].
        self.W_S = nn.Parameter(torch.empty(symbols, input_size + rec))
        self.b_S = nn.Parameter(torch.zeros(symbols))
        self.W_R = nn.Parameter(torch.empty(roles, input_size + rec))
        self.b_R = nn.Parameter(torch.zeros(roles))
        self.S = nn.Parameter(torch.empty(self.symbol_dim, symbols))  # columns = symbol embeddings s_j
        self.R = nn.Parameter(torch.empty(role_dim, roles))  # columns = role embeddings r_k
        if gated:  # gates i, j (candidate), f, o in the code's order
            self.W_lstm = nn.Parameter(torch.empty(4 * hidden_size, input_size + rec))
            self.b_lstm = nn.Parameter(torch.zeros(4 * hidden_size))
        else:
            self.W_lstm = self.b_lstm = None
        # Declared here, not only in forward: the training loop lists the modules that have an
        # `aux_loss` attribute when it builds the model (tasks/training.py `_build`), before any forward.
        self.aux_loss: torch.Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        fan_in = self.input_size + self.recurrent_width(self.hidden_size, self.gated)
        for weight in (self.W_S, self.W_R, self.W_lstm):
            if weight is not None:
                _uniform_unit_scaling_(weight, fan_in)
        # The code's F is [n_S, d_S] and R is [n_R, d_R]: fan_in = n_S, resp. n_R.
        _uniform_unit_scaling_(self.S, self.symbols)
        _uniform_unit_scaling_(self.R, self.roles)
        for bias in (self.b_S, self.b_R, self.b_lstm):
            if bias is not None:
                nn.init.zeros_(bias)

    # -- options and counts -----------------------------------------------------------------
    @staticmethod
    def recurrent_width(hidden_size: int, gated: bool) -> int:
        return 2 * hidden_size if gated else hidden_size

    # check_options: TPRNMeta's (units/meta.py), read by study files without torch

    @property
    def output_size(self) -> int:
        return self.recurrent_width(self.hidden_size, self.gated)

    @classmethod
    def formula_params(
        cls, input_size: int, hidden_size: int, symbols: int = 100, roles: int = 20, role_dim: int = 10, gated: bool = False, **_: object
    ) -> int:
        """(d_in + d_S d_R)(n_S + n_R) + n_S d_S + n_R d_R (W_S, W_R, S and R above), weights only;
        gated: the attention also reads h, plus the LSTM's 4·d·(d_in + 2d)."""
        rec = cls.recurrent_width(hidden_size, gated)
        count = (input_size + rec) * (symbols + roles) + symbols * (hidden_size // role_dim) + roles * role_dim
        if gated:
            count += 4 * hidden_size * (input_size + rec)
        return count

    # -- the equations ----------------------------------------------------------------------
    def bind(self, a_S: torch.Tensor, a_R: torch.Tensor) -> torch.Tensor:
        """v = vec((S a_S)(R a_R)ᵀ), row-major: [..., n_S], [..., n_R] → [..., d_S·d_R]."""
        T = outer_bind(a_S @ self.S.T, a_R @ self.R.T)
        return T.reshape(*T.shape[:-2], self.hidden_size)

    def _split_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Input matrix [n, d_in], recurrent matrix [n, rec] and bias [n], rows = [a_S; a_R; (LSTM gates)]."""
        mats = [self.W_S, self.W_R] + ([self.W_lstm] if self.gated else [])
        biases = [self.b_S, self.b_R] + ([self.b_lstm] if self.gated else [])
        W = torch.cat(mats, 0)
        return W[:, : self.input_size], W[:, self.input_size :], torch.cat(biases)

    def _zero_carry(self, x: torch.Tensor) -> object:
        zeros = x.new_zeros(x.shape[0], self.hidden_size)
        return (zeros, zeros, zeros) if self.gated else zeros

    def _run(self, x: torch.Tensor, carry: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, object]:
        """Outputs [B,T,out], a_S [B,T,n_S], a_R [B,T,n_R] and the carry after the last step."""
        W_in, W_rec, bias = self._split_weights()
        pre_x = torch.nn.functional.linear(x, W_in, bias)  # all steps at once
        n_att = self.symbols + self.roles
        if self.impl == "fused" and not self.gated and x.shape[1] > 0:
            V, A = TPRNRecurrence.apply(pre_x.transpose(0, 1).contiguous(), W_rec, self.S, self.R, carry, self.symbols)
            out, att = V.transpose(0, 1), A.transpose(0, 1)
            a_S, a_R = att.split([self.symbols, self.roles], -1)
            return out, a_S, a_R, V[-1]
        outputs, attention = [], []
        if self.gated:
            c, h, v = carry
        else:
            v = carry
        for t in range(x.shape[1]):
            state = torch.cat([h, v], -1) if self.gated else v
            pre = pre_x[:, t] + state @ W_rec.T
            a = torch.sigmoid(pre[:, :n_att])
            if self.gated:  # TPRLSTMCell: i, j, f, o; everything reads h_{t−1}, v_{t−1}
                i, j, f, o = pre[:, n_att:].chunk(4, -1)
                c = c * torch.sigmoid(f + FORGET_BIAS) + torch.sigmoid(i) * torch.tanh(j)
                h = torch.tanh(c) * torch.sigmoid(o)
            v = self.bind(a[:, : self.symbols], a[:, self.symbols :])
            outputs.append(torch.cat([h, v], -1) if self.gated else v)
            attention.append(a)
        if not outputs:  # T = 0
            out = x.new_zeros(x.shape[0], 0, self.output_size)
            att = x.new_zeros(x.shape[0], 0, n_att)
        else:
            out, att = torch.stack(outputs, 1), torch.stack(attention, 1)
        a_S, a_R = att.split([self.symbols, self.roles], -1)
        return out, a_S, a_R, ((c, h, v) if self.gated else v)

    def _set_aux_loss(self, a_S: torch.Tensor, a_R: torch.Tensor, keep: torch.Tensor | None) -> None:
        """quantization · mean over the batch of Σ_t [Q(a_S,t) + Q(a_R,t)] over real tokens."""
        if self.quantization == 0:
            self.aux_loss = a_S.new_zeros(())
            return
        q = quantization_penalty(a_S) + quantization_penalty(a_R)  # [B, T]
        if keep is not None:
            q = q * keep.to(q.dtype)
        self.aux_loss = self.quantization * q.sum() / max(a_S.shape[0], 1)

    # -- the unit interface -----------------------------------------------------------------
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_attention: bool = False) -> tuple[torch.Tensor, ...]:
        lengths = lengths_from_mask(x, mask)
        out, a_S, a_R, _ = self._run(x, self._zero_carry(x))
        keep = mask_from_lengths(lengths, x.shape[1])
        self._set_aux_loss(a_S, a_R, keep)
        outputs = mask_outputs(out, lengths)
        state = last_state(outputs, lengths)
        if return_attention:
            return outputs, state, (mask_outputs(a_S, lengths), mask_outputs(a_R, lengths))
        return outputs, state

    def forward_carry(self, x: torch.Tensor, carry: object | None = None) -> tuple[torch.Tensor, object]:
        """Unpadded windows (truncated BPTT): carry = v, or (c, h, v) when gated."""
        out, a_S, a_R, carry = self._run(x, carry if carry is not None else self._zero_carry(x))
        self._set_aux_loss(a_S, a_R, None)
        return out, carry

    def attention(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """a_S [B,T,n_S] and a_R [B,T,n_R] per token (zero at padding): what the paper interprets."""
        return self.forward(x, mask, return_attention=True)[2]

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, symbols={self.symbols}, roles={self.roles}, "
            f"symbol_dim={self.symbol_dim}, role_dim={self.role_dim}, quantization={self.quantization}, gated={self.gated}, "
            f"impl={self.impl}"
        )
