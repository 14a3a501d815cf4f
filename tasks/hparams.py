"""The training hyperparameters of one run: one typed model, resolved once.

A run's hyperparameters come from three places, in this order of precedence: the study's
`[search]` values (fixed, searched or defaulted), the task's `defaults` (the papers' values for
that task) and the field defaults below (what the trainer did before any of this existed).
`resolve_hparams` merges them into one validated `HParams`; nothing else in tasks/ or harness/
reads a hyperparameter with a fallback of its own. The study reader calls `check_search_names`
and `check_values` so a misspelled name or a value of the wrong type stops the study when it is
read (exit 2), not in a worker. The resolved values are part of the run's fingerprint and are
logged to MLflow as the run's params (nanoGPT's habit: the config as the run saw it).

A task that needs hyperparameters of its own subclasses `HParams` (new fields with defaults)
and sets `TaskAdapter.HParams` to it; the names then become valid `[search]` keys for that task.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

import pydantic
from pydantic import ConfigDict, Field

OPTIMIZERS = ("adam", "nadam", "nadam-tf", "sgd", "adadelta")
SCHEDULES = ("step", "plateau", "threshold", "none")


class HParamsError(ValueError):
    """Unknown hyperparameter names or values that do not validate. One line, exit 2 in the CLI."""

    user_error = True


class HParams(pydantic.BaseModel):
    """Every hyperparameter the shared training loop reads. Defaults reproduce the loop as it was
    before hyperparameters were typed (Adam, StepLR ÷10 every 30 epochs, clip 5, batch 64)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # optimiser
    lr: float = Field(1e-3, gt=0, description="learning rate")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay of the optimiser")
    optimizer: Literal["adam", "nadam", "nadam-tf", "sgd", "adadelta"] = Field(
        "adam",
        description="adam | nadam (torch's: Dozat's momentum schedule, as Keras) | nadam-tf (constant β1 "
        "momentum, as tf.contrib.opt.NadamOptimizer) | sgd | adadelta",
    )
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam/Nadam betas")
    momentum: float = Field(0.0, ge=0, description="SGD momentum")
    eps: float | None = Field(None, gt=0, description="optimiser eps (None: torch's default for the optimiser)")
    clip: float = Field(5.0, ge=0, description="global gradient-norm clipping (0 = off)")
    batch_size: int = Field(64, ge=1, description="training batch size")
    # what an epoch is, and the order the training examples come in
    epoch_updates: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="an epoch is this many updates of ONE continuous stream of full training batches (a pass's "
        "tail joined to the next pass's head, as TF's `dataset.repeat().batch()`) instead of one pass over the "
        "training data; validation, checkpoint, schedule and stop rules count these epochs "
        "(TPR-RNN's code validates every 200 updates). Tasks with `train_batch` only",
    )
    data_order: Literal["reshuffle", "fixed"] = Field(
        "reshuffle",
        description="reshuffle: a new order of the training data every pass; fixed: one order, drawn once from "
        "the seed, for every pass (TPR-RNN's code: one np.random.permutation, then `.cache().repeat()`)",
    )
    # learning-rate schedule
    schedule: Literal["step", "plateau", "threshold", "none"] = Field(
        "step",
        description="step: ×lr_gamma every lr_step epochs; plateau: ×factor after `patience` epochs without a "
        "better validation metric; threshold: ×factor once when threshold_metric crosses threshold_value",
    )
    lr_step: int = Field(30, ge=1, description="step schedule: epochs between decays")
    lr_gamma: float = Field(0.1, gt=0, description="step schedule: decay factor")
    lr_decay_start: int = Field(
        0,
        ge=0,
        description="step schedule: epochs at the initial lr before the first decay, "
        "then ×lr_gamma every lr_step epochs (0: StepLR's, first decay "
        "after lr_step epochs). Zaremba et al.'s PTB LSTM code: 5, 1, 0.5 (lr 1 for 5 epochs)",
    )
    factor: float = Field(0.5, gt=0, description="plateau/threshold schedules: decay factor")
    patience: int = Field(10, ge=0, description="plateau schedule: epochs without improvement before a decay")
    min_lr: float = Field(
        0.0,
        ge=0,
        description="plateau schedule: the lr never decays below this (torch ReduceLROnPlateau's min_lr; 0 = no floor). "
        "The HRR authors' DevBasedSchedule keeps its default min_factor 0.01: a floor of 0.01 x the initial lr "
        "(j-luo93/lingvo lingvo/core/lr_schedule.py, DevBasedSchedule.Params)",
    )
    threshold_metric: str = Field("valid_loss", description="threshold schedule: the per-epoch metric watched")
    threshold_value: float = Field(0.1, description="threshold schedule: decay once when the metric crosses this value")
    threshold_mode: Literal["below", "above"] = Field("below", description="threshold schedule: crossing downwards or upwards")
    warmup_steps: int = Field(0, ge=0, description="first optimiser steps at lr × warmup_factor")
    warmup_factor: float = Field(1.0, gt=0, description="learning-rate multiplier during warm-up")
    nan_restarts: int = Field(0, ge=0, description="re-initialise model and optimiser when the loss is NaN during warm-up, at most this often")
    # stopping before `epochs` (both off by default)
    stop_value: float | None = Field(
        None,
        description="end the run once the run's validation metric reaches this value "
        "(e.g. valid_acc 1.0: no later epoch could then be chosen as best)",
    )
    stop_patience: int = Field(0, ge=0, description="end the run after this many epochs without a better validation metric (0 = never)")
    # measurements during training (off by default; they do not change what is trained)
    grad_log_batches: int = Field(
        0,
        ge=0,
        description="after each epoch, log the gradient-flow summary of encoder layer "
        "1 (first/last ‖∂L/∂s_t‖, share σ_max(J) > 1, mean σ_max) on this "
        "many validation batches of 32 (0 = off)",
    )
    # model
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout of the architecture around the unit")
    mlp_hidden: int | None = Field(None, ge=1, description="classifier hidden size (None: the architecture's default)")


