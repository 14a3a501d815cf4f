"""Per-token readouts of a unit through its own interpretation interface.

Each family of the papers interprets a different quantity; a unit says which it has by the method
it exposes (duck typing: a third-party unit with the same method gets the same analysis):

| interface | units | per-token role | probe features |
|---|---|---|---|
| `fillers(x, mask)` → [B,T,k,N] | tpru, tpru-v1, tpru-mod1..3 | argmax over the N roles, per slice | the fillers (k·N) |
| `attention(x, mask)` → (a_S, a_R) | tprn | argmax of the role attention a_R | a_R |
| `unbinding(x, mask)` → [B,T,d²] | tpgn | none (k-means of u_t, as the controls) | u_t |
| none | lstm, gru, tpr3, ... | none (k-means of the outputs) | the outputs |

HRR filler sets (tasks/lm/hrr.py, the `lm` option `embedding = "hrr"`) are per word *type*, not per
token: `hrr_filler_sets` reads them from the embedding module; tasks/analysis/filler_sets.py scores them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

INTERFACES = ("fillers", "attention", "unbinding")


def interface_of(unit: nn.Module | type) -> str:
    """'fillers', 'attention', 'unbinding', or 'states' (no interpretation interface)."""
    for name in INTERFACES:
        if callable(getattr(unit, name, None)):
            return name
    return "states"


@dataclass
class Readout:
    """One batch's per-token readout: outputs [B,T,d], features [B,T,F] and roles [B,T,k] (or None)."""

    outputs: torch.Tensor
    features: torch.Tensor
    roles: torch.Tensor | None
    interface: str


@torch.no_grad()
def read_unit(unit: nn.Module, x: torch.Tensor, mask: torch.Tensor) -> Readout:
    outputs, _ = unit(x, mask)
    kind = interface_of(unit)
    if kind == "fillers":
        f = unit.fillers(x, mask)  # [B, T, k, N]
        return Readout(outputs, f.flatten(2), f.argmax(-1), kind)
    if kind == "attention":
        _a_S, a_R = unit.attention(x, mask)  # [B, T, n_R]
        return Readout(outputs, a_R, a_R.argmax(-1, keepdim=True), kind)
    if kind == "unbinding":
        return Readout(outputs, unit.unbinding(x, mask), None, kind)
    return Readout(outputs, outputs, None, kind)


def encoder_layers(model: nn.Module) -> list[nn.Module]:
    """The layers of the model's encoder, first to last (`model.encoder`, Stacked or a single unit).
    A bidirectional layer is read through its forward direction (the papers' units are forward)."""
    encoder = getattr(model, "encoder", None)
    if encoder is None:
        raise ValueError(f"{type(model).__name__} has no `encoder`: cannot find the unit to read")
    layers = list(encoder.layers) if hasattr(encoder, "layers") else [encoder]
    return layers


def layer_unit(layer: nn.Module) -> nn.Module:
    return getattr(layer, "fwd", layer)


@torch.no_grad()
def layer_input(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, layer: int) -> torch.Tensor:
    """What layer `layer` (1-based) of the encoder reads: the embeddings through the layers below."""
    layers = encoder_layers(model)
    if not 1 <= layer <= len(layers):
        raise ValueError(f"layer {layer} out of range: the encoder has {len(layers)} layer(s)")
    x = model.embed(ids)
    for below in layers[: layer - 1]:
        x, _ = below(x, mask)
    return x


def hrr_filler_sets(embedding: nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """Per filler set i, the words' Ẽ_i(w) = s_i^w F_i (HRRWordEmbedding.filler_embeddings): [N] × [V', d]."""
    fe = embedding.filler_embeddings(ids)  # [V', N, d]
    return [fe[:, i] for i in range(fe.shape[1])]
