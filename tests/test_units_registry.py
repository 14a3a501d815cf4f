"""Unit specs, the registry, and third-party units (import path and entry point).

The third-party unit is tests/plugin_units.py:ElmanUnit, which is not registered by decorator;
docs/adding-a-unit.md uses it as its worked example.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import units
from units import registry
from units.spec import UnitSpec, UnitSpecError, parse_spec

BUILTINS = ["gru", "lstm", "tpru", "tpru-mod1", "tpru-mod2", "tpru-mod3", "tpru-v1"]
REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "tests.plugin_units:ElmanUnit"


@pytest.fixture
def repo_root_importable(monkeypatch):
    """`tests.plugin_units` must import however pytest was started (tests/ has no __init__.py)."""
    monkeypatch.syspath_prepend(str(REPO_ROOT))


# --------------------------------------------------------------------------------------------
# Specs: parse and format
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, canonical",
    [
        ("gru", "gru"),
        ("  gru  ", "gru"),
        ("gru[]", "gru"),
        ("tpru[roles=32]", "tpru[roles=32]"),
        ("tpru[slices=8,roles=32]", "tpru[roles=32,slices=8]"),
        ("tpru[ slices = 8 , roles=32 ]", "tpru[roles=32,slices=8]"),
        ("tpru-mod2[roles=32,bidirectional=true,layers=2]", "tpru-mod2[bidirectional=true,layers=2,roles=32]"),
        ("mypkg.cells:MyCell[k=3]", "mypkg.cells:MyCell[k=3]"),
        ("tests.plugin_units:ElmanUnit[nonlinearity=relu]", "tests.plugin_units:ElmanUnit[nonlinearity=relu]"),
    ],
)
def test_parse_format_round_trip(text, canonical):
    spec = parse_spec(text)
    assert str(spec) == canonical
    assert parse_spec(str(spec)) == spec
    assert parse_spec(canonical) == spec
    assert hash(parse_spec(canonical)) == hash(spec)


def test_parsed_spec_fields():
    spec = parse_spec("tpru[slices=8,roles=32]")
    assert spec.name == "tpru"
    assert spec.options == (("roles", "32"), ("slices", "8"))  # kept as written, sorted
    assert spec.option_dict == {"roles": "32", "slices": "8"}
    assert str(spec.with_options(slices=2, bidirectional=True)) == "tpru[bidirectional=true,roles=32,slices=2]"
    assert UnitSpec("gru") == parse_spec("gru")


def test_resolve_types_options_and_fills_defaults():
    resolved = units.resolve("tpru[slices=8,roles=32]", 64)
    assert resolved.cls is units.lookup("tpru")
    assert resolved.options["roles"] == 32 and isinstance(resolved.options["roles"], int)
    assert resolved.options["slices"] == 8
    assert resolved.options["impl"] == "fused"  # a default, filled in
    assert resolved.layers == 1 and resolved.bidirectional is False
    assert str(resolved.spec) == "tpru[roles=32,slices=8]"  # as written
    # the canonical form spells every option out, so equal units hash equally
    assert resolved.canonical == units.resolve("tpru[roles=32,slices=8,layers=1,bidirectional=false]", 64).canonical
    assert resolved.canonical != units.resolve("tpru[roles=32,slices=4]", 64).canonical
    bi = units.resolve("gru[bidirectional=true,layers=3]")
    assert bi.bidirectional is True and bi.layers == 3 and bi.options == {}


@pytest.mark.parametrize("raw, value", [("true", True), ("True", True), ("1", True), ("false", False), ("0", False)])
def test_bool_option_coercion(raw, value):
    assert units.resolve(f"gru[bidirectional={raw}]").bidirectional is value


def test_impl_option_parses():
    """`impl=fused|loop` is documented as a spec option, e.g. `tpru[impl=loop]`."""
    assert units.resolve("tpru[impl=loop]").options["impl"] == "loop"
    with pytest.raises(UnitSpecError, match="impl"):
        units.resolve("tpru[impl=cuda]")


def test_build_attaches_spec_and_output_size():
    module = units.build("tpru[slices=2,roles=3]", 5, 8)
    assert module.spec == "tpru[roles=3,slices=2]"
    assert module.output_size == 8 and module.roles == 3 and module.slices == 2
    bi = units.build("gru[bidirectional=true,layers=2]", 5, 8)
    assert bi.output_size == 16
    assert isinstance(bi, units.Stacked)
    assert all(isinstance(layer, units.Bidirectional) for layer in bi.layers)


def test_available_lists_the_builtins():
    names = units.available()
    assert set(BUILTINS) <= set(names)
    assert names == sorted(names)


# --------------------------------------------------------------------------------------------
# Errors: UnitSpecError with the specific message
# --------------------------------------------------------------------------------------------
def test_unit_spec_error_is_a_user_error():
    assert issubclass(UnitSpecError, ValueError)
    assert UnitSpecError.user_error is True
    assert units.UnitSpecError is UnitSpecError


@pytest.mark.parametrize("typo, suggestion", [("tpur", "tpru"), ("gur", "gru"), ("tpru-mod4", "tpru-mod"), ("lstn", "lstm")])
def test_unknown_unit_did_you_mean(typo, suggestion):
    with pytest.raises(UnitSpecError) as info:
        units.build(f"{typo}[roles=3]", 4, 8)
    message = str(info.value)
    assert f"unknown unit {typo!r}" in message
    assert "did you mean" in message and f"'{suggestion}" in message
    assert "available:" in message and "gru" in message


def test_unknown_unit_without_close_match_lists_available():
    with pytest.raises(UnitSpecError) as info:
        units.resolve("transformer")
    assert "did you mean" not in str(info.value)
    for name in BUILTINS:
        assert name in str(info.value)


def test_unknown_option_lists_accepted():
    with pytest.raises(UnitSpecError) as info:
        units.resolve("tpru[rolls=32]")
    message = str(info.value)
    assert "unknown option 'rolls'" in message
    assert "did you mean 'roles'" in message
    assert "tpru accepts basis_seed, biases, bidirectional, impl, layers, roles, slices" in message
    with pytest.raises(UnitSpecError, match="unknown option 'roles'.*gru accepts bidirectional, layers"):
        units.resolve("gru[roles=3]")


@pytest.mark.parametrize(
    "spec, key",
    [("tpru[roles=abc]", "roles"), ("tpru[slices=1.5]", "slices"), ("gru[layers=two]", "layers"), ("gru[bidirectional=maybe]", "bidirectional")],
)
def test_bad_value(spec, key):
    with pytest.raises(UnitSpecError) as info:
        units.resolve(spec)
    value = spec.split("=")[-1].rstrip("]")
    assert f"option {key}={value!r} is invalid" in str(info.value)
    assert spec in str(info.value)


@pytest.mark.parametrize("spec, message", [("gru[layers=0]", "layers must be >= 1"), ("tpru[roles=0]", "roles must be >= 1")])
def test_out_of_range_values(spec, message):
    with pytest.raises(UnitSpecError, match=message):
        units.build(spec, 4, 8)


def test_slices_must_divide_hidden_size():
    units.resolve("tpru[slices=3]")  # without a hidden size there is nothing to check yet
    units.resolve("tpru[slices=4]", 16)
    with pytest.raises(UnitSpecError) as info:
        units.resolve("tpru[slices=3]", 16)
    assert "slices=3 must divide the hidden size 16" in str(info.value)
    assert "'tpru[slices=3]'" in str(info.value)
    for name in ("tpru-v1", "tpru-mod1", "tpru-mod2", "tpru-mod3"):
        with pytest.raises(UnitSpecError, match="slices=3 must divide the hidden size 16"):
            units.build(f"{name}[roles=4,slices=3]", 5, 16)
    with pytest.raises(UnitSpecError, match="must divide"):
        units.param_counts("tpru[slices=5]", 5, 16)


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("", "empty unit spec"),
        ("   ", "empty unit spec"),
        ("tpru[roles=3", "cannot parse unit spec"),
        ("tpru roles=3", "cannot parse unit spec"),
        ("1tpru", "cannot parse unit spec"),
        ("tpru[[roles=3]]", "cannot parse unit spec"),
        ("tpru[roles]", "option 'roles' is not key=value"),
        ("tpru[=3]", "bad option name ''"),
        ("tpru[1x=3]", "bad option name '1x'"),
        ("tpru[roles=]", "option 'roles' has no value"),
        ("tpru[roles=3,roles=4]", "option 'roles' given twice"),
    ],
)
def test_malformed_specs(spec, fragment):
    with pytest.raises(UnitSpecError, match=fragment.replace("[", r"\[")):
        parse_spec(spec)
    with pytest.raises(UnitSpecError):
        units.build(spec, 4, 8)


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        units.register_unit("gru")(type("OtherGRU", (torch.nn.Module,), {}))


# --------------------------------------------------------------------------------------------
# Third-party units: import path
# --------------------------------------------------------------------------------------------
def _elman_reference(unit, nonlinearity: str) -> torch.nn.RNN:
    """torch's Elman RNN with the plug-in's weights: the plug-in must compute the same thing."""
    rnn = torch.nn.RNN(unit.input_size, unit.hidden_size, nonlinearity=nonlinearity, batch_first=True).double()
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(unit.W_x.weight)
        rnn.bias_ih_l0.copy_(unit.W_x.bias)
        rnn.weight_hh_l0.copy_(unit.W_h.weight)
        rnn.bias_hh_l0.zero_()
    return rnn


def _tprbench_units(**args) -> int:
    """`tprbench units` itself (its command module; the CLI's other commands are not loaded)."""
    import argparse

    from harness.commands import units as units_command

    return units_command.run(argparse.Namespace(**args))


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_import_path_unit(repo_root_importable, nonlinearity):
    spec = f"{PLUGIN}[nonlinearity={nonlinearity}]"
    resolved = units.resolve(spec, 8)
    assert resolved.cls.__name__ == "ElmanUnit" and resolved.options == {"nonlinearity": nonlinearity, "bias": True}
    unit = units.build(spec, 5, 8).double()
    assert unit.spec == spec and unit.nonlinearity == nonlinearity
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    mask = torch.arange(6).unsqueeze(0) < torch.tensor([6, 4, 2]).unsqueeze(1)
    with torch.no_grad():
        out, state = unit(x, mask)
        ref, _ = _elman_reference(unit, nonlinearity)(x)
    torch.testing.assert_close(out[mask], ref[mask])
    assert torch.all(out[~mask] == 0)
    torch.testing.assert_close(state, ref[torch.arange(3), torch.tensor([5, 3, 1])])


def test_import_path_unit_options_and_counts(repo_root_importable):
    assert "ElmanUnit" not in {getattr(cls, "__name__", "") for cls in registry.UNITS.entries.values()}  # not decorator-registered
    with pytest.raises(UnitSpecError, match=r"option nonlinearity='sigmoid' is invalid"):
        units.resolve(f"{PLUGIN}[nonlinearity=sigmoid]")
    with pytest.raises(UnitSpecError, match=r"unknown option 'nonlinarity' \(did you mean 'nonlinearity'\?\)"):
        units.resolve(f"{PLUGIN}[nonlinarity=relu]")
    assert units.resolve(f"{PLUGIN}[bias=false]").options["bias"] is False
    counts = units.param_counts(f"{PLUGIN}[nonlinearity=relu]", 6, 10)
    assert counts.formula == 10 * 10 + 10 * 6
    assert counts.total == counts.formula + 10  # one bias vector
    assert units.param_counts(f"{PLUGIN}[bias=false]", 6, 10).total == 160
    # the generic wrappers apply to it like to any built-in
    counts = units.param_counts(f"{PLUGIN}[layers=2,bidirectional=true]", 6, 10)
    assert counts.formula == 2 * (100 + 60) + 2 * (100 + 200)
    module = units.build(f"{PLUGIN}[layers=2,bidirectional=true]", 6, 10)
    out, state = module(torch.randn(2, 3, 6), torch.tensor([[True, True, True], [True, False, False]]))
    assert out.shape == (2, 3, 20) and state.shape == (2, 20)


def test_import_path_unit_in_tprbench_units(repo_root_importable, capsys):
    assert _tprbench_units(dim=10, input_dim=6, specs=[f"{PLUGIN}[nonlinearity=relu]"]) == 0
    out = capsys.readouterr().out
    assert "160" in out and "170" in out  # formula d² + dd', total with the bias
    assert "Elman" in out


def test_import_path_module_that_fails_to_import():
    with pytest.raises(UnitSpecError) as info:
        units.resolve("no_such_package_xyz.cells:MyCell[k=3]")
    assert "module 'no_such_package_xyz.cells' failed to import" in str(info.value)


def test_import_path_module_that_raises_on_import(tmp_path, monkeypatch):
    (tmp_path / "broken_cells_xyz.py").write_text("import torch\nraise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnitSpecError) as info:
        units.build("broken_cells_xyz:Cell", 4, 8)
    assert "module 'broken_cells_xyz' failed to import" in str(info.value) and "boom at import" in str(info.value)


def test_import_path_missing_class(repo_root_importable):
    with pytest.raises(UnitSpecError, match="module 'tests.plugin_units' has no attribute 'NoSuchUnit'"):
        units.resolve("tests.plugin_units:NoSuchUnit")


def test_constructor_error_is_a_spec_error():
    with pytest.raises(UnitSpecError, match=r"'gru': cannot build \(0→8\).*sizes must be positive"):
        units.build("gru", 0, 8)


# --------------------------------------------------------------------------------------------
# Third-party units: entry point group tprbench.units
# --------------------------------------------------------------------------------------------
def _fake_distribution(root: Path, dist: str, entries: str) -> None:
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entries).lstrip())


