"""Search spaces: the `[search]` table of a study file, normalised, and turned into Optuna calls.

A study file writes each hyperparameter as a fixed value or a distribution::

    [search]
    lr = { log_uniform = [1e-4, 1e-2] }     # suggest_float(log=True)
    dropout = { uniform = [0.0, 0.3] }      # suggest_float
    layers = { int = [1, 3] }               # suggest_int; optional step = k
    batch_size = { choice = [32, 64] }      # suggest_categorical
    clip = 5.0                              # fixed: returned as is, never searched
    betas = { fixed = [0.9, 0.999] }        # fixed, for a list-valued hyperparameter

    [search.defaults]                       # optional: values used when study.trials = 0
    lr = 1e-3

`parse_space` checks that table and returns the *normalised space*: a plain, JSON-able dict
(name → parameter, file order) that is hashed into cell ids, logged and sent to workers::

    {"lr":         {"kind": "log_uniform", "low": 0.0001, "high": 0.01, "default": 0.001},
     "layers":     {"kind": "int", "low": 1, "high": 3, "step": 1, "default": 2},
     "batch_size": {"kind": "choice", "choices": [32, 64], "default": 32},
     "clip":       {"kind": "fixed", "value": 5.0}}

Every searched parameter carries a `default`: the one from `[search.defaults]`, else the
first choice, the midpoint of a uniform/int range, or the geometric midpoint of a log range
(rounded to 6 significant digits). `defaults(space)` returns them with the fixed values.

Optuna is imported lazily (inside `suggest` and `make_pruner`) so that reading a study file
stays cheap. Pruner steps are epochs: the trainer reports one validation score per epoch.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from typing import Any

KINDS = ("log_uniform", "uniform", "int", "choice")
PRUNER_KINDS = ("none", "median", "hyperband", "successive_halving")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEFAULTS_KEY = "defaults"

Problem = tuple[str, str]  # (key path, message)


def show(value: Any) -> str:
    """A value the way it is written in TOML, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "a table" if value else "an empty table"
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (str, bool)) or _is_number(v)


def _round6(x: float) -> float:
    return float(f"{x:.6g}")


def _parse_fixed(path: str, value: Any, problems: list[Problem]) -> dict[str, Any] | None:
    """`{ fixed = [a, b] }`: a list-valued hyperparameter (e.g. betas) held at that value."""
    items = value if isinstance(value, list) else [value]
    if not items or not all(_is_scalar(v) for v in items):
        problems.append((f"{path}.fixed", f"expected a value or a list of values, got {show(value)}"))
        return None
    return {"kind": "fixed", "value": value}


def _parse_param(path: str, value: Any, problems: list[Problem]) -> dict[str, Any] | None:
    if isinstance(value, Mapping) and list(value) == ["fixed"]:
        return _parse_fixed(path, value["fixed"], problems)
    if isinstance(value, Mapping):
        keys = list(value)
        kinds = [k for k in keys if k in KINDS]
        if not kinds:
            unknown = ", ".join(repr(k) for k in keys) or "nothing"
            hint = did_you_mean(keys[0], KINDS) if len(keys) == 1 else ""
            problems.append((path, f"a distribution needs one of {', '.join(KINDS)}; got {unknown}{hint}"))
            return None
        if len(kinds) > 1:
            problems.append((path, f"give one distribution, not {' and '.join(repr(k) for k in kinds)}"))
            return None
        kind = kinds[0]
        allowed = (kind, "step") if kind == "int" else (kind,)
        bad = False
        for key in keys:
            if key not in allowed:
                extra = "; only int ranges take a step" if key == "step" else ""
                problems.append((f"{path}.{key}", f"unknown key {key!r}{did_you_mean(key, allowed)}{extra}"))
                bad = True
        if bad:
            return None
        arg = value[kind]
        if kind == "choice":
            return _parse_choice(f"{path}.choice", arg, problems)
        return _parse_range(path, kind, arg, value.get("step"), problems)
    if isinstance(value, list):
        problems.append(
            (
                path,
                f"a plain list is ambiguous: write {{ choice = {show(value)} }} to search over it, "
                f"one value to fix it, or {{ fixed = {show(value)} }} to fix a list-valued one (betas)",
            )
        )
        return None
    if not _is_scalar(value):
        problems.append((path, f"expected a number, string, true/false or a distribution table, got {show(value)}"))
        return None
    return {"kind": "fixed", "value": value}


