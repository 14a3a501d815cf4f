"""Generator of logical-entailment pairs in the DeepMind `A,B,E,H1,H2,H3` format.

The construction follows Evans et al. 2018 (learned from the Haskell generator of
google-deepmind/logical-entailment-dataset; this is an independent Python implementation):

1. A *group* draws a pool of variables (its size uniform in `Preset.vars`, the letters a
   random subset of a-z) and `Preset.candidates` random formulas for each role A and B.
   A formula with n operators is a variable when n = 0; otherwise the left subtree gets
   m ~ U{0..n-1} operators and the node is ~ (the child gets n-1), &, | or > with equal
   probability (the binary's right subtree gets n-1-m). The number of operators is uniform in
   `Preset.ops_a` / `Preset.ops_b`; formulas deeper than `Preset.max_depth` are redrawn.
2. Every formula's truth table over the pool is one Python integer (a list of 2^18-bit blocks
   above 18 variables; exact, see formulas.py), so all candidate pairs are tested cheaply:
   A ⊧ B iff table(A) & ~table(B) == 0.
3. **Four-tuples**: two positive pairs A1 ⊧ B1, A2 ⊧ B2 whose crosses are negative,
   A1 ⊭ B2 and A2 ⊭ B1, each formula used once. They give four lines, two with E=1 and two
   with E=0, and every A and B occurs once with each label, so anything computed from one
   side alone is at chance. (An unsatisfiable or valid formula can never be part of a
   four-tuple, e.g. an unsatisfiable A entails every B, so such formulas are dropped early.)
4. **De-duplication** up to renaming of variables (`formulas.alpha_key`): a four-tuple is
   kept only if its four pairs are new with respect to everything generated so far and to
   the `seen` set passed in (e.g. the real validate/test pairs); across the splits written
   by `write_dataset` no pair occurs twice.
5. H1-H3 are computed by `formulas.heuristics` exactly as the real train-distribution files
   define them; the lines of a split are shuffled.

Determinism: one `random.Random` per split, seeded with the string
"tprbench-logic:{seed}:{split}" (string seeds are hashed with SHA-512 by Python, so the
stream does not depend on PYTHONHASHSEED); the same arguments give byte-identical files.
Speed (measured, one core): the `easy` preset makes 10,000-17,000 lines per second, so
100,000 train lines take 6-11 s and no multiprocessing is used; `massive` (pools of up to 25
variables, truth tables in blocks of 2^18 bits) makes about 50 lines per second.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tasks.errors import DataError
from tasks.paths import file_sha256

from . import formulas as F
from .data import EVAL_SPLITS, SPLITS, find_splits, read_split

GENERATOR_VERSION = 1


@dataclass(frozen=True)
class Preset:
    """Knobs of one distribution (see the module docstring for how each is used)."""

    name: str
    vars: tuple[int, int]  # size of a group's variable pool, uniform in [lo, hi]
    ops_a: tuple[int, int]  # operators per premise A, uniform in [lo, hi]
    ops_b: tuple[int, int]  # operators per hypothesis B
    max_depth: int | None = None  # redraw formulas deeper than this (None: no limit)
    candidates: int = 32  # formulas per role and group
    tuples_per_group: int = 4  # at most this many four-tuples from one group

    def __post_init__(self) -> None:
        for key in ("vars", "ops_a", "ops_b"):
            lo, hi = getattr(self, key)
            if not 0 <= lo <= hi:
                raise ValueError(f"preset {self.name}: {key} must be (lo, hi) with 0 <= lo <= hi, got {(lo, hi)}")
        if not 1 <= self.vars[0] or self.vars[1] > F.MAX_VARS:
            raise ValueError(f"preset {self.name}: vars must lie in 1..{F.MAX_VARS}, got {self.vars}")
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"preset {self.name}: max_depth must be >= 1 or None")
        if self.candidates < 2 or self.tuples_per_group < 1:
            raise ValueError(f"preset {self.name}: candidates >= 2 and tuples_per_group >= 1 required")

    def replace(self, **changes: object) -> Preset:
        d = asdict(self)
        d.update(changes)
        for key in ("vars", "ops_a", "ops_b"):
            d[key] = tuple(d[key])
        return Preset(**d)


# Named presets, tuned so the generated statistics match the rows of $TPRBENCH_DATA/logical_entailment/STATS.md
# (vars per pair, operators, characters and depth per formula; see the module tests).
PRESETS: dict[str, Preset] = {
    "easy": Preset("easy", vars=(3, 10), ops_a=(4, 10), ops_b=(4, 10)),
    "hard": Preset("hard", vars=(1, 10), ops_a=(15, 20), ops_b=(15, 20)),
    "big": Preset("big", vars=(1, 10), ops_a=(10, 30), ops_b=(10, 30)),
    "massive": Preset("massive", vars=(19, 25), ops_a=(20, 30), ops_b=(20, 30), candidates=48, tuples_per_group=8),
    "exam": Preset("exam", vars=(1, 4), ops_a=(1, 4), ops_b=(0, 4), max_depth=3),
}
PRESETS["validate"] = PRESETS["easy"].replace(name="validate")
PRESETS["train"] = PRESETS["easy"].replace(name="train")

# Which preset each DeepMind split name is generated with.
SPLIT_PRESETS = {
    "train": "easy",
    "validate": "easy",
    "test_easy": "easy",
    "test_hard": "hard",
    "test_big": "big",
    "test_massive": "massive",
    "test_exam": "exam",
}


def get_preset(preset: str | Preset) -> Preset:
    if isinstance(preset, Preset):
        return preset
    try:
        return PRESETS[preset]
    except KeyError:
        raise ValueError(f"unknown preset {preset!r} (available: {', '.join(sorted(PRESETS))})") from None


def format_line(a: str, b: str, label: int, heuristics: Sequence[int] | None = None) -> str:
    """One line `A,B,E,H1,H2,H3` (heuristics computed when not given)."""
    h = tuple(heuristics) if heuristics is not None else F.heuristics(a, b)
    return f"{a},{b},{int(label)},{h[0]},{h[1]},{h[2]}"


# ----------------------------------------------------------------------------- sampling


def _random_formula(rnd: Callable[[], float], n: int, pool: Sequence[str], cols: Sequence[int], mask: int) -> tuple[str, int, int]:
    """(canonical string, truth table, depth) of a random formula with n operators.

    Tables stay non-negative (negation is `^ mask`): Python's bitwise operators on negative
    big integers make two's-complement copies and are several times slower.
    """
    if n == 0:
        i = int(rnd() * len(pool))
        return pool[i], cols[i], 0
    n1 = n - 1
    na = int(rnd() * n)  # operators of a binary's left subtree, U{0..n-1}
    k = int(rnd() * 4)
    if k == 0:
        s, t, d = _random_formula(rnd, n1, pool, cols, mask)
        return "~(" + s + ")", t ^ mask, d + 1
    s1, t1, d1 = _random_formula(rnd, na, pool, cols, mask)
    s2, t2, d2 = _random_formula(rnd, n1 - na, pool, cols, mask)
    d = (d1 if d1 > d2 else d2) + 1
    if k == 1:
        return "(" + s1 + "&" + s2 + ")", t1 & t2, d
    if k == 2:
        return "(" + s1 + "|" + s2 + ")", t1 | t2, d
    return "(" + s1 + ">" + s2 + ")", (t1 ^ mask) | t2, d


def random_formula(rng: random.Random, n_ops: int, pool: Sequence[str] = F.ALPHABET) -> str:
    """A random formula with exactly `n_ops` operators over the letters in `pool`."""
    zeros = [0] * len(pool)
    return _random_formula(rng.random, n_ops, list(pool), zeros, 0)[0]


def _candidates(
    rng: random.Random, preset: Preset, ops: tuple[int, int], pool: list[str], cols: Sequence[int], mask: int, blocked: bool
) -> list[tuple[str, object]]:
    """Distinct random formulas with their truth tables over the pool, contingent ones only
    (neither unsatisfiable nor valid: those can never be part of a four-tuple).

    A table is one int when the pool has <= BLOCK_VARS variables, computed while the
    formula is drawn; for bigger pools (`blocked`) it is the list `formulas.block_tables`.
    """
    rnd = rng.random
    lo, hi = ops
    out: dict[str, object] = {}
    for _ in range(preset.candidates):
        for _try in range(20):
            s, t, d = _random_formula(rnd, lo + int(rnd() * (hi - lo + 1)), pool, cols, mask)
            if preset.max_depth is None or d <= preset.max_depth:
                break
        else:
            continue
        if s in out:
            continue
        if blocked:
            tables = F.block_tables(F.parse(s), pool)
            if any(tables) and any(x != mask for x in tables):
                out[s] = tables
        elif t and t != mask:
            out[s] = t
    return list(out.items())


def _holds_blocked(ta: list[int], nb: list[int]) -> bool:
    """A ⊧ B on block tables: no block of table(A) & ~table(B) has a bit set."""
    for x, y in zip(ta, nb):
        if x & y:
            return False
    return True


def _four_tuples(rng: random.Random, preset: Preset) -> list[tuple[str, str, str, str]]:
    """Four-tuples (A1, B1, A2, B2) from one group: A1⊧B1, A2⊧B2, A1⊭B2, A2⊭B1."""
    size = preset.vars[0] + int(rng.random() * (preset.vars[1] - preset.vars[0] + 1))
    pool = rng.sample(F.ALPHABET, size)
    blocked = size > F.BLOCK_VARS
    if blocked:  # formulas are drawn without tables, then evaluated block by block
        cols: Sequence[int] = [0] * size
        mask = (1 << (1 << F.BLOCK_VARS)) - 1
        draw_mask = 0
    else:
        cols = F.columns(size)
        mask = draw_mask = (1 << (1 << size)) - 1
    premises = _candidates(rng, preset, preset.ops_a, pool, cols, draw_mask, blocked)
    hypotheses = _candidates(rng, preset, preset.ops_b, pool, cols, draw_mask, blocked)
    # A ⊧ B iff table(A) & ~table(B) == 0; the complements of the B tables are kept.
    if blocked:
        not_b: list = [[x ^ mask for x in tb] for _, tb in hypotheses]
        holds = _holds_blocked
    else:
        not_b = [tb ^ mask for _, tb in hypotheses]

        def holds(ta: int, nb: int) -> bool:
            return not ta & nb

    positive = [(i, j) for i, (_, ta) in enumerate(premises) for j, nb in enumerate(not_b) if holds(ta, nb)]
    rng.shuffle(positive)
    used_a: set[int] = set()
    used_b: set[int] = set()
    out = []
    for x, (i, j) in enumerate(positive):
        if i in used_a or j in used_b:
            continue
        ta_i, nb_j = premises[i][1], not_b[j]
        for k, m in positive[x + 1 :]:
            if k == i or m == j or k in used_a or m in used_b:
                continue
            if not holds(ta_i, not_b[m]) and not holds(premises[k][1], nb_j):  # A1⊭B2 and A2⊭B1
                used_a.update((i, k))
                used_b.update((j, m))
                out.append((premises[i][0], hypotheses[j][0], premises[k][0], hypotheses[m][0]))
                break
        if len(out) >= preset.tuples_per_group:
            break
    return out


def split_rng(seed: int, split: str) -> random.Random:
    return random.Random(f"tprbench-logic:{seed}:{split}")


def generate_split(
    n_lines: int,
    preset: str | Preset = "easy",
    seed: int = 0,
    *,
    split: str = "train",
    seen: set[str] | None = None,
    shuffle: bool = True,
    progress: Callable[[int, int], None] | None = None,
    max_groups: int | None = None,
) -> list[str]:
    """Lines `A,B,E,H1,H2,H3` of one split: ceil(n_lines/4) whole four-tuples (so exactly half
    are positive), shuffled. `seen` holds `formulas.alpha_key`s to avoid and is updated with
    the new pairs, so passing one set to several calls keeps the splits disjoint.
    `progress(done_lines, total_lines)` is called after every group."""
    cfg = get_preset(preset)
    if n_lines < 0:
        raise ValueError(f"n_lines must be >= 0, got {n_lines}")
    rng = split_rng(seed, split)
    seen = set() if seen is None else seen
    need = math.ceil(n_lines / 4)
    total = 4 * need
    limit = max_groups if max_groups is not None else 1000 + 50 * need
    lines: list[str] = []
    groups = 0
    while len(lines) < total:
        if groups >= limit:
            raise ValueError(
                f"preset {cfg.name}: only {len(lines) // 4} of {need} distinct four-tuples after {groups} groups; "
                "ask for fewer lines or widen the preset (more variables or operators)"
            )
        groups += 1
        for a1, b1, a2, b2 in _four_tuples(rng, cfg):
            quad = ((a1, b1, 1), (a2, b2, 1), (a1, b2, 0), (a2, b1, 0))
            keys = [F.alpha_key(a, b) for a, b, _ in quad]
            if len(set(keys)) < 4 or any(k in seen for k in keys):
                continue
            seen.update(keys)
            feats = {s: F.features(s) for s in (a1, b1, a2, b2)}
            lines.extend(format_line(a, b, e, F.heuristics_from(feats[a], feats[b])) for a, b, e in quad)
            if len(lines) >= total:
                break
        if progress is not None:
            progress(len(lines), total)
    if shuffle:
        rng.shuffle(lines)
    return lines


# ----------------------------------------------------------------------------- statistics


def split_stats(examples: Iterable) -> dict[str, float]:
    """The columns of $TPRBENCH_DATA/logical_entailment/STATS.md for a list of `data.LogicExample` (or (a, b, label) triples).

    Heuristic accuracies use the example's H1-H3 columns when it has them, else compute them.
    """
    n = 0
    nv: list[int] = []
    n_ops: list[int] = []
    chars: list[int] = []
    depths: list[int] = []
    pos = 0
    hits = [0, 0, 0]
    for ex in examples:
        if isinstance(ex, tuple):
            a, b, label, h = ex[0], ex[1], ex[2], None
        else:
            a, b, label, h = ex.a, ex.b, ex.label, getattr(ex, "heuristics", None)
        fa, fb = F.parse(a), F.parse(b)
        n += 1
        nv.append(len(F.variables(a) | F.variables(b)))
        for s, f in ((a, fa), (b, fb)):
            n_ops.append(F.ops(s))
            chars.append(len(s))
            depths.append(F.depth(f))
        pos += int(label)
        h = h if h is not None else F.heuristics(fa, fb)
        for i in range(3):
            hits[i] += int(h[i] == int(label))
    if n == 0:
        return {"pairs": 0}

    def mean(v: list[int]) -> float:
        return sum(v) / len(v)

    return {
        "pairs": n,
        "vars_mean": mean(nv),
        "vars_max": max(nv),
        "ops_mean": mean(n_ops),
        "ops_max": max(n_ops),
        "chars_mean": mean(chars),
        "chars_max": max(chars),
        "depth_mean": mean(depths),
        "depth_max": max(depths),
        "p_pos": pos / n,
        "h1_acc": hits[0] / n,
        "h2_acc": hits[1] / n,
        "h3_acc": hits[2] / n,
    }


def format_stats_row(name: str, s: Mapping[str, float]) -> list[str]:
    """Cells as in $TPRBENCH_DATA/logical_entailment/STATS.md: split, pairs, vars, ops, chars, depth, P(E=1), H1/H2/H3."""
    if not s.get("pairs"):
        return [name, "0", "", "", "", "", "", ""]
    return [
        name,
        f"{s['pairs']:,}",
        f"{s['vars_mean']:.1f} / {s['vars_max']}",
        f"{s['ops_mean']:.1f} / {s['ops_max']}",
        f"{s['chars_mean']:.1f} / {s['chars_max']}",
        f"{s['depth_mean']:.1f} / {s['depth_max']}",
        f"{s['p_pos']:.2f}",
        f"{s['h1_acc']:.2f} / {s['h2_acc']:.2f} / {s['h3_acc']:.2f}",
    ]


STATS_HEADER = ["split", "pairs", "vars/pair (mean / max)", "ops/formula", "chars/formula", "depth", "P(E=1)", "acc H1 / H2 / H3"]


# ----------------------------------------------------------------------------- datasets


def exclusion_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Expand directories to the DeepMind split files inside them; files are taken as given."""
    out: list[Path] = []
    for p in paths:
        p = Path(p).expanduser().resolve()
        if p.is_dir():
            out.extend(find_splits(p).values())
        elif p.is_file():
            out.append(p)
        else:
            raise DataError(f"exclude: {p} is neither a file nor a directory")
    return sorted(set(out))


