"""The architectures the papers put around a unit, for tasks that compare two sequences.

- `plain`: a siamese encoder (one unit, shared by both sides; two layers unless the unit spec
  says `layers`), pooling, the feature vector [u; v; |u−v|; u∘v] and an MLP with one ReLU
  hidden layer of width d (the authors' classifier.py).
- `bidaf`: the same encoder, bi-directional attention between the two sides, a modelling
  layer (one layer of the same unit, or `modelling_unit`), pooling and the same head.
  `attention="dot"` (default) is the TPRU authors' models/bidaf.py: dot-product similarity,
  each side attends to the other, modelling input [h; ũ; embedding]. `attention="trilinear"`
  is Seo et al. (2017): α(h, u) = wᵀ[h; u; h∘u], context-to-query and query-to-context
  attention, modelling input G = [h; ũ; h∘ũ; h∘h̃] (each side in turn is the context).

Both take any unit spec (bidirectional or not) through `units.build` and know nothing else
about units. Sources of every choice: docs/science-tasks.md ("Pair architectures").
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import units

from .arch_options import (
    ARCHS,
    ATTENTIONS,
    POOLINGS,
)


def encoder_spec(unit: str, dim: int, layers: int) -> str:
    """The unit spec with `layers` filled in when it does not say (the spec's own value wins)."""
    spec = units.resolve(unit, dim).spec
    return str(spec if "layers" in spec.option_dict else spec.with_options(layers=layers))


def modelling_spec(unit: str, dim: int, modelling_unit: str | None) -> str:
    """The modelling layer: `modelling_unit` as written, else one layer of the encoder's unit
    (the authors' att_layers=1; Seo et al.'s modelling layer is its own LSTM)."""
    if modelling_unit:
        return modelling_unit
    return str(units.resolve(unit, dim).spec.with_options(layers=1))


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax over the positions where `mask` holds; all-masked rows give 0 (not NaN, whose
    gradient would poison the weights even after nan_to_num)."""
    any_real = mask.any(dim, keepdim=True)
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~any_real, 0.0)
    return torch.softmax(scores, dim) * mask


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
    """[u; v; |u−v|; u∘v] → Linear → ReLU → dropout → Linear to class logits.

    Init as the authors' classifier.py: weights kaiming-uniform (gain √2), biases 0."""

    def __init__(self, size: int, hidden: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4 * size, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, classes))
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([u, v, (u - v).abs(), u * v], -1))


