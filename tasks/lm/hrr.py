"""The HRR word embedding and readout of Luo et al. ("Towards Decomposed Linguistic Representation with Holographic
Reduced Representation"; the authors' code j-luo93/lingvo, lingvo/tasks/lm/layers.py): words as sums of role ⊛ filler.

Each word w has N coefficient vectors s_i^w ∈ R^{d'} (trained). With a role vector r_i ∈ R^d and a
filler basis F_i (d' basis fillers f_{i,k} ∈ R^d, the rows of `filler_basis[i]`) per role:

    Ẽ_i(w) = Σ_k s_{i,k}^w f_{i,k}                       the word's i-th filler
    E(w)   = Σ_i r_i ⊛ Ẽ_i(w)                            input embedding (circular convolution)
    f_i    = r_i ⊕ h                                     decoded filler of the output h ∈ R^d
    logit(h, w) = Σ_i α_i f_i · Ẽ_i(w)  (+ b_w)          the readout, tied to the fillers

⊛/⊕ are `units.binding.cconv`/`ccorr` (the role is the conjugated, first operand of ⊕, as the
authors' code). α_1 = 1 and α_{i+1} = min(step, T_i)/T_i (role annealing, lingvo
`SimpleFullSoftmax._GetGatingProbs`); the code drops b_w whenever it anneals, so b_w exists here
only when annealing is off (N = 1 or `anneal_steps=0`).

Bases: "fixed" draws r_i and f_{i,k} from N(0, 1/d) once and keeps them as buffers (saved with
the weights, never trained); "isometric" trains them from U(±init_scale) (`basis_init="uniform"`, the
authors'; `"orthonormal"`: R Rᵀ = I and the N·d' basis fillers orthonormal, the isometry loss 0 at the
start, a deviation from the authors) and `isometry_loss()`
= β(‖G_F − I‖² + ‖R Rᵀ − I‖²), G_F the Gram matrix of all N·d' basis fillers (the R term only for
N > 1, as lingvo/tasks/lm/model.py), which needs N·d' ≤ d. It is set as `aux_loss` by `embed` in
training for the training loop's auxiliary-loss hook.

Plugging into a language model (tasks/lm/adapter.py `LanguageModel`): this module replaces the
`nn.Embedding` (its `forward(ids)` is `embed(ids)`) and `logits(h)` replaces the tied decoder,
with the unit's output projected to `dim` first. `logits` counts the training-mode calls in the
`step` buffer (one per optimizer update in truncated BPTT) and anneals with it unless a step is
passed, so annealing needs no help from the training loop and resumes from checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from units.binding import cconv, ccorr


@dataclass(frozen=True)
class EmbeddingParamCounts:
    """`formula`: V·N·d' (+ N·d'·d + N·d when the bases are trained), the paper's count.
    `plain`: V·d, the plain embedding it replaces. `total`: every trainable parameter (b_w included)."""

    formula: int
    plain: int
    total: int


def _anneal_schedule(roles: int, anneal_steps: int | Sequence[int]) -> tuple[int, ...]:
    """T_2 … T_N, or () when annealing is off."""
    if roles == 1:
        return ()
    if isinstance(anneal_steps, int):
        if anneal_steps < 0:
            raise ValueError(f"anneal_steps must be >= 0, got {anneal_steps}")
        if anneal_steps == 0:
            return ()
        if roles > 2:
            raise ValueError(
                f"anneal_steps: with {roles} roles give one step count per role after the first ({roles - 1} values, "
                "e.g. [3000, 4000, 5000] as the authors' 4-role PTB configs), not a single number"
            )
        return (anneal_steps,)
    steps = tuple(int(s) for s in anneal_steps)
    if len(steps) != roles - 1 or any(s < 1 for s in steps):
        raise ValueError(f"anneal_steps: need {roles - 1} positive step counts (roles 2…{roles}), got {list(anneal_steps)}")
    return steps


class HRRWordEmbedding(nn.Module):
    """Embedding E(w) = Σ_i r_i ⊛ F_i s_i^w and its tied readout Σ_i α_i (r_i ⊕ h)·F_i s_i^w."""

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        fillers: int,
        roles: int = 2,
        basis: Literal["fixed", "isometric"] = "fixed",
        beta: float = 100.0,
        anneal_steps: int | Sequence[int] = 3000,
        filler_dropout: float = 0.5,
        init_scale: float = 0.05,
        basis_seed: int | None = None,
        basis_init: Literal["uniform", "orthonormal"] = "uniform",
    ) -> None:
        super().__init__()
        if min(vocab_size, dim, fillers, roles) < 1:
            raise ValueError(f"vocab_size, dim, fillers and roles must be >= 1, got {vocab_size}, {dim}, {fillers}, {roles}")
        if basis not in ("fixed", "isometric"):
            raise ValueError(f"basis must be 'fixed' or 'isometric', got {basis!r}")
        if basis == "isometric" and roles * fillers > dim:
            raise ValueError(
                f"the isometric basis needs N·d' <= d (all N·d' basis fillers orthonormal in R^d): "
                f"roles={roles} × fillers={fillers} = {roles * fillers} > dim={dim}; lower fillers to <= {dim // roles} "
                "or use basis='fixed'"
            )
        if basis_init not in ("uniform", "orthonormal"):
            raise ValueError(f"basis_init must be 'uniform' or 'orthonormal', got {basis_init!r}")
        if basis_init == "orthonormal" and basis != "isometric":
            raise ValueError("basis_init='orthonormal' is for trained (isometric) bases; fixed bases are N(0, 1/d) draws")
        if not 0 <= filler_dropout < 1:
            raise ValueError(f"filler_dropout must be in [0, 1), got {filler_dropout}")
        if beta < 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        self.vocab_size, self.dim, self.fillers, self.roles = vocab_size, dim, fillers, roles
        self.basis, self.beta, self.basis_init = basis, float(beta), basis_init
        self.anneal_steps = _anneal_schedule(roles, anneal_steps)

        # s_i^w: lingvo's PTB configs initialise every weight U(±0.05) (params/ptb_word_level.py `iter_iter`).
        self.coefficients = nn.Parameter(torch.empty(vocab_size, roles, fillers).uniform_(-init_scale, init_scale))
        if basis == "fixed":  # lingvo `get_basis_init`: N(0, 1/d), i.e. scale 1/√d, constant
            gen = torch.Generator().manual_seed(basis_seed) if basis_seed is not None else None
            self.register_buffer("role_basis", torch.randn(roles, dim, generator=gen) / math.sqrt(dim))
            self.register_buffer("filler_basis", torch.randn(roles, fillers, dim, generator=gen) / math.sqrt(dim))
        elif basis_init == "uniform":  # trainable bases take the layer's params_init, U(±0.05) in the PTB configs
            self.role_basis = nn.Parameter(torch.empty(roles, dim).uniform_(-init_scale, init_scale))
            self.filler_basis = nn.Parameter(torch.empty(roles, fillers, dim).uniform_(-init_scale, init_scale))
        else:  # orthonormal rows (N·d' <= d checked above): R Rᵀ = I, G_F = I, the isometry loss exactly at its minimum
            self.role_basis = nn.Parameter(nn.init.orthogonal_(torch.empty(roles, dim)))
            self.filler_basis = nn.Parameter(nn.init.orthogonal_(torch.empty(roles * fillers, dim)).reshape(roles, fillers, dim))
        self.bias = None if self.anneal_steps else nn.Parameter(torch.zeros(vocab_size))
        self.filler_dropout = nn.Dropout(filler_dropout)
        self.register_buffer("step", torch.zeros((), dtype=torch.long))  # training-mode `logits` calls so far
        self.aux_loss: torch.Tensor | None = None  # present from construction: the trainer finds aux-loss modules then

    # -- the pieces -------------------------------------------------------------------------
    def alphas(self, step: int | None = None) -> torch.Tensor:
        """[α_1 … α_N]: 1, then min(step, T_i)/T_i; all ones without annealing. step None = the `step` buffer."""
        s = int(self.step) if step is None else int(step)
        values = [1.0] + [min(s, T) / T for T in self.anneal_steps]
        values += [1.0] * (self.roles - len(values))
        return torch.tensor(values, dtype=self.coefficients.dtype, device=self.coefficients.device)

    def filler_embeddings(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """Ẽ_i(w) = Σ_k s_{i,k}^w f_{i,k}: [..., N, d] for `ids` (every word when None)."""
        s = self.coefficients if ids is None else self.coefficients[ids]
        return torch.einsum("...nk,nkd->...nd", s, self.filler_basis)

    def bound_basis(self) -> torch.Tensor:
        """r_i ⊛ f_{i,k} for every role and basis filler, [N·d', d]. By linearity of ⊛,
        E(w) = Σ_i r_i ⊛ Ẽ_i(w) = (s^w flattened) · this matrix: one matmul per token, no per-token FFT."""
        return cconv(self.role_basis.unsqueeze(1), self.filler_basis).reshape(self.roles * self.fillers, self.dim)

    def decode(self, h: torch.Tensor) -> torch.Tensor:
        """f_i = r_i ⊕ h: [..., d] → [..., N, d]."""
        if h.shape[-1] != self.dim:
            raise ValueError(f"HRR readout: h has width {h.shape[-1]}, expected dim={self.dim} (project the unit output first)")
        return ccorr(self.role_basis, h.unsqueeze(-2))

    # -- embedding and readout --------------------------------------------------------------
    def embed(self, ids: torch.Tensor, loss_scale: float = 1.0) -> torch.Tensor:
        """E(w) for token ids [...] → [..., d]; sets `aux_loss` (loss_scale·β·isometry loss in training, else 0).

        β is the authors' weight against lingvo's loss, the cross-entropy summed over each
        sequence's tokens (and averaged over the batch); a caller whose loss is the per-token mean
        passes loss_scale = 1/(tokens per sequence) to keep the same balance."""
        out = self.coefficients[ids].reshape(*ids.shape, self.roles * self.fillers) @ self.bound_basis()
        if self.training and self.basis == "isometric" and self.beta > 0:
            self.aux_loss = (self.beta * loss_scale) * self.isometry_loss()
        else:
            self.aux_loss = out.new_zeros(())
        return out

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids)

    def logits(self, h: torch.Tensor, step: int | None = None) -> torch.Tensor:
        """Σ_i α_i f_i·Ẽ_i(w) (+ b_w) for every word: [..., d] → [..., V].

        `filler_dropout` (the code's `decoded_filler_keep_prob`) drops entries of the decoded f_i in
        training. Computed as (α_i f_i F_iᵀ) · s_i^w, so Ẽ for the whole vocabulary is never built:
        the cost is one [N·d' × V] matmul, as a plain tied decoder of width N·d'."""
        alphas = self.alphas(step)
        f = self.filler_dropout(self.decode(h))  # [..., N, d]
        g = torch.einsum("...nd,nkd->...nk", f, self.filler_basis) * alphas.unsqueeze(-1)  # [..., N, d']
        out = g.reshape(*g.shape[:-2], self.roles * self.fillers) @ self.coefficients.reshape(self.vocab_size, -1).T
        if self.bias is not None:
            out = out + self.bias
        if self.training and step is None:
            self.step += 1
        return out

    # -- the isometry loss and counts -------------------------------------------------------
    def isometry_loss(self) -> torch.Tensor:
        """‖G_F − I‖² + ‖R Rᵀ − I‖² (unweighted), G_F = Gram of all N·d' basis fillers; R term for N > 1."""
        Fm = self.filler_basis.reshape(self.roles * self.fillers, self.dim)
        eye = torch.eye(Fm.shape[0], dtype=Fm.dtype, device=Fm.device)
        loss = ((Fm @ Fm.T - eye) ** 2).sum()
        if self.roles > 1:
            R = self.role_basis
            loss = loss + ((R @ R.T - torch.eye(self.roles, dtype=R.dtype, device=R.device)) ** 2).sum()
        return loss

    def param_counts(self) -> EmbeddingParamCounts:
        formula = self.vocab_size * self.roles * self.fillers
        if self.basis == "isometric":
            formula += self.roles * self.fillers * self.dim + self.roles * self.dim
        total = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return EmbeddingParamCounts(formula, self.vocab_size * self.dim, total)

    def extra_repr(self) -> str:
        return (
            f"vocab={self.vocab_size}, dim={self.dim}, roles={self.roles}, fillers={self.fillers}, basis={self.basis}, "
            f"beta={self.beta}, anneal_steps={list(self.anneal_steps)}, bias={self.bias is not None}"
            + (f", basis_init={self.basis_init}" if self.basis_init != "uniform" else "")
        )
