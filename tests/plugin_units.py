"""A third-party unit, written the way a researcher outside tprbench would write one.

It is deliberately NOT registered with `@register_unit`: the tests reach it the two ways a
user's package would be reached without editing tprbench —

    an import path in a spec:   tests.plugin_units:ElmanUnit[nonlinearity=relu]
    an entry point:             [project.entry-points."tprbench.units"]
                                elman = "tests.plugin_units:ElmanUnit"

docs/adding-a-unit.md walks through this file; tests/test_units_registry.py exercises it.
"""

from typing import Literal

import torch
from torch import nn

from units.base import last_state, lengths_from_mask, mask_outputs


class ElmanUnit(nn.Module):
    """Elman RNN: h_t = φ(W_x x_t + W_h h_{t-1} + b); d² + dd' weights."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        nonlinearity: Literal["tanh", "relu"] = "tanh",
        bias: bool = True,
    ) -> None:
        super().__init__()
        if nonlinearity not in ("tanh", "relu"):  # the spec path checks this already; direct callers too
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.input_size, self.hidden_size, self.nonlinearity = input_size, hidden_size, nonlinearity
        self.output_size = hidden_size  # what the wrappers and task architectures read
        self.W_x = nn.Linear(input_size, hidden_size, bias=bias)
        self.W_h = nn.Linear(hidden_size, hidden_size, bias=False)

    @classmethod
    def formula_params(cls, input_size: int, hidden_size: int, **options: object) -> int:
        """The papers' way of counting: weight matrices only, no biases."""
        return hidden_size * hidden_size + hidden_size * input_size

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = lengths_from_mask(x, mask)  # checks the mask is [B, T] and right-padded
        act = torch.tanh if self.nonlinearity == "tanh" else torch.relu
        xs = self.W_x(x)  # input projections for all steps at once, outside the loop
        h = x.new_zeros(x.shape[0], self.hidden_size)
        steps = []
        for t in range(x.shape[1]):
            h = act(xs[:, t] + self.W_h(h))
            steps.append(h)
        outputs = torch.stack(steps, 1) if steps else x.new_zeros(x.shape[0], 0, self.hidden_size)
        outputs = mask_outputs(outputs, lengths)  # zero at padding
        return outputs, last_state(outputs, lengths)  # state = output at the last real token
