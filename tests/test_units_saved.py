"""Saved artifacts pin the TPRU cell and its initialisation (asappresearch/sru's regression idea).

tests/data/units_saved.pt holds, per spec, the state dict of a small unit built after
`torch.manual_seed(seed)` (E included), fixed inputs with padding, and the outputs and final
state they gave when the file was written. A change to the equations, the fused path, the
basis scale or the init shows up here even where every other test still agrees with itself.

Regenerate ONLY for a deliberate change of the cell or its init (and say so in the commit):
    .venv/bin/python tests/test_units_saved.py --regenerate
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import units

SAVED = Path(__file__).resolve().parent / "data" / "units_saved.pt"
DIN, D = 5, 8
LENGTHS = [6, 4, 1]
SPECS = {  # spec → seed
    "tpru[roles=4]": 1,
    "tpru[roles=4,slices=2,biases=code]": 2,
    "tpru[roles=4,biases=gate]": 3,
    "tpru-v1[roles=3]": 4,
    "tpru-mod1[roles=3,biases=code]": 5,
    "tpru-mod2[roles=5,slices=4]": 6,
    "tpru-mod3[roles=4]": 7,
}


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2024)
    T = max(LENGTHS)
    x = torch.randn(len(LENGTHS), T, DIN, generator=gen)
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)
    return x, mask


def _fresh(spec: str) -> torch.nn.Module:
    torch.manual_seed(SPECS[spec])
    return units.build(spec, DIN, D)


def regenerate() -> None:
    x, mask = _inputs()
    record = {"x": x, "mask": mask, "units": {}}
    for spec in SPECS:
        unit = _fresh(spec).eval()
        with torch.no_grad():
            out, state = unit(x, mask)
        record["units"][spec] = {"state_dict": unit.state_dict(), "outputs": out, "state": state}
    SAVED.parent.mkdir(exist_ok=True)
    torch.save(record, SAVED)
    print(f"wrote {SAVED} ({SAVED.stat().st_size} bytes)")


@pytest.fixture(scope="module")
def saved():
    return torch.load(SAVED, weights_only=True)


def test_saved_inputs_are_the_fixed_ones(saved):
    x, mask = _inputs()
    assert torch.equal(saved["x"], x) and torch.equal(saved["mask"], mask)
    assert set(saved["units"]) == set(SPECS), "a spec was added or removed: regenerate deliberately"


@pytest.mark.parametrize("impl", ["fused", "loop"])
@pytest.mark.parametrize("spec", sorted(SPECS))
def test_saved_weights_give_saved_outputs(saved, spec, impl):
    """The cell: the stored weights on the stored inputs still give the stored outputs."""
    entry = saved["units"][spec]
    unit = units.build(spec, DIN, D)
    unit.impl = impl
    unit.load_state_dict(entry["state_dict"], strict=True)
    with torch.no_grad():
        out, state = unit.eval()(saved["x"], saved["mask"])
    torch.testing.assert_close(out, entry["outputs"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(state, entry["state"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_init_is_unchanged(saved, spec):
    """The init: a unit built after the same seed has exactly the stored weights and basis."""
    fresh = _fresh(spec).state_dict()
    stored = saved["units"][spec]["state_dict"]
    assert fresh.keys() == stored.keys()
    for key in stored:
        torch.testing.assert_close(fresh[key], stored[key], rtol=0, atol=0, msg=lambda m, key=key: f"{spec} {key}: {m}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(__doc__)
    regenerate()
