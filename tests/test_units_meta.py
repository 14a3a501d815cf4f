"""The built-in units' torch-free metadata (units/meta.py) says what their classes say.

Study files are checked against the metadata (no torch); units are built from the classes. These
tests keep the two from drifting: every built-in unit has metadata, its class subclasses it (so
`check_options` and `implied_hidden_size` are the same functions), and `OPTIONS` equals the
constructor's keyword parameters — names, types and defaults.
"""

from __future__ import annotations

import inspect

import pytest

import units
from units import registry
from units.meta import TPR3Meta, UnitMeta


def _builtins() -> list[str]:
    registry.UNITS.load_builtins()
    registry.UNITS.load_metas()
    return sorted(name for name, cls in registry.UNITS.entries.items() if isinstance(cls, type) and cls.__module__.startswith("units."))


def test_every_builtin_unit_has_metadata_and_no_metadata_lacks_a_unit():
    names = _builtins()
    assert {"gru", "lstm", "tpru", "tpru-v1", "tpru-mod1", "tpru-mod2", "tpru-mod3", "tprn", "tpgn", "tpr3"} <= set(names)
    assert sorted(registry.UNITS.metas) == names


@pytest.mark.parametrize("name", _builtins())
def test_metadata_equals_the_constructor(name):
    cls, meta = units.lookup(name), registry.UNITS.metas[name]
    assert issubclass(meta, UnitMeta) and issubclass(cls, meta), f"{cls.__qualname__} must subclass {meta.__qualname__}"
    declared = {k: (p.annotation, p.default) for k, p in units.unit_options(meta).items()}
    constructor = {k: (p.annotation, p.default) for k, p in units.constructor_options(cls).items()}
    assert declared == constructor, f"units/meta.py {meta.__qualname__}.OPTIONS differs from {cls.__qualname__}.__init__"
    assert list(declared) == list(constructor)  # same order: `tprbench units` lists them so
    for hook in ("check_options", "implied_hidden_size"):
        # one function: the class inherits the metadata's (a copy in the class could drift)
        assert inspect.getattr_static(cls, hook, None) is inspect.getattr_static(meta, hook, None), hook


def test_resolve_uses_the_metadata_and_the_class_on_demand():
    resolved = units.resolve("tpr3[entity=4,relation=3]")
    assert resolved.meta is TPR3Meta and resolved.implied_hidden_size == 48
    assert resolved.cls is units.lookup("tpr3") and resolved.identity == "tpr3[entity=4,relation=3]"
    assert units.unit_meta("tpru") is registry.UNITS.metas["tpru"]


def test_a_unit_registered_at_run_time_under_a_new_name_is_its_own_metadata():
    class Probe(units.lookup("gru")):
        pass

    registry.UNITS.add("probe-unit-xyz", Probe)
    try:
        assert units.unit_meta("probe-unit-xyz") is Probe and units.resolve("probe-unit-xyz").cls is Probe
    finally:
        registry.UNITS.remove("probe-unit-xyz")


def test_a_plugin_subclass_of_a_builtin_is_read_from_its_own_constructor():
    base = units.lookup("tpru")

    class TPRUPlus(base):
        def __init__(self, input_size: int, hidden_size: int, roles: int = 64, extra: int = 1) -> None:
            super().__init__(input_size, hidden_size, roles=roles)
            self.extra = extra

    registry.UNITS.add("tpru-plus-xyz", TPRUPlus)
    try:
        resolved = units.resolve("tpru-plus-xyz[extra=2,roles=4]", 8)
        assert resolved.cls is TPRUPlus and resolved.options == {"roles": 4, "extra": 2}
        assert resolved.identity == "tpru-plus-xyz[extra=2,roles=4]"
        with pytest.raises(units.UnitSpecError, match="roles must be >= 1"):  # the inherited check
            units.resolve("tpru-plus-xyz[roles=0]", 8)
    finally:
        registry.UNITS.remove("tpru-plus-xyz")
