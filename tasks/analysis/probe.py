"""How well discrete roles (or clusters) and per-token vectors line up with gold tags.

The numbers the interpretation sections of the papers report, from scikit-learn where it has them:
- `nmi`: normalised mutual information between role and tag (arithmetic normalisation,
  scikit-learn's default): 1 when one determines the other, ≈ 0 when independent.
- `purity`: the share of tokens whose role's most frequent tag is their own tag (each role
  predicts its majority tag). Grows with the number of roles; read it with NMI and the controls.
- `probe_accuracy`: a linear probe (multinomial logistic regression on standardised features),
  fitted on one set of tokens and scored on another (dev → test).
- `role_table`: per role, its support and top tags with p(tag | role) and
  PMI = log2 p(tag | role) / p(tag) — the layout of the TPRU paper's Table 5.
- `cluster`: k-means (the controls: states of a unit without discrete roles, clustered into as
  many groups as the TPR model uses roles).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def nmi(roles: Sequence, tags: Sequence) -> float:
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(tags, roles))


def purity(roles: Sequence, tags: Sequence) -> float:
    from sklearn.metrics.cluster import contingency_matrix

    m = contingency_matrix(tags, roles)  # [tags, roles]
    return float(m.max(0).sum() / m.sum()) if m.size else float("nan")


def probe_accuracy(train_x: np.ndarray, train_y: Sequence, test_x: np.ndarray, test_y: Sequence, max_iter: int = 300, seed: int = 0) -> float:
    """Accuracy of a linear probe fitted on (train_x, train_y) and scored on (test_x, test_y);
    test tags unseen in training count as errors."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter, random_state=seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the score is what is reported; a cap keeps it cheap
        probe.fit(np.asarray(train_x, dtype=np.float64), np.asarray(train_y))
    return float(np.mean(probe.predict(np.asarray(test_x, dtype=np.float64)) == np.asarray(test_y)))


def cluster(features: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """k-means labels (MiniBatchKMeans above 64 clusters: full k-means is slow there on a CPU)."""
    from sklearn.cluster import KMeans, MiniBatchKMeans

    k = max(1, min(k, len(features)))
    x = np.asarray(features, dtype=np.float64)
    if k > 64:
        model = MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=3, batch_size=2048)
    else:
        model = KMeans(n_clusters=k, random_state=seed, n_init=4)
    return model.fit_predict(x)


@dataclass
class RoleRow:
    role: int
    support: int
    top: list[tuple[str, float, float]]  # (tag, p(tag | role), PMI in bits)


def role_table(roles: Sequence[int], tags: Sequence[str], top: int = 3, min_support: int = 1) -> list[RoleRow]:
    """Per role (by support, descending): its most likely tags with p(tag | role) and PMI."""
    n = len(tags)
    tag_p = {t: c / n for t, c in Counter(tags).items()}
    by_role: dict[int, Counter] = {}
    for r, t in zip(roles, tags):
        by_role.setdefault(int(r), Counter())[t] += 1
    rows = []
    for r, counts in by_role.items():
        support = sum(counts.values())
        if support < min_support:
            continue
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        rows.append(RoleRow(r, support, [(t, c / support, float(np.log2((c / support) / tag_p[t]))) for t, c in best]))
    rows.sort(key=lambda row: (-row.support, row.role))
    return rows


def role_metrics(roles: Sequence[int], tags: Sequence[str]) -> dict[str, float]:
    return {"nmi": nmi(roles, tags), "purity": purity(roles, tags), "roles_used": int(len(set(map(int, roles))))}
