"""The unit registry: names → unit classes, with typed options and helpful errors.

Built-in units register with `@register_unit("name")`. Third-party units need no edit here:
they either declare an entry point in the group `tprbench.units` (name → "pkg.mod:Class")
or are named by import path in a spec (`pkg.mod:Class[opt=1]`). Modelled on
lm-evaluation-harness's `@register_model`: unknown names are answered with "did you mean".
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import typing
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable

import pydantic

from .spec import UnitSpec, UnitSpecError, format_value, parse_spec

ENTRY_POINT_GROUP = "tprbench.units"

# Options every unit accepts: they select the generic wrappers, not the unit itself.
GENERIC_OPTIONS: dict[str, tuple[type, Any]] = {"layers": (int, 1), "bidirectional": (bool, False)}

_REGISTRY: dict[str, type] = {}
_ENTRY_POINTS_LOADED = False


def register_unit(name: str) -> Callable[[type], type]:
    """Class decorator: make a unit available under `name`."""

    def decorate(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"unit name {name!r} is already registered by {_REGISTRY[name].__qualname__}")
        _REGISTRY[name] = cls
        cls.unit_name = name
        return cls

    return decorate


def _load_entry_points() -> None:
    """Register units that installed packages advertise, once, lazily (imports can be slow)."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY and ep.name not in _BROKEN:
            _REGISTRY[ep.name] = _LazyEntryPoint(ep)  # imported on first use, so a broken one hides nothing


class _LazyEntryPoint:
    """An entry point not imported yet; `lookup` imports it and reports a failure by name."""

    def __init__(self, ep: metadata.EntryPoint) -> None:
        self.ep = ep

    def load(self) -> type:
        try:
            cls = self.ep.load()
        except Exception as exc:
            _BROKEN.add(self.ep.name)
            _REGISTRY.pop(self.ep.name, None)
            raise UnitSpecError(
                f"unit {self.ep.name!r} from entry point {self.ep.value!r} (group {ENTRY_POINT_GROUP}) failed to import: {exc}"
            ) from exc
        _REGISTRY[self.ep.name] = cls
        cls.unit_name = self.ep.name
        return cls


_BROKEN: set[str] = set()


def available() -> list[str]:
    """Names of every registered unit (built-ins and entry points), sorted."""
    _load_entry_points()
    return sorted(_REGISTRY)


def _import_path(name: str) -> type:
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UnitSpecError(f"unit import path {name!r}: module {module_name!r} failed to import: {exc}") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise UnitSpecError(f"unit import path {name!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(cls):
        raise UnitSpecError(f"unit import path {name!r} does not name a class")
    return cls


def lookup(name: str) -> type:
    """The class behind a unit name or import path, or an error with a did-you-mean."""
    if ":" in name:
        return _import_path(name)
    if name not in _REGISTRY:
        _load_entry_points()
    if name in _REGISTRY:
        found = _REGISTRY[name]
        return found.load() if isinstance(found, _LazyEntryPoint) else found
    close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise UnitSpecError(f"unknown unit {name!r}{hint} (available: {', '.join(sorted(_REGISTRY))})")


def unit_options(cls: type) -> dict[str, inspect.Parameter]:
    """The unit's own options: keyword parameters of its constructor after (input_size, hidden_size).

    Annotations are resolved to real types (modules with `from __future__ import annotations`
    store them as strings), so `Literal[...]` options convert in any unit's module.
    """
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # unresolvable annotations: fall back to what the signature says
        hints = {}
    params = list(inspect.signature(cls).parameters.values())[2:]
    return {p.name: p.replace(annotation=hints.get(p.name, p.annotation)) for p in params
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def _convert(spec_text: str, key: str, raw: str, annotation: Any) -> Any:
    # pydantic does the str→int/float/bool/Literal coercion (lax mode) so we don't hand-write it.
    if annotation is inspect.Parameter.empty:
        annotation = Any
    try:
        return pydantic.TypeAdapter(annotation).validate_python(raw)
    except pydantic.ValidationError as exc:
        reason = exc.errors()[0].get("msg", str(exc))
        raise UnitSpecError(f"unit spec {spec_text!r}: option {key}={raw!r} is invalid: {reason}") from None


@dataclass(frozen=True)
class ResolvedUnit:
    """A spec checked against its class: typed options, defaults filled in, wrappers chosen."""

    spec: UnitSpec
    cls: type
    options: dict[str, Any]
    layers: int
    bidirectional: bool

    @property
    def canonical(self) -> str:
        """Every option spelled out (defaults included), sorted: what exactly will be built."""
        opts = dict(self.options, layers=self.layers, bidirectional=self.bidirectional)
        return str(UnitSpec(self.spec.name, tuple(sorted((k, format_value(v)) for k, v in opts.items()))))

    @property
    def identity(self) -> str:
        """Only the options that differ from their defaults, sorted: what cell ids hash.

        `tpru` and `tpru[roles=64]` are one unit; and a unit option added later with a default
        leaves the ids of every existing cell (and so their records) as they were."""
        defaults = {k: p.default for k, p in unit_options(self.cls).items() if p.default is not inspect.Parameter.empty}
        defaults.update({k: default for k, (_, default) in GENERIC_OPTIONS.items()})
        opts = dict(self.options, layers=self.layers, bidirectional=self.bidirectional)
        kept = sorted((k, format_value(v)) for k, v in opts.items() if k not in defaults or defaults[k] != v)
        return str(UnitSpec(self.spec.name, tuple(kept)))


def resolve(spec: str | UnitSpec, hidden_size: int | None = None) -> ResolvedUnit:
    """Parse and type-check a spec; with `hidden_size`, also check size-dependent constraints."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    text = str(parsed)
    cls = lookup(parsed.name)
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
