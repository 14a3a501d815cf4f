"""Do an HRR embedding's filler sets split syntax from semantics? (Luo et al.'s Table 4,
measured here on UD English EWT rather than on the paper's data).

The paper's claim: filler set 1 groups words by inflection (VB/VBD/VBG/VBZ), set 2 by meaning
(give/gave/giving close). The measure here, on verb types of UD English EWT:
- **types**: the word ids (a run's vocabulary) of tokens with UPOS VERB and an XPOS VB*; each type
  labelled with its most frequent (lemma, XPOS) among those tokens (ties: first seen);
- **pairs**: every unordered pair of types. Syntactic positives share the XPOS and not the lemma;
  semantic positives share the lemma and not the XPOS; the negatives of both share neither
  (the paper does not define its negatives; pairs that share nothing are the plain choice);
- **score**: ROC-AUC of cos(v(w), v(w')) separating positives from negatives, per vector kind
  (filler set i's Ẽ_i(w), the whole embedding E(w), a control's embedding).
Pass (the paper's claim as inequalities; its Table 4 has syntactic 0.912 vs 0.840, semantic 0.873 vs 0.975):
AUC_syn(set 1) > AUC_syn(set 2) and AUC_sem(set 2) > AUC_sem(set 1).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np


@dataclass
class VerbTypes:
    ids: np.ndarray  # [n] vocabulary ids
    lemma: np.ndarray  # [n]
    xpos: np.ndarray  # [n]
    words: np.ndarray  # [n] a written form of each type (its first)


def verb_types(token_ids: np.ndarray, upos: np.ndarray, xpos: np.ndarray, lemmas: np.ndarray, words: np.ndarray, known: np.ndarray) -> VerbTypes:
    """Verb types among in-vocabulary tokens, each with its most frequent (lemma, XPOS)."""
    labels: dict[int, Counter] = {}
    first: dict[int, str] = {}
    for i in np.nonzero(known & (upos == "VERB") & np.char.startswith(xpos.astype(str), "VB"))[0]:
        t = int(token_ids[i])
        labels.setdefault(t, Counter())[(str(lemmas[i]).lower(), str(xpos[i]))] += 1
        first.setdefault(t, str(words[i]))
    ids = sorted(labels)
    top = [labels[t].most_common(1)[0][0] for t in ids]
    return VerbTypes(
        np.array(ids, dtype=np.int64), np.array([lem for lem, _ in top]), np.array([x for _, x in top]), np.array([first[t] for t in ids])
    )


def pair_labels(types: VerbTypes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, syntactic, semantic) over unordered pairs i < j; syntactic/semantic ∈ {1 positive,
    0 negative, -1 neither} (a pair sharing both lemma and XPOS cannot occur: one label per type)."""
    i, j = np.triu_indices(len(types.ids), k=1)
    same_lemma = types.lemma[i] == types.lemma[j]
    same_xpos = types.xpos[i] == types.xpos[j]
    neither = ~same_lemma & ~same_xpos
    syn = np.where(same_xpos & ~same_lemma, 1, np.where(neither, 0, -1))
    sem = np.where(same_lemma & ~same_xpos, 1, np.where(neither, 0, -1))
    return i, j, syn, sem


def cosine_pairs(vectors: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    v = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return np.einsum("nd,nd->n", v[i], v[j])


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC-AUC of `scores` for labels 1 vs 0 (label −1 ignored); NaN without both classes."""
    from sklearn.metrics import roc_auc_score

    keep = labels >= 0
    y = labels[keep]
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, scores[keep]))


def syntax_semantics_auc(vectors: np.ndarray, types: VerbTypes) -> dict[str, float]:
    """{'syntactic': AUC, 'semantic': AUC} of cosine similarity for one kind of vector [n types, d]."""
    i, j, syn, sem = pair_labels(types)
    cos = cosine_pairs(np.asarray(vectors, dtype=np.float64), i, j)
    return {"syntactic": auc(cos, syn), "semantic": auc(cos, sem)}


def pair_counts(types: VerbTypes) -> dict[str, int]:
    _, _, syn, sem = pair_labels(types)
    return {
        "types": len(types.ids),
        "lemmas": len(set(types.lemma.tolist())),
        "syntactic_pos": int((syn == 1).sum()),
        "semantic_pos": int((sem == 1).sum()),
        "negatives": int((syn == 0).sum()),
    }
