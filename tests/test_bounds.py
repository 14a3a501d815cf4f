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
    assert not unbounded, f"numeric options without a bound (harness/bounds.py): {unbounded}"
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
    from harness.study import Resources

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    check_fits(Resources(cpus=2))
    with pytest.raises(RunnerError, match=r"cpus = 3 per trial, but the Ray cluster has 2 in all"):
        check_fits(Resources(cpus=3))
    with pytest.raises(RunnerError, match=r"gpus = 1 per trial, but the Ray cluster has 0 in all"):
        check_fits(Resources(gpus=1))
