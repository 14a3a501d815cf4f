"""The two architectures of the `babi` task, both reading sentences through TPR-RNN's input module.

- `TPRRNNModel` (arch `tpr-rnn`): Schlag & Schmidhuber's whole model — `SentenceEncoder` (input
  module), the unit `tpr3` (update module: F_T after each story's last sentence, `TPR3.memory`)
  and `TPRInference` (three hops through F_T from the question, one scalar LayerNorm per hop, Z
  onto the whole vocabulary). Equations: units/tpr_rnn.py; sources in docs/babi.md.
- `SentenceModel` (arch `plain`): a *sentence-level* baseline for any registered unit — the same
  input module, the unit over the story's sentence vectors with the question vector appended as
  the last step, and a linear readout of the unit's final state onto the vocabulary. The paper's
  LSTM column is a word-level LSTM (Sukhbaatar et al.); this is not that model.

Both take (stories [B, T, L], lengths [B], question [B, L]) of word ids and return logits [B, V].
"""

from __future__ import annotations

import torch
from torch import nn

import units
from units.base import mask_from_lengths
from units.tpr_rnn import TPR3, SentenceEncoder, TPRInference


def story_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """[B, steps] True for the first `lengths[b]` steps (right-padded)."""
    return mask_from_lengths(lengths, steps)


class TPRRNNModel(nn.Module):
    """TPR-RNN: input module → tpr3 over the story → inference module over F_T and the question."""

    def __init__(self, unit: str, dim: int, vocab_size: int, max_words: int, symbol_size: int, embed_init: float) -> None:
        super().__init__()
        self.encoder = SentenceEncoder(vocab_size, symbol_size, max_words, init_limit=embed_init)
        self.update = units.build(unit, symbol_size, dim)
        if not isinstance(self.update, TPR3):  # the adapter checks the spec first; this guards direct use
            raise TypeError(f"tpr-rnn needs a single tpr3 unit, got {type(self.update).__name__}")
        self.inference = TPRInference(symbol_size, self.update.entity, self.update.relation, vocab_size, mlp_hidden=self.update.mlp_hidden)

    def forward(self, stories: torch.Tensor, lengths: torch.Tensor, question: torch.Tensor) -> torch.Tensor:
        sentences = self.encoder(stories)  # [B, T, S]
        memory = self.update.memory(sentences, story_mask(lengths, stories.shape[1]))  # F_T [B, E, R, E]
        return self.inference(self.encoder(question), memory)


class SentenceModel(nn.Module):
    """Sentence-level baseline: [s_1 … s_n, s_Q] through any unit, its final state → Linear → V."""

    def __init__(self, unit: str, dim: int, vocab_size: int, max_words: int, symbol_size: int, embed_init: float, dropout: float) -> None:
        super().__init__()
        self.encoder = SentenceEncoder(vocab_size, symbol_size, max_words, init_limit=embed_init)
        self.unit = units.build(unit, symbol_size, dim)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(self.unit.output_size, vocab_size)

    def forward(self, stories: torch.Tensor, lengths: torch.Tensor, question: torch.Tensor) -> torch.Tensor:
        B, T, _ = stories.shape
        sentences = self.encoder(stories)  # [B, T, S]
        steps = torch.cat([sentences, sentences.new_zeros(B, 1, sentences.shape[-1])], 1)
        # the question goes right after each story's last sentence (right padding stays right padding)
        steps = steps.index_put((torch.arange(B, device=stories.device), lengths), self.encoder(question))
        _, state = self.unit(self.dropout(steps), story_mask(lengths + 1, T + 1))
        return self.out(self.dropout(state))