def alpha_keys(paths: Iterable[str | os.PathLike]) -> set[str]:
    """α-equivalence keys of every pair in the given split files (or directories of them)."""
    keys: set[str] = set()
    for path in exclusion_files(paths):
        for ex in read_split(path):
            keys.add(F.alpha_key(ex.a, ex.b))
    return keys


@dataclass
class DatasetInfo:
    """What `write_dataset` wrote (or found already written)."""

    out_dir: Path
    files: dict[str, Path]
    counts: dict[str, int]
    params: dict
    seconds: float
    cached: bool
    split_seconds: dict[str, float] = field(default_factory=dict)


def default_eval_sizes(eval_size: int) -> dict[str, int]:
    sizes = {name: eval_size for name in EVAL_SPLITS}
    sizes["test_exam"] = min(eval_size, 100)
    return sizes


def _sizes_and_presets(
    train: int, eval_size: int, eval_sizes: Mapping[str, int] | None, presets: Mapping[str, str | Preset] | None
) -> tuple[dict[str, int], dict[str, Preset]]:
    """Lines per split and the resolved preset of each split (ValueError on unknown split names)."""
    sizes = default_eval_sizes(eval_size)
    if eval_sizes:
        unknown = set(eval_sizes) - set(EVAL_SPLITS)
        if unknown:
            raise ValueError(f"eval_sizes: unknown split(s) {sorted(unknown)} (known: {', '.join(EVAL_SPLITS)})")
        sizes.update(eval_sizes)
    sizes["train"] = train
    chosen = dict(SPLIT_PRESETS)
    if presets:
        unknown = set(presets) - set(SPLITS)
        if unknown:
            raise ValueError(f"presets: unknown split(s) {sorted(unknown)} (known: {', '.join(SPLITS)})")
        chosen.update(presets)
    return sizes, {name: get_preset(p) for name, p in chosen.items()}


