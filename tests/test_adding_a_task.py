"""docs/adding-a-task.md's example task, executed: in-process (train, tprbench tasks/train), and
as a third-party task in a real study on Ray — once by import path, once by entry point — with
nothing of it inside the repository.

The example's code is read from the Markdown (the first ```python block), so the page cannot
drift from what works.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "adding-a-task.md"
MODULE = "tprb_contains7"


def example_code() -> str:
    match = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert match, "docs/adding-a-task.md has no python example"
    return match.group(1)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    """The example as a user's own module, plus an installed distribution advertising it."""
    root = tmp_path_factory.mktemp("plugin")
    (root / f"{MODULE}.py").write_text(example_code())
    info = root / "tprb_contains7-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tprb-contains7\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[tprbench.tasks]\ncontains7 = {MODULE}:Contains7\n")
    return root


@pytest.fixture
def importable(plugin_dir, monkeypatch):
    from tasks.registry import TASKS

    monkeypatch.syspath_prepend(str(plugin_dir))
    TASKS.load_builtins()  # before the snapshot: the teardown must not forget the built-ins
    monkeypatch.setattr(TASKS, "entry_points_loaded", False)
    before = dict(TASKS.entries)
    yield plugin_dir
    for name in set(TASKS.entries) - set(before):
        TASKS.remove(name)


def test_the_example_trains_in_process(importable, tmp_path):
    from tasks.registry import get_task
    from tasks.training import TrainConfig, train

    cls = get_task(f"{MODULE}:Contains7")
    assert cls.name == f"{MODULE}:Contains7"
    assert get_task("contains7") is cls  # the entry point names the same class
    adapter = cls({"train_size": 256, "eval_size": 64}, "generated", tmp_path)
    result = train(adapter, TrainConfig("gru", "plain", 16, 8, epochs=3, seed=0, hparams={"dropout": 0.1}))
    assert result.status == "finished" and result.hparams["lr"] == 1e-2 and result.hparams["dropout"] == 0.1
    assert result.best_valid > 0.6, result.history  # 'contains a 7' is learnable in 3 epochs
    assert set(result.test) == {"test"}


def test_a_class_that_is_not_an_adapter_is_refused(importable):
    from tasks.errors import TaskError
    from tasks.registry import get_task

    with pytest.raises(TaskError, match="is not a subclass of tasks.base.TaskAdapter"):
        get_task(f"{MODULE}:SequenceClassifier")
    with pytest.raises(TaskError, match="did you mean 'contains7'"):
        get_task("contains8")


def test_cli_tasks_and_train_find_it(importable, tmp_path, capsys):
    from harness.cli import main

    assert main(["tasks", "contains7", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["tasks"][0]
    assert info["archs"] == ["plain"] and info["study_metric"] == "valid_acc"
    assert {o["name"] for o in info["options"]} == {"train_size", "eval_size", "max_len", "data_seed"}
    code = main(
        [
            "train",
            "--task",
            f"{MODULE}:Contains7",
            "--unit",
            "gru",
            "--dim",
            "8",
            "--epochs",
            "1",
            "--root",
            str(tmp_path),
            "--set",
            "train_size=64",
            "--set",
            "eval_size=16",
        ]
    )
    assert code == 0  # --arch defaults to the task's first architecture


STUDY = """
[study]
name = "thirdparty"
trials = 0
seeds = 1
epochs = 1

[[tasks]]
name = "{module}:Contains7"
label = "by-path"
data = "generated"
[tasks.options]
train_size = 128
eval_size = 32

[[tasks]]
name = "contains7"
label = "by-entry-point"
data = "generated"
[tasks.options]
train_size = 96
eval_size = 32

[matrix]
dim = [8]
units = ["gru"]

[search]
lr = 0.01

[resources]
cpus = 1
"""


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_third_party_task_runs_in_a_study(plugin_dir, tmp_path):
    """`tprbench run` in a subprocess whose PYTHONPATH holds the plug-in (as a user's install
    would): the driver and the Ray workers find the task by import path and by entry point."""
    study = tmp_path / "thirdparty.toml"
    study.write_text(STUDY.format(module=MODULE))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin_dir), str(ROOT)]), RAY_TMPDIR=_short_tmp())
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(study), "--root", str(tmp_path / "runs"), "--quiet", "--num-cpus", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from harness.record.reader import RecordReader

    runs = RecordReader(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}", "thirdparty").runs()
    assert sorted(runs["label"]) == ["by-entry-point/plain/d8/gru", "by-path/plain/d8/gru"]
    assert set(runs["status"]) == {"finished"}
    assert runs["metric.test_test_acc"].notna().all()


def _short_tmp() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="tprt", dir="/tmp")


def test_doc_names_every_contract_method():
    text = DOC.read_text()
    for name in (
        "prepare()",
        "train_batches",
        "eval_batches",
        "build_model",
        "loss(model, batch)",
        "loss_with_carry",
        "metrics_from_counts",
        "check_data()",
        "valid_split",
        "test_splits",
        "Options",
        "metrics",
        "defaults",
        "HParams",
        "tprbench.tasks",
        "aux_loss" if "aux_loss" in text else "mask",
    ):
        assert name in text, name
    assert textwrap.dedent(example_code()).startswith('"""contains7')