class PairModel(nn.Module):
    """Embedding + (plain | bidaf) encoder + classifier head for a pair of token sequences.

    `unit` is built as written: callers fill in the encoder's `layers` (`encoder_spec`)."""

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
        attention: str = "dot",
        modelling_unit: str | None = None,
    ) -> None:
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        if attention not in ATTENTIONS:
            raise ValueError(f"unknown attention {attention!r}; choose one of {', '.join(ATTENTIONS)}")
        self.arch, self.pooling, self.attention = arch, pooling, attention
        self.embed = nn.Embedding(vocab_size, input_dim, padding_idx=0)
        if embeddings is not None:
            self.embed.weight.data.copy_(embeddings)
            self.embed.weight.requires_grad = not freeze_embeddings
        self.dropout = nn.Dropout(dropout)
        self.encoder = units.build(unit, input_dim, dim)
        width = self.encoder.output_size
        if arch == "bidaf":
            if attention == "trilinear":
                self.similarity = nn.Linear(3 * width, 1, bias=False)  # w in α(h, u) = wᵀ[h; u; h∘u]
                modelling_in = 4 * width  # G = [h; ũ; h∘ũ; h∘h̃]
            else:
                modelling_in = 2 * width + input_dim  # [h; ũ; x]
            self.modelling = units.build(modelling_spec(unit, dim, modelling_unit), modelling_in, dim)
            width = self.modelling.output_size
        # The authors' classifier.py: hidden width d (d_hidden, also when bidirectional).
        self.head = PairClassifierHead(width, mlp_hidden or dim, classes, dropout)

    def encode_pair(self, a, a_mask, b, b_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled vectors u, v of both sides, computed in one batch of 2B sequences."""
        steps = max(a.shape[1], b.shape[1])
        tokens = torch.cat([pad_to(a, steps), pad_to(b, steps)], 0)
        mask = torch.cat([pad_to(a_mask, steps), pad_to(b_mask, steps)], 0)
        emb = self.dropout(self.embed(tokens))
        outputs, state = self.encoder(emb, mask)
        if self.arch == "bidaf":
            outputs, state = self._bidaf(outputs, emb, mask)
        self._aux_losses_per_pair()
        z = pool(outputs, state, mask, self.pooling)
        return z.chunk(2, 0)

    def _aux_losses_per_pair(self) -> None:
        """Rescale the units' auxiliary losses from per sequence to per pair (× 2).

        A unit's `aux_loss` is a mean over its batch of per-sequence sums (TPRN's quantisation
        penalty). Both sides of a pair run as one batch of 2B sequences, so that mean is half the
        papers' per-example definition, which sums over both sentences of an example and averages
        over the B examples: the TPRN authors' basic/model.py adds `reduce_mean` over the question
        batch (`reg_u`) and `reduce_mean` over the passage batch (`reg_h`). With × 2 the weight
        (`quantization`) means what it means in the paper and the code (1e−5)."""
        parts = [self.encoder] + ([self.modelling] if self.arch == "bidaf" else [])
        for part in parts:
            for module in part.modules():
                if torch.is_tensor(getattr(module, "aux_loss", None)):
                    module.aux_loss = module.aux_loss * 2

    def _bidaf(self, h: torch.Tensor, emb: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Bi-directional attention between the two halves of the batch, then the modelling layer."""
        hu, hv = h.chunk(2, 0)
        mu, mv = mask.chunk(2, 0)
        if self.attention == "trilinear":
            g = self._trilinear(hu, hv, mu, mv)
        else:
            sim = hu @ hv.transpose(1, 2)  # [B, Tu, Tv] dot-product similarity
            v_for_u = masked_softmax(sim, mv.unsqueeze(1), 2) @ hv  # each u position over v: [B, Tu, d]
            u_for_v = masked_softmax(sim, mu.unsqueeze(2), 1).transpose(1, 2) @ hu  # each v position over u
            g = torch.cat([torch.cat([hu, v_for_u], -1), torch.cat([hv, u_for_v], -1)], 0)
            g = torch.cat([g, emb], -1)
        return self.modelling(self.dropout(g * mask.unsqueeze(-1)), mask)

    def _trilinear(self, hu, hv, mu, mv) -> torch.Tensor:
        """Seo et al. (2017) §2.4, each side in turn the context, the other the query.

        S_tj = wᵀ[u_t; v_j; u_t∘v_j] (one matrix; the v side reads it transposed);
        C2Q ũ_t = Σ_j softmax_j(S_t:) v_j; Q2C h̃ = Σ_t softmax_t(max_j S_tj) u_t, tiled over t;
        G_t = [u_t; ũ_t; u_t∘ũ_t; u_t∘h̃]."""
        w = self.similarity.weight.view(3, -1)  # [w_h; w_u; w_hu]
        S = (hu @ w[0]).unsqueeze(2) + (hv @ w[1]).unsqueeze(1) + (hu * w[2]) @ hv.transpose(1, 2)  # [B, Tu, Tv]

        def side(h, other, h_mask, o_mask, S):
            attended = masked_softmax(S, o_mask.unsqueeze(1), 2) @ other  # C2Q: [B, T, w]
            best = S.masked_fill(~o_mask.unsqueeze(1), float("-inf")).amax(2)
            best = best.masked_fill(~o_mask.any(1, keepdim=True), 0.0)  # other side empty
            summary = masked_softmax(best, h_mask, 1).unsqueeze(1) @ h  # Q2C: [B, 1, w]
            return torch.cat([h, attended, h * attended, h * summary], -1)

        return torch.cat([side(hu, hv, mu, mv, S), side(hv, hu, mv, mu, S.transpose(1, 2))], 0)

    def forward(self, a, a_mask, b, b_mask) -> torch.Tensor:
        u, v = self.encode_pair(a, a_mask, b, b_mask)
        return self.head(self.dropout(u), self.dropout(v))