@pytest.fixture
def clean_registry(monkeypatch):
    """Entry points are read once per process: make this test read them again, then forget them."""
    registry.UNITS.load_builtins()  # before the snapshot: the teardown must not forget the built-ins
    monkeypatch.setattr(registry.UNITS, "entry_points_loaded", False)
    before = dict(registry.UNITS.entries)
    yield
    for name in set(registry.UNITS.entries) - set(before):
        registry.UNITS.remove(name)
    registry.UNITS.broken.clear()


def test_entry_point_unit(tmp_path, monkeypatch, repo_root_importable, clean_registry, capsys):
    _fake_distribution(
        tmp_path,
        "elman_plugin",
        f"""
        [tprbench.units]
        elman = {PLUGIN}
    """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert units.ENTRY_POINT_GROUP == "tprbench.units"
    names = units.available()
    assert "elman" in names and set(BUILTINS) <= set(names)
    module = units.build("elman[nonlinearity=relu]", 5, 8)
    assert type(module).__name__ == "ElmanUnit" and module.nonlinearity == "relu"
    out, state = module(torch.randn(2, 4, 5), torch.tensor([[True] * 4, [True, True, False, False]]))
    assert out.shape == (2, 4, 8) and torch.all(out[1, 2:] == 0)
    assert units.param_counts("elman", 5, 8).formula == 64 + 40
    with pytest.raises(UnitSpecError, match="did you mean 'elman'"):
        units.resolve("elmann")
    # and `tprbench units` lists it among the built-ins
    assert _tprbench_units(dim=8, input_dim=None, specs=[]) == 0
    listing = capsys.readouterr().out
    assert "elman" in listing and "tpru-mod3" in listing


def test_entry_point_found_lazily_by_lookup(tmp_path, monkeypatch, repo_root_importable, clean_registry):
    """Looking up an unknown name reads the entry points; no call to available() first."""
    _fake_distribution(
        tmp_path,
        "elman_plugin2",
        f"""
        [tprbench.units]
        elman-lazy = {PLUGIN}
    """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert units.lookup("elman-lazy").__name__ == "ElmanUnit"


def test_broken_entry_point_names_itself(tmp_path, monkeypatch, clean_registry):
    _fake_distribution(
        tmp_path,
        "broken_plugin",
        """
        [tprbench.units]
        broken = no_such_package_xyz.cells:Cell
    """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "broken" in units.available()  # listing never imports plug-ins, so it cannot fail
    with pytest.raises(UnitSpecError) as info:
        units.lookup("broken")
    assert "'broken'" in str(info.value) and "no_such_package_xyz.cells:Cell" in str(info.value)
    assert "tprbench.units" in str(info.value)
    # the built-ins stay reachable by name
    assert units.lookup("gru") is registry.UNITS.entries["gru"]


def test_a_builtin_module_missing_an_optional_dependency_is_skipped_and_named(tmp_path, monkeypatch):
    """E.g. the Triton kernels on a machine without triton: the other built-ins stay usable."""
    from units.plugins import Registry

    (tmp_path / "tprb_optional_xyz.py").write_text("import no_such_dependency_xyz\n")
    (tmp_path / "tprb_fine_xyz.py").write_text("from units.plugins import Registry\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("thing", "tprbench.things", builtins=lambda: ["tprb_optional_xyz", "tprb_fine_xyz"], error=ValueError)
    with pytest.raises(ValueError, match="tprb_optional_xyz was not loaded: needs 'no_such_dependency_xyz'"):
        reg.lookup("anything")
    assert reg.skipped == {"tprb_optional_xyz": "needs 'no_such_dependency_xyz', which is not installed"}
