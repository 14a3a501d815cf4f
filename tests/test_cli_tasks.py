"""`tprbench tasks`: every registered task with its architectures, options, layouts and metric."""

from __future__ import annotations

import json

from harness.cli import main
from tasks.registry import available_tasks, get_task


def test_tasks_json_lists_every_registered_task(capsys) -> None:
    assert main(["tasks", "--json"]) == 0
    tasks = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tasks"]}
    assert set(tasks) == set(available_tasks()) and "logic" in tasks
    for name, info in tasks.items():
        cls = get_task(name)
        assert info["archs"] == list(cls.archs)
        assert info["direction"] in ("maximize", "minimize")
        assert [o["name"] for o in info["options"]] == list(cls.Options.model_fields)
        assert info["layouts"] and all(isinstance(x, str) and x for x in info["layouts"])
    logic = tasks["logic"]
    assert logic["archs"] == ["plain", "bidaf"]
    assert (logic["metric"], logic["study_metric"], logic["direction"]) == ("acc", "valid_acc", "maximize")
    options = {o["name"]: o for o in logic["options"]}
    assert options["train_size"] == {
        "name": "train_size",
        "type": "int",
        "default": 100000,
        "required": False,
        "description": "generated training pairs (when the data has no train.txt)",
    }
    assert options["max_len"]["type"] == "int | None" and options["max_len"]["default"] is None
    assert options["pooling"]["type"] == "'max' | 'last' | 'mean'" and options["pooling"]["default"] == "max"
    assert "validate.txt" in logic["layouts"][0]
    assert logic["defaults"]["lr"] == 1e-3


def test_tasks_table(capsys) -> None:
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for text in ("logic", "plain, bidaf", "valid_acc", "maximize", "train_size", "100000", "svp", "[tasks.options]", "DeepMind"):
        assert text in out, text


def test_tasks_one_name_and_an_unknown_one(capsys) -> None:
    assert main(["tasks", "logic", "--json"]) == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)["tasks"]] == ["logic"]
    assert main(["tasks", "logik"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tprbench tasks: error: unknown task 'logik'; did you mean 'logic'")
    assert err.endswith(f"(available: {', '.join(available_tasks())})\n") and err.count("\n") == 1


def test_train_defaults_arch_to_the_tasks_first(tmp_path, capsys):
    """`tprbench train --task lm` used to fail with "task 'lm' has no architecture 'plain'"."""
    from harness.cli import main

    code = main(["train", "--task", "lm", "--unit", "gru", "--data", str(tmp_path / "no-corpus"), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "architecture" not in err and "corpus folder" in err