def _parse_choice(path: str, arg: Any, problems: list[Problem]) -> dict[str, Any] | None:
    if not isinstance(arg, list):
        problems.append((path, f"expected a list of values, got {show(arg)}"))
        return None
    if not arg:
        problems.append((path, "must not be empty"))
        return None
    ok = True
    seen: list[Any] = []
    for i, item in enumerate(arg):
        if not _is_scalar(item):
            problems.append((f"{path}[{i}]", f"choices must be plain values (number, string, true/false), got {show(item)}"))
            ok = False
        elif any(type(item) is type(s) and item == s for s in seen):
            problems.append((f"{path}[{i}]", f"{show(item)} is listed twice"))
            ok = False
        else:
            seen.append(item)
    if not ok:
        return None
    return {"kind": "choice", "choices": list(arg), "default": arg[0]}


# One check after the other, each with its own message for the way a range can be miswritten;
# splitting them would scatter the messages without making any branch simpler.
def _parse_range(path: str, kind: str, arg: Any, step: Any, problems: list[Problem]) -> dict[str, Any] | None:  # noqa: C901
    where = f"{path}.{kind}"
    if not isinstance(arg, list) or len(arg) != 2:
        problems.append((where, f"expected [low, high], got {show(arg)}"))
        return None
    low, high = arg
    n = len(problems)
    for name, v in (("low", low), ("high", high)):
        if kind == "int":
            if not isinstance(v, int) or isinstance(v, bool):
                problems.append((f"{path}.{name}", f"an int range needs whole numbers, got {show(v)}"))
        elif not _is_number(v):
            problems.append((f"{path}.{name}", f"expected a number, got {show(v)}"))
    if len(problems) > n:
        return None
    if kind == "log_uniform":
        for name, v in (("low", low), ("high", high)):
            if v <= 0:
                problems.append((f"{path}.{name}", f"must be > 0 for a log-uniform range, got {show(v)}"))
        if len(problems) > n:
            return None
    if low >= high:
        problems.append((path, f"low must be < high, got [{show(low)}, {show(high)}]"))
        return None
    if kind == "int":
        if step is None:
            step = 1
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            problems.append((f"{path}.step", f"must be a whole number >= 1, got {show(step)}"))
            return None
        if (high - low) % step:
            problems.append((f"{path}.step", f"high - low = {high - low} is not a multiple of step {step}"))
            return None
        default = low + ((high - low) // 2 // step) * step
        return {"kind": "int", "low": low, "high": high, "step": step, "default": default}
    low, high = float(low), float(high)
    if kind == "log_uniform":
        default = _round6(math.exp((math.log(low) + math.log(high)) / 2))
    else:
        default = _round6((low + high) / 2)
    return {"kind": kind, "low": low, "high": high, "default": min(max(default, low), high)}


def _check_default(path: str, param: dict[str, Any], value: Any, problems: list[Problem]) -> Any:
    kind = param["kind"]
    if kind == "fixed":
        problems.append((path, f"the parameter is fixed at {show(param['value'])}; it needs no default"))
    elif kind == "choice":
        if not any(type(value) is type(c) and value == c for c in param["choices"]):
            problems.append((path, f"{show(value)} is not one of the choices {show(param['choices'])}"))
        else:
            return value
    elif kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append((path, f"expected a whole number, got {show(value)}"))
        elif not param["low"] <= value <= param["high"] or (value - param["low"]) % param["step"]:
            problems.append((path, f"{value} is outside the range [{param['low']}, {param['high']}] (step {param['step']})"))
        else:
            return value
    else:
        if not _is_number(value):
            problems.append((path, f"expected a number, got {show(value)}"))
        elif not param["low"] <= value <= param["high"]:
            problems.append((path, f"{show(value)} is outside the range [{show(param['low'])}, {show(param['high'])}]"))
        else:
            return float(value)
    return None


def parse_space(raw: Any, where: str = "search") -> tuple[dict[str, dict[str, Any]], list[Problem]]:
    """Check a `[search]` table; return (normalised space, problems). No exception: the caller
    collects the problems with the rest of the file's and reports them together."""
    problems: list[Problem] = []
    space: dict[str, dict[str, Any]] = {}
    if raw is None:
        return space, problems
    if not isinstance(raw, Mapping):
        return space, [(where, f"expected a table, got {show(raw)}")]
    for name, value in raw.items():
        if name == _DEFAULTS_KEY:
            continue
        path = f"{where}.{name}"
        if not _NAME_RE.match(name):
            problems.append((path, f"bad hyperparameter name {name!r}: use letters, digits and _"))
            continue
        param = _parse_param(path, value, problems)
        if param is not None:
            space[name] = param
    given = raw.get(_DEFAULTS_KEY)
    if given is not None:
        _apply_defaults(where, given, [k for k in raw if k != _DEFAULTS_KEY], space, problems)
    return space, problems


def _apply_defaults(where: str, given: Any, names: list[str], space: dict[str, dict[str, Any]], problems: list[Problem]) -> None:
    """`[search.defaults]`: each must name a key of [search] and fit its range or choices."""
    if not isinstance(given, Mapping):
        problems.append((f"{where}.{_DEFAULTS_KEY}", f"expected a table, got {show(given)}"))
        return
    for name, value in given.items():
        path = f"{where}.{_DEFAULTS_KEY}.{name}"
        if name not in names:
            problems.append((path, f"unknown hyperparameter {name!r}{did_you_mean(name, names)}; a default must name a key of [search]"))
        elif name in space:
            checked = _check_default(path, space[name], value, problems)
            if checked is not None:
                space[name]["default"] = checked


def is_searchable(space: Mapping[str, Mapping[str, Any]]) -> bool:
    """True when at least one parameter is a distribution (not fixed)."""
    return any(p["kind"] != "fixed" for p in space.values())


def defaults(space: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The values used without search (study.trials = 0): fixed values and each parameter's default."""
    return {name: (p["value"] if p["kind"] == "fixed" else p["default"]) for name, p in space.items()}


def suggest(trial: Any, space: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Ask an Optuna trial for one value per parameter (fixed values are returned as they are)."""
    params: dict[str, Any] = {}
    for name, p in space.items():
        kind = p["kind"]
        if kind == "fixed":
            params[name] = p["value"]
        elif kind == "log_uniform":
            params[name] = trial.suggest_float(name, p["low"], p["high"], log=True)
        elif kind == "uniform":
            params[name] = trial.suggest_float(name, p["low"], p["high"])
        elif kind == "int":
            params[name] = trial.suggest_int(name, p["low"], p["high"], step=p.get("step", 1))
        elif kind == "choice":
            params[name] = trial.suggest_categorical(name, list(p["choices"]))
        else:
            raise ValueError(f"search parameter {name!r}: unknown kind {kind!r}")
    return params


def make_pruner(config: Any = None, max_epochs: int | None = None) -> Any:
    """The Optuna pruner for a study's `[pruner]` table (a mapping or an object with those attributes).

    median             → MedianPruner(n_startup_trials=startup_trials (5), n_warmup_steps=warmup_epochs (0))
    hyperband          → HyperbandPruner(min_resource=min_epochs (1), max_resource=max_epochs or "auto",
                                         reduction_factor (3))
    successive_halving → SuccessiveHalvingPruner(min_resource=min_epochs (1), reduction_factor (3))
    none               → NopPruner()
    """
    import optuna

    if config is None:
        cfg: dict[str, Any] = {}
    elif isinstance(config, Mapping):
        cfg = dict(config)
    elif hasattr(config, "model_dump"):
        cfg = config.model_dump()
    else:
        cfg = {k: getattr(config, k) for k in ("kind", "startup_trials", "warmup_epochs", "min_epochs", "reduction_factor") if hasattr(config, k)}

    def get(key: str, default: Any) -> Any:
        value = cfg.get(key)
        return default if value is None else value

    kind = get("kind", "median")
    if kind == "none":
        return optuna.pruners.NopPruner()
    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=get("startup_trials", 5), n_warmup_steps=get("warmup_epochs", 0))
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=get("min_epochs", 1), max_resource=max_epochs or "auto", reduction_factor=get("reduction_factor", 3)
        )
    if kind == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=get("min_epochs", 1), reduction_factor=get("reduction_factor", 3))
    raise ValueError(f"unknown pruner kind {kind!r}{did_you_mean(str(kind), PRUNER_KINDS)}; use one of {', '.join(PRUNER_KINDS)}")
