"""Generic stacking and bidirectionality: written once, for every unit."""

from __future__ import annotations

import torch
from torch import nn

from .base import lengths_from_mask, reverse_padded


class Bidirectional(nn.Module):
    """A forward unit and a backward unit; outputs concatenated, state = [last fwd; first bwd]."""

    def __init__(self, forward_unit: nn.Module, backward_unit: nn.Module) -> None:
        super().__init__()
        self.fwd, self.bwd = forward_unit, backward_unit
        self.output_size = 2 * forward_unit.output_size

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = lengths_from_mask(x, mask)
        out_f, state_f = self.fwd(x, mask)
        # Reverse within each length so padding stays at the end and the unit stays causal.
        out_b_rev, state_b = self.bwd(reverse_padded(x, lengths), mask)
        out_b = reverse_padded(out_b_rev, lengths)
        return torch.cat([out_f, out_b], -1), torch.cat([state_f, state_b], -1)


class Stacked(nn.Module):
    """Layers applied in sequence; the state is the top layer's."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.output_size = layers[-1].output_size

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        state = None
        for layer in self.layers:
            x, state = layer(x, mask)
        return x, state

    def forward_carry(self, x: torch.Tensor, carry: list | None = None) -> tuple[torch.Tensor, list]:
        """Each layer continues from its own carry (a list, one per layer)."""
        carries = carry if carry is not None else [None] * len(self.layers)
        out = []
        for layer, c in zip(self.layers, carries):
            x, c = layer.forward_carry(x, c)
            out.append(c)
        return x, out
