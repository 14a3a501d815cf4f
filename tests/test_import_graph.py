"""The import graph: units → tasks → harness, no arrow back, and no import cycle.

Every module's imports are read with `ast` (nothing is imported): those at module level, and
those inside functions (the lazy ones). Two rules:

- layering: `units/` imports neither `tasks/` nor `harness/`, and `tasks/` does not import
  `harness/` — not even lazily, inside a function; inside `harness/`, its packages (and the
  modules at its root) are layered too (`HARNESS_LAYERS`), each importing only lower layers;
- no cycle at module level anywhere (a circle there is an import-order bug waiting to happen),
  and none in `units/` and `tasks/` even counting the imports inside functions (a lazy import
  that closes a circle only hides it). Cycles are found with Tarjan's strongly connected
  components, whose own check on synthetic graphs is below.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("units", "tasks", "harness")  # each may import only those before it
#: harness's own layers, lowest first: a module may import its own package and the layers
#: before its own, never a later layer nor another package of its own layer (those are peers that
#: know nothing of each other). Each entry names a package under harness/ or a module at its root.
HARNESS_LAYERS: tuple[tuple[str, ...], ...] = (
    ("diskfull", "faults"),  # out of disk space in one line; the fault points tests kill at
    ("study",),  # study files → a validated Study → Cells (units and tasks only)
    ("record",),  # the MLflow record and the Optuna storage: contract, writer, reader, guard
    ("report", "transfer"),  # tables and figures from the record; a trained run on another task
    ("analysis", "driver"),  # gradients and interpretation of recorded runs; the study driver
    ("bench",),  # benchmarks of the harness, the record's scaling and training speed
    ("commands",),  # one module per CLI subcommand (+ support/)
    ("cli",),  # `tprbench`: loads the commands by name
)
#: Packages in which even function-level imports may not close a circle.
NO_HIDDEN_CYCLES = ("units", "tasks", "harness")


def modules() -> dict[str, Path]:
    out = {}
    for top in LAYERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _resolve(node: ast.Import | ast.ImportFrom, me: str, is_package: bool, known: Mapping[str, Path]) -> list[str]:
    """The project modules an import statement names (the deepest known module of each name)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = me.split(".") if is_package else me.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != me:
            out.append(name)
    return out


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


