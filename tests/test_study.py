"""Study files → Study → cells: schema errors, stable ids, search spaces, filters, shipped studies."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import optuna
import pydantic
import pytest

from harness.study import search_space
from harness.study.cells import Cell, expand, filter_cells
from harness.study.load import load_study, parse_study
from harness.study.schema import StudyError
from tasks.base import TaskAdapter
from tasks.errors import TaskError
from tasks.registry import TASKS, get_task, register_task

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"


class _FakeOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    train_size: int = 1000
    eval_size: int = 200
    max_len: int = 40


class FakeTask(TaskAdapter):
    """A stand-in adapter: the harness only needs `archs`, `Options` and the default metric (never instantiated)."""

    archs = ("plain", "bidaf")
    Options = _FakeOptions
    metric = "acc"  # as tasks.base.TaskAdapter spells it; cells carry "valid_acc"
    direction = "maximize"
    metrics = {"loss": "minimize", "acc": "maximize", "f1": "maximize"}


class FakeLMTask(TaskAdapter):
    archs = ("lm",)
    Options = _FakeOptions
    metric = "ppl"
    direction = "minimize"
    metrics = {"loss": "minimize", "ppl": "minimize"}


@pytest.fixture(autouse=True, scope="module")
def fake_tasks():
    """Register the stand-in tasks for this module only (other tests see the real registry)."""
    register_task("studytest")(FakeTask)
    register_task("studytest-lm")(FakeLMTask)
    yield
    TASKS.remove("studytest")
    TASKS.remove("studytest-lm")


BASE = """\
[study]
name = "t"
trials = 2
seeds = 3
epochs = 3

[[tasks]]
name = "studytest"
data = "generated"
[tasks.options]
train_size = 100

[matrix]
arch = ["plain"]
dim = [16]
units = ["lstm", "gru", "tpru[roles=8]"]

[[matrix.grid]]
unit = "tpru"
roles = [4, 16]
slices = [1, 2]

[search]
lr = { log_uniform = [1e-4, 1e-2] }
batch_size = 64

[pruner]
kind = "median"

