"""Every numeric CLI option and study field is bounded before anything starts.

The parser is walked, not listed by hand: a numeric option added without a bound fails
`test_no_numeric_option_is_unbounded`, and every bounded one is tried just below and just
above its range (and with `nan` for floats) through `tprbench` itself: exit 2, one line naming
the option. The study's numeric fields are tried the same way through `study show`.
"""

from __future__ import annotations

import argparse

import pytest

from tests.ray_helpers import study_text


def _options() -> list[tuple[tuple[str, ...], str, argparse.Action]]:
    from harness.cli import build_parser

    found = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif action.type is not None and action.option_strings:
                found.append((path, action.option_strings[0], action))

    walk(build_parser(), ())
    return found


NON_NUMERIC = {"_key_value"}  # train --hp/--set KEY=VALUE: parsed and checked by the unit and task


def test_no_numeric_option_is_unbounded() -> None:
    unbounded = [
        f"{' '.join(p)} {o}" for p, o, a in _options() if getattr(a.type, "__name__", "") not in NON_NUMERIC and not hasattr(a.type, "bounds")
    ]
    assert not unbounded, f"numeric options without a bound (harness/commands/support/bounds.py): {unbounded}"
    assert len(_options()) >= 40


def _bad_values() -> list[tuple[str, list[str]]]:
    cases = []
    for path, option, action in _options():
        bounds = getattr(action.type, "bounds", None)
        if bounds is None:
            continue
        lo, hi = bounds
        floats = getattr(action.type, "__name__", "") == "real"
        tries = []
        if lo is not None:
            tries.append(str(lo - (1 if not floats else 0.5)) if not floats else str(lo - 1))
        if hi is not None:
            tries.append(str(hi + 1))
        if floats:
            tries.append("nan")
        for value in tries:
            cases.append((f"{' '.join(path)} {option}={value}", [*path, option, value]))
    return cases


@pytest.mark.parametrize("argv", [c[1] for c in _bad_values()], ids=[c[0] for c in _bad_values()])
def test_a_number_out_of_range_is_one_line_and_exit_2(argv, capsys) -> None:
    from harness.cli import main

    with pytest.raises(SystemExit) as done:
        main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert done.value.code == 2
    assert err[-1].startswith("tprbench ") and f"argument {argv[-2]}" in err[-1] and "expected" in err[-1], err
    assert "Traceback" not in "\n".join(err)


STUDY_FIELDS = {
    "study.trials": ("trials = 2", "trials = 1000000"),
    "study.seeds": ("seeds = 2", "seeds = -1"),
    "study.epochs": ("epochs = 2", "epochs = 0"),
    "study.epochs (too many)": ("epochs = 2", "epochs = 100000000"),
    "resources.cpus": ("cpus = 1", "cpus = 0"),
    "resources.cpus (nan)": ("cpus = 1", "cpus = nan"),
    "resources.gpus": ("gpus = 0", "gpus = -1"),
    "resources.gpus (inf)": ("gpus = 0", "gpus = inf"),
    "resources.retries": ("retries = 3", "retries = 1000"),
    "matrix.dim": ("dim = [8]", "dim = [0]"),
    "matrix.dim (too big)": ("dim = [8]", "dim = [10000000]"),
    "pruner.reduction_factor": ('kind = "none"', 'kind = "hyperband"\nreduction_factor = 1'),
}


