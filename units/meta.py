"""The built-in units as data: their options and the checks of those options, without torch.

A study file names units (`tpru[roles=32]`); reading it must check the options and the sizes
(`units.resolve`) but must not import torch (~2 s of every `study show` and `report`). So each
built-in unit's options — name → (type, default), exactly its constructor's keyword parameters —
and its option checks (`check_options`, `implied_hidden_size`) live here, and the unit class
subclasses its metadata class, so the checks are one function each. tests/test_units_meta.py
checks that `OPTIONS` equals each constructor's signature and that every built-in has metadata
(a unit without any still works: `unit_meta` then imports it).

Besides its options a unit states what reports and benchmarks need to know of it, so no harness
module names a unit: the integer options reports give columns of their own (`REPORT_COLUMNS`,
`TABLE_COLUMNS`) and how to build it comparably to GRU at a nominal size (`size_against_gru`,
for `tprbench bench units`). A plug-in unit declares the same names on its class (the harness
reads them with these defaults when it does not).

Nothing here may import torch (tests/test_lazy_imports.py checks it).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any, ClassVar, Literal

from .registry import lookup, register_unit_meta


class UnitMeta:
    """What a study file, a report and a benchmark need to know of a unit. Subclasses add
    `check_options(hidden_size, **options)` (raise ValueError) and, for units whose options fix
    their size, `implied_hidden_size(**options)`."""

    OPTIONS: ClassVar[dict[str, tuple[Any, Any]]] = {}
    # Integer options that reports keep as columns of their own, read from each cell's spec (else
    # its canonical spec): table.csv has one per option and rows sort by them numerically (roles
    # 8 before 32), not as text. Every report has the columns of every built-in unit, so its
    # files keep one shape whichever units a study runs.
    REPORT_COLUMNS: ClassVar[tuple[str, ...]] = ()
    # Of those, the ones the papers' tables (Markdown, LaTeX, console) show in a column beside the
    # unit, taken out of its spec there: the TPRU papers compare numbers of roles.
    TABLE_COLUMNS: ClassVar[tuple[str, ...]] = ()
    # A baseline the papers compare every unit against: reports list baselines first, in this
    # rank (LSTM, then GRU, as the TPRU papers' tables); None for the units under study.
    BASELINE_RANK: ClassVar[int | None] = None
    # Report columns the papers sweep in their learning-curve figures: one line per value of the
    # first (`curves_<first>`: the TPRU papers' roles figure), and, with a second, one line per
    # value of the second at each value of the first (`curves_<second>`: the slices figure).
    FIGURE_SWEEP: ClassVar[tuple[str, ...]] = ()
    # The unit `tprbench bench units` and `bench train` time every other unit against (its
    # speed ratios' denominator); exactly one built-in declares it.
    SPEED_REFERENCE: ClassVar[bool] = False

    @classmethod
    def size_against_gru(cls, dim: int) -> tuple[dict[str, object], int]:
        """(options, hidden size) that build this unit comparably to GRU at nominal size `dim`
        (input size `dim`), for `tprbench bench units`; options a spec gives win over these.
        By default: no options, hidden size `dim`."""
        return {}, dim


@register_unit_meta("lstm")
class LSTMMeta(UnitMeta):
    """units.torch_rnn.LSTM: no options."""

    BASELINE_RANK = 0


@register_unit_meta("gru")
class GRUMeta(UnitMeta):
    """units.torch_rnn.GRU: no options. The speed reference: the papers size every unit against
    GRU's 6d² (`size_against_gru`)."""

    BASELINE_RANK = 1
    SPEED_REFERENCE = True


def triton_installed() -> bool:
    """Whether Triton can be used: what units.tpru_triton found when it imported it, once that
    module is loaded (it imports torch); before, whether the package is installed (found
    without importing it)."""
    loaded = sys.modules.get("units.tpru_triton")
    if loaded is not None:
        return loaded.available()
    return importlib.util.find_spec("triton") is not None


@register_unit_meta("tpru")
@register_unit_meta("tpru-v1")
@register_unit_meta("tpru-mod1")
@register_unit_meta("tpru-mod2")
@register_unit_meta("tpru-mod3")
class TPRUMeta(UnitMeta):
    """units.tpru.TPRUBase and its five variants (which differ in class attributes, not options)."""

    REPORT_COLUMNS = ("roles", "slices")
    TABLE_COLUMNS = ("roles",)
    FIGURE_SWEEP = ("roles", "slices")

    OPTIONS = {
        "roles": (int, 64),
        "slices": (int, 1),
        "biases": (Literal["none", "gate", "code"], "none"),
        "impl": (Literal["fused", "loop", "triton"], "fused"),
        "basis_seed": (int | None, None),
    }

    @classmethod
    def check_options(cls, hidden_size: int, roles: int = 64, slices: int = 1, impl: str = "fused", **_: object) -> None:
        if roles < 1:
            raise ValueError(f"roles must be >= 1, got {roles}")
        if slices < 1 or hidden_size % slices:
            raise ValueError(f"slices={slices} must divide the hidden size {hidden_size}")
        if impl == "triton" and not triton_installed():
            raise ValueError("impl=triton needs Triton, which is not installed (pip install 'tprbench[gpu]')")

    @classmethod
    def size_against_gru(cls, dim: int) -> tuple[dict[str, object], int]:
        """roles = d: the papers' parameter formula, 4d² + 2dd', then equals GRU's 6d² at d' = d."""
        return {"roles": dim}, dim


def _divisor_near(d: int, target: float) -> int:
    """The divisor of d closest to target (ties: the smaller)."""
    return min((q for q in range(1, d + 1) if d % q == 0), key=lambda q: (abs(q - target), q))


