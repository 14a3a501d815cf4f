"""Binding operations shared by the TPR units and the HRR embedding (each family's sources below).

Two families:

* Tensor products (Smolensky): `outer_bind(f, r) = f rᵀ` keeps every filler/role pair in a
  d_f × d_r matrix; `tpr_unbind(T, u) = T u` recovers the filler bound to the role whose dual
  (unbinding) vector is u — exactly when the roles are linearly independent and u is their dual.
* Holographic reduced representations (Plate): circular convolution binds two d-vectors into one
  d-vector, circular correlation approximately unbinds it.

      cconv(x, y)_j = Σ_k x_k y_{(j−k) mod d} = irfft(rfft x · rfft y)
      ccorr(x, y)_j = Σ_k x_k y_{(j+k) mod d} = irfft(conj(rfft x) · rfft y)

  `ccorr` conjugates the FIRST operand, as the HRR authors' code does (lingvo fork,
  `HRREmbeddingLayer._circular_corr(a, b)`, always called as `corr(role, vector)`): the role goes
  first. Then ccorr(x, y) = cconv(involution(x), y), and for a role with |FFT r| = 1 (unitary)
  ccorr(r, cconv(r, f)) = f exactly.

torch.fft has no circular convolution of its own; the FFT forms below are the standard O(d log d)
way (the direct sums are O(d²)). Every function broadcasts over leading dimensions.
"""

from __future__ import annotations

import torch


def outer_bind(filler: torch.Tensor, role: torch.Tensor) -> torch.Tensor:
    """f rᵀ: [..., d_f] and [..., d_r] → [..., d_f, d_r]. Flatten row-major for vec(T)."""
    return filler.unsqueeze(-1) * role.unsqueeze(-2)


def tpr_unbind(tpr: torch.Tensor, unbinding: torch.Tensor) -> torch.Tensor:
    """T u: [..., d_f, d_r] and [..., d_r] → [..., d_f], the filler of the role that u is dual to."""
    return (tpr @ unbinding.unsqueeze(-1)).squeeze(-1)


def _check_same_length(x: torch.Tensor, y: torch.Tensor, name: str) -> int:
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"{name}: operands must have the same last dimension, got {x.shape[-1]} and {y.shape[-1]}")
    return x.shape[-1]


def cconv(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Circular convolution x ⊛ y (binding): irfft(rfft x · rfft y), length d kept (odd d too)."""
    d = _check_same_length(x, y, "cconv")
    return torch.fft.irfft(torch.fft.rfft(x, dim=-1) * torch.fft.rfft(y, dim=-1), n=d, dim=-1)


def ccorr(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Circular correlation x ⊕ y (unbinding with x): irfft(conj(rfft x) · rfft y).

    Conjugates the first operand: pass the role first, as `ccorr(role, trace)`."""
    d = _check_same_length(x, y, "ccorr")
    return torch.fft.irfft(torch.fft.rfft(x, dim=-1).conj() * torch.fft.rfft(y, dim=-1), n=d, dim=-1)


def involution(x: torch.Tensor) -> torch.Tensor:
    """x*_j = x_{(−j) mod d}: the approximate inverse of x under ⊛ (ccorr(x, y) = cconv(x*, y))."""
    return torch.cat([x[..., :1], x[..., 1:].flip(-1)], dim=-1)
