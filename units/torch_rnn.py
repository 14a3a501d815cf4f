"""LSTM and GRU baselines: torch's fused implementations (cuDNN on GPU) behind the unit interface."""

from __future__ import annotations

import torch
from torch import nn

from .base import RecurrentUnit, last_state, lengths_from_mask, mask_outputs
from .meta import GRUMeta, LSTMMeta
from .registry import register_unit


class _TorchRNN(RecurrentUnit):
    """One direction, one layer of a fused torch RNN; stacking/bidirectionality are generic wrappers."""

    torch_class: type[nn.RNNBase]
    gates: int

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        self.rnn = self.torch_class(input_size, hidden_size, batch_first=True)

    @classmethod
    def formula_params(cls, input_size: int, hidden_size: int, **options: object) -> int:
        return cls.gates * (hidden_size * hidden_size + hidden_size * input_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = lengths_from_mask(x, mask)
        # No packing: the unit is causal, so right padding cannot touch real tokens.
        outputs, _ = self.rnn(x)
        outputs = mask_outputs(outputs, lengths)
        return outputs, last_state(outputs, lengths)

    def forward_carry(self, x: torch.Tensor, carry: object | None = None) -> tuple[torch.Tensor, object]:
        return self.rnn(x, carry)


@register_unit("lstm")
class LSTM(_TorchRNN, LSTMMeta):
    """torch.nn.LSTM: 4d² + 4dd' weights."""

    torch_class = nn.LSTM
    gates = 4


@register_unit("gru")
class GRU(_TorchRNN, GRUMeta):
    """torch.nn.GRU: 3d² + 3dd' weights."""

    torch_class = nn.GRU
    gates = 3
