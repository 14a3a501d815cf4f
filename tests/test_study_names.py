"""A study name is checked once, in the study schema, for everything every command does with it.

It names folders (`reports/<name>/`, `<root>/work/<name>/`) and the start of files
(`<root>/logs/<name>-<time>.log`, `<root>/locks/<name>.lock`), and is part of MLflow's experiment
name. "." and ".." passed the old pattern: the cells' run directories landed beside mlflow.db, and
`report ..` wrote its files into the current directory's parent. A 300-character name passed
`study show` and then `run` died with ENAMETOOLONG. Both are now one line, exit 2, before anything
is created; the real `tprbench` is run where the user would see it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.ray_helpers import TPRBENCH, ray_environ, study_text


def _tprbench(*argv: str, cwd: Path) -> tuple[int, list[str]]:
    proc = subprocess.run([TPRBENCH, *argv], capture_output=True, text=True, timeout=300, cwd=cwd, env={**os.environ, **ray_environ()})
    return proc.returncode, [line for line in proc.stderr.splitlines() if line.strip()]


def _study(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "named.toml"
    path.write_text(study_text("named", ["gru"], trials=0).replace('name = "named"', f'name = "{name}"', 1))
    return path


@pytest.mark.parametrize("name", [".", ".."])
def test_a_name_that_means_a_folder_is_refused_by_run_and_report(name, tmp_path) -> None:
    study = _study(tmp_path, name)
    root = tmp_path / "runs"
    rc, err = _tprbench("run", str(study), "--root", str(root), "--quiet", cwd=tmp_path)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"tprbench run: error: {study}: study.name: {name!r} means "), err[0]
    assert not root.exists()
    # `report NAME` takes a recorded study's name: the same rule, before the record is read.
    rc, err = _tprbench("report", name, "--root", str(root), cwd=tmp_path)
    assert rc == 2 and len(err) == 1 and f"study name {name!r}: {name!r} means " in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["named.toml"]  # nothing written here or above


def test_a_name_too_long_for_the_files_it_names_is_refused_by_study_show(tmp_path) -> None:
    """`study show` accepted it and `run` failed with ENAMETOOLONG: now both refuse it in one line."""
    study = _study(tmp_path, "a" * 300)
    rc, err = _tprbench("study", "show", str(study), "--root", str(tmp_path / "runs"), cwd=tmp_path)
    assert rc == 2 and err == [f"tprbench study: error: {study}: study.name: at most 128 characters (it names files and folders), got 300"], err


def test_the_longest_name_leaves_room_for_every_file_named_after_it(tmp_path) -> None:
    """A name of NAME_MAX characters is accepted, and every file and name made from it fits: a path
    component of 255 bytes, MLflow's 256-character experiment name."""
    from harness.commands.support.quiet import log_path
    from harness.record.contract import experiment_name
    from harness.study.load import parse_study
    from harness.study.schema import NAME_MAX, study_name_problem

    name = "n" * NAME_MAX
    assert study_name_problem(name) is None and study_name_problem(name + "n") is not None
    assert parse_study(_study(tmp_path, name).read_text(), "x.toml").name == name
    components = [log_path(tmp_path, name).name, f"{name}.lock", f".{name}.{2**22}.tmp"]
    assert max(len(c.encode()) for c in components) <= 255 and len(experiment_name(name)) <= 256
