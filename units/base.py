"""The interface every recurrent unit implements, and the padding helpers they share.

A unit maps `x: [B, T, input_size]` and a padding mask `[B, T]` (True = real token,
right-padded) to `outputs: [B, T, output_size]` (zero at padding) and `state: [B, output_size]`,
the output at each sequence's last real token. Units are causal, so right padding can never
change what happens at real tokens; that is what lets LSTM/GRU stay on torch's fused kernels
without packing.
"""

from __future__ import annotations

import os

import torch
from torch import nn


class RecurrentUnit(nn.Module):
    """Base class of the built-in units. Third-party units only need the same call shape."""

    unit_name: str = "?"

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        if input_size < 1 or hidden_size < 1:
            raise ValueError(f"sizes must be positive, got input_size={input_size}, hidden_size={hidden_size}")
        self.input_size = input_size
        self.hidden_size = hidden_size

    @property
    def output_size(self) -> int:
        return self.hidden_size

    @classmethod
    def formula_params(cls, input_size: int, hidden_size: int, **options: object) -> int | None:
        """The papers' parameter count (weight matrices only, no biases); None if not known."""
        return None

    def forward_carry(self, x: torch.Tensor, carry: object | None = None) -> tuple[torch.Tensor, object]:
        """Unpadded sequences continuing from `carry` (None = zero state); returns (outputs, carry).

        For truncated BPTT (language modelling): the carry of one window starts the next. The carry
        is whatever the unit needs (LSTM: (h, c)); detach it between windows.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support carried state")


def lengths_from_mask(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Sequence lengths [B] from a right-padded mask; checks shape and that padding is only at the end."""
    batch, steps = x.shape[0], x.shape[1]
    if mask is None:
        return torch.full((batch,), steps, dtype=torch.long, device=x.device)
    if mask.shape != (batch, steps):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {(batch, steps)} to match x {tuple(x.shape)}")
    mask = mask.bool()
    lengths = mask.sum(dim=1)
    # The check compares on the device and reads one bool back: on a GPU that is a host sync on
    # every forward. So it runs where it is free (CPU tensors) or when asked; the trainer checks
    # every batch's masks on the host once, where the batch is made (tasks/training.py).
    if CHECK_MASKS or mask.device.type == "cpu":
        check_right_padded(mask, lengths)
    return lengths


CHECK_MASKS = os.environ.get("TPRBENCH_CHECK_MASKS", "") not in ("", "0")  # debug: check masks on every forward


def mask_from_lengths(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """[B, steps] True for each row's first `lengths[b]` steps: the right-padded mask of lengths."""
    return torch.arange(steps, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def check_right_padded(mask: torch.Tensor, lengths: torch.Tensor | None = None) -> None:
    """Raise ValueError unless each row of a [B, T] mask is True for real tokens, then only False."""
    mask = mask.bool()
    lengths = mask.sum(dim=1) if lengths is None else lengths
    expected = mask_from_lengths(lengths, mask.shape[1])
    if not torch.equal(mask, expected):
        raise ValueError("mask must be right-padded: True for real tokens, then only False")


def mask_outputs(outputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Zero the outputs at padded positions (masks by multiplication, as in the original TPRU code)."""
    keep = mask_from_lengths(lengths, outputs.shape[1])
    return outputs * keep.unsqueeze(-1).to(outputs.dtype)


def last_state(outputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The output at each sequence's last real token; zeros for an empty sequence."""
    index = (lengths - 1).clamp_min(0)
    state = outputs[torch.arange(outputs.shape[0], device=outputs.device), index]
    return state * (lengths > 0).unsqueeze(-1).to(outputs.dtype)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence within its own length; padding stays at the end."""
    steps = x.shape[1]
    t = torch.arange(steps, device=x.device).unsqueeze(0)
    rev = lengths.unsqueeze(1) - 1 - t
    index = torch.where(rev >= 0, rev, t)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))
