"""`tprbench interpret`: per-token roles of a trained encoder against gold POS on UD English EWT,
with the controls the papers lack (tasks/analysis/ has the pieces).

Systems compared on the same tokens (in-vocabulary tokens of UD EWT dev + test, run as whole
sentences so every token has its context):
- the run's unit through its own interface (TPRU fillers, TPRN role attention, TPGN unbinding
  vectors; a unit without one: its states, clustered);
- the same model at its initial weights (the run's seed, untrained);
- each `--control` run (an LSTM/GRU of equal width): its states, k-means into as many clusters as
  the TPR model uses roles;
- the word embeddings the layer reads (word identity alone: how much POS needs no recurrence).
NMI and purity of role (or cluster) vs tag over dev + test; a linear probe fitted on dev, scored
on test, from each system's interface features and from its states.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .sources import AnalysisError, Source, analysed_unit

SPLITS = ("dev", "test")
TREEBANK_FILES = {"dev": "en_ewt-ud-dev.conllu", "test": "en_ewt-ud-test.conllu"}


@dataclass
class Tokens:
    """UD tokens mapped to a run's vocabulary (`words.word_map`): per split, the id lists to run per
    sentence and where each word's readout sits in them, gold tags, words, lemmas, XPOS, the id
    read at each word and which tokens are in the vocabulary."""

    ids: dict[str, list[list[int]]]
    tags: dict[str, np.ndarray]
    words: dict[str, np.ndarray]
    known: dict[str, np.ndarray]
    skipped: dict[str, tuple[int, int]]
    positions: dict[str, list[list[int]]] = field(default_factory=dict)
    lemmas: dict[str, np.ndarray] = field(default_factory=dict)
    xpos: dict[str, np.ndarray] = field(default_factory=dict)
    upos: dict[str, np.ndarray] = field(default_factory=dict)
    token_ids: dict[str, np.ndarray] = field(default_factory=dict)
    mapping: str = ""

    def oov_rate(self) -> float:
        total = sum(len(k) for k in self.known.values())
        return float(1 - sum(int(k.sum()) for k in self.known.values()) / max(total, 1))

    def oov_type_rate(self) -> float:
        types = {w.lower() for ws in self.words.values() for w in ws}
        known = {w.lower() for s in SPLITS for w, k in zip(self.words[s], self.known[s]) if k}
        return float(1 - len(known) / max(len(types), 1))


def vocabulary(adapter: Any) -> dict[str, int]:
    """The NLI word vocabulary (`vocab.stoi`): what `--word-split` listings of NLI splits map through."""
    vocab = getattr(adapter, "vocab", None)
    stoi = getattr(vocab, "stoi", None)
    if not isinstance(stoi, dict):
        raise AnalysisError(
            f"task {getattr(adapter, 'name', '?')!r} has no word vocabulary (`vocab.stoi`): "
            "interpret maps UD words to a word-level vocabulary (NLI-style tasks; the LM's BPE "
            "and logic's symbols are not words)"
        )
    return stoi


def map_treebank(adapter: Any, treebank_dir: Path, tag: str) -> Tokens:
    """UD dev/test through the run's own tokenizer (harness/analysis/words.py: NLI words lower-cased,
    LM words, LM BPE pieces read at each word's last piece)."""
    from tasks.analysis.conllu import read_conllu
    from tasks.errors import DataError

    from .words import word_map

    wm = word_map(adapter)
    ids, positions, tags, words, known, skipped = {}, {}, {}, {}, {}, {}
    lemmas, xpos, upos, token_ids = {}, {}, {}, {}
    for split in SPLITS:
        try:
            bank = read_conllu(treebank_dir / TREEBANK_FILES[split])
        except DataError as exc:
            raise AnalysisError(str(exc)) from None
        column = "upos" if tag == "upos" else "xpos"
        mapped = [wm.sentence(s.forms) for s in bank.sentences]
        ids[split] = [m[0] for m in mapped]
        positions[split] = [m[1] for m in mapped]
        known[split] = np.array([k for m in mapped for k in m[2]], dtype=bool)
        token_ids[split] = np.array([m[0][p] for m in mapped for p in m[1]], dtype=np.int64)
        tags[split] = np.array([t for s in bank.sentences for t in getattr(s, column)])
        words[split] = np.array([w for s in bank.sentences for w in s.forms])
        lemmas[split] = np.array([w for s in bank.sentences for w in s.lemmas])
        xpos[split] = np.array([w for s in bank.sentences for w in s.xpos])
        upos[split] = np.array([w for s in bank.sentences for w in s.upos])
        skipped[split] = (bank.skipped_multiword, bank.skipped_empty)
    return Tokens(ids, tags, words, known, skipped, positions, lemmas, xpos, upos, token_ids, wm.name)