def _cached(meta_path: Path, params: dict[str, Any], files: dict[str, Path], t0: float) -> DatasetInfo | None:
    """The dataset already written with the same parameters, if every file is there."""
    if not meta_path.is_file():
        return None
    try:
        old = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if old.get("params") != params or not all(p.is_file() for p in files.values()):
        return None
    return DatasetInfo(
        meta_path.parent,
        files,
        dict(old.get("counts", {})),
        params,
        time.perf_counter() - t0,
        cached=True,
        split_seconds=dict(old.get("split_seconds", {})),
    )


#: The stage of `write_dataset` that reads the `exclude` files, as its `progress` callback names it
#: (counted in files, not lines).
EXCLUDING = "(reading the pairs to exclude)"


def write_dataset(
    out_dir: str | os.PathLike,
    train: int = 100000,
    seed: int = 0,
    *,
    eval_size: int = 1000,
    eval_sizes: Mapping[str, int] | None = None,
    exclude: Iterable[str | os.PathLike] = (),
    presets: Mapping[str, str | Preset] | None = None,
    force: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> DatasetInfo:
    """Write train.txt, validate.txt, test_easy/hard/big/massive/exam.txt and generator.json.

    `eval_size` lines per evaluation split (test_exam at most 100), overridden per split by
    `eval_sizes`; a size of 0 leaves the split out. `exclude`: split files or directories
    whose pairs (up to renaming) must not be generated, e.g. the real DeepMind files.
    `presets` overrides `SPLIT_PRESETS`. Splits are generated test_exam ... validate, then
    train, sharing one de-duplication set, so no pair occurs in two splits.
    If `out_dir/generator.json` records the same parameters and every file is there, nothing
    is regenerated (`cached=True`) unless `force`. `progress(split, done, total)` is called
    during generation.
    """
    t0 = time.perf_counter()
    out = Path(out_dir).expanduser()
    sizes, resolved = _sizes_and_presets(train, eval_size, eval_sizes, presets)
    order = [s for s in reversed(EVAL_SPLITS)] + ["train"]
    order = [s for s in order if sizes[s] > 0]
    excluded = exclusion_files(exclude)
    params = {
        "generator": "tasks.logic.generator",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "splits": {s: {"lines": 4 * math.ceil(sizes[s] / 4), "preset": asdict(resolved[s])} for s in order},
        "exclude": [{"path": str(p), "sha256": file_sha256(p)} for p in excluded],
    }
    # JSON round trip so tuples compare equal to the lists read back from generator.json.
    params = json.loads(json.dumps(params))
    meta_path = out / "generator.json"
    files = {s: out / f"{s}.txt" for s in order}
    cached = None if force else _cached(meta_path, params, files, t0)
    if cached is not None:
        return cached
    out.mkdir(parents=True, exist_ok=True)
    if meta_path.exists():
        # An earlier run of ours wrote here: its description and any split it wrote that
        # this run leaves out would no longer be true.
        meta_path.unlink()
        for name in SPLITS:
            if name not in files and (out / f"{name}.txt").is_file():
                (out / f"{name}.txt").unlink()
    seen: set[str] = set()
    for i, path in enumerate(excluded):  # reading the real splits takes minutes on a busy machine: reported
        if progress is not None:
            progress(EXCLUDING, i, len(excluded))
        seen |= alpha_keys([path])
    counts: dict[str, int] = {}
    split_seconds: dict[str, float] = {}
    for split in order:
        t1 = time.perf_counter()
        cb = (lambda done, total, _s=split: progress(_s, done, total)) if progress else None
        if progress is not None:  # the split's start is reported before its first group is done
            progress(split, 0, params["splits"][split]["lines"])
        lines = generate_split(sizes[split], resolved[split], seed, split=split, seen=seen, progress=cb)
        tmp = files[split].with_suffix(".txt.tmp")
        tmp.write_text("".join(line + "\n" for line in lines), encoding="ascii")
        os.replace(tmp, files[split])
        counts[split] = len(lines)
        split_seconds[split] = round(time.perf_counter() - t1, 3)
    seconds = time.perf_counter() - t0
    meta = {"params": params, "counts": counts, "split_seconds": split_seconds, "seconds": round(seconds, 3)}
    tmp = meta_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, meta_path)
    return DatasetInfo(out, files, counts, params, seconds, cached=False, split_seconds=split_seconds)


__all__ = [
    "SPLITS",
    "EVAL_SPLITS",
    "Preset",
    "PRESETS",
    "SPLIT_PRESETS",
    "get_preset",
    "format_line",
    "random_formula",
    "generate_split",
    "split_rng",
    "split_stats",
    "format_stats_row",
    "STATS_HEADER",
    "exclusion_files",
    "alpha_keys",
    "DatasetInfo",
    "default_eval_sizes",
    "write_dataset",
]