@pytest.mark.parametrize("field", list(STUDY_FIELDS))
def test_a_study_field_out_of_range_is_one_line_and_exit_2(field, tmp_path, capsys) -> None:
    from harness.cli import main

    good, bad = STUDY_FIELDS[field]
    text = study_text("bounded", ["gru"])
    assert good in text, good
    path = tmp_path / "bounded.toml"
    path.write_text(text.replace(good, bad, 1))
    rc = main(["study", "show", str(path), "--root", str(tmp_path / "runs")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and err and "Traceback" not in "\n".join(err), err
    key = field.split(" ")[0].split(".")[-1]
    said = "\n".join(err)
    assert key in said and ("must be" in said or "expected a number" in said), err
    assert not (tmp_path / "runs").exists()


def test_a_trial_request_larger_than_the_cluster_is_one_line(monkeypatch) -> None:
    """Ray would wait for such a trial forever, without a word."""
    import ray

    from harness.driver.errors import RunnerError
    from harness.driver.ray_start import check_fits
    from harness.study.schema import Resources

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    check_fits(Resources(cpus=2))
    with pytest.raises(RunnerError, match=r"cpus = 3 per trial, but the Ray cluster has 2 in all"):
        check_fits(Resources(cpus=3))
    with pytest.raises(RunnerError, match=r"gpus = 1 per trial, but the Ray cluster has 0 in all"):
        check_fits(Resources(gpus=1))


# -- task options (tasks/<name>/meta.py): bounded in each task's Options model ------------------

#: Values past any bound the project uses (tasks/bounds.py), per numeric kind of a field.
BEYOND = {"int": [-(10**15), 10**15], "float": [-1e300, 1e300, float("nan"), float("inf")]}
BOUND_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"}


def _numeric_kinds(annotation) -> set[str]:
    """The numeric kinds a field's annotation takes: "int", "float", and "list:int" for a list of them."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _numeric_kinds(args[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_numeric_kinds(a) for a in args))
    if origin in (list, tuple):
        return {f"list:{k}" for a in args for k in _numeric_kinds(a)}
    return {"int"} if annotation is int else {"float"} if annotation is float else set()


def _task_option_values() -> list[tuple[str, str, object]]:
    from tasks.registry import available_tasks, task_meta

    cases = []
    for task in available_tasks():
        model = task_meta(task).Options
        for name, info in model.model_fields.items():
            for kind in sorted(_numeric_kinds(info.annotation)):
                inner = kind.removeprefix("list:")
                for value in BEYOND[inner]:
                    cases.append((task, name, [value] if kind.startswith("list:") else value))
    return cases


def test_every_numeric_task_option_is_bounded_above_and_below() -> None:
    """Each numeric option of every task, far below and far above any sensible value (and NaN, inf
    for reals), is refused by the option's own bound: `train_size = 99999999999999` used to pass."""
    import pydantic

    from tasks.registry import task_meta

    cases = _task_option_values()
    assert len(cases) >= 60, len(cases)  # every task's numeric options were found
    unbounded = []
    for task, name, value in cases:
        try:
            task_meta(task).Options.model_validate({name: value})
        except pydantic.ValidationError as exc:
            if any(err["loc"][:1] == (name,) and err["type"] in BOUND_ERRORS for err in exc.errors()):
                continue
        unbounded.append(f"{task}.{name} = {value!r}")
    assert not unbounded, f"task options without a bound (tasks/bounds.py): {unbounded}"


OPTIONS_THAT_CANNOT_WORK = {
    # an empty validation split: every trial errored 3 times (KeyError 'validate'), `run` exited 0
    "eval_size = 0": ("eval_size = 40", "eval_size = 0", "must be >= 1, got 0"),
    "train_size = 99999999999999": ("train_size = 200", "train_size = 99999999999999", "must be <= 1000000000"),
}


@pytest.mark.parametrize("case", list(OPTIONS_THAT_CANNOT_WORK))
def test_a_task_option_that_cannot_work_is_refused_before_anything_starts(case, tmp_path) -> None:
    """Through the real `tprbench run`: one line naming the study file, the task and the option,
    exit 2, and no run directory (nothing started)."""
    import subprocess

    from tests.ray_helpers import TPRBENCH

    good, bad, why = OPTIONS_THAT_CANNOT_WORK[case]
    text = study_text("opts", ["gru"], trials=0)
    assert good in text, good
    path = tmp_path / "opts.toml"
    path.write_text(text.replace(good, bad, 1))
    root = tmp_path / "runs"
    proc = subprocess.run([TPRBENCH, "run", str(path), "--root", str(root), "--quiet"], capture_output=True, text=True, timeout=300, env=_env())
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    option = bad.split(" ")[0]
    assert lines[0].startswith(f"tprbench run: error: {path}: tasks[0].options.{option}: {why}"), lines[0]
    assert lines[0].endswith("(task 'logic')"), lines[0]
    assert not root.exists()


def _env() -> dict[str, str]:
    import os

    from tests.ray_helpers import ray_environ

    return {**os.environ, **ray_environ()}
