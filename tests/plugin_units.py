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


# --------------------------------------------------------------------------------------------
# Units for the harness tests (tests/test_study_ray.py, tests/test_faults.py), reached by import
# path like any third-party unit. Each is an Elman RNN with one misbehaviour, counted in
# training-mode forward calls of one module (evaluation is never affected).


class NaNUnit(ElmanUnit):
    """Diverges: outputs become NaN from training forward call `nan_after` on (0 = at once)."""

    def __init__(self, input_size: int, hidden_size: int, nan_after: int = 0) -> None:
        super().__init__(input_size, hidden_size)
        self.nan_after, self.calls = nan_after, 0

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        outputs, state = super().forward(x, mask)
        if self.training:
            self.calls += 1
            if self.calls > self.nan_after:
                outputs, state = outputs * float("nan"), state * float("nan")
        return outputs, state


class RaiseUnit(ElmanUnit):
    """Crashes: raises RuntimeError on training forward call `raise_after` + 1."""

    def __init__(self, input_size: int, hidden_size: int, raise_after: int = 0) -> None:
        super().__init__(input_size, hidden_size)
        self.raise_after, self.calls = raise_after, 0

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.training:
            self.calls += 1
            if self.calls > self.raise_after:
                raise RuntimeError(f"RaiseUnit: deliberate failure at training step {self.calls}")
        return super().forward(x, mask)


class SlowUnit(ElmanUnit):
    """An Elman RNN that sleeps `delay` seconds per training forward call: trials that last long
    enough to be interrupted, without using CPU. Results are those of ElmanUnit (same seed)."""

    def __init__(self, input_size: int, hidden_size: int, delay: float = 0.05) -> None:
        super().__init__(input_size, hidden_size)
        self.delay = delay

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.training and self.delay > 0:
            import time

            time.sleep(self.delay)
        return super().forward(x, mask)


class MissingDepUnit(ElmanUnit):
    """Cannot be built where the file named by `flag` exists: raises ModuleNotFoundError as a
    unit whose optional dependency is missing on the workers would. An environment error, not a
    result: its runs end `errored` and are retried once the file is gone (tests/test_errored.py)."""

    def __init__(self, input_size: int, hidden_size: int, flag: str = "") -> None:
        import os

        if flag and os.path.exists(flag):
            raise ModuleNotFoundError("No module named 'tprbench_missing_dep'")
        super().__init__(input_size, hidden_size)