@dataclass
class Readings:
    """One system's per-token arrays over a split (all tokens, sentence order)."""

    features: np.ndarray
    states: np.ndarray
    inputs: np.ndarray
    roles: np.ndarray | None  # [n, slices]
    interface: str


def read_split(model: Any, layer: int, sentences: list[list[int]], positions: list[list[int]] | None = None, batch_size: int = 64) -> Readings:
    """Per-word readings of `sentences` (whole sentences, so every word has its context), taken at
    `positions` (default: every position; LM runs: after the leading <eos>, BPE: each word's last piece)."""
    import torch

    from tasks.analysis.readout import layer_input, read_unit

    unit = analysed_unit(model, layer)
    model.eval()
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    per_sentence: dict[int, tuple] = {}
    kind = "states"
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        T = max(len(sentences[i]) for i in idx)
        ids = torch.zeros(len(idx), T, dtype=torch.long)
        mask = torch.zeros(len(idx), T, dtype=torch.bool)
        for row, i in enumerate(idx):
            ids[row, : len(sentences[i])] = torch.tensor(sentences[i])
            mask[row, : len(sentences[i])] = True
        x = layer_input(model, ids, mask, layer)
        r = read_unit(unit, x, mask)
        kind = r.interface
        for row, i in enumerate(idx):
            at = torch.tensor(positions[i] if positions is not None else range(len(sentences[i])), dtype=torch.long)
            per_sentence[i] = (
                r.features[row, at].double().numpy(),
                r.outputs[row, at].double().numpy(),
                x[row, at].double().numpy(),
                None if r.roles is None else r.roles[row, at].numpy(),
            )
    parts = [per_sentence[i] for i in range(len(sentences))]
    roles = None if parts[0][3] is None else np.concatenate([p[3] for p in parts])
    return Readings(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]), roles, kind)


@dataclass
class SystemResult:
    name: str
    interface: str
    clusters: str  # "argmax of N roles" or "k-means, k = K"
    nmi: float
    purity: float
    roles_used: int
    probe_features: float
    probe_states: float
    per_slice: list[dict[str, float]] = field(default_factory=list)
    roles: np.ndarray | None = None  # [n dev+test known tokens] (slice 0), for the role table


def evaluate(name: str, dev: Readings, test: Readings, tokens: Tokens, k: int | None, what: str = "unit") -> SystemResult:
    """Metrics of one system on the in-vocabulary tokens. `what`: 'unit' (interface features and
    roles) or 'inputs' (the embeddings the layer reads)."""
    from tasks.analysis import probe

    kd, kt = tokens.known["dev"], tokens.known["test"]
    tags = np.concatenate([tokens.tags["dev"][kd], tokens.tags["test"][kt]])
    if what == "inputs":
        feats = (dev.inputs, test.inputs)
        states = feats
        roles, interface = None, "embedding"
    else:
        feats, states, interface = (dev.features, test.features), (dev.states, test.states), dev.interface
        roles = None if dev.roles is None else np.concatenate([dev.roles[kd], test.roles[kt]])
    per_slice = []
    if roles is not None:
        for j in range(roles.shape[1]):
            per_slice.append(probe.role_metrics(roles[:, j], tags))
        main_roles = roles[:, 0]
        how = f"argmax of {dev.features.shape[1] // roles.shape[1]} roles" + (f", {roles.shape[1]} slices" if roles.shape[1] > 1 else "")
    else:
        if k is None:
            raise AnalysisError("no cluster count: pass --clusters K (the run has no discrete roles)")
        X = np.concatenate([feats[0][kd], feats[1][kt]])
        main_roles = probe.cluster(X, k)
        per_slice.append(probe.role_metrics(main_roles, tags))
        how = f"k-means, k = {k}"
    mean = {key: float(np.mean([m[key] for m in per_slice])) for key in per_slice[0]}
    p_feat = probe.probe_accuracy(feats[0][kd], tokens.tags["dev"][kd], feats[1][kt], tokens.tags["test"][kt])
    p_state = p_feat if states is feats else probe.probe_accuracy(states[0][kd], tokens.tags["dev"][kd], states[1][kt], tokens.tags["test"][kt])
    return SystemResult(
        name,
        interface,
        how,
        mean["nmi"],
        mean["purity"],
        int(round(mean["roles_used"])),
        p_feat,
        p_state,
        per_slice if len(per_slice) > 1 else [],
        main_roles,
    )


