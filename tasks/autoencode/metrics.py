"""Corpus BLEU-1…4 of regenerated sentences, with sacrebleu (maintained; no hand-written BLEU).

BLEU-n is Papineni et al.'s corpus BLEU with uniform weights 1/n over the 1…n-gram precisions
and the brevity penalty — the "BLEU-1/2/3/4" columns of caption papers (the TPGN paper's Table 3,
printed as fractions: .709/.539/.406/.305). sacrebleu computes exactly that with
`max_ngram_order=n`: score = BP · exp((1/n) Σ_{k≤n} log p_k). Settings, and why:

- `tokenize="none"`: the inputs are already word tokens (PTB/WikiText); sacrebleu's default 13a
  tokeniser would split them again (e.g. `n't`, `@.@`).
- `smooth_method="none"`: plain corpus BLEU; an order with no matching n-gram anywhere in the
  corpus gives 0 (smoothing is for sentence-level BLEU).
- one reference per hypothesis (the sentence that was encoded), so the brevity penalty's choice
  of reference length does not arise.

Scores are returned as fractions in [0, 1] (sacrebleu reports 0–100), to sit beside the paper's.
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU


def corpus_bleu(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]], max_order: int = 4) -> dict[str, float]:
    """{"bleu1": …, …, f"bleu{max_order}": …} for token lists, one reference per hypothesis."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("corpus_bleu needs at least one sentence")
    if max_order < 1:
        raise ValueError(f"max_order must be >= 1, got {max_order}")
    for what, seqs in (("hypothesis", hypotheses), ("reference", references)):
        for i, seq in enumerate(seqs):
            if isinstance(seq, str) or any((not tok) or any(c.isspace() for c in tok) for tok in seq):
                raise ValueError(f"{what} {i} must be a list of non-empty tokens without spaces, got {seq!r}")
    hyp = [" ".join(h) for h in hypotheses]
    ref = [[" ".join(r) for r in references]]  # sacrebleu: a list of reference streams
    return {
        f"bleu{n}": BLEU(tokenize="none", smooth_method="none", max_ngram_order=n).corpus_score(hyp, ref).score / 100 for n in range(1, max_order + 1)
    }