@functools.cache
def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level imports, function-level imports) of every project module."""
    known = modules()
    top: dict[str, set[str]] = {m: set() for m in known}
    inner: dict[str, set[str]] = {m: set() for m in known}

    def visit(node: ast.AST, me: str, is_package: bool, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                continue  # annotations only: never executed
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inner if in_function else top)[me].update(_resolve(child, me, is_package, known))
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, me, is_package, nested)

    for name, path in known.items():
        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), name, path.name == "__init__.py", False)
    return top, inner


class _Tarjan:
    """Tarjan's strongly connected components, iterative (no recursion limit on long chains)."""

    def __init__(self, graph: Mapping[str, Iterable[str]]) -> None:
        self.graph = graph
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.found: list[list[str]] = []

    def _enter(self, node: str, work: list) -> None:
        self.index[node] = self.low[node] = len(self.index)
        self.stack.append(node)
        self.on_stack.add(node)
        work.append((node, iter(self.graph.get(node, ()))))

    def _leave(self, node: str) -> None:
        if self.low[node] != self.index[node]:
            return
        component = []
        while True:
            member = self.stack.pop()
            self.on_stack.discard(member)
            component.append(member)
            if member == node:
                break
        if len(component) > 1 or node in self.graph.get(node, ()):
            self.found.append(sorted(component))

    def visit(self, root: str) -> None:
        work: list = []
        self._enter(root, work)
        while work:
            node, edges = work[-1]
            nxt = next((n for n in edges if n not in self.index or n in self.on_stack), None)
            if nxt is not None and nxt not in self.index:
                self._enter(nxt, work)
                continue
            if nxt is not None:  # an edge back into the current component
                self.low[node] = min(self.low[node], self.index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                self.low[parent] = min(self.low[parent], self.low[node])
            self._leave(node)


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import cycles of a graph: its strongly connected components of more than one node,
    plus any node that imports itself."""
    tarjan = _Tarjan(graph)
    for node in graph:
        if node not in tarjan.index:
            tarjan.visit(node)
    return sorted(tarjan.found)


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": []}) == []
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert cycles({"a": ["a"]}) == [["a"]]
    two = cycles({"a": ["b"], "b": ["a"], "c": ["d"], "d": ["e"], "e": ["c", "a"]})
    assert two == [["a", "b"], ["c", "d", "e"]]
    # deep chains do not hit Python's recursion limit (the finder is iterative)
    chain = {str(i): [str(i + 1)] for i in range(sys.getrecursionlimit() + 100)}
    assert cycles(chain) == []
    chain[str(len(chain))] = ["0"]
    assert len(cycles(chain)[0]) == len(chain)


def test_the_graph_reader_sees_module_and_function_level_imports() -> None:
    top, inner = import_graph()
    assert "harness.record.contract" in top["harness.record.reader"]  # from .contract import …
    assert "tasks.result" in top["harness.record.contract"]  # from tasks.result import …
    assert "tasks.training" in inner["harness.driver.worker"]  # inside run_job: the lazy torch import
    assert "harness.report.render" in inner["harness.driver.progress"]  # from ..report.render, in a function
    assert len(top) > 100


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def test_units_tasks_harness_with_no_arrow_back() -> None:
    top, inner = import_graph()
    back = sorted(f"{m} → {t}" + (" (inside a function)" if t not in top[m] else "") for m in top for t in top[m] | inner[m] if _layer(t) > _layer(m))
    assert not back, "imports against the layering units → tasks → harness:\n" + "\n".join(back)


def _harness_part(module: str) -> str | None:
    """The package under harness/ (or module at its root) a harness module belongs to; None for
    harness/__init__.py itself and for modules outside harness."""
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 else None


def _harness_layer(part: str) -> int:
    return next(i for i, layer in enumerate(HARNESS_LAYERS) if part in layer)


def test_every_part_of_harness_has_a_layer() -> None:
    top, _ = import_graph()
    parts = {p for m in top if (p := _harness_part(m))}
    listed = [p for layer in HARNESS_LAYERS for p in layer]
    assert len(listed) == len(set(listed)), "a part of harness named in two layers"
    assert parts == set(listed), f"HARNESS_LAYERS and harness/ differ: not placed {sorted(parts - set(listed))}, gone {sorted(set(listed) - parts)}"


def test_harness_layers_with_no_arrow_up_or_sideways() -> None:
    """Inside harness, a module imports only its own package and lower layers — counting the
    imports inside functions: a lazy import against the order is the same dependency, deferred."""
    top, inner = import_graph()
    wrong = []
    for m in top:
        mine = _harness_part(m)
        if mine is None:
            continue
        for t in top[m] | inner[m]:
            theirs = _harness_part(t)
            if theirs is None or theirs == mine:
                continue
            if _harness_layer(theirs) >= _harness_layer(mine):
                how = "a later layer" if _harness_layer(theirs) > _harness_layer(mine) else "a peer of its layer"
                wrong.append(f"{m} → {t} ({how}" + (", inside a function)" if t not in top[m] else ")"))
    assert not wrong, "imports against harness's layers (HARNESS_LAYERS):\n" + "\n".join(sorted(wrong))


def test_the_layer_check_sees_an_import_against_the_order() -> None:
    assert _harness_layer("record") < _harness_layer("driver") < _harness_layer("commands") < _harness_layer("cli")
    assert _harness_layer("report") == _harness_layer("transfer")  # peers: neither may import the other
    assert _harness_part("harness.driver.plan") == "driver" and _harness_part("harness.faults") == "faults"
    assert _harness_part("harness") is None and _harness_part("tasks.result") is None


def test_no_import_cycle_at_module_level() -> None:
    top, _ = import_graph()
    found = cycles(top)
    assert not found, "import cycles at module level:\n" + "\n".join(" → ".join(c) for c in found)


@pytest.mark.parametrize("package", NO_HIDDEN_CYCLES)
def test_no_import_cycle_hidden_in_a_function(package: str) -> None:
    top, inner = import_graph()
    mine = {m: {t for t in top[m] | inner[m] if t.split(".")[0] == package} for m in top if m.split(".")[0] == package}
    found = cycles(mine)
    assert not found, "import cycles through imports inside functions:\n" + "\n".join(" → ".join(c) for c in found)
