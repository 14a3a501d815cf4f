"""Building units from specs and counting their parameters (imports torch)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .registry import ResolvedUnit, resolve
from .spec import UnitSpec, UnitSpecError
from .wrappers import Bidirectional, Stacked


def build(spec: str | UnitSpec | ResolvedUnit, input_size: int, hidden_size: int) -> nn.Module:
    """Instantiate a spec: the unit, wrapped for `layers`/`bidirectional` when asked.

    The module's forward is `(x [B,T,input_size], mask [B,T]) → (outputs, state)` and it has
    `output_size` (hidden_size, doubled when bidirectional).
    """
    resolved = spec if isinstance(spec, ResolvedUnit) else resolve(spec, hidden_size)

    def make(din: int) -> nn.Module:
        try:
            unit = resolved.cls(din, hidden_size, **resolved.options)
        except (TypeError, ValueError) as exc:
            raise UnitSpecError(f"unit spec {str(resolved.spec)!r}: cannot build ({din}→{hidden_size}): {exc}") from exc
        if not hasattr(unit, "output_size"):
            unit.output_size = hidden_size
        for attr, value in (
            ("unit_name", resolved.spec.name),
            ("input_size", din),
            ("hidden_size", hidden_size),
            ("unit_options", dict(resolved.options)),
        ):
            if not hasattr(unit, attr):
                setattr(unit, attr, value)  # what model_param_counts looks for, also on plug-in units
        return unit

    layers = []
    din = input_size
    for _ in range(resolved.layers):
        layers.append(Bidirectional(make(din), make(din)) if resolved.bidirectional else make(din))
        din = layers[-1].output_size  # a unit may be wider than hidden_size (tprn[gated=true]: [h; v])
    module = layers[0] if len(layers) == 1 else Stacked(layers)
    module.spec = str(resolved.spec)
    return module


@dataclass(frozen=True)
class ParamCounts:
    """`formula`: the papers' count (weight matrices, no biases), None if the unit has none.
    `total`: every trainable parameter of the built module (biases and scalars included)."""

    formula: int | None
    total: int


def model_param_counts(model: nn.Module) -> ParamCounts:
    """Counts over every recurrent unit inside a model (stacked layers, both directions, a BiDAF
    modelling layer), excluding embeddings and classifiers: what the papers' tables compare."""
    formula: int | None = 0
    total = 0
    for module in model.modules():
        if not (hasattr(module, "unit_name") and hasattr(module, "input_size") and hasattr(module, "hidden_size")):
            continue
        total += sum(p.numel() for p in module.parameters() if p.requires_grad)
        fn = getattr(type(module), "formula_params", None)
        one = fn(module.input_size, module.hidden_size, **getattr(module, "unit_options", {})) if fn else None
        formula = None if (formula is None or one is None) else formula + one
    return ParamCounts(formula, total)


def param_counts(spec: str | UnitSpec | ResolvedUnit, input_size: int, hidden_size: int) -> ParamCounts:
    """Counts of the built unit (all layers and directions): the formula summed per inner unit."""
    resolved = spec if isinstance(spec, ResolvedUnit) else resolve(spec, hidden_size)
    return model_param_counts(build(resolved, input_size, hidden_size))
