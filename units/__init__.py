"""tprbench units: the registry and the recurrent units. Knows nothing of tasks or Ray.

    from units import build, available
    unit = build("tpru[roles=32,slices=8]", input_size=300, hidden_size=512)
    outputs, state = unit(x, mask)          # x [B,T,300], mask [B,T] → [B,T,512], [B,512]

Lazy: `import units` and the spec parser (`units.parse_spec`, `units.spec`) do not import
torch, so the CLI and reports can read unit specs cheaply. Everything else is imported on
first use (PEP 562 module `__getattr__`).
"""

from __future__ import annotations

import importlib
from typing import Any

from .spec import UnitSpec as UnitSpec  # torch-free
from .spec import UnitSpecError as UnitSpecError
from .spec import parse_spec as parse_spec

# name → submodule that defines it (imported on first access). The built-in units (torch_rnn,
# tpru, tpr_rnn, tpgn, ...) register themselves when the registry first looks a name up: every
# module of this package is imported then (units/plugins.py), so a new unit file needs no edit here.
_LAZY = {
    "build": "factory",
    "ParamCounts": "factory",
    "model_param_counts": "factory",
    "param_counts": "factory",
    "RecurrentUnit": "base",
    "Bidirectional": "wrappers",
    "Stacked": "wrappers",
    "ENTRY_POINT_GROUP": "registry",
    "ResolvedUnit": "registry",
    "available": "registry",
    "lookup": "registry",
    "register_unit": "registry",
    "resolve": "registry",
    "unit_options": "registry",
    "unit_meta": "registry",
    "constructor_options": "registry",
}

__all__ = sorted([*_LAZY, "UnitSpec", "UnitSpecError", "parse_spec"])


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'units' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
