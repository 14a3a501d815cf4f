"""Security defaults (docs/security.md): checkpoints load as weights only, study files are data,
anything served binds 127.0.0.1."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
import torch

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {"tests", ".venv", "runs", ".git", "reports", "build", "dist", "node_modules", "__pycache__"}


def project_sources() -> list[Path]:
    """Every Python file of the project itself (not tests, the virtualenv or run directories)."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.startswith(".") or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        out.append(path)
    return out


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, _dotted(node.func)


def _token_count(text: str, code: str) -> int:
    """How often `code` (e.g. "torch.load(") occurs in the source outside strings and comments."""
    import io
    import tokenize

    kept = [
        tok.string
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type not in (tokenize.STRING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        and not tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1)
    ]
    return "".join(kept).count(code)


def test_project_sources_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in project_sources()}
    assert "tasks/training.py" in names and "harness/cli.py" in names
    assert not any(n.startswith(("tests/", ".venv/")) for n in names)


# ---------------------------------------------------------------------------------------------
# Checkpoints: weights_only=True everywhere, and a code-carrying file is refused


def test_every_torch_load_is_weights_only() -> None:
    found, bad = 0, []
    for path in project_sources():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, str(path))
        calls = 0
        for node, name in _calls(tree):
            if name in ("torch.load", "torch.serialization.load"):
                calls += 1
                ok = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords)
                if not ok:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if name in (
                "pickle.load",
                "pickle.loads",
                "dill.load",
                "dill.loads",
                "cloudpickle.load",
                "cloudpickle.loads",
                "yaml.load",
                "torch.jit.load",
                "joblib.load",
                "numpy.load",
                "np.load",
            ):
                if name in ("numpy.load", "np.load") and not any(
                    k.arg == "allow_pickle" and getattr(k.value, "value", None) is True for k in node.keywords
                ):
                    continue
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
        # A token-level grep as well (strings and comments left out): a call the AST check missed shows here.
        assert _token_count(text, "torch.load(") == calls, path
        assert not re.search(r"from\s+torch\s+import\s+[^\n]*\bload\b", text), path
        found += calls
    assert not bad, f"torch.load without weights_only=True (or an unpickler) at: {bad}"
    assert found >= 1  # tasks/training.py loads checkpoints