def majority_baseline(tokens: Tokens) -> float:
    from collections import Counter

    kd, kt = tokens.known["dev"], tokens.known["test"]
    top = Counter(tokens.tags["dev"][kd]).most_common(1)[0][0]
    return float(np.mean(tokens.tags["test"][kt] == top))


def role_table_md(result: SystemResult, tokens: Tokens, top: int = 3, rows: int = 40) -> str:
    from tasks.analysis.probe import role_table

    kd, kt = tokens.known["dev"], tokens.known["test"]
    tags = np.concatenate([tokens.tags["dev"][kd], tokens.tags["test"][kt]])
    words = np.concatenate([tokens.words["dev"][kd], tokens.words["test"][kt]])
    table = role_table(result.roles, tags, top=top)
    lines = [
        f"Per-role tag distribution of {result.name} ({result.clusters}; slice 0), dev + test in-vocabulary "
        f"tokens: top tags with p(tag | role) and PMI = log2 p(tag | role)/p(tag) in bits; the most frequent words.",
        "",
        "| role | tokens | " + " | ".join(f"tag {i + 1} (p, PMI)" for i in range(top)) + " | frequent words |",
        "|---:|---:|" + "---|" * top + "---|",
    ]
    for row in table[:rows]:
        cells = [f"{t} ({p:.2f}, {pmi:+.2f})" for t, p, pmi in row.top] + [""] * (top - len(row.top))
        from collections import Counter

        freq = Counter(w.lower() for w in words[result.roles == row.role]).most_common(5)
        lines.append(f"| {row.role} | {row.support} | " + " | ".join(cells) + " | " + ", ".join(w for w, _ in freq) + " |")
    if len(table) > rows:
        lines.append(f"\n({len(table) - rows} smaller roles not shown)")
    return "\n".join(lines) + "\n"


def corpus_sentences(source: Source, ref: str, cache_dir: Path) -> list[list[int]]:
    """The unique sentences (premises and hypotheses, first-seen order) of an NLI split `ref`
    (`mnli:dev_matched`), read whole from the run's data root and mapped through its vocabulary
    (the run's own valid/test copies may be truncated by `max_eval`). For an LM run `ref` is one of
    its splits (train, valid, test): its sentences as the LM reads them (<eos> first)."""
    from tasks.errors import DataError
    from tasks.nli import data as nli_data
    from tasks.paths import data_root

    corpus_lm = getattr(source.adapter, "corpus", None)
    if corpus_lm is not None and hasattr(source.adapter, "streams"):
        if ref not in source.adapter.streams:
            raise AnalysisError(f"--word-split {ref!r}: an LM run's split is one of {', '.join(source.adapter.streams)}")
        from tasks.lm.data import split_sentences

        eos = corpus_lm.eos_id
        return [[eos] + s[:-1].tolist() for s in split_sentences(source.adapter.streams[ref], eos)]
    stoi = vocabulary(source.adapter)
    corpus, _, split = ref.partition(":")
    try:
        root = data_root(source.adapter.data)
        if root is None:
            raise DataError("the run has no data root")
        got = nli_data.load_nli(corpus, data_dir=nli_data.default_dir(corpus, root), cache_dir=cache_dir / "nli")
        ds = got.splits[split]
    except (DataError, KeyError) as exc:
        raise AnalysisError(f"--word-split {ref!r}: {exc}") from None
    unique = dict.fromkeys(t for row in zip(ds["premise"], ds["hypothesis"]) for t in row)
    unk = stoi.get("<unk>", 1)
    max_len = getattr(source.adapter.options, "max_len", None)
    return [[stoi.get(w, unk) for w in nli_data.tokenize(text)[: max_len or None]] for text in unique]


