"""A unit's recurrent state as one flat vector per example, and the unit run one step at a time.

The gradient analysis needs the *whole* state a step hands to the next (TPRU: b; GRU: h; LSTM:
(h, c); TPRN: v, or (c, h, v) gated; TPGN: (Ŝ, C, p, c̃)) as a single vector s_t ∈ R^D, so that
∂L/∂s_t and ∂s_t/∂s_{t−1} are plain vectors and D × D matrices whatever the unit. Every unit
already exposes its state through `forward_carry(x, carry)` (the truncated-BPTT interface of
units/base.py); this module flattens that carry and unflattens it again, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils import _pytree as pytree  # torch's own pytree: tuples/lists of tensors ↔ a flat list


class CarryError(ValueError):
    """The unit cannot be run one step at a time (no `forward_carry`)."""

    user_error = True


@dataclass(frozen=True)
class CarryLayout:
    """How a unit's carry maps to s ∈ R^{B×D}: the pytree spec, each leaf's shape without the batch
    axis, and where the batch axis is (torch's fused RNNs keep (layers, B, d); every other unit B first)."""

    spec: pytree.TreeSpec
    shapes: tuple[tuple[int, ...], ...]
    batch_axis: int

    @property
    def size(self) -> int:
        n = 0
        for shape in self.shapes:
            n += int(torch.Size(shape).numel())
        return n

    def flatten(self, carry: object) -> torch.Tensor:
        leaves, _ = pytree.tree_flatten(carry)
        parts = [leaf.movedim(self.batch_axis, 0).reshape(leaf.shape[self.batch_axis], -1) for leaf in leaves]
        return torch.cat(parts, -1)

    def unflatten(self, flat: torch.Tensor) -> object:
        B = flat.shape[0]
        sizes = [int(torch.Size(s).numel()) for s in self.shapes]
        leaves = [part.reshape(B, *shape).movedim(0, self.batch_axis) for part, shape in zip(flat.split(sizes, -1), self.shapes)]
        return pytree.tree_unflatten(leaves, self.spec)


def batch_axis(unit: nn.Module) -> int:
    """torch.nn.LSTM/GRU carries are (num_layers, B, d); the units of this project put B first."""
    return 1 if isinstance(getattr(unit, "rnn", None), nn.RNNBase) else 0


def check_steppable(unit: nn.Module) -> None:
    if type(unit).forward_carry is getattr(nn.Module, "forward_carry", None) or not hasattr(unit, "forward_carry"):
        raise CarryError(f"{type(unit).__name__} has no forward_carry: it cannot be run one step at a time")


def layout_of(unit: nn.Module, carry: object) -> CarryLayout:
    leaves, spec = pytree.tree_flatten(carry)
    axis = batch_axis(unit)
    shapes = tuple(tuple(s for i, s in enumerate(leaf.shape) if i != axis) for leaf in leaves)
    return CarryLayout(spec, shapes, axis)


def first_step(unit: nn.Module, x_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, CarryLayout]:
    """Step 1 from the zero state: (output [B, d_out], s_1 [B, D], the layout)."""
    try:  # the class's method: `gradients.record` may have replaced the instance's while recording
        out, carry = type(unit).forward_carry(unit, x_t.unsqueeze(1), None)
    except NotImplementedError as exc:
        raise CarryError(f"{type(unit).__name__}: {exc}") from None
    layout = layout_of(unit, carry)
    return out[:, -1], layout.flatten(carry), layout


def torch_rnn_step(rnn: nn.RNNBase) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """One step of a one-layer nn.LSTM/nn.GRU written out in torch's documented equations (gate
    order i, f, g, o and r, z, n; biases b_ih + b_hh). Why not the module itself: its fused kernels
    (aten::mkldnn_rnn_layer, aten::gru) have no vmap batching rule, so torch.func would fall back to
    one kernel call per Jacobian row and pair — hours instead of seconds. Tested equal to the module."""
    W_ih, W_hh, b_ih, b_hh = rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0
    d = rnn.hidden_size
    if isinstance(rnn, nn.LSTM):

        def lstm(s: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h, c = s[:, :d], s[:, d:]  # the carry (h, c) flattened: h first
            i, f, g, o = (F.linear(x, W_ih, b_ih) + F.linear(h, W_hh, b_hh)).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            return h, torch.cat([h, c], -1)

        return lstm

    def gru(s: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gx, gh = F.linear(x, W_ih, b_ih).chunk(3, -1), F.linear(s, W_hh, b_hh).chunk(3, -1)
        r, z = torch.sigmoid(gx[0] + gh[0]), torch.sigmoid(gx[1] + gh[1])
        n = torch.tanh(gx[2] + r * gh[2])
        h = (1 - z) * n + z * s
        return h, h

    return gru


def step_function(unit: nn.Module, layout: CarryLayout) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """(s_{t−1} [B, D], x_t [B, d_in]) → (output_t [B, d_out], s_t [B, D])."""
    rnn = getattr(unit, "rnn", None)
    if isinstance(rnn, (nn.LSTM, nn.GRU)) and rnn.num_layers == 1 and not rnn.bidirectional and rnn.bias:
        return torch_rnn_step(rnn)

    def step(s: torch.Tensor, x_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, carry = type(unit).forward_carry(unit, x_t.unsqueeze(1), layout.unflatten(s))
        return out[:, -1], layout.flatten(carry)

    return step


class reference_path:
    """Context: the unit's plain-autograd loop (`impl=loop`) while analysing. The fused paths are
    custom autograd Functions (C++/Triton loops) that torch.func cannot transform; the loop path
    computes the same function (tests/test_units_*.py check them against each other)."""

    def __init__(self, unit: nn.Module) -> None:
        self.unit = unit
        self.impls: list[tuple[nn.Module, str]] = []

    def __enter__(self) -> nn.Module:
        for m in self.unit.modules():
            impl = getattr(m, "impl", None)
            if isinstance(impl, str) and impl != "loop":
                self.impls.append((m, impl))
                m.impl = "loop"
        return self.unit

    def __exit__(self, *exc: object) -> None:
        for m, impl in self.impls:
            m.impl = impl