def test_no_eval_or_exec_in_the_project() -> None:
    """Nothing a user writes (study values, specs, data) can reach eval/exec: the project calls neither."""
    bad = []
    for path in project_sources():
        for node, name in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            if name in ("eval", "exec", "builtins.eval", "builtins.exec", "compile"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not bad, bad


class _Payload:
    """Pickles to a call of os.system: unpickling it without weights_only would create `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _evil(path: Path, marker: Path, **extra) -> None:
    torch.save({"fingerprint": "x", "model": {"w": torch.zeros(1)}, "payload": _Payload(marker), **extra}, path)


def test_the_payload_really_runs_without_weights_only(tmp_path: Path) -> None:
    """The crafted file is dangerous: a plain torch.load(weights_only=False) creates the marker."""
    marker, path = tmp_path / "MARKER", tmp_path / "evil.pt"
    _evil(path, marker)
    torch.load(path, weights_only=False)
    assert marker.exists()


@pytest.fixture(scope="module")
def logic_adapter(tmp_path_factory):
    from tasks.registry import get_task

    cache = tmp_path_factory.mktemp("sec-cache")
    adapter = get_task("logic")({"train_size": 40, "eval_size": 8}, "generated", cache)
    adapter.prepare()
    return adapter


def _config(unit: str = "gru"):
    from tasks.training import TrainConfig

    return TrainConfig(unit=unit, arch="plain", dim=8, input_dim=8, epochs=1, seed=0, hparams={"batch_size": 16})


def test_train_refuses_a_code_carrying_checkpoint(tmp_path: Path, logic_adapter) -> None:
    from tasks.checkpoint import CheckpointRefused
    from tasks.result import CHECKPOINT
    from tasks.training import train

    marker, run_dir = tmp_path / "MARKER", tmp_path / "run"
    run_dir.mkdir()
    _evil(run_dir / CHECKPOINT, marker)
    with pytest.raises(CheckpointRefused) as info:
        train(logic_adapter, _config(), run_dir, device="cpu")
    message = str(info.value)
    assert message.startswith(f"{run_dir / CHECKPOINT}: refused to load") and "\n" not in message
    assert "weights_only=True" in message
    assert type(info.value).user_error is True
    assert not marker.exists()


def test_load_best_model_refuses_a_code_carrying_file(tmp_path: Path, logic_adapter) -> None:
    from tasks.checkpoint import CheckpointRefused
    from tasks.result import BEST_WEIGHTS
    from tasks.training import load_best_model

    marker, run_dir = tmp_path / "MARKER", tmp_path / "run"
    run_dir.mkdir()
    torch.save({"w": _Payload(marker)}, run_dir / BEST_WEIGHTS)
    with pytest.raises(CheckpointRefused, match=re.escape(f"{run_dir / BEST_WEIGHTS}: refused to load")):
        load_best_model(logic_adapter, _config(), run_dir)
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["garbled", "truncated", "empty"])
def test_a_corrupt_checkpoint_is_set_aside_and_the_run_restarts(tmp_path: Path, logic_adapter, damage) -> None:
    """Unreadable (not hostile): moved to checkpoint.pt.corrupt-<time>, one line says so, the run
    trains from scratch and ends as an undisturbed run would."""
    from tasks.result import CHECKPOINT
    from tasks.training import train

    clean = train(logic_adapter, _config(), tmp_path / "clean", device="cpu")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good = (tmp_path / "clean" / CHECKPOINT).read_bytes()
    data = {"garbled": b"\x80\x02not a checkpoint at all", "truncated": good[: len(good) // 2], "empty": b""}[damage]
    (run_dir / CHECKPOINT).write_bytes(data)
    lines: list[str] = []
    result = train(logic_adapter, _config(), run_dir, device="cpu", notice=lines.append)
    assert len(lines) == 1 and str(run_dir / CHECKPOINT) in lines[0] and "restarting the run" in lines[0], lines
    aside = list(run_dir.glob(CHECKPOINT + ".corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == data
    assert result.status == "finished" and result.best_valid == clean.best_valid
    assert result.test == clean.test and lines[0] in result.notes


def test_cli_train_refuses_it_with_exit_2(tmp_path: Path, capsys) -> None:
    """Through `tprbench train --run-dir`: one error line, exit 2, marker absent."""
    marker, run_dir = tmp_path / "MARKER", tmp_path / "run"
    run_dir.mkdir()
    _evil(run_dir / "checkpoint.pt", marker)
    code = main(
        [
            "train",
            "--unit",
            "gru",
            "--dim",
            "8",
            "--epochs",
            "1",
            "--run-dir",
            str(run_dir),
            "--root",
            str(tmp_path / "root"),
            "--set",
            "train_size=40",
            "--set",
            "eval_size=8",
            "--device",
            "cpu",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists()
    assert err.splitlines() == [err.rstrip("\n")] and f"{run_dir / 'checkpoint.pt'}: refused to load" in err


def test_real_checkpoints_still_resume(tmp_path: Path, logic_adapter) -> None:
    """The refusal is specific: what `train` itself writes loads back (resume, best model)."""
    from tasks.training import load_best_model, train

    config = _config()
    first = train(logic_adapter, config, tmp_path / "run", device="cpu")
    assert first.status == "finished"
    (tmp_path / "run" / "result.json").unlink()  # force a resume from checkpoint.pt
    again = train(logic_adapter, config, tmp_path / "run", device="cpu")
    assert again.resumed_from_epoch == 1 and again.best_valid == first.best_valid
    assert load_best_model(logic_adapter, config, tmp_path / "run") is not None


# ---------------------------------------------------------------------------------------------
# Study files are data: no value is ever evaluated; the one code path is a unit import path

TEMPLATE = """\
[study]
name = "sec"
description = "a study"
trials = 1
seeds = 1
epochs = 1
metric = "valid_acc"
direction = "maximize"

[[tasks]]
name = "logic"
label = "logic"
data = "generated"
[tasks.options]
pooling = "max"
preset = "easy"

[matrix]
arch = ["plain"]
dim = [8]
units = ["gru", "tpru[roles=4,impl=loop]"]

[[matrix.grid]]
unit = "tpru"
roles = [2]
impl = ["loop"]

[search]
lr = { log_uniform = [1e-3, 1e-2] }
optimizer = "adam"
batch_size = { choice = [16, 32] }
threshold_metric = "valid_loss"

[pruner]
kind = "median"
"""

STRING = re.compile(r'"[^"\n]*"')


def _payloads(marker: Path) -> list[str]:
    return [
        f"__import__('os').system('touch {marker}')",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"{{{{__import__('os').system('touch {marker}')}}}}",
        f"!!python/object/apply:os.system ['touch {marker}']",
    ]


def _variants(marker: Path) -> list[tuple[str, str]]:
    """The template with one string value at a time (then all at once) replaced by each payload."""
    strings = STRING.findall(TEMPLATE)
    assert len(strings) >= 15  # every string field of the template
    out = []
    for payload in _payloads(marker):
        literal = '"' + payload.replace("\\", "\\\\") + '"'
        for match in STRING.finditer(TEMPLATE):
            out.append((f"{match.group(0)}→payload", TEMPLATE[: match.start()] + literal + TEMPLATE[match.end() :]))
        out.append(("all strings→payload", STRING.sub(lambda _m, lit=literal: lit, TEMPLATE)))
        out.append(("payload as a key", TEMPLATE.replace("[search]\n", f"[search]\n{literal} = 1\n")))
    return out


def test_no_study_value_is_ever_evaluated(tmp_path: Path, capsys) -> None:
    from harness.study.cells import expand
    from harness.study.load import parse_study
    from harness.study.schema import StudyError

    marker = tmp_path / "MARKER"
    variants = _variants(marker)
    accepted = 0
    for what, text in variants:
        try:
            study = parse_study(text, tmp_path / "sec.toml")
        except StudyError:
            continue  # refused as data (a name that is not a task, a spec that does not parse, ...)
        cells = expand(study)
        for cell in cells:
            cell.as_dict(), cell.label, cell.id
        accepted += 1
        assert not marker.exists(), what
    assert not marker.exists()
    # description, data and a free-form string hyperparameter are accepted as plain strings; the
    # metric, names and typed hyperparameters are checked when the file is read (so rejected).
    assert accepted >= 5


def test_no_study_value_is_evaluated_by_tprbench_run(tmp_path: Path, capsys, monkeypatch) -> None:
    """The same through `tprbench run` up to dispatch (the study driver itself is stubbed out)."""
    import harness.driver.runner
    import harness.report

    seen = []
    monkeypatch.setattr(
        harness.driver.runner.StudyRunner, "run", lambda self, **kw: seen.append(self.cells) or {"seconds": 0.0, "cells": 0, "states": {}}
    )
    monkeypatch.setattr(harness.report, "print_summary", lambda *a, **k: None)
    marker = tmp_path / "MARKER"
    codes = []
    for what, text in _variants(marker)[: len(STRING.findall(TEMPLATE)) + 2]:
        path = tmp_path / "sec.toml"
        path.write_text(text)
        codes.append(main(["run", str(path), "--root", str(tmp_path / "runs")]))
        err = capsys.readouterr().err
        assert codes[-1] in (0, 2) and "Traceback" not in err, (what, err)
        assert not marker.exists(), what
    assert codes.count(0) >= 2 and len(seen) == codes.count(0)  # description, threshold_metric


def test_a_data_path_payload_is_only_a_path(tmp_path: Path, capsys, monkeypatch) -> None:
    """`data` goes through ${VAR} expansion only (no shell): a payload in it or in an env var is a path."""
    marker = tmp_path / "MARKER"
    monkeypatch.setenv("TPRB_SEC_PAYLOAD", f"$(touch {marker})")
    for data in (f"$(touch {marker})", "${TPRB_SEC_PAYLOAD}/x", f"`touch {marker}`"):
        text = TEMPLATE.replace('data = "generated"', f'data = "{data}"')
        path = tmp_path / "data.toml"
        path.write_text(text)
        code = main(["run", str(path), "--root", str(tmp_path / "runs")])
        err = capsys.readouterr().err
        assert code == 2 and "logic data: directory" in err and "not found" in err, err
    assert not marker.exists()


def test_the_only_code_path_is_a_unit_import_path(tmp_path: Path, monkeypatch) -> None:
    """Documented: a unit named by import path is imported (its module runs) when the study is read."""
    from harness.study.load import parse_study

    marker = tmp_path / "IMPORTED"
    (tmp_path / "tprb_sec_unit.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
        "from torch import nn\n"
        "class Cell(nn.Module):\n"
        "    def __init__(self, input_size, hidden_size):\n"
        "        super().__init__()\n"
        "        self.rnn, self.output_size = nn.GRU(input_size, hidden_size, batch_first=True), hidden_size\n"
        "    def forward(self, x, mask=None):\n"
        "        out, h = self.rnn(x)\n"
        "        return out, h[-1]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    text = TEMPLATE.replace('units = ["gru", "tpru[roles=4,impl=loop]"]', 'units = ["gru", "tprb_sec_unit:Cell"]')
    study = parse_study(text, tmp_path / "imp.toml")
    assert marker.exists()
    assert any(u.spec == "tprb_sec_unit:Cell" for u in study.units)
    doc = (ROOT / "docs" / "security.md").read_text()
    assert "import path" in doc and "trust" in doc


# ---------------------------------------------------------------------------------------------
# Servers bind 127.0.0.1


def test_mlflow_ui_hint_binds_localhost(tmp_path: Path, capsys, monkeypatch) -> None:
    """`tprbench run` prints the `mlflow ui` command to watch a study: it binds 127.0.0.1."""
    import harness.driver.runner
    import harness.report

    monkeypatch.setattr(harness.driver.runner.StudyRunner, "run", lambda self, **kw: {"cells": len(self.cells), "seconds": 0.0, "states": {}})
    monkeypatch.setattr(harness.report, "print_summary", lambda *a, **k: None)
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal must not break the command over lines
    path = tmp_path / "s.toml"
    path.write_text(TEMPLATE)
    assert main(["run", str(path), "--root", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    hints = [line for line in out.splitlines() if "mlflow ui" in line]
    assert hints, out
    for line in hints:
        assert "--host 127.0.0.1" in line, line
        assert "0.0.0.0" not in line


def test_ray_is_started_without_a_dashboard(monkeypatch) -> None:
    """A local Ray starts no dashboard (no HTTP server); connecting to a cluster starts nothing."""
    import ray

    import harness.driver.ray_start

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    harness.driver.ray_start.init_ray(None, 1)
    assert calls[-1]["include_dashboard"] is False
    assert calls[-1].get("dashboard_host", "127.0.0.1") == "127.0.0.1"
    harness.driver.ray_start.init_ray("ray://head:10001")
    assert calls[-1]["address"] == "ray://head:10001" and "dashboard_host" not in calls[-1]


def _argv_hosts(node: ast.List | ast.Tuple, rel: Path) -> list[str]:
    """'--host' elements of an argv list not followed by a loopback address."""
    bad = []
    for here, after in zip(node.elts, [*node.elts[1:], None]):
        if isinstance(here, ast.Constant) and here.value == "--host":
            if not (isinstance(after, ast.Constant) and after.value in ("127.0.0.1", "localhost")):
                bad.append(f"{rel}:{here.lineno}: '--host' not followed by 127.0.0.1")
    return bad


#: Constructors whose `host=` is the machine a run ran on, as the record keeps it
#: (harness/record/contract.py WorkerInfo), not an address anything listens on.
RECORDED_HOSTS = {"WorkerInfo"}


def _called(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def test_everything_served_binds_localhost() -> None:
    """No 0.0.0.0 anywhere; every host= / dashboard_host= / --host in the project is 127.0.0.1."""
    bad = []
    for path in project_sources():
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        if "0.0.0.0" in text:
            bad.append(f"{rel}: 0.0.0.0")
        tree = ast.parse(text)
        recorded = {  # `host=` of a record's where-it-ran field names a machine; nothing binds to it
            id(kw) for call in ast.walk(tree) if isinstance(call, ast.Call) and _called(call) in RECORDED_HOSTS for kw in call.keywords
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and id(node) in recorded:
                continue
            if isinstance(node, ast.keyword) and node.arg in ("host", "dashboard_host", "ray_client_server_host"):
                if not (isinstance(node.value, ast.Constant) and node.value.value in ("127.0.0.1", "localhost")):
                    bad.append(f"{rel}:{node.value.lineno}: {node.arg}=")
            if isinstance(node, (ast.List, ast.Tuple)):  # an argv list: "--host", "127.0.0.1"
                bad += _argv_hosts(node, rel)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "--host" in node.value:
                if node.value != "--host" and "--host 127.0.0.1" not in node.value:  # "--host" alone: the argv check above
                    bad.append(f"{rel}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.JoinedStr):
                pieces = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
                if "--host" in pieces and "--host 127.0.0.1" not in pieces:
                    bad.append(f"{rel}:{node.lineno}: f-string with --host")
    assert not bad, bad
    init = (ROOT / "harness" / "driver" / "ray_start.py").read_text()
    assert "include_dashboard=False" in init