def polysemy(source: Source, layer: int, word: str, sentences: list[list[int]], limit: int = 40) -> tuple[list[dict[str, Any]], str]:
    """The first `limit` sentences containing `word`, each occurrence with its role."""
    from .words import word_map

    wm = word_map(source.adapter)
    wid = wm.word_id(word)
    if wid is None:
        return [], f"{word!r} is not in the run's vocabulary as one token (its training data never had it)"
    hits = [s for s in sentences if wid in s][:limit]
    if not hits:
        return [], f"{word!r} does not occur"
    r = read_split(source.model, layer, hits)
    if r.roles is None:
        return [], f"{source.label} has no discrete roles (interface {r.interface})"
    itos = wm.itos
    out, pos = [], 0
    for s in hits:
        roles = r.roles[pos : pos + len(s)]
        pos += len(s)
        for i, t in enumerate(s):
            if t == wid:
                words = [itos[x] for x in s]
                words[i] = f"**{words[i]}**"
                out.append({"role": int(roles[i, 0]), "roles_all_slices": [int(v) for v in roles[i]], "sentence": " ".join(words)})
    return sorted(out, key=lambda o: o["role"]), ""


def polysemy_md(word: str, split: str, rows: list[dict[str, Any]], note: str) -> str:
    if not rows:
        return f"Polysemy: {note}.\n"
    roles = sorted({r["role"] for r in rows})
    lines = [
        f"Occurrences of **{word}** in {split} (unique sentences; up to the first 40 containing it) and the role "
        f"each takes (argmax role; TPRU: slice 0): {len(rows)} occurrences, {len(roles)} distinct role(s): "
        f"{', '.join(map(str, roles))}. Senses are not annotated: read the sentences.",
        "",
        "| role | sentence |",
        "|---:|---|",
    ]
    lines += [f"| {r['role']} | {r['sentence'].replace('|', '/')} |" for r in rows]
    return "\n".join(lines) + "\n"


def summary_md(results: list[SystemResult], tokens: Tokens, majority: float, tag: str, header: list[str]) -> str:
    lines = [f"<!-- {h} -->" for h in header]
    sk = ", ".join(f"{s}: {m} multiword ranges, {e} empty nodes" for s, (m, e) in tokens.skipped.items())
    lines += [
        "",
        f"Gold tag: {tag.upper()}. Tokens: dev {len(tokens.tags['dev'])}, test {len(tokens.tags['test'])}; "
        f"out of the run's vocabulary: {tokens.oov_rate():.1%} of tokens, {tokens.oov_type_rate():.1%} of word types "
        f"(run as <unk>, left out of every number); words mapped as {tokens.mapping}. Skipped lines: {sk}. "
        f"Probe: multinomial logistic regression on "
        f"standardised features, fitted on dev, accuracy on test; majority-tag baseline {majority:.3f}.",
        "",
        "| system | interface | roles / clusters | used | NMI | purity | probe (interface) | probe (states) |",
        "|:---|:---|:---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.interface} | {r.clusters} | {r.roles_used} | {r.nmi:.3f} | {r.purity:.3f} | "
            f"{r.probe_features:.3f} | {r.probe_states:.3f} |"
        )
    slices = [r for r in results if r.per_slice]
    for r in slices:
        lines += ["", f"{r.name}, per slice: " + "; ".join(f"{j}: NMI {m['nmi']:.3f}, purity {m['purity']:.3f}" for j, m in enumerate(r.per_slice))]
    return "\n".join(lines) + "\n"


