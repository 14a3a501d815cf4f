"""The built-in units as data: their options and the checks of those options, without torch.

A study file names units (`tpru[roles=32]`); reading it must check the options and the sizes
(`units.resolve`) but must not import torch (~2 s of every `study show` and `report`). So each
built-in unit's options — name → (type, default), exactly its constructor's keyword parameters —
and its option checks (`check_options`, `implied_hidden_size`) live here, and the unit class
subclasses its metadata class, so the checks are one function each. tests/test_units_meta.py
checks that `OPTIONS` equals each constructor's signature and that every built-in has metadata
(a unit without any still works: `unit_meta` then imports it).

Nothing here may import torch (tests/test_lazy_imports.py checks it).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any, ClassVar, Literal

from .registry import register_unit_meta


class UnitMeta:
    """What a study file needs to know of a unit: its options. Subclasses add `check_options(
    hidden_size, **options)` (raise ValueError) and, for units whose options fix their size,
    `implied_hidden_size(**options)`."""

    OPTIONS: ClassVar[dict[str, tuple[Any, Any]]] = {}


@register_unit_meta("lstm")
class LSTMMeta(UnitMeta):
    """units.torch_rnn.LSTM: no options."""


@register_unit_meta("gru")
class GRUMeta(UnitMeta):
    """units.torch_rnn.GRU: no options."""


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


@register_unit_meta("tprn")
class TPRNMeta(UnitMeta):
    """units.tprn.TPRN (Palangi et al.)."""

    OPTIONS = {
        "symbols": (int, 100),
        "roles": (int, 20),
        "role_dim": (int, 10),
        "quantization": (float, 1e-5),
        "gated": (bool, False),
        "impl": (Literal["fused", "loop"], "fused"),
    }

    @classmethod
    def check_options(cls, hidden_size: int, symbols: int = 100, roles: int = 20, role_dim: int = 10,
                      quantization: float = 1e-5, **_: object) -> None:
        if symbols < 1 or roles < 1:
            raise ValueError(f"symbols and roles must be >= 1, got symbols={symbols}, roles={roles}")
        if role_dim < 1 or hidden_size % role_dim:
            raise ValueError(
                f"role_dim={role_dim} must divide the hidden size {hidden_size} "
                f"(the hidden size is d_S·d_R = symbol dim × role_dim; e.g. hidden 100 = 10 × 10)"
            )
        if not quantization >= 0:
            raise ValueError(f"quantization must be >= 0, got {quantization}")


def plan_side(hidden_size: int) -> int:
    """TPGN: d for hidden_size = d²; ValueError naming the nearest squares otherwise."""
    d = math.isqrt(max(hidden_size, 0))
    if hidden_size < 1 or d * d != hidden_size:
        lo, hi = d * d, (d + 1) ** 2
        raise ValueError(f"tpgn needs hidden size d² (a perfect square: the plan Ŝ is d×d and f_t has d² entries), "
                         f"got {hidden_size}; nearest: {lo} (d={d}) or {hi} (d={d + 1})")
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
    def check_options(cls, hidden_size: int, entity: int = 15, relation: int = 10, mlp_hidden: int = 0,
                      ops: str = "wmb", **_: object) -> None:
        if entity < 1 or relation < 1:
            raise ValueError(f"entity and relation must be >= 1, got entity={entity}, relation={relation}")
        if mlp_hidden < 0:
            raise ValueError(f"mlp_hidden must be >= 0 (0 = the input size), got {mlp_hidden}")
        if ops not in TPR3_OPS:
            raise ValueError(f"ops must be one of {', '.join(TPR3_OPS)}, got {ops!r}")
        if hidden_size != cls.width(entity, relation):
            raise ValueError(
                f"tpr3's hidden size is the size of vec(F) = entity·relation·entity = {entity}·{relation}·{entity} = "
                f"{cls.width(entity, relation)}, got {hidden_size}: use that size or change entity/relation")
