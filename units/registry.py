"""The unit registry: names → unit classes, with typed options and helpful errors.

Built-in units register with `@register_unit("name")`. Third-party units need no edit here:
they either declare an entry point in the group `tprbench.units` (name → "pkg.mod:Class")
or are named by import path in a spec (`pkg.mod:Class[opt=1]`). The lookup itself is the
generic registry of units/plugins.py (shared with tasks): lazy built-ins, entry points,
import paths, a base-class check (an `nn.Module`) and "did you mean".

`resolve` (what study files and the CLI call) reads a built-in unit's options and checks from its
torch-free metadata (units/meta.py: `OPTIONS`, `check_options`, `implied_hidden_size`), which the
unit class subclasses; the class itself, and torch with it, is imported only when something asks
for `ResolvedUnit.cls` (building the unit). tests/test_units_meta.py checks that each built-in's
metadata equals its constructor's signature.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic

from .plugins import Registry, package_modules
from .spec import UnitSpec, UnitSpecError, format_value, parse_spec

ENTRY_POINT_GROUP = "tprbench.units"

# Options every unit accepts: they select the generic wrappers, not the unit itself.
GENERIC_OPTIONS: dict[str, tuple[type, Any]] = {"layers": (int, 1), "bidirectional": (bool, False)}


def _module_base() -> type:
    from torch import nn

    return nn.Module


def _stamp(cls: type, name: str) -> None:
    cls.unit_name = name


# Built-ins: every module of the units package, imported on the first lookup (a new unit file
# registers itself with @register_unit; no list to edit). Listing and parsing import no torch.
UNITS = Registry(
    "unit",
    ENTRY_POINT_GROUP,
    builtins=lambda: package_modules("units"),
    error=UnitSpecError,
    base=_module_base,
    on_add=_stamp,
    metas=lambda: ["units.meta"],
)


def register_unit(name: str) -> Callable[[type], type]:
    """Class decorator: make a unit available under `name`."""
    return UNITS.register(name)


def register_unit_meta(name: str) -> Callable[[type], type]:
    """Class decorator: the torch-free metadata of built-in unit `name` (units/meta.py)."""
    return UNITS.register_meta(name)


def unit_meta(name: str) -> type:
    """A unit's options and option checks without importing it: the built-ins' torch-free
    metadata, else the unit class (plug-ins, import paths); unknown names raise as `lookup`."""
    return UNITS.meta(name)


def available() -> list[str]:
    """Names of every registered unit (built-ins and entry points), sorted."""
    return UNITS.available()


def meta_or_none(name: str) -> type | None:
    """`unit_meta(name)`, or None where the unit's code cannot be loaded: readers of a record
    (reports, figures) still work where a plug-in that made it is gone or fails to import."""
    try:
        return unit_meta(name)
    except Exception:
        return None


def baseline_rank(name: str) -> int | None:
    """The unit's `BASELINE_RANK` (units/meta.py): reports list baselines first, in this rank; None
    for a unit under study, or one whose code cannot be loaded."""
    return getattr(meta_or_none(name), "BASELINE_RANK", None)


def speed_reference() -> str:
    """The registered unit every benchmark times the others against (`SPEED_REFERENCE`)."""
    found = [n for n in available() if getattr(meta_or_none(n), "SPEED_REFERENCE", False)]
    if len(found) != 1:
        raise RuntimeError(f"exactly one unit must declare SPEED_REFERENCE = True, found {found}")
    return found[0]


def baselines() -> list[str]:
    """The registered baselines by rank (LSTM, GRU)."""
    ranked = [(r, n) for n in available() if (r := baseline_rank(n)) is not None]
    return [n for _, n in sorted(ranked)]


def lookup(name: str) -> type:
    """The class behind a unit name or import path, or an error with a did-you-mean."""
    return UNITS.lookup(name)


def unit_options(cls: type) -> dict[str, inspect.Parameter]:
    """The unit's own options: for a built-in's metadata class (units/meta.py) its `OPTIONS`
    (name → (type, default)), for a unit class `constructor_options(cls)` (a plug-in that
    subclasses a built-in and adds options is read from its own constructor)."""
    if _is_meta(cls):
        declared = cls.OPTIONS
        kind = inspect.Parameter.KEYWORD_ONLY
        return {name: inspect.Parameter(name, kind, default=default, annotation=annotation) for name, (annotation, default) in declared.items()}
    return constructor_options(cls)


def constructor_options(cls: type) -> dict[str, inspect.Parameter]:
    """Keyword parameters of a unit's constructor after (input_size, hidden_size): a plug-in's options.

    Annotations are resolved to real types (modules with `from __future__ import annotations`
    store them as strings), so `Literal[...]` options convert in any unit's module.
    """
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # unresolvable annotations: fall back to what the signature says
        hints = {}
    params = list(inspect.signature(cls).parameters.values())[2:]
    return {p.name: p.replace(annotation=hints.get(p.name, p.annotation)) for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


@functools.lru_cache(maxsize=256)
def _adapter(annotation: Any) -> pydantic.TypeAdapter:
    """One TypeAdapter per option type: building one costs ~80 µs, and a study of 10,000 cells
    resolves a unit spec per cell."""
    return pydantic.TypeAdapter(annotation)


def _convert(spec_text: str, key: str, raw: str, annotation: Any) -> Any:
    # pydantic does the str→int/float/bool/Literal coercion (lax mode) so we don't hand-write it.
    if annotation is inspect.Parameter.empty:
        annotation = Any
    try:
        try:
            adapter = _adapter(annotation)
        except TypeError:  # an unhashable annotation (a plug-in's): not cached
            adapter = pydantic.TypeAdapter(annotation)
        return adapter.validate_python(raw)
    except pydantic.ValidationError as exc:
        reason = exc.errors()[0].get("msg", str(exc))
        raise UnitSpecError(f"unit spec {spec_text!r}: option {key}={raw!r} is invalid: {reason}") from None


@dataclass(frozen=True)
class ResolvedUnit:
    """A spec checked against its unit: typed options, defaults filled in, wrappers chosen.

    `meta` is what the options were checked against (units/meta.py for built-ins: no torch);
    `cls`, the unit class, is imported on first use."""

    spec: UnitSpec
    meta: type
    options: dict[str, Any]
    layers: int
    bidirectional: bool

    @property
    def cls(self) -> type:
        """The unit class (imports its module, and torch)."""
        return lookup(self.spec.name) if _is_meta(self.meta) else self.meta

    @property
    def canonical(self) -> str:
        """Every option spelled out (defaults included), sorted: what exactly will be built."""
        opts = dict(self.options, layers=self.layers, bidirectional=self.bidirectional)
        return str(UnitSpec(self.spec.name, tuple(sorted((k, format_value(v)) for k, v in opts.items()))))

    @property
    def implied_hidden_size(self) -> int | None:
        """The hidden size this unit's options fix (a class method `implied_hidden_size(**options)`,
        e.g. tpr3: entity·relation·entity), or None for units that take any size."""
        implied = getattr(self.meta, "implied_hidden_size", None)
        return None if implied is None else int(implied(**self.options))

    @property
    def identity(self) -> str:
        """Only the options that differ from their defaults, sorted: what cell ids hash.

        `tpru` and `tpru[roles=64]` are one unit; and a unit option added later with a default
        leaves the ids of every existing cell (and so their records) as they were."""
        defaults = {k: p.default for k, p in unit_options(self.meta).items() if p.default is not inspect.Parameter.empty}
        defaults.update({k: default for k, (_, default) in GENERIC_OPTIONS.items()})
        opts = dict(self.options, layers=self.layers, bidirectional=self.bidirectional)
        kept = sorted((k, format_value(v)) for k, v in opts.items() if k not in defaults or defaults[k] != v)
        return str(UnitSpec(self.spec.name, tuple(kept)))


def _is_meta(cls: type) -> bool:
    """Whether `cls` is a registered metadata class (not a unit class)."""
    return any(cls is m for m in UNITS.metas.values())


def resolve(spec: str | UnitSpec, hidden_size: int | None = None) -> ResolvedUnit:
    """Parse and type-check a spec; with `hidden_size`, also check size-dependent constraints."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    text = str(parsed)
    cls = unit_meta(parsed.name)
    known = unit_options(cls)
    typed: dict[str, Any] = {}
    generic = {k: default for k, (_, default) in GENERIC_OPTIONS.items()}
    for key, raw in parsed.options:
        if key in GENERIC_OPTIONS:
            generic[key] = _convert(text, key, raw, GENERIC_OPTIONS[key][0])
        elif key in known:
            typed[key] = _convert(text, key, raw, known[key].annotation)
        else:
            names = sorted(set(known) | set(GENERIC_OPTIONS))
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnitSpecError(f"unit spec {text!r}: unknown option {key!r}{hint}; {parsed.name} accepts {', '.join(names)}")
    for key, param in known.items():
        if key not in typed and param.default is not inspect.Parameter.empty:
            typed[key] = param.default
    if generic["layers"] < 1:
        raise UnitSpecError(f"unit spec {text!r}: layers must be >= 1, got {generic['layers']}")
    if hidden_size is not None and hasattr(cls, "check_options"):
        try:
            cls.check_options(hidden_size, **typed)
        except ValueError as exc:
            raise UnitSpecError(f"unit spec {text!r} with hidden size {hidden_size}: {exc}") from None
    return ResolvedUnit(parsed, cls, typed, generic["layers"], generic["bidirectional"])