def _fields(model: type[HParams]) -> list[str]:
    return list(model.model_fields)


def did_you_mean(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_search_names(names: list[str], model: type[HParams] = HParams, task: str = "") -> list[tuple[str, str]]:
    """(name, message) for each name that is not a hyperparameter of `model`."""
    known = _fields(model)
    where = f"task {task!r}" if task else "the trainer"
    return [
        (name, f"unknown hyperparameter {name!r}{did_you_mean(name, known)}; {where} reads {', '.join(sorted(known))}")
        for name in names
        if name not in known
    ]


def _problems(exc: pydantic.ValidationError) -> list[tuple[str, str]]:
    out = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(hyperparameters)"
        out.append((key, f"{err['msg']}, got {err.get('input')!r}"))
    return out


def check_values(values: dict[str, Any], defaults: dict[str, Any] | None = None, model: type[HParams] = HParams) -> list[tuple[str, str]]:
    """(name, message) for each value that does not validate (names are checked separately)."""
    try:
        model.model_validate({**(defaults or {}), **values})
    except pydantic.ValidationError as exc:
        return _problems(exc)
    return []


def resolve_hparams(values: dict[str, Any] | HParams | None, defaults: dict[str, Any] | None = None, model: type[HParams] = HParams) -> HParams:
    """Study values over task defaults over field defaults, validated. Raises HParamsError."""
    if isinstance(values, HParams):
        return values
    unknown = check_search_names(list(values or {}), model)
    if unknown:
        raise HParamsError("; ".join(m for _, m in unknown))
    try:
        return model.model_validate({**(defaults or {}), **(values or {})})
    except pydantic.ValidationError as exc:
        raise HParamsError("hyperparameters: " + "; ".join(f"{k}: {m}" for k, m in _problems(exc))) from None


#: Fields added after runs were first fingerprinted: hashed only when set to something other than
#: their default, so every run (and checkpoint) written before they existed keeps its fingerprint.
ADDED_LATER = ("stop_value", "stop_patience", "grad_log_batches", "lr_decay_start", "epoch_updates", "data_order", "min_lr")


def as_params(hp: HParams) -> dict[str, Any]:
    """The resolved values as plain JSON-able data (what MLflow logs and the result records)."""
    return hp.model_dump(mode="json")


def fingerprint_params(hp: HParams) -> dict[str, Any]:
    """`as_params` less the `ADDED_LATER` fields at their default: what a run's fingerprint hashes."""
    out = as_params(hp)
    for name in ADDED_LATER:
        if name in out and getattr(hp, name) == type(hp).model_fields[name].default:
            del out[name]
    return out
