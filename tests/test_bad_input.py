"""Bad input through the real CLI: exit code 2, one specific error line, no traceback, and nothing
already recorded is touched.

Each case runs `harness.cli.main(argv)` in-process (two run the console script in a subprocess
for the real exit status and stderr). Cases that target an existing run directory compare a
snapshot of its file tree (sizes, mtimes, and the sha256 of mlflow.db and optuna.journal) taken
before and after. That run directory is made once per module by a tiny real study (`tprbench
run` with a local Ray, ~20-40 s).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]

GOOD = """\
[study]
name = "{name}"
trials = {trials}
seeds = 1
epochs = 1

[[tasks]]
name = "logic"
data = "{data}"
[tasks.options]
train_size = 200
eval_size = 40

[matrix]
arch = ["plain"]
dim = [8]
units = {units}

[search]
lr = {{ log_uniform = [1e-3, 1e-2] }}

[resources]
cpus = 1
"""


def study_text(name: str = "badinput", trials: int = 1, data: str = "generated", units: str = '["gru"]', extra: str = "") -> str:
    return GOOD.format(name=name, trials=trials, data=data, units=units) + extra


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under `root` with its size and mtime; the record files also with their sha256."""
    out: dict[str, tuple] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if path.is_dir():
            out[rel] = ("dir", st.st_mtime_ns)
            continue
        entry: tuple = ("file", st.st_size, st.st_mtime_ns)
        if path.name in ("mlflow.db", "optuna.journal"):
            entry += (hashlib.sha256(path.read_bytes()).hexdigest(),)
        out[rel] = entry
    return out


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)  # a traceback would surface here as an exception: the test fails
    except SystemExit as exc:  # an option argparse refuses (harness/commands/support/bounds.py)
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tprbench_exe() -> list[str]:
    exe = Path(sys.executable).parent / "tprbench"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "harness.cli"]


# ---------------------------------------------------------------------------------------------
# One recorded run directory and the input files, made once per module