@register_unit_meta("tprn")
class TPRNMeta(UnitMeta):
    """units.tprn.TPRN (Palangi et al.)."""

    REPORT_COLUMNS = TABLE_COLUMNS = FIGURE_SWEEP = ("roles",)

    OPTIONS = {
        "symbols": (int, 100),
        "roles": (int, 20),
        "role_dim": (int, 10),
        "quantization": (float, 1e-5),
        "gated": (bool, False),
        "impl": (Literal["fused", "loop"], "fused"),
    }

    @classmethod
    def check_options(
        cls, hidden_size: int, symbols: int = 100, roles: int = 20, role_dim: int = 10, quantization: float = 1e-5, **_: object
    ) -> None:
        if symbols < 1 or roles < 1:
            raise ValueError(f"symbols and roles must be >= 1, got symbols={symbols}, roles={roles}")
        if role_dim < 1 or hidden_size % role_dim:
            raise ValueError(
                f"role_dim={role_dim} must divide the hidden size {hidden_size} "
                f"(the hidden size is d_S·d_R = symbol dim × role_dim; e.g. hidden 100 = 10 × 10)"
            )
        if not quantization >= 0:
            raise ValueError(f"quantization must be >= 0, got {quantization}")

    @classmethod
    def size_against_gru(cls, dim: int) -> tuple[dict[str, object], int]:
        """Hidden d = d_S · d_R with role_dim ≈ √d; symbols + roles = 3d in the paper's 5 : 1, so
        (d' + d)(n_S + n_R) = 6d², GRU's 3(d² + d'd) at d' = d."""
        return {"role_dim": _divisor_near(dim, math.sqrt(dim)), "symbols": (5 * 3 * dim) // 6, "roles": (3 * dim) // 6}, dim


def plan_side(hidden_size: int) -> int:
    """TPGN: d for hidden_size = d²; ValueError naming the nearest squares otherwise."""
    d = math.isqrt(max(hidden_size, 0))
    if hidden_size < 1 or d * d != hidden_size:
        lo, hi = d * d, (d + 1) ** 2
        raise ValueError(
            f"tpgn needs hidden size d² (a perfect square: the plan Ŝ is d×d and f_t has d² entries), "
            f"got {hidden_size}; nearest: {lo} (d={d}) or {hi} (d={d + 1})"
        )
    return d


@register_unit_meta("tpgn")
class TPGNMeta(UnitMeta):
    """units.tpgn.TPGN (Huang et al. 2018): hidden size d²."""

    OPTIONS = {"plan_size": (int, 0), "impl": (Literal["fused", "loop"], "fused")}

    @classmethod
    def check_options(cls, hidden_size: int, plan_size: int = 0, **_: object) -> None:
        plan_side(hidden_size)
        if plan_size < 0:
            raise ValueError(f"plan_size must be >= 0 (0: no plan projection), got {plan_size}")

    @classmethod
    def size_against_gru(cls, dim: int) -> tuple[dict[str, object], int]:
        """The hidden size is p² (the plan is p×p): the square whose formula count is nearest GRU's
        3(d² + d·d') = 6d². The count is the unit class's (`formula_params`, which imports torch)."""
        unit, target = lookup("tpgn"), 6 * dim * dim
        squares = [p * p for p in range(1, math.isqrt(4 * dim) + 2)]
        return {}, min(squares, key=lambda h: abs(unit.formula_params(dim, h) - target))


TPR3_OPS = ("wmb", "w", "wm", "wb")  # write, move, backlink: all, or an ablation


@register_unit_meta("tpr3")
class TPR3Meta(UnitMeta):
    """units.tpr_rnn.TPR3 (Schlag & Schmidhuber 2018): hidden size entity·relation·entity."""

    OPTIONS = {
        "entity": (int, 15),
        "relation": (int, 10),
        "mlp_hidden": (int, 0),
        "ops": (Literal["wmb", "w", "wm", "wb"], "wmb"),
    }

    @staticmethod
    def width(entity: int, relation: int) -> int:
        """The output and hidden size of the unit: len(vec(F)) = E·R·E."""
        return entity * relation * entity

    @classmethod
    def implied_hidden_size(cls, entity: int = 15, relation: int = 10, **_: object) -> int:
        """The only hidden size tpr3 takes: a study matrix without `dim` gives its cells this size."""
        return cls.width(entity, relation)

    @classmethod
    def check_options(cls, hidden_size: int, entity: int = 15, relation: int = 10, mlp_hidden: int = 0, ops: str = "wmb", **_: object) -> None:
        if entity < 1 or relation < 1:
            raise ValueError(f"entity and relation must be >= 1, got entity={entity}, relation={relation}")
        if mlp_hidden < 0:
            raise ValueError(f"mlp_hidden must be >= 0 (0 = the input size), got {mlp_hidden}")
        if ops not in TPR3_OPS:
            raise ValueError(f"ops must be one of {', '.join(TPR3_OPS)}, got {ops!r}")
        if hidden_size != cls.width(entity, relation):
            raise ValueError(
                f"tpr3's hidden size is the size of vec(F) = entity·relation·entity = {entity}·{relation}·{entity} = "
                f"{cls.width(entity, relation)}, got {hidden_size}: use that size or change entity/relation"
            )

    @classmethod
    def size_against_gru(cls, dim: int) -> tuple[dict[str, object], int]:
        """The state is vec(F), E·R·E: the E, R (R ≤ E) with E·R·E nearest d, E and R as close as possible."""
        e, r = min(
            ((e, r) for e in range(1, dim + 1) for r in range(1, e + 1) if e * r * e <= 2 * dim),
            key=lambda er: (abs(er[0] * er[1] * er[0] - dim), er[0] - er[1]),
        )
        return {"entity": e, "relation": r}, cls.width(e, r)