[resources]
cpus = 1
gpus = 0.0
"""


def study_text(**replace: str) -> str:
    """BASE with whole lines replaced: study_text(**{'dim = [16]': 'dim = [16, 32]'})."""
    text = BASE
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def edit(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


def cells_of(text: str, path: str = "studies/t.toml") -> list[Cell]:
    return expand(parse_study(text, path))


# --- the base study ---------------------------------------------------------------------------


def test_base_study_expands_in_file_order() -> None:
    study = parse_study(BASE, "studies/t.toml")
    assert (study.name, study.trials, study.seeds, study.epochs) == ("t", 2, 3, 3)
    assert (study.study.name, study.study.trials, study.study.seeds) == ("t", 2, 3)
    cells = expand(study)
    assert [c.unit for c in cells] == [
        "lstm",
        "gru",
        "tpru[roles=8]",
        "tpru[roles=4,slices=1]",
        "tpru[roles=4,slices=2]",
        "tpru[roles=16,slices=1]",
        "tpru[roles=16,slices=2]",
    ]
    cell = cells[2]
    assert cell.label == "studytest/plain/d16/tpru[roles=8]"
    assert "roles=8" in cell.unit_canonical and "slices=1" in cell.unit_canonical and "layers=1" in cell.unit_canonical
    assert cell.task_options == {"train_size": 100, "eval_size": 200, "max_len": 40}  # defaults filled in
    assert (cell.dim, cell.input_dim, cell.epochs, cell.metric, cell.direction) == (16, 16, 3, "valid_acc", "maximize")
    assert cell.search["lr"] == {"kind": "log_uniform", "low": 1e-4, "high": 1e-2, "default": 1e-3}
    assert cell.search["batch_size"] == {"kind": "fixed", "value": 64}
    assert len(cell.id) == 12 and int(cell.id, 16) >= 0
    d = cell.as_dict()
    assert d["id"] == cell.id and d["label"] == cell.label and d["unit"] == "tpru[roles=8]"
    assert len({c.id for c in cells}) == len(cells)
    assert {c: 1 for c in cells}  # hashable
    assert pickle.loads(pickle.dumps(cell)) == cell  # travels to Ray workers
    assert pickle.loads(pickle.dumps(study)) == study


def test_order_is_task_arch_dim_unit() -> None:
    text = edit('arch = ["plain"]', 'arch = ["bidaf", "plain"]').replace("dim = [16]", "dim = [32, 16]")
    cells = cells_of(text)
    assert len(cells) == 2 * 2 * 7
    keys = [(c.arch, c.dim) for c in cells[::7]]
    assert keys == [("bidaf", 32), ("bidaf", 16), ("plain", 32), ("plain", 16)]


def test_defaults_study_name_metric_direction_input_dim(tmp_path: Path) -> None:
    text = BASE.replace('name = "t"\n', "").replace('arch = ["plain"]\n', "")
    text = text.replace('name = "studytest"', 'name = "studytest-lm"').replace("dim = [16]", "dim = 16\ninput_dim = [8, 12]")
    path = tmp_path / "my-study.toml"
    path.write_text(text)
    study = load_study(path)
    assert study.name == "my-study"
    cells = expand(study)
    assert {c.arch for c in cells} == {"lm"}  # the task's first architecture
    assert {(c.metric, c.direction) for c in cells} == {("valid_ppl", "minimize")}
    assert [c.input_dim for c in cells[:2]] == [8, 8] and cells[7].input_dim == 12
    assert cells[0].label == "studytest-lm/lm/d16e8/lstm"
    # a study-level metric overrides the task's; direction is inferred from its name
    text2 = text.replace("epochs = 3", 'epochs = 3\nmetric = "valid_loss"')
    assert {c.direction for c in cells_of(text2)} == {"minimize"}


def test_data_env_expansion(monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit('data = "generated"', 'data = "${TPRB_TEST_DATA}/logical_entailment"')
    monkeypatch.setenv("TPRB_TEST_DATA", "/data/a")
    a = cells_of(text)
    assert a[0].data == "/data/a/logical_entailment" and a[0].data_source == "${TPRB_TEST_DATA}/logical_entailment"
    monkeypatch.setenv("TPRB_TEST_DATA", "/elsewhere")
    b = cells_of(text)
    assert b[0].data == "/elsewhere/logical_entailment"
    assert [c.id for c in a] == [c.id for c in b]  # ids hash the path as written: portable across machines


# --- stable ids -----------------------------------------------------------------------------


def ids(text: str) -> list[str]:
    return [c.id for c in cells_of(text)]


def test_ids_are_stable() -> None:
    assert ids(BASE) == ids(BASE)
    assert ids(BASE) == [c.id for c in expand(parse_study(BASE, "elsewhere/other.toml"))]


@pytest.mark.parametrize(
    "old,new",
    [
        ("seeds = 3", "seeds = 5"),
        ("trials = 2", "trials = 20"),
        ('name = "t"', 'name = "another-study"'),
        ("cpus = 1", "cpus = 4"),
        ("gpus = 0.0", "gpus = 0.25\nmax_concurrent = 2\nretries = 0"),
        ('kind = "median"', 'kind = "hyperband"'),
        ("[study]", '[study]\ndescription = "words do not change results"'),
    ],
)
def test_ids_ignore_budget_name_and_resources(old: str, new: str) -> None:
    assert ids(edit(old, new)) == ids(BASE)


@pytest.mark.parametrize(
    "old,new",
    [
        ("epochs = 3", "epochs = 4"),
        ("dim = [16]", "dim = [32]"),
        ('arch = ["plain"]', 'arch = ["bidaf"]'),
        ("train_size = 100", "train_size = 101"),
        ('data = "generated"', 'data = "/data/x"'),
        ("lr = { log_uniform = [1e-4, 1e-2] }", "lr = { log_uniform = [1e-4, 1e-1] }"),
        ("batch_size = 64", "batch_size = 32"),
        ("[pruner]", "[search.defaults]\nlr = 5e-3\n\n[pruner]"),
        ("epochs = 3", 'epochs = 3\nmetric = "valid_f1"'),
    ],
)
def test_ids_change_with_what_affects_results(old: str, new: str) -> None:
    before, after = ids(BASE), ids(edit(old, new))
    assert not set(before) & set(after)


def test_id_depends_on_unit_and_explicit_default_is_the_same_unit() -> None:
    base = {c.unit: c.id for c in cells_of(BASE)}
    other = {c.unit: c.id for c in cells_of(edit('"tpru[roles=8]"', '"tpru[roles=12]"'))}
    assert other["lstm"] == base["lstm"] and other["tpru[roles=12]"] not in base.values()
    # slices=1 is tpru's default: the same canonical unit, the same id
    same = {c.unit: c.id for c in cells_of(edit('"tpru[roles=8]"', '"tpru[roles=8,slices=1]"'))}
    assert same["tpru[roles=8,slices=1]"] == base["tpru[roles=8]"]


def test_shared_cells_share_ids_across_studies() -> None:
    small = edit('units = ["lstm", "gru", "tpru[roles=8]"]', 'units = ["gru"]').replace('name = "t"', 'name = "other"')
    small = small[: small.index("[[matrix.grid]]")] + small[small.index("[search]") :]
    (gru,) = cells_of(small)
    assert gru.id == next(c.id for c in cells_of(BASE) if c.unit == "gru")


# --- bad input ------------------------------------------------------------------------------

BAD = [
    # (id, old, new, expected substring)
    ("toml-syntax", "seeds = 3", "seeds 3", "studies/t.toml: line 4: Expected '=' after a key"),
    ("unknown-key-did-you-mean", "dim = [16]", "dims = [16]", "matrix.dims: unknown key 'dims' (did you mean 'dim'?)"),
    ("unknown-top-level", "[resources]", "[resource]", "resource: unknown key 'resource' (did you mean 'resources'?)"),
    ("unknown-study-key", "seeds = 3", "seed = 3", "study.seed: unknown key 'seed' (did you mean 'seeds'?)"),
    ("missing-epochs", "epochs = 3\n", "", "study.epochs: required key is missing"),
    ("missing-tasks", '[[tasks]]\nname = "studytest"\ndata = "generated"\n[tasks.options]\ntrain_size = 100\n', "", "tasks: required key is missing"),
    ("wrong-type-trials", "trials = 2", 'trials = "2"', "study.trials: expected a whole number, got '2'"),
    ("wrong-type-float-epochs", "epochs = 3", "epochs = 3.5", "study.epochs: expected a whole number, got 3.5"),
    ("negative-seeds", "seeds = 3", "seeds = -1", "study.seeds: must be >= 0, got -1"),
    ("negative-trials", "trials = 2", "trials = -2", "study.trials: must be >= 0, got -2"),
    ("zero-epochs", "epochs = 3", "epochs = 0", "study.epochs: must be >= 1, got 0"),
    ("bad-name", 'name = "t"', 'name = "my study"', "study.name: use only letters, digits"),
    (
        "bad-direction",
        "[[tasks]]",
        'direction = "maximise"\n\n[[tasks]]',
        "must be one of 'maximize' or 'minimize', got 'maximise' (did you mean 'maximize'?)",
    ),
    ("empty-dim-list", "dim = [16]", "dim = []", "matrix.dim: must not be empty"),
    ("empty-units-list", 'units = ["lstm", "gru", "tpru[roles=8]"]', "units = []", "matrix.units: must not be empty"),
    ("zero-dim", "dim = [16]", "dim = [16, 0]", "matrix.dim[1]: must be >= 1, got 0"),
    (
        "no-units",
        'units = ["lstm", "gru", "tpru[roles=8]"]\n\n[[matrix.grid]]\nunit = "tpru"\nroles = [4, 16]\nslices = [1, 2]\n',
        "",
        "matrix: no units",
    ),
    ("unknown-unit", '"gru"', '"gur"', "matrix.units[1]: unknown unit 'gur'; did you mean 'gru'"),
    (
        "unknown-unit-option",
        '"tpru[roles=8]"',
        '"tpru[role=8]"',
        "matrix.units[2]: unit spec 'tpru[role=8]': unknown option 'role' (did you mean 'roles'?)",
    ),
    (
        "bad-unit-option-value",
        '"tpru[roles=8]"',
        '"tpru[roles=many]"',
        "matrix.units[2]: unit spec 'tpru[roles=many]': option roles='many' is invalid",
    ),
    (
        "slices-not-dividing",
        "slices = [1, 2]",
        "slices = [1, 3]",
        "matrix.grid[0]: unit spec 'tpru[roles=4,slices=3]' with hidden size 16: slices=3 must divide the hidden size 16",
    ),
    (
        "slices-not-dividing-one-dim",
        'dim = [16]\nunits = ["lstm", "gru", "tpru[roles=8]"]',
        'dim = [16, 18]\nunits = ["lstm", "gru", "tpru[roles=8]", "tpru-mod1[slices=4]"]',
        "matrix.units[3]: unit spec 'tpru-mod1[slices=4]' with hidden size 18: slices=4 must divide the hidden size 18 (matrix.dim = 18)",
    ),
    (
        "grid-unknown-option",
        "slices = [1, 2]",
        "slics = [1, 2]",
        "matrix.grid[0]: unit spec 'tpru[roles=4,slics=1]': unknown option 'slics' (did you mean 'slices'?)",
    ),
    ("grid-empty-list", "slices = [1, 2]", "slices = []", "matrix.grid[0].slices: must not be empty"),
    ("grid-option-twice", 'unit = "tpru"', 'unit = "tpru[roles=8]"', "matrix.grid[0].roles: option 'roles' is given both in unit"),
    ("unknown-task", 'name = "studytest"', 'name = "studytset"', "tasks[0].name: unknown task 'studytset'; did you mean 'studytest'"),
    (
        "unknown-task-option",
        "train_size = 100",
        "train_sizes = 100",
        "tasks[0].options.train_sizes: unknown key 'train_sizes' (did you mean 'train_size'?)",
    ),
    ("bad-task-option-value", "train_size = 100", 'train_size = "lots"', "tasks[0].options.train_size: "),
    (
        "unknown-arch",
        'arch = ["plain"]',
        'arch = ["plain", "bidaff"]',
        "matrix.arch[1]: task 'studytest' has no architecture 'bidaff' (did you mean 'bidaf'?)",
    ),
    (
        "unset-env-var",
        'data = "generated"',
        'data = "${TPRB_SURELY_UNSET_VAR}/x"',
        "tasks[0].data: environment variable TPRB_SURELY_UNSET_VAR is not set",
    ),
    ("empty-search-with-trials", "lr = { log_uniform = [1e-4, 1e-2] }\n", "", "search: empty search space but study.trials = 2"),
    ("range-low-ge-high", "lr = { log_uniform = [1e-4, 1e-2] }", "lr = { uniform = [0.3, 0.1] }", "search.lr: low must be < high, got [0.3, 0.1]"),
    ("range-low-eq-high", "lr = { log_uniform = [1e-4, 1e-2] }", "lr = { uniform = [0.1, 0.1] }", "search.lr: low must be < high"),
    (
        "log-low-le-zero",
        "lr = { log_uniform = [1e-4, 1e-2] }",
        "lr = { log_uniform = [0.0, 1e-2] }",
        "search.lr.low: must be > 0 for a log-uniform range",
    ),
    ("int-non-integer", "batch_size = 64", "batch_size = { int = [16, 64.5] }", "search.batch_size.high: an int range needs whole numbers, got 64.5"),
    (
        "int-bad-step",
        "batch_size = 64",
        "batch_size = { int = [16, 64], step = 5 }",
        "search.batch_size.step: high - low = 48 is not a multiple of step 5",
    ),
    (
        "unknown-distribution",
        "batch_size = 64",
        "batch_size = { choices = [32, 64] }",
        "search.batch_size: a distribution needs one of log_uniform, uniform, int, choice; got 'choices' (did you mean 'choice'?)",
    ),
    ("empty-choice", "batch_size = 64", "batch_size = { choice = [] }", "search.batch_size.choice: must not be empty"),
    ("plain-list-search", "batch_size = 64", "batch_size = [32, 64]", "search.batch_size: a plain list is ambiguous"),
    ("range-not-pair", "lr = { log_uniform = [1e-4, 1e-2] }", "lr = { uniform = [1e-4] }", "search.lr.uniform: expected [low, high], got [0.0001]"),
    (
        "default-unknown-param",
        "[pruner]",
        "[search.defaults]\nrl = 1e-3\n\n[pruner]",
        "search.defaults.rl: unknown hyperparameter 'rl' (did you mean 'lr'?)",
    ),
    ("default-out-of-range", "[pruner]", "[search.defaults]\nlr = 0.5\n\n[pruner]", "search.defaults.lr: 0.5 is outside the range"),
    (
        "pruner-kind",
        'kind = "median"',
        'kind = "medain"',
        "pruner.kind: must be one of 'none', 'median', 'hyperband' or 'successive_halving', got 'medain' (did you mean 'median'?)",
    ),
    (
        "pruner-key-for-other-kind",
        'kind = "median"',
        'kind = "none"\nstartup_trials = 3',
        "pruner.startup_trials: only used by kind = 'median', not 'none'",
    ),
    ("gpus-negative", "gpus = 0.0", "gpus = -0.5", "resources.gpus: must be >= 0, got -0.5"),
    ("cpus-zero", "cpus = 1", "cpus = 0", "resources.cpus: must be > 0, got 0"),
    ("gpus-fraction-above-one", "gpus = 0.0", "gpus = 1.5", "resources.gpus: Ray takes a fraction below 1 or a whole number"),
    (
        "duplicate-unit",
        '"tpru[roles=8]"',
        '"tpru[roles=4,slices=2]"',
        "matrix.grid[0]: duplicate cells: unit 'tpru[roles=4,slices=2]' is the same unit as 'tpru[roles=4,slices=2]' from matrix.units[2]",
    ),
    (
        "duplicate-default-spelled-out",
        '"lstm", "gru"',
        '"lstm", "lstm[layers=1]"',
        "matrix.units[1]: duplicate cells: unit 'lstm[layers=1]' is the same unit as 'lstm' from matrix.units[0]",
    ),
    ("duplicate-dim", "dim = [16]", "dim = [16, 16]", "matrix.dim[1]: duplicate cells: 16 is listed twice"),
    (
        "duplicate-task",
        "[matrix]",
        '[[tasks]]\nname = "studytest"\n[tasks.options]\ntrain_size = 100\n\n[matrix]',
        "tasks[1]: duplicate cells: the same task, options, data and overrides as tasks[0]",
    ),
    ("task-label-clash", "[matrix]", '[[tasks]]\nname = "studytest"\n\n[matrix]', "tasks[1].label: task label 'studytest' is also used by tasks[0]"),
    ("unparseable-unit", '"gru"', '"gru[oops"', "matrix.units[1]: cannot parse unit spec 'gru[oops'"),
]


@pytest.mark.parametrize("old,new,expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(old: str, new: str, expected: str) -> None:
    with pytest.raises(StudyError) as info:
        parse_study(edit(old, new), "studies/t.toml")
    message = str(info.value)
    assert expected in message, message
    assert all(line.startswith("studies/t.toml: ") for line in message.splitlines()), message
    assert type(info.value).user_error is True


def test_every_problem_is_listed() -> None:
    text = edit("seeds = 3", "seeds = -1\nsed = 2").replace("dim = [16]", "dims = [16]").replace("gpus = 0.0", "gpus = -1.0")
    text = text.replace("lr = { log_uniform = [1e-4, 1e-2] }", "lr = { log_uniform = [0, 1e-2] }")
    with pytest.raises(StudyError) as info:
        parse_study(text, "studies/t.toml")
    paths = [where for where, _ in info.value.problems]
    assert {"study.seeds", "study.sed", "matrix.dims", "matrix.dim", "resources.gpus", "search.lr.low"} <= set(paths)
    assert len(str(info.value).splitlines()) == len(info.value.problems)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StudyError, match="nope.toml: study file not found"):
        load_study(tmp_path / "nope.toml")


def test_trials_zero_allows_empty_search() -> None:
    text = edit("trials = 2", "trials = 0").replace("lr = { log_uniform = [1e-4, 1e-2] }\n", "")
    study = parse_study(text, "studies/t.toml")
    assert search_space.defaults(study.search) == {"batch_size": 64}


def test_cli_prints_study_errors_as_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import is_user_error

    with pytest.raises(StudyError) as info:
        parse_study(edit("dim = [16]", "dims = [16]"), "studies/t.toml")
    assert is_user_error(info.value)


# --- search spaces --------------------------------------------------------------------------

SPACE_TOML = {
    "lr": {"log_uniform": [1e-4, 1e-2]},
    "dropout": {"uniform": [0.0, 0.5]},
    "layers": {"int": [1, 7], "step": 2},
    "batch_size": {"choice": [32, 64, 128]},
    "optimizer": "adam",
    "clip": 5.0,
}


def test_parse_space_normalises_and_defaults() -> None:
    space, problems = search_space.parse_space(SPACE_TOML)
    assert problems == []
    assert list(space) == list(SPACE_TOML)
    assert space["lr"] == {"kind": "log_uniform", "low": 1e-4, "high": 1e-2, "default": 1e-3}
    assert space["dropout"]["default"] == 0.25
    assert space["layers"] == {"kind": "int", "low": 1, "high": 7, "step": 2, "default": 3}
    assert search_space.defaults(space) == {"lr": 1e-3, "dropout": 0.25, "layers": 3, "batch_size": 32, "optimizer": "adam", "clip": 5.0}
    with_defaults, problems = search_space.parse_space(dict(SPACE_TOML, defaults={"lr": 3e-3, "batch_size": 64}))
    assert problems == []
    assert search_space.defaults(with_defaults)["lr"] == 3e-3 and search_space.defaults(with_defaults)["batch_size"] == 64
    assert search_space.is_searchable(space) and not search_space.is_searchable({"x": {"kind": "fixed", "value": 1}})


def test_suggest_with_optuna_in_memory_study() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, _ = search_space.parse_space(SPACE_TOML)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        params = search_space.suggest(trial, space)
        assert list(params) == list(space)
        assert 1e-4 <= params["lr"] <= 1e-2
        assert 0.0 <= params["dropout"] <= 0.5
        assert params["layers"] in (1, 3, 5, 7)
        assert params["batch_size"] in (32, 64, 128)
        assert params["optimizer"] == "adam" and params["clip"] == 5.0
        study.tell(trial, params["lr"])
    # only the searched parameters are Optuna parameters; their distributions match the space
    dists = study.trials[0].distributions
    assert set(dists) == {"lr", "dropout", "layers", "batch_size"}
    assert dists["lr"].log and not dists["dropout"].log and dists["layers"].step == 2


def test_suggest_replays_enqueued_defaults() -> None:
    space, _ = search_space.parse_space(SPACE_TOML)
    study = optuna.create_study()
    searched = {k: v for k, v in search_space.defaults(space).items() if space[k]["kind"] != "fixed"}
    study.enqueue_trial(searched)
    assert search_space.suggest(study.ask(), space) == search_space.defaults(space)


@pytest.mark.parametrize(
    "config,cls",
    [
        ({"kind": "median", "startup_trials": 1, "warmup_epochs": 2}, optuna.pruners.MedianPruner),
        ({"kind": "hyperband", "min_epochs": 1, "reduction_factor": 3}, optuna.pruners.HyperbandPruner),
        ({"kind": "successive_halving"}, optuna.pruners.SuccessiveHalvingPruner),
        ({"kind": "none"}, optuna.pruners.NopPruner),
        (None, optuna.pruners.MedianPruner),
    ],
)
def test_make_pruner(config: dict | None, cls: type) -> None:
    assert isinstance(search_space.make_pruner(config, max_epochs=10), cls)


def test_make_pruner_from_study() -> None:
    study = parse_study(edit('kind = "median"', 'kind = "median"\nstartup_trials = 1\nwarmup_epochs = 1'), "t.toml")
    pruner = search_space.make_pruner(study.pruner, max_epochs=study.epochs)
    assert isinstance(pruner, optuna.pruners.MedianPruner)
    assert pruner._n_startup_trials == 1 and pruner._n_warmup_steps == 1


# --- filters --------------------------------------------------------------------------------


def test_filter_cells() -> None:
    cells = cells_of(edit('arch = ["plain"]', 'arch = ["plain", "bidaf"]').replace("dim = [16]", "dim = [16, 32]"))
    assert len(cells) == 28

    def units(patterns: list[str]) -> list[str]:
        return sorted({c.unit for c in filter_cells(cells, patterns)})

    assert units(["unit=tpru*"]) == [
        "tpru[roles=16,slices=1]",
        "tpru[roles=16,slices=2]",
        "tpru[roles=4,slices=1]",
        "tpru[roles=4,slices=2]",
        "tpru[roles=8]",
    ]
    assert units(["unit=tpru[roles=8]"]) == ["tpru[roles=8]"]  # brackets are literal
    assert units(["unit=tpru[slices=2, roles=4]"]) == ["tpru[roles=4,slices=2]"]  # options in any order
    assert units(["unit=tpru[slices=2,roles=*]"]) == []  # a glob is matched as written
    assert units(["unit=*slices=2]"]) == ["tpru[roles=16,slices=2]", "tpru[roles=4,slices=2]"]
    assert units(["unit=?ru"]) == ["gru"]
    assert len(filter_cells(cells, ["unit=gru", "arch=bidaf", "dim=32"])) == 1  # AND-ed
    assert len(filter_cells(cells, ["task=studytest", "dim=16"])) == 14
    assert filter_cells(cells, ["unit=gru", "unit=lstm"]) == []
    one = cells[5]
    assert filter_cells(cells, [f"id={one.id}"]) == [one]
    assert one in filter_cells(cells, [f"id={one.id[:4]}*"])
    assert filter_cells(cells, []) == cells


@pytest.mark.parametrize(
    "pattern,expected",
    [
        ("units=tpru*", "--only 'units=tpru*': unknown key 'units' (did you mean 'unit'?)"),
        ("tpru", "--only 'tpru': expected KEY=GLOB"),
        ("=gru", "--only '=gru': expected KEY=GLOB"),
    ],
)
def test_filter_cells_errors(pattern: str, expected: str) -> None:
    cells = cells_of(BASE)
    with pytest.raises(StudyError) as info:
        filter_cells(cells, ["arch=plain", pattern])
    assert expected in str(info.value)


# --- the shipped study files ----------------------------------------------------------------


def _logic_task() -> type:
    try:
        return get_task("logic")
    except TaskError as exc:
        pytest.skip(f"the logic task adapter is not registered yet ({exc})")


def test_quickstart_study() -> None:
    _logic_task()
    study = load_study(STUDIES / "quickstart.toml")
    cells = expand(study)
    assert len(cells) == 8  # 1 task × 1 arch × 1 dim × (6 units + 2 grid)
    assert (study.trials, study.seeds, study.epochs) == (2, 3, 3)
    assert {c.data for c in cells} == {"generated"}
    assert expand(load_study(STUDIES / "quickstart.toml")) == cells


def test_logic_ablation_study(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _logic_task()
    monkeypatch.setenv("TPRBENCH_DATA", str(tmp_path))
    study = load_study(STUDIES / "logic-ablation.toml")
    cells = expand(study)
    assert len(cells) == 2 * 2 * (5 + 4 * 2)  # archs × dims × (lstm, gru, mod1-3 + roles × slices)
    assert {c.data for c in cells} == {f"{tmp_path}/logical_entailment"}
    assert study.resources.gpus == 0.25 and study.seeds == 3 and study.epochs == 90
    assert len(filter_cells(cells, ["unit=tpru[*", "arch=bidaf", "dim=128"])) == 8


@pytest.fixture
def stand_in_logic(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the real logic adapter is missing, a stand-in with the option names the studies use."""
    try:
        get_task("logic")
    except TaskError:
        monkeypatch.setitem(TASKS.entries, "logic", type("Logic", (FakeTask,), {"name": "logic"}))
    # when the real adapter exists, the shipped files are checked against its own Options


