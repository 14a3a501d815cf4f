"""The record contract, guarded: its names are spelled in their owners only.

Every module of harness/, tasks/ and scripts/ is read with `ast` (nothing is imported, as in
tests/test_import_graph.py). Rules, each with the only modules allowed to break it:

- MLflow's client (`MlflowClient`, imported or named) is used in harness/record/ only: the writer
  (`Tracker`) and the readers (`RecordReader`, `TrackedRuns`, the sources) are the record's one
  way in and out;
- an MLflow run-status literal ("FINISHED", "KILLED", "FAILED", "RUNNING") appears in
  harness/record/contract.py only (`MlflowStatus`);
- a `tprbench.` tag literal (a string starting with `tprbench.`) appears in
  harness/record/contract.py only (`Tag`, `PREFIX`);
- a run-root layout literal ("mlflow.db", "mlflow.db.gz", "optuna.journal", "mlartifacts", alone
  or ending a path) appears in harness/record/layout.py only (`RunRoot`), and no other module
  joins a root's folder by hand (`root / "cache"`, `/ "work"`, `/ "locks"`, `/ "snapshots"`).

Docstrings are prose and are not read; messages and help texts that name a file inside a
sentence are not literals of the layout (only a string that *is* the name, or ends a path with
it, is). The few strings that look like a rule's but are something else are listed in `EXEMPT`,
each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("harness", "tasks", "scripts")

STATUS_LITERALS = {"FINISHED", "KILLED", "FAILED", "RUNNING"}
LAYOUT_NAMES = ("mlflow.db", "mlflow.db.gz", "optuna.journal", "mlartifacts")
LAYOUT_FOLDERS = ("cache", "work", "locks", "snapshots")  # joined onto a path: `root / "cache"`
TAG_PREFIX = "tprbench."

CONTRACT = "harness/record/contract.py"
LAYOUT = "harness/record/layout.py"
RECORD = "harness/record/"

#: (module, literal) → why it is not what the rule guards.
EXEMPT = {
    ("harness/record/storage.py", "RUNNING"): "Optuna's trial state RUNNING (TrialState), not an MLflow run status",
    ("tasks/registry.py", "tprbench.tasks"): "the entry-point group of plug-in tasks, not a tag",
    ("harness/record/summary.py", "tprbench.summary"): "a key of the summary file's parquet metadata, not a tag",
    ("harness/record/summary.py", "tprbench.tombstones"): "a key of the summary file's parquet metadata, not a tag",
}


def sources(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for top in TREES:
        for path in sorted((root / top).rglob("*.py")):
            out[path.relative_to(root).as_posix()] = path
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (module, class, function): prose, not literals."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def _is_layout_literal(text: str) -> bool:
    return any(text == name or text.endswith("/" + name) for name in LAYOUT_NAMES)


def _names(node: ast.AST) -> list[str]:
    """The names a node uses or imports (`MlflowClient`, `mlflow.MlflowClient`, `import … MlflowClient`)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [a.name.rpartition(".")[2] for a in node.names]
    return []


def _joined_folder(node: ast.AST) -> str | None:
    """`<path> / "cache"` (a root's folder joined by hand): the folder's name, else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant):
        return node.right.value if node.right.value in LAYOUT_FOLDERS else None
    return None


def _literal_breaches(rel: str, text: str) -> list[str]:
    if (rel, text) in EXEMPT:
        return []
    out = []
    if text in STATUS_LITERALS and rel != CONTRACT:
        out.append(f"MLflow status literal {text!r} (use harness.record.contract.MlflowStatus)")
    if text.startswith(TAG_PREFIX) and rel != CONTRACT:
        out.append(f"tag literal {text!r} (use harness.record.contract.Tag)")
    if _is_layout_literal(text) and rel != LAYOUT:
        out.append(f"run-root layout literal {text!r} (use harness.record.layout)")
    return out


def violations(root: Path = ROOT) -> list[str]:
    """Every breach of the rules in the modules under `root` (`module:line: what`)."""
    out = []
    for rel, path in sources(root).items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if "MlflowClient" in _names(node) and not rel.startswith(RECORD):
                out.append(f"{where}: MlflowClient outside harness/record/ (read through harness.record.reader, write through Tracker)")
            folder = _joined_folder(node)
            if folder is not None and rel != LAYOUT:
                out.append(f"{where}: a run root's folder joined by hand (/ {folder!r}: use harness.record.layout.RunRoot)")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                out += [f"{where}: {what}" for what in _literal_breaches(rel, node.value)]
    return out


def test_the_record_contract_is_spelled_in_its_owners_only() -> None:
    found = violations()
    assert not found, "\n".join(found)


def test_every_exemption_is_still_needed() -> None:
    """An exemption whose literal is gone is removed from the list."""
    files = sources()
    for (rel, literal), _why in EXEMPT.items():
        assert rel in files, rel
        tree = ast.parse(files[rel].read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.Constant) and n.value == literal for n in ast.walk(tree)), (rel, literal)


def test_the_guard_catches_each_rule(tmp_path: Path) -> None:
    """Each rule on a module written to break it (and the owners allowed to spell their names)."""
    (tmp_path / "harness" / "record").mkdir(parents=True)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "harness" / "bad.py").write_text(
        '"""A docstring may say mlflow.db, FINISHED and tprbench.status."""\n'
        "from mlflow import MlflowClient\n"
        "def f(client, root):\n"
        '    client.set_terminated("r", "KILLED")\n'
        '    return {"tprbench.status": 1}, root / "mlflow.db", f"journal://{root}/optuna.journal", root / "cache"\n'
    )
    (tmp_path / "harness" / "record" / "contract.py").write_text('KILLED = "KILLED"\nSTATUS = "tprbench.status"\n')
    (tmp_path / "harness" / "record" / "layout.py").write_text('DB = "mlflow.db"\n')
    (tmp_path / "harness" / "record" / "writer.py").write_text("from mlflow import MlflowClient\n")
    found = violations(tmp_path)
    assert sorted(f.split(": ", 1)[0] for f in found) == ["harness/bad.py:2", "harness/bad.py:4"] + ["harness/bad.py:5"] * 4, found
    text = "\n".join(found)
    for what in ("MlflowClient", "'KILLED'", "'tprbench.status'", "'mlflow.db'", "'/optuna.journal'", "/ 'cache'"):
        assert what in text, (what, text)