def to_json(results: list[SystemResult], tokens: Tokens, majority: float) -> str:
    return json.dumps(
        {
            "oov_token_rate": tokens.oov_rate(),
            "oov_type_rate": tokens.oov_type_rate(),
            "majority_baseline": majority,
            "systems": [{k: v for k, v in r.__dict__.items() if k != "roles"} for r in results],
        },
        indent=1,
        default=float,
    )


# -- HRR filler sets (Luo et al. Table 4) -----------------------------------------------------------


@dataclass
class FillerSetResult:
    name: str  # the system: the run, its untrained model, a control
    vectors: str  # "filler set 1", "embedding E(w)", ...
    types: int
    syntactic: float
    semantic: float


def type_vectors(model: Any, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Per word type: each HRR filler set's Ẽ_i(w) and the whole embedding E(w) of an HRR model
    (tasks/lm/hrr.py), or the embedding row of a plain one."""
    import torch

    t = torch.as_tensor(ids, dtype=torch.long)
    hrr = getattr(model, "hrr", None)
    with torch.no_grad():
        if hrr is not None:
            from tasks.analysis.readout import hrr_filler_sets

            out = {f"filler set {i + 1}": v.double().numpy() for i, v in enumerate(hrr_filler_sets(hrr, t))}
            out["embedding E(w)"] = hrr(t).double().numpy()
            return out
        return {"embedding": model.embed(t).double().numpy()}


def has_filler_sets(model: Any) -> bool:
    return getattr(model, "hrr", None) is not None


def filler_set_results(name: str, model: Any, tokens: Tokens) -> tuple[list[FillerSetResult], dict[str, int]]:
    """AUCs of every per-type vector kind of `model` on UD EWT verb types mapped by `tokens`."""
    from tasks.analysis import filler_sets as fs

    cat = lambda d: np.concatenate([d[s] for s in SPLITS])  # noqa: E731
    types = fs.verb_types(cat(tokens.token_ids), cat(tokens.upos), cat(tokens.xpos), cat(tokens.lemmas), cat(tokens.words), cat(tokens.known))
    if len(types.ids) < 3:
        raise AnalysisError(f"{name}: only {len(types.ids)} verb types of UD EWT are in the run's vocabulary")
    rows = []
    for kind, vectors in type_vectors(model, types.ids).items():
        a = fs.syntax_semantics_auc(vectors, types)
        rows.append(FillerSetResult(name, kind, len(types.ids), a["syntactic"], a["semantic"]))
    return rows, fs.pair_counts(types)


def filler_sets_md(rows: list[FillerSetResult], counts: dict[str, int], header: list[str]) -> str:
    lines = [f"<!-- {h} -->" for h in header]
    lines += [
        "",
        "HRR filler sets vs syntax and semantics (Luo et al. Table 4; the measure: tasks/analysis/"
        "filler_sets.py): UD EWT dev + test verb types (UPOS VERB, XPOS VB*) in the run's vocabulary, "
        f"{counts['types']} types of {counts['lemmas']} lemmas; ROC-AUC of cos(v(w), v(w')) for syntactic "
        f"positives (same XPOS, different lemma: {counts['syntactic_pos']} pairs) and semantic positives "
        f"(same lemma, different XPOS: {counts['semantic_pos']} pairs) against pairs sharing neither "
        f"({counts['negatives']}). The paper (1B words): syntactic 0.912 (set 1) / 0.840 (set 2) / 0.842 "
        "(baseline); semantic 0.873 / 0.975 / 0.670.",
        "",
        "| system | vectors | types | AUC syntactic | AUC semantic |",
        "|:---|:---|---:|---:|---:|",
    ]
    lines += [f"| {r.name} | {r.vectors} | {r.types} | {r.syntactic:.3f} | {r.semantic:.3f} |" for r in rows]
    sets = {r.vectors: r for r in rows if r.name == rows[0].name and r.vectors.startswith("filler set")}
    if "filler set 1" in sets and "filler set 2" in sets:
        s1, s2 = sets["filler set 1"], sets["filler set 2"]
        ok = s1.syntactic > s2.syntactic and s2.semantic > s1.semantic
        lines += [
            "",
            f"Pass test (AUC_syn(set 1) > AUC_syn(set 2) and AUC_sem(set 2) > AUC_sem(set 1)): "
            f"{'**holds**' if ok else '**does not hold**'} for {rows[0].name} "
            f"(syntactic {s1.syntactic:.3f} vs {s2.syntactic:.3f}, semantic {s2.semantic:.3f} vs {s1.semantic:.3f}).",
        ]
    return "\n".join(lines) + "\n"


# -- TPRN: roles above a threshold (Palangi et al. §7) -------------------------------------------------

THRESHOLDS = (0.5, 0.65, 0.8)
MIN_SUPPORT = 20  # a role's p(tag | role) counts toward the maxima only with this many tokens above θ


def attention_thresholds(dev: Readings, test: Readings, tokens: Tokens, thresholds: tuple[float, ...] = THRESHOLDS) -> list[dict[str, Any]]:
    """The paper's measure on TPRN role attention: per role k, the tokens with â_R,k > θ
    (â_R = a_R/‖a_R‖₂), their p(DET | k) and p(VERB ∪ ADJ | k); per θ the largest of each over
    roles with at least MIN_SUPPORT tokens (the paper: role 9, p(DET) = 0.96 at θ = 0.65; role 17,
    p(VERB ∨ ADJ) = 0.82). UPOS tags, dev + test in-vocabulary tokens."""
    kd, kt = tokens.known["dev"], tokens.known["test"]
    a = np.concatenate([dev.features[kd], test.features[kt]])
    upos = np.concatenate([tokens.upos["dev"][kd], tokens.upos["test"][kt]])
    a_hat = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    det, pred = upos == "DET", np.isin(upos, ["VERB", "ADJ"])
    out = []
    for theta in thresholds:
        above = a_hat > theta  # [n, roles]
        support = above.sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            p_det = (above & det[:, None]).sum(0) / support
            p_pred = (above & pred[:, None]).sum(0) / support
        ok = support >= MIN_SUPPORT
        (k_det, max_det), (k_pred, max_pred) = _best_role(p_det, ok), _best_role(p_pred, ok)
        out.append(
            {
                "theta": theta,
                "roles_with_support": int(ok.sum()),
                "tokens_above": int(above.any(1).sum()),
                "max_p_det": max_det,
                "role_det": k_det,
                "support_det": int(support[k_det]) if k_det is not None else 0,
                "max_p_verb_adj": max_pred,
                "role_verb_adj": k_pred,
                "support_verb_adj": int(support[k_pred]) if k_pred is not None else 0,
                "p_det_all": float(det.mean()),
                "p_verb_adj_all": float(pred.mean()),
            }
        )
    return out


def _best_role(p: np.ndarray, ok: np.ndarray) -> tuple[int | None, float]:
    if not ok.any():
        return None, float("nan")
    masked = np.where(ok, p, -1.0)
    return int(masked.argmax()), float(masked.max())


def thresholds_md(rows: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "",
        "TPRN role attention above a threshold (the paper's measure, §7): per θ, over roles with at least "
        f"{MIN_SUPPORT} tokens with â_R,k > θ (â_R = a_R/‖a_R‖₂), the largest p(DET | role) and p(VERB ∪ ADJ | role) "
        "(the paper, SQuAD questions: 0.96 and 0.82 at θ = 0.65). Base rates over the same tokens in the last columns.",
        "",
        "| system | θ | tokens above θ | roles (support ≥ 20) | max p(DET \\| role) (role, tokens) | "
        "max p(VERB ∪ ADJ \\| role) (role, tokens) | p(DET) | p(VERB ∪ ADJ) |",
        "|:---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rs in rows.items():
        for r in rs:
            lines.append(
                f"| {name} | {r['theta']:.2f} | {r['tokens_above']} | {r['roles_with_support']} | "
                f"{r['max_p_det']:.3f} ({r['role_det']}, {r['support_det']}) | "
                f"{r['max_p_verb_adj']:.3f} ({r['role_verb_adj']}, {r['support_verb_adj']}) | "
                f"{r['p_det_all']:.3f} | {r['p_verb_adj_all']:.3f} |"
            )
    return "\n".join(lines) + "\n"
