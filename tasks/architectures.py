"""The architectures the papers put around a unit, for tasks that compare two sequences.

- `plain`: a siamese encoder (one unit, shared by both sides), pooling, the feature vector
  [u; v; |u−v|; u∘v] and an MLP with one ReLU hidden layer.
- `bidaf`: an encoding layer, bi-directional attention between the two sides, a modelling
  layer of the same unit and size over [h; attended other side; embedding], pooling and the
  same feature vector + MLP (as the original TPRU code's BiDAF model).

Both take any unit spec (bidirectional or not) through `units.build` and know nothing else
about units.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import units

POOLINGS = ("max", "last", "mean")
ARCHS = ("plain", "bidaf")


def pool(outputs: torch.Tensor, state: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """Sequence → vector: max over real tokens, the state at the last real token, or the mean."""
    if how == "last":
        return state
    keep = mask.unsqueeze(-1)
    if how == "max":
        return outputs.masked_fill(~keep, float("-inf")).amax(1).masked_fill(~mask.any(1, keepdim=True), 0.0)
    if how == "mean":
        return (outputs * keep).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
    raise ValueError(f"unknown pooling {how!r}; choose one of {', '.join(POOLINGS)}")


def pad_to(x: torch.Tensor, steps: int) -> torch.Tensor:
    """Right-pad dim 1 to `steps` (so both sides of a pair run through the encoder as one batch)."""
    return F.pad(x, (0, 0, 0, steps - x.shape[1])) if x.dim() == 3 else F.pad(x, (0, steps - x.shape[1]))


class PairClassifierHead(nn.Module):
    """[u; v; |u−v|; u∘v] → Linear → ReLU → dropout → Linear to class logits."""

    def __init__(self, size: int, hidden: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4 * size, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, classes))

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([u, v, (u - v).abs(), u * v], -1))


class PairModel(nn.Module):
    """Embedding + (plain | bidaf) encoder + classifier head for a pair of token sequences."""

    def __init__(
        self,
        unit: str,
        arch: str,
        vocab_size: int,
        dim: int,
        input_dim: int,
        classes: int,
        pooling: str = "max",
        mlp_hidden: int | None = None,
        dropout: float = 0.0,
        embeddings: torch.Tensor | None = None,
        freeze_embeddings: bool = False,
    ) -> None:
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        self.arch, self.pooling = arch, pooling
        self.embed = nn.Embedding(vocab_size, input_dim, padding_idx=0)
        if embeddings is not None:
            self.embed.weight.data.copy_(embeddings)
            self.embed.weight.requires_grad = not freeze_embeddings
        self.dropout = nn.Dropout(dropout)
        self.encoder = units.build(unit, input_dim, dim)
        width = self.encoder.output_size
        if arch == "bidaf":
            self.modelling = units.build(unit, 2 * width + input_dim, dim)
            width = self.modelling.output_size
        self.head = PairClassifierHead(width, mlp_hidden or 2 * dim, classes, dropout)

    def encode_pair(self, a, a_mask, b, b_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled vectors u, v of both sides, computed in one batch of 2B sequences."""
        steps = max(a.shape[1], b.shape[1])
        tokens = torch.cat([pad_to(a, steps), pad_to(b, steps)], 0)
        mask = torch.cat([pad_to(a_mask, steps), pad_to(b_mask, steps)], 0)
        emb = self.dropout(self.embed(tokens))
        outputs, state = self.encoder(emb, mask)
        if self.arch == "bidaf":
            outputs, state = self._bidaf(outputs, emb, mask)
        z = pool(outputs, state, mask, self.pooling)
        return z.chunk(2, 0)

    def _bidaf(self, h: torch.Tensor, emb: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Bi-directional attention between the two halves of the batch, then the modelling layer."""
        hu, hv = h.chunk(2, 0)
        mu, mv = mask.chunk(2, 0)
        sim = hu @ hv.transpose(1, 2)                                    # [B, Tu, Tv] dot-product similarity
        attend_v = torch.softmax(sim.masked_fill(~mv.unsqueeze(1), float("-inf")), 2)   # each u position over v
        attend_u = torch.softmax(sim.masked_fill(~mu.unsqueeze(2), float("-inf")), 1)   # each v position over u
        v_for_u = attend_v @ hv                                          # [B, Tu, d]
        u_for_v = attend_u.transpose(1, 2) @ hu                          # [B, Tv, d]
        g = torch.cat([torch.cat([hu, v_for_u], -1), torch.cat([hv, u_for_v], -1)], 0)
        g = torch.nan_to_num(g) * mask.unsqueeze(-1)                     # rows of an empty side → 0
        return self.modelling(self.dropout(torch.cat([g, emb], -1)), mask)

    def forward(self, a, a_mask, b, b_mask) -> torch.Tensor:
        u, v = self.encode_pair(a, a_mask, b, b_mask)
        return self.head(self.dropout(u), self.dropout(v))
