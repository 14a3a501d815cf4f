"""One registry for everything tprbench looks up by name: units here, tasks in tasks/registry.py.

    UNITS = Registry("unit", "tprbench.units", builtins=..., base=..., error=UnitSpecError)
    @UNITS.register("gru")                       # a built-in, registered when its module is imported
    class GRU(...): ...
    UNITS.lookup("gru")                          # built-ins are imported on the first lookup (lazily)
    UNITS.lookup("mypkg.cells:MyCell")           # an import path: `package.module:Class`
    UNITS.lookup("elman")                        # an installed package's entry point (group tprbench.units)
    UNITS.lookup("gur")                          # error: unknown unit 'gur'; did you mean 'gru'?
    UNITS.meta("gru")                            # what a study file needs to know, without importing torch

Metadata (`meta`): looking a class up imports its module, and the built-ins' modules import torch
(~2 s), which a command that only reads a study file (`study show`, `report`) does not need. A
built-in may therefore also declare a torch-free metadata class (`@REGISTRY.register_meta(name)`,
in the modules `metas()` lists: units/meta.py, tasks/<name>/meta.py) that its real class
subclasses; `meta(name)` returns it, and falls back to `lookup(name)` (the class itself) for
plug-ins, import paths and unknown names, so errors read the same.

Modelled on lm-evaluation-harness's `@register_model`. Entry points are listed lazily and
imported on first use, so a broken plug-in cannot hide the others; each class found is checked
against the registry's base class. It lives in units/ because units must not import tasks
(tasks import it). Nothing here imports torch.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any


class _LazyEntryPoint:
    """An entry point not imported yet; `Registry.lookup` imports it and reports a failure by name."""

    def __init__(self, ep: metadata.EntryPoint) -> None:
        self.ep = ep


class Registry:
    """Names → classes of one kind ("unit", "task").

    `builtins()` returns module names whose import registers the built-ins (called once, on the
    first lookup or listing); `base()` returns the class every entry must subclass (None: no
    check); `error` is the user-error type raised; `on_add(cls, name)` stamps the name on a class
    (with `name_import_paths`, also on a class found by import path that has no name of its own).
    """

    def __init__(
        self,
        kind: str,
        group: str,
        builtins: Callable[[], Iterable[str]],
        error: type[Exception],
        base: Callable[[], type | None] = lambda: None,
        on_add: Callable[[type, str], None] | None = None,
        name_import_paths: bool = False,
        metas: Callable[[], Iterable[str]] = lambda: (),
        on_meta: Callable[[type, str], None] | None = None,
    ) -> None:
        self.kind, self.group, self.error = kind, group, error
        self._builtins, self._base, self._on_add = builtins, base, on_add
        self._name_import_paths = name_import_paths
        self._metas, self._on_meta = metas, on_meta
        self.entries: dict[str, Any] = {}  # name → class, or _LazyEntryPoint until first used
        self.metas: dict[str, type] = {}  # name → torch-free metadata class of a built-in
        self.metas_loaded = False
        self.broken: set[str] = set()  # entry points that failed to import (not listed again)
        self.skipped: dict[str, str] = {}  # built-in modules left out: module → why
        self.builtins_loaded = False
        self.entry_points_loaded = False

    # -- registering ---------------------------------------------------------------------------
    def register(self, name: str) -> Callable[[type], type]:
        """Class decorator: make a class available under `name`."""

        def decorate(cls: type) -> type:
            self.add(name, cls)
            return cls

        return decorate

    def add(self, name: str, cls: type) -> None:
        self._check(cls, f"{self.kind} {name!r}")
        found = self.entries.get(name)
        if found is not None and found is not cls and not isinstance(found, _LazyEntryPoint):
            raise ValueError(f"{self.kind} name {name!r} is already registered by {found.__qualname__}")
        self.entries[name] = cls
        if self._on_add is not None:
            self._on_add(cls, name)

    def register_meta(self, name: str) -> Callable[[type], type]:
        """Class decorator: `name`'s torch-free metadata (what `meta(name)` returns; the real class,
        registered with `register`, subclasses it)."""

        def decorate(cls: type) -> type:
            found = self.metas.get(name)
            if found is not None and found is not cls:
                raise ValueError(f"{self.kind} name {name!r} already has metadata {found.__qualname__}")
            self.metas[name] = cls
            if self._on_meta is not None:
                self._on_meta(cls, name)
            return cls

        return decorate

    def remove(self, name: str) -> None:
        """Forget a name (tests and benchmarks that register a temporary entry)."""
        self.entries.pop(name, None)

    # -- loading -------------------------------------------------------------------------------
    def load_builtins(self) -> None:
        """Import the built-in modules once. One whose optional dependency is not installed (e.g.
        Triton kernels on a CPU machine) is skipped and named if a lookup then fails; any other
        import error is a bug in the repository and raises."""
        if self.builtins_loaded:
            return
        self.builtins_loaded = True
        for module in self._builtins():
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name is None or exc.name == module or exc.name.startswith(module.split(".")[0] + "."):
                    raise
                self.skipped[module] = f"needs {exc.name!r}, which is not installed"

    def load_metas(self) -> None:
        """Import the metadata modules once (torch-free by contract; a missing optional dependency
        skips the module, as for built-ins: its names then fall back to `lookup`)."""
        if self.metas_loaded:
            return
        self.metas_loaded = True
        for module in self._metas():
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name is None or exc.name == module or exc.name.startswith(module.split(".")[0] + "."):
                    raise

    def load_entry_points(self) -> None:
        """List the entry points installed packages advertise, once (imported only when used)."""
        if self.entry_points_loaded:
            return
        self.entry_points_loaded = True
        for ep in metadata.entry_points(group=self.group):
            if ep.name not in self.entries and ep.name not in self.broken:
                self.entries[ep.name] = _LazyEntryPoint(ep)

    def available(self) -> list[str]:
        """Every registered name (built-ins and entry points), sorted; imports no plug-in."""
        self.load_builtins()
        self.load_entry_points()
        return sorted(self.entries)

    # -- looking up ----------------------------------------------------------------------------
    def lookup(self, name: str) -> type:
        """The class behind a name or `package.module:Class` import path, or `error` with a did-you-mean."""
        if ":" in name:
            return self._import_path(name)
        self.load_builtins()
        if name not in self.entries:
            self.load_entry_points()
        found = self.entries.get(name)
        if isinstance(found, _LazyEntryPoint):
            return self._load_entry_point(name, found.ep)
        if found is not None:
            return found
        close = difflib.get_close_matches(name, list(self.entries), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        skipped = "".join(f"; {m} was not loaded: {why}" for m, why in sorted(self.skipped.items()))
        raise self.error(f"unknown {self.kind} {name!r}{hint} (available: {', '.join(sorted(self.entries)) or 'none'}){skipped}")

    def meta(self, name: str) -> type:
        """What a study file needs to know of `name`: the torch-free metadata class of a built-in,
        else the class itself (`lookup`: plug-ins, import paths, names registered at run time,
        and the did-you-mean error of an unknown name)."""
        if ":" not in name:
            self.load_metas()
            found = self.metas.get(name)
            entry = self.entries.get(name)
            # a name registered under another class at run time (tests) is that class's
            if found is not None and (entry is None or (isinstance(entry, type) and issubclass(entry, found))):
                return found
        return self.lookup(name)

    def _load_entry_point(self, name: str, ep: metadata.EntryPoint) -> type:
        where = f"{self.kind} {name!r} from entry point {ep.value!r} (group {self.group})"
        try:
            cls = ep.load()
        except Exception as exc:  # any import-time failure of a plug-in is reported by name
            self.broken.add(name)
            self.entries.pop(name, None)
            raise self.error(f"{where} failed to import: {exc}") from exc
        self._check(cls, where)
        self.entries[name] = cls
        if self._on_add is not None:
            self._on_add(cls, name)
        return cls

    def _import_path(self, path: str) -> type:
        module_name, _, attr = path.partition(":")
        where = f"{self.kind} import path {path!r}"
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # any import-time failure is reported with the path
            raise self.error(f"{where}: module {module_name!r} failed to import: {exc}") from exc
        cls = getattr(module, attr, None)
        if cls is None:
            raise self.error(f"{where}: module {module_name!r} has no attribute {attr!r}")
        if not isinstance(cls, type):
            raise self.error(f"{where} does not name a class")
        self._check(cls, where)
        if self._on_add is not None and self._name_import_paths and "name" not in vars(cls):
            self._on_add(cls, path)
        return cls

    def _check(self, cls: Any, where: str) -> None:
        base = self._base()
        if base is not None and not (isinstance(cls, type) and issubclass(cls, base)):
            raise self.error(f"{where}: {getattr(cls, '__qualname__', cls)!r} is not a subclass of {base.__module__}.{base.__qualname__}")


def package_modules(package: str, skip: Iterable[str] = (), pattern: str | None = None) -> list[str]:
    """Module names of a package's files (or `pattern`, e.g. "{name}.adapter" for subpackages), for
    `Registry(builtins=...)`: a new built-in file registers itself without editing any list."""
    import pkgutil

    spec = importlib.util.find_spec(package)
    paths = list(spec.submodule_search_locations or []) if spec else []
    out = []
    for info in sorted(pkgutil.iter_modules(paths), key=lambda i: i.name):
        if info.name.startswith("_") or info.name in skip:
            continue
        if pattern is None and not info.ispkg:
            out.append(f"{package}.{info.name}")
        elif pattern is not None and info.ispkg:
            candidate = f"{package}.{pattern.format(name=info.name)}"
            if importlib.util.find_spec(candidate) is not None:
                out.append(candidate)
    return out