@dataclass
class Env:
    tmp: Path
    root: Path  # a run directory holding a finished study (mlflow.db, optuna.journal, ...)
    study: Path  # the study file that made it
    train_dir: Path  # a `tprbench train` run directory (gru, 1 epoch)
    train_root: Path
    files: dict[str, Path] = field(default_factory=dict)

    def write(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.write_text(text)
        return str(path)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Env:
    tmp = tmp_path_factory.mktemp("badinput")
    root = tmp / "runs"
    study = tmp / "badinput.toml"
    study.write_text(study_text())
    # A real study, in a subprocess so its local Ray goes away with it.
    proc = subprocess.run(
        tprbench_exe() + ["run", str(study), "--root", str(root), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (root / "mlflow.db").is_file() and (root / "optuna.journal").is_file()

    # A one-epoch `tprbench train` run directory with a gru checkpoint.
    train_root, train_dir = tmp / "train-root", tmp / "train-run"
    assert (
        main(
            [
                "train",
                "--unit",
                "gru",
                "--dim",
                "8",
                "--epochs",
                "1",
                "--run-dir",
                str(train_dir),
                "--root",
                str(train_root),
                "--set",
                "train_size=40",
                "--set",
                "eval_size=8",
            ]
        )
        == 0
    )
    assert (train_dir / "checkpoint.pt").is_file()

    e = Env(tmp, root, study, train_dir, train_root)
    # A DeepMind-layout directory with bad lines (real layout: no train.txt, so train pairs are generated).
    bad = tmp / "bad-data"
    bad.mkdir()
    (bad / "validate.txt").write_text("a,b,0,0,0,0\n(a&b),a,1,1,1,1\na,(b,0,0,0,0\n")
    (bad / "test_easy.txt").write_text("a,a,1,1,1,1\n")
    e.files["bad_formula"] = bad
    fields = tmp / "bad-fields"
    fields.mkdir()
    (fields / "validate.txt").write_text("a,a,1,1,1,1\n(a|b),b,0,0,0,0,0\n")
    e.files["bad_fields"] = fields
    label = tmp / "bad-label"
    label.mkdir()
    (label / "validate.txt").write_text("a,a,1,1,1,1\na,b,0,0,0,0\nb,b,yes,1,1,1\n")
    e.files["bad_label"] = label
    # A data root (as ../shared/data) given where a dataset's own folder is expected.
    shared = tmp / "shared-data"
    (shared / "logical_entailment").mkdir(parents=True)
    (shared / "logical_entailment" / "validate.txt").write_text("a,a,1,1,1,1\n")
    (shared / "babi" / "en").mkdir(parents=True)
    (shared / "babi" / "en" / "qa1_single-supporting-fact_train.txt").write_text("1 Mary went home.\n")
    e.files["data_root"] = shared
    (tmp / "a-file").write_text("not a directory\n")
    (tmp / "study-dir").mkdir()
    (tmp / "tprb_boom_unit.py").write_text("raise RuntimeError('boom while importing tprb_boom_unit')\n")
    return e


# ---------------------------------------------------------------------------------------------
# The cases: (argv from env, the specific text the one error line must contain)


@dataclass
class Case:
    id: str
    argv: Callable[[Env], list[str]]
    expect: Callable[[Env], str] | str
    touches_root: bool = True  # targets the recorded run directory: it must stay exactly as it was


def study_case(id: str, text: Callable[[], str] | str, expect: str, command: str = "run") -> Case:
    def argv(e: Env) -> list[str]:
        body = text() if callable(text) else text
        path = e.write(f"{id}.toml", body)
        if command == "show":
            return ["study", "show", path, "--root", str(e.root)]
        return ["run", path, "--root", str(e.root)]

    return Case(id, argv, lambda e: f"{e.tmp / (id + '.toml')}: {expect}")


CASES = [
    study_case("malformed_toml", study_text().replace("[[tasks]]", "[[tasks]"), "line 7: Expected ']]' at the end of an array declaration"),
    study_case("malformed_toml_value", study_text().replace("epochs = 1", "epochs = 1 1"), "line 5: "),
    study_case("unknown_table", study_text(extra="\n[resource]\ncpus = 1\n"), "resource: unknown key 'resource' (did you mean 'resources'?)"),
    study_case("unknown_key", study_text().replace("seeds = 1", "seedz = 1"), "study.seedz: unknown key 'seedz' (did you mean 'seeds'?)"),
    study_case("wrong_type", study_text().replace("seeds = 1", 'seeds = "three"'), "study.seeds: expected a whole number, got 'three'"),
    study_case("wrong_type_list", study_text().replace("dim = [8]", 'dim = ["eight"]'), "matrix.dim[0]: expected a whole number, got 'eight'"),
    study_case("negative_count", study_text().replace("trials = 1", "trials = -1"), "study.trials: must be >= 0, got -1"),
    study_case(
        "slices_do_not_divide_d",
        study_text(units='["tpru[roles=4,slices=3]"]'),
        "matrix.units[0]: unit spec 'tpru[roles=4,slices=3]' with hidden size 8: slices=3 must divide the hidden size 8",
    ),
    study_case(
        "grid_slices_do_not_divide_d",
        study_text(extra='\n[[matrix.grid]]\nunit = "tpru"\nroles = 4\nslices = [2, 3]\n'),
        "matrix.grid[0]: unit spec 'tpru[roles=4,slices=3]' with hidden size 8: slices=3 must divide",
    ),
    study_case("unknown_unit", study_text(units='["tprux"]'), "matrix.units[0]: unknown unit 'tprux'; did you mean 'tpru'"),
    study_case("unknown_task", study_text().replace('name = "logic"', 'name = "logik"'), "tasks[0].name: unknown task 'logik'; did you mean 'logic'"),
    study_case(
        "unknown_arch",
        study_text().replace('arch = ["plain"]', 'arch = ["plane"]'),
        "matrix.arch[0]: task 'logic' has no architecture 'plane' (did you mean 'plain'?)",
    ),
    study_case(
        "unknown_unit_option",
        study_text(units='["tpru[rolez=4]"]'),
        "matrix.units[0]: unit spec 'tpru[rolez=4]': unknown option 'rolez' (did you mean 'roles'?)",
    ),
    study_case(
        "bad_unit_option_value",
        study_text(units='["tpru[roles=many]"]'),
        "matrix.units[0]: unit spec 'tpru[roles=many]': option roles='many' is invalid",
    ),
    study_case("unparsable_unit_spec", study_text(units='["tpru[roles=4"]'), "matrix.units[0]: cannot parse unit spec 'tpru[roles=4'"),
    study_case(
        "unknown_task_option",
        study_text().replace("train_size = 200", "train_sise = 200"),
        "tasks[0].options.train_sise: unknown key 'train_sise' (did you mean 'train_size'?)",
    ),
    study_case(
        "bad_task_option_value",
        study_text().replace("train_size = 200", 'train_size = "lots"'),
        "tasks[0].options.train_size: expected a whole number, got 'lots'",
    ),
    study_case(
        "empty_search_space_with_trials",
        study_text().replace("lr = { log_uniform = [1e-3, 1e-2] }", "lr = 1e-3"),
        "search: empty search space but study.trials = 1",
    ),
    study_case("bad_distribution", study_text().replace("[1e-3, 1e-2]", "[0, 1e-2]"), "search.lr.low: must be > 0 for a log-uniform range, got 0"),
    study_case(
        "unset_env_var_in_data", study_text(data="${TPRB_TEST_UNSET_VAR}/logic"), "tasks[0].data: environment variable TPRB_TEST_UNSET_VAR is not set"
    ),
    study_case(
        "import_path_unit_missing_module",
        study_text(units='["mymod_missing:Cell"]'),
        "matrix.units[0]: unit import path 'mymod_missing:Cell': module 'mymod_missing' failed to import: No module named 'mymod_missing'",
    ),
    study_case(
        "import_path_unit_raises",
        study_text(units='["tprb_boom_unit:Cell"]'),
        "matrix.units[0]: unit import path 'tprb_boom_unit:Cell': module 'tprb_boom_unit' failed to import: boom while importing tprb_boom_unit",
    ),
    study_case("show_unknown_key", study_text().replace("seeds = 1", "seedz = 1"), "study.seedz: unknown key 'seedz'", command="show"),
    # A data path that does not exist: found before the run directory's record is opened.
    Case(
        "missing_data_path",
        lambda e: ["run", e.write("missing_data_path.toml", study_text(data="/nonexistent/tprb-logic")), "--root", str(e.root)],
        lambda e: f"{e.tmp / 'missing_data_path.toml'}: task 'logic': logic data: directory /nonexistent/tprb-logic not found",
    ),
    Case(
        "nonexistent_study_file",
        lambda e: ["run", str(e.tmp / "no-such-study.toml"), "--root", str(e.root)],
        lambda e: f"{e.tmp / 'no-such-study.toml'}: study file not found",
    ),
    Case(
        "study_file_is_a_directory",
        lambda e: ["run", str(e.tmp / "study-dir"), "--root", str(e.root)],
        lambda e: f"{e.tmp / 'study-dir'}: is a directory, not a study file",
    ),
    Case(
        "only_unknown_key",
        lambda e: ["run", str(e.study), "--root", str(e.root), "--only", "unt=gru"],
        "--only 'unt=gru': unknown key 'unt' (did you mean 'unit'?)",
    ),
    Case("only_without_equals", lambda e: ["study", "show", str(e.study), "--root", str(e.root), "--only", "gru"], "--only 'gru': expected KEY=GLOB"),
    Case(
        "report_study_without_record",
        lambda e: ["report", "never-ran", "--root", str(e.root), "--out", str(e.tmp / "report-out")],
        lambda e: f"study 'never-ran' has no record in sqlite:///{e.root / 'mlflow.db'}",
    ),
    Case(
        "report_study_file_without_record",
        lambda e: ["report", e.write("never_ran.toml", study_text(name="never-ran")), "--root", str(e.root), "--out", str(e.tmp / "report-out")],
        "study 'never-ran' has no record in",
    ),
    Case(
        "report_without_store",
        lambda e: ["report", "badinput", "--root", str(e.tmp / "empty-root"), "--out", str(e.tmp / "report-out")],
        lambda e: f"no MLflow store at sqlite:///{e.tmp / 'empty-root' / 'mlflow.db'}",
        touches_root=False,
    ),
    Case("compare_study_without_record", lambda e: ["compare", "badinput", "never-ran", "--root", str(e.root)], "study 'never-ran' has no record in"),
    # Corrupt data lines: the message names file:line.
    Case(
        "corrupt_formula_line",
        lambda e: [
            "train",
            "--unit",
            "gru",
            "--dim",
            "8",
            "--epochs",
            "1",
            "--data",
            str(e.files["bad_formula"]),
            "--root",
            str(e.train_root),
            "--set",
            "train_size=40",
        ],
        lambda e: f"{e.files['bad_formula'] / 'validate.txt'}:3: field B is not a formula",
        touches_root=False,
    ),
    Case(
        "corrupt_field_count",
        lambda e: [
            "train",
            "--unit",
            "gru",
            "--dim",
            "8",
            "--epochs",
            "1",
            "--data",
            str(e.files["bad_fields"]),
            "--root",
            str(e.train_root),
            "--set",
            "train_size=40",
        ],
        lambda e: f"{e.files['bad_fields'] / 'validate.txt'}:2: expected 6 comma-separated fields A,B,E,H1,H2,H3, got 7",
        touches_root=False,
    ),
    Case(
        "corrupt_label",
        lambda e: [
            "train",
            "--unit",
            "gru",
            "--dim",
            "8",
            "--epochs",
            "1",
            "--data",
            str(e.files["bad_label"]),
            "--root",
            str(e.train_root),
            "--set",
            "train_size=40",
        ],
        lambda e: f"{e.files['bad_label'] / 'validate.txt'}:3: label E must be 0 or 1, got 'yes'",
        touches_root=False,
    ),
    Case(
        "train_missing_data_path",
        lambda e: ["train", "--unit", "gru", "--dim", "8", "--data", "/nonexistent/tprb-logic", "--root", str(e.train_root)],
        "logic data: directory /nonexistent/tprb-logic not found",
        touches_root=False,
    ),
    # The data root where the dataset's folder belongs: nothing generated, the folder named.
    Case(
        "train_data_root_for_a_dataset",
        lambda e: ["train", "--unit", "gru", "--dim", "8", "--epochs", "1", "--data", str(e.files["data_root"]), "--root", str(e.train_root)],
        lambda e: (
            f"logic data: {e.files['data_root']} has none of the files the task reads (train.txt, validate.txt, "
            f"test_easy.txt, test_hard.txt, test_big.txt, test_massive.txt, test_exam.txt); did you mean "
            f"{e.files['data_root'] / 'logical_entailment'}?"
        ),
        touches_root=False,
    ),
    Case(
        "train_babi_data_root",
        lambda e: [
            "train",
            "--task",
            "babi",
            "--unit",
            "gru",
            "--dim",
            "8",
            "--epochs",
            "1",
            "--data",
            str(e.files["data_root"]),
            "--root",
            str(e.train_root),
        ],
        lambda e: (
            f"bAbI: {e.files['data_root']} has none of the files the task reads "
            f"(en/qa*_*_train.txt, en-10k/qa*_*_train.txt); did you mean {e.files['data_root'] / 'babi'}?"
        ),
        touches_root=False,
    ),
    Case(
        "run_data_root_for_a_dataset",
        lambda e: ["run", e.write("data_root.toml", study_text(data=str(e.files["data_root"]))), "--root", str(e.root)],
        lambda e: (
            f"{e.tmp / 'data_root.toml'}: task 'logic': logic data: {e.files['data_root']} has none of the "
            f"files the task reads (train.txt, validate.txt, test_easy.txt, test_hard.txt, test_big.txt, "
            f"test_massive.txt, test_exam.txt); did you mean {e.files['data_root'] / 'logical_entailment'}?"
        ),
    ),
    Case(
        "train_unknown_task_option",
        lambda e: ["train", "--unit", "gru", "--dim", "8", "--set", "train_sise=5", "--root", str(e.train_root)],
        "task 'logic' options: unknown option 'train_sise' (did you mean 'train_size'?)",
        touches_root=False,
    ),
    Case(
        "train_unknown_arch",
        lambda e: ["train", "--unit", "gru", "--dim", "8", "--arch", "plane", "--root", str(e.train_root)],
        "task 'logic' has no architecture 'plane'",
        touches_root=False,
    ),
    Case(
        "train_unknown_task",
        lambda e: ["train", "--unit", "gru", "--task", "logik", "--root", str(e.train_root)],
        "unknown task 'logik'; did you mean 'logic'",
        touches_root=False,
    ),
    Case(
        "train_import_path_unit_missing",
        lambda e: ["train", "--unit", "mymod_missing:Cell", "--root", str(e.train_root)],
        "unit import path 'mymod_missing:Cell': module 'mymod_missing' failed to import",
        touches_root=False,
    ),
    # A checkpoint from a different unit in the run directory: refused, the directory left as it was.
    Case(
        "checkpoint_of_another_unit",
        lambda e: [
            "train",
            "--unit",
            "lstm",
            "--dim",
            "8",
            "--epochs",
            "1",
            "--run-dir",
            str(e.train_dir),
            "--root",
            str(e.train_root),
            "--set",
            "train_size=40",
            "--set",
            "eval_size=8",
        ],
        lambda e: f"{e.train_dir / 'checkpoint.pt'}: checkpoint belongs to a different run configuration",
        touches_root=False,
    ),
    Case(
        "data_out_is_a_file",
        lambda e: ["data", "logic", "--out", str(e.tmp / "a-file"), "--train", "8"],
        lambda e: f"--out {e.tmp / 'a-file'}: exists and is not a directory",
        touches_root=False,
    ),
    Case(
        "data_out_under_a_file",
        lambda e: ["data", "logic", "--out", str(e.tmp / "a-file" / "sub"), "--train", "8", "--eval-size", "4", "--no-stats"],
        lambda e: f"--out {e.tmp / 'a-file' / 'sub'}: cannot write the dataset (Not a directory",
        touches_root=False,
    ),
    Case(
        "data_negative_train",
        lambda e: ["data", "logic", "--out", str(e.tmp / "gen"), "--train", "-1"],
        "argument --train: expected an integer from 0 to 1000000000, got '-1'",
        touches_root=False,
    ),
    Case(
        "bench_unknown_unit_option",
        lambda e: ["bench", "units", "--units", "gru;tpru[rolez=3]", "--dims", "8", "--repeats", "1", "--warmup", "0"],
        "unit spec 'tpru[rolez=3]': unknown option 'rolez' (did you mean 'roles'?)",
        touches_root=False,
    ),
    Case(
        "bench_unparsable_unit",
        lambda e: ["bench", "units", "--units", "tpru[roles=", "--dims", "8"],
        "cannot parse unit spec 'tpru[roles='",
        touches_root=False,
    ),
    Case(
        "units_slices_do_not_divide_d",
        lambda e: ["units", "tpru[slices=3]", "--dim", "8"],
        "unit spec 'tpru[slices=3]' with hidden size 8: slices=3 must divide the hidden size 8",
        touches_root=False,
    ),
    Case(
        "units_hrr_isometric_too_wide",
        lambda e: ["units", "lstm", "--dim", "8", "--hrr-fillers", "5", "--hrr-basis", "isometric"],
        "--hrr-fillers 5: the isometric basis needs N·d' <= d",
        touches_root=False,
    ),
    Case("tasks_unknown_task", lambda e: ["tasks", "logik"], "unknown task 'logik'; did you mean 'logic'", touches_root=False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_line_and_exit_2(case: Case, env: Env, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(env.tmp))  # where tprb_boom_unit.py lives
    monkeypatch.delenv("TPRB_TEST_UNSET_VAR", raising=False)
    argv = case.argv(env)
    before = snapshot(env.root)
    train_before = snapshot(env.train_dir)
    code, out, err = cli(argv, capsys)
    expect = case.expect(env) if callable(case.expect) else case.expect
    lines = err.splitlines()
    assert code == 2, (code, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert len(lines) == 1, f"expected one error line, got:\n{err}"
    assert lines[0].startswith(f"tprbench {argv[0]}: error: "), lines[0]
    assert expect in lines[0], f"{expect!r} not in {lines[0]!r}"
    assert snapshot(env.root) == before, "the recorded run directory changed"
    assert snapshot(env.train_dir) == train_before, "the train run directory changed"


def test_case_count() -> None:
    assert len(CASES) >= 25


def test_unwritable_run_directory(env: Env, capsys) -> None:
    """A run directory that cannot be written: one line naming it, before any work starts.

    As root, chmod does not stop writes, so the directory then lies under a regular file
    (mkdir fails with 'Not a directory' for root too)."""
    if os.geteuid() == 0:
        target = env.tmp / "a-file" / "runs"
        expect = f"run directory {target}: cannot create it (Not a directory)"
    else:
        locked = env.tmp / "locked"
        locked.mkdir(exist_ok=True)
        locked.chmod(0o500)
        target = locked / "runs"
        expect = f"run directory {target}: cannot create it (Permission denied)"
    try:
        code, out, err = cli(["run", str(env.study), "--root", str(target)], capsys)
    finally:
        if os.geteuid() != 0:
            (env.tmp / "locked").chmod(0o700)
    assert code == 2 and "Traceback" not in err
    assert err.splitlines() == [f"tprbench run: error: {expect}"]


def test_existing_but_unwritable_root(env: Env, capsys, tmp_path) -> None:
    """An existing run directory without write permission (only testable as a non-root user)."""
    if os.geteuid() == 0:
        pytest.skip("root writes through chmod 500; covered by test_unwritable_run_directory")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        code, _, err = cli(["run", str(env.study), "--root", str(ro)], capsys)
    finally:
        ro.chmod(0o700)
    assert code == 2 and err.splitlines() == [f"tprbench run: error: run directory {ro}: not writable"]


@pytest.mark.parametrize(
    "argv_of, expect_of",
    [
        (
            lambda e: ["run", e.write("sub_malformed.toml", "[study\nname = 'x'\n"), "--root", str(e.root)],
            lambda e: f"{e.tmp / 'sub_malformed.toml'}: line 1: ",
        ),
        (
            lambda e: [
                "train",
                "--unit",
                "lstm",
                "--dim",
                "8",
                "--epochs",
                "1",
                "--run-dir",
                str(e.train_dir),
                "--root",
                str(e.train_root),
                "--set",
                "train_size=40",
                "--set",
                "eval_size=8",
            ],
            lambda e: f"{e.train_dir / 'checkpoint.pt'}: checkpoint belongs to a different run configuration",
        ),
        (
            lambda e: [
                "train",
                "--task",
                "logic",
                "--unit",
                "gru",
                "--dim",
                "16",
                "--epochs",
                "1",
                "--data",
                str(e.files["data_root"]),
                "--root",
                str(e.train_root),
            ],
            lambda e: f"did you mean {e.files['data_root'] / 'logical_entailment'}?",
        ),
    ],
    ids=["malformed_toml", "checkpoint_of_another_unit", "train_data_root"],
)
def test_bad_input_in_a_subprocess(argv_of, expect_of, env: Env) -> None:
    """The console script itself: real exit status 2, one stderr line, no traceback, nothing touched."""
    before, train_before = snapshot(env.root), snapshot(env.train_dir)
    generated = set((env.train_root / "cache" / "logic").glob("train-for-*"))  # earlier tests' data
    t0 = time.monotonic()
    proc = subprocess.run(tprbench_exe() + argv_of(env), cwd=ROOT, capture_output=True, text=True, timeout=300)
    print(f"\nexit {proc.returncode} after {time.monotonic() - t0:.1f} s")
    assert proc.returncode == 2, proc.stderr
    # Found before any data work: no training pairs were generated for the folder it was given.
    assert set((env.train_root / "cache" / "logic").glob("train-for-*")) == generated
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and expect_of(env) in lines[0], proc.stderr
    assert snapshot(env.root) == before and snapshot(env.train_dir) == train_before


def test_recorded_study_still_reports(env: Env, capsys) -> None:
    """After all the bad input, the record is intact: the study still reports its one cell."""
    code, out, err = cli(["study", "show", str(env.study), "--root", str(env.root), "--json"], capsys)
    assert code == 0, err
    import json

    rows = json.loads(out)["cells"]
    assert [r["status"] for r in rows] == ["done"] and rows[0]["seeds_done"] == 1


def test_help_lists_the_commands(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("run", "report", "train", "units", "tasks", "data", "bench"):
        assert name in out