def test_shipped_studies_expand_with_stand_in(stand_in_logic: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPRBENCH_DATA", "/data")
    quick = expand(load_study(STUDIES / "quickstart.toml"))
    ablation = expand(load_study(STUDIES / "logic-ablation.toml"))
    assert len(quick) == 8 and len(ablation) == 52
    assert [c.label for c in quick][:3] == ["logic/plain/d16/lstm", "logic/plain/d16/gru", "logic/plain/d16/tpru-mod1[roles=8]"]
    assert quick[-1].label == "logic/plain/d16/tpru[roles=16]"
    assert not {c.id for c in quick} & {c.id for c in ablation}


def test_ablation_without_data_env_is_a_clear_error(stand_in_logic: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TPRBENCH_DATA", raising=False)
    with pytest.raises(StudyError, match=r"logic-ablation.toml: tasks\[0\].data: environment variable TPRBENCH_DATA is not set"):
        load_study(STUDIES / "logic-ablation.toml")


def test_docs_example_is_a_valid_study(stand_in_logic: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ```toml block of docs/study-files.md must load."""
    monkeypatch.setenv("TPRBENCH_DATA", "/data")
    doc = (ROOT / "docs" / "study-files.md").read_text()
    block = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    study = parse_study(textwrap.dedent(block), "docs/study-files.md")
    assert expand(study)


def test_docs_name_every_trainer_hyperparameter() -> None:
    """docs/study-files.md's `[search]` section names every field of `HParams` (min_lr, epoch_updates
    and data_order were added to the trainer without it)."""
    from tasks.hparams import HParams

    section = (ROOT / "docs" / "study-files.md").read_text().split("### `[search]`", 1)[1].split("| written |", 1)[0]
    assert [name for name in HParams.model_fields if f"`{name}`" not in section] == []


# -- the metric and the search names are checked when the study is read ---------------------


def test_a_metric_the_task_does_not_log_is_rejected() -> None:
    text = BASE.replace("epochs = 3", 'epochs = 3\nmetric = "valid_accuracy"')
    with pytest.raises(StudyError) as info:
        parse_study(text, "studies/t.toml")
    assert "study.metric: metric 'valid_accuracy' (did you mean 'valid_acc'?)" in str(info.value)


def test_metric_sets_the_cells_direction_as_the_task_declares_it() -> None:
    cells = expand(parse_study(BASE.replace("epochs = 3", 'epochs = 3\nmetric = "valid_loss"'), "t.toml"))
    assert {(c.metric, c.direction) for c in cells} == {("valid_loss", "minimize")}


def test_an_unknown_search_name_is_rejected_with_did_you_mean() -> None:
    text = BASE.replace("[search]", "[search]\ndroput = 0.1")
    with pytest.raises(StudyError) as info:
        parse_study(text, "studies/t.toml")
    assert "search.droput: unknown hyperparameter 'droput' (did you mean 'dropout'?)" in str(info.value)


def test_a_search_value_the_trainer_cannot_take_is_rejected() -> None:
    text = BASE.replace("[search]", '[search]\noptimizer = { choice = ["adam", "adamw"] }\nclip = -1.0')
    with pytest.raises(StudyError) as info:
        parse_study(text, "studies/t.toml")
    message = str(info.value)
    assert "search.optimizer: 'adamw'" in message and "search.clip: -1.0" in message


def test_cli_exits_2_naming_a_misspelled_search_name(tmp_path, capsys) -> None:
    from harness.cli import main

    path = tmp_path / "t.toml"
    path.write_text(BASE.replace("[search]", "[search]\nlrr = 0.1"))
    assert main(["study", "show", str(path), "--root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "search.lrr: unknown hyperparameter 'lrr' (did you mean 'lr'?)" in err and "Traceback" not in err


def test_a_task_entry_overrides_epochs_and_search_for_its_cells_only(tmp_path):
    """`[[tasks]] epochs` / `search` apply to that entry's cells; the other tasks' cells keep their
    ids (bAbI's qa3 on its 1k file: 10× the epochs and patience of the 10k tasks)."""
    from harness.study.cells import expand
    from harness.study.load import parse_study
    from harness.study.schema import StudyError

    base = """
[study]
name = "o"
trials = 0
seeds = 1
epochs = 3

[[tasks]]
name = "logic"
label = "a"
[tasks.options]
train_size = 8
{extra}
[matrix]
arch = ["plain"]
dim = [8]
units = ["gru"]

[search]
lr = 1e-2
"""
    plain = expand(parse_study(base.format(extra="")))
    both = expand(
        parse_study(
            base.format(
                extra='[[tasks]]\nname = "logic"\nlabel = "b"\nepochs = 30\n'
                "search = { lr = 2e-2, stop_patience = 5 }\n[tasks.options]\ntrain_size = 8\n"
            )
        )
    )
    a, b = both
    assert a.id == plain[0].id and (a.epochs, a.search["lr"]["value"]) == (3, 1e-2)
    assert (b.epochs, b.search["lr"]["value"], b.search["stop_patience"]["value"]) == (30, 2e-2, 5)
    assert b.id != a.id
    with pytest.raises(StudyError, match=r"search\.no_such_knob: unknown hyperparameter .*\(tasks\[1\]\)"):
        parse_study(base.format(extra='[[tasks]]\nname = "logic"\nlabel = "b"\nsearch = { no_such_knob = 1 }\n'))
