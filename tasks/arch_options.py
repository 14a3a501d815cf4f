"""The options of the pair architectures (`plain`, `bidaf`; tasks/architectures.py builds them), torch-free.

logic, nli and transfer share these task options; study files read them (tasks/<name>/meta.py)
without importing the models, or torch. Sources: docs/science-tasks.md ("Pair architectures").
"""

from __future__ import annotations

from typing import Literal

import pydantic

import units

from .bounds import LAYERS_MAX

POOLINGS = ("max", "last", "mean")
ARCHS = ("plain", "bidaf")
ATTENTIONS = ("dot", "trilinear")
ENCODER_LAYERS = 2  # ICLR appendix C.1 and the authors' main_*.py default n_layers=2 (docs/science-tasks.md)

ARCH_NAMES = {
    "plain": "plain (siamese encoder, {pooling}-pooling, [u;v;|u−v|;u∘v], MLP)",
    ("bidaf", "dot"): "BiDAF as the TPRU authors' models/bidaf.py (dot-product similarity, [h;ũ;x] into the modelling layer)",
    ("bidaf", "trilinear"): "BiDAF as Seo et al. 2017 (trilinear similarity, C2Q and Q2C, G=[h;ũ;h∘ũ;h∘h̃])",
}


class PairArchOptions(pydantic.BaseModel):
    """Task options of the pair architectures (logic, nli, transfer share them)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    pooling: Literal["max", "last", "mean"] = pydantic.Field(
        "max", description="sequence → vector: max over time (the papers, the authors' rep_pooling), last state, mean"
    )
    layers: int = pydantic.Field(
        ENCODER_LAYERS,
        ge=1,
        le=LAYERS_MAX,
        description="encoder layers when the unit spec does not say `layers` (2: ICLR appendix C.1, the authors' n_layers=2)",
    )
    attention: Literal["dot", "trilinear"] = pydantic.Field(
        "dot", description="bidaf only: 'dot' = the TPRU authors' models/bidaf.py; 'trilinear' = Seo et al. (2017)"
    )
    modelling_unit: str | None = pydantic.Field(
        None, description="bidaf only: unit spec of the modelling layer (default: the encoder's unit, one layer)"
    )

    @pydantic.field_validator("modelling_unit")
    @classmethod
    def _unit_spec(cls, value: str | None) -> str | None:
        if value:
            try:
                units.resolve(value)
            except units.UnitSpecError as exc:
                raise ValueError(str(exc)) from None
        return value


def describe_arch(arch: str, options: PairArchOptions) -> str:
    """The architecture's name as report headers should print it (which BiDAF it is, above all)."""
    if arch == "plain":
        return ARCH_NAMES["plain"].format(pooling=options.pooling)
    name = ARCH_NAMES[(arch, options.attention)]
    return name + (f"; modelling layer {options.modelling_unit}" if options.modelling_unit else "")
