"""The CLI and reports read unit specs without importing torch (units/__init__ is lazy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE = """
import sys
import units
from harness.cli import build_parser
from harness.report import parse_unit, unit_columns
build_parser()
assert units.parse_spec("tpru[roles=32,slices=8]").option_dict == {"roles": "32", "slices": "8"}
assert parse_unit("tpru[roles=32]") == ("tpru", {"roles": "32"})
assert unit_columns("tpru[roles=32]", "tpru[roles=32,slices=1]")["slices"] == 1
assert "torch" not in sys.modules, "torch was imported"
units.build  # first use of the rest imports it
assert "torch" in sys.modules
"""


def test_spec_parsing_and_the_cli_parser_do_not_import_torch():
    proc = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
