#!/usr/bin/env bash
# Create .venv and install tprbench with the versions measured on these machines.
# constraints.txt pins torch to the local CPU wheel (an unpinned torch pulls GBs of CUDA).
# The `gpu` extra is Triton (no dependencies of its own; the wheel is ~290 MB, ~1 min here): CI runs
# the TPRU kernel tests in Triton's CPU interpreter, and on a GPU machine the same install uses it.
# The `cluster` extra is the PostgreSQL driver (psycopg 3) for `--storage postgresql://…`.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q -c constraints.txt -e ".[test,gpu,cluster]"
# The C++ TPRU recurrence, built once per machine into ~/.cache/tprbench/ext (units/tpru_ext.py);
# if it cannot be built, TPRU runs on its Python loop (same results, slower): never fail the install.
.venv/bin/python -m units.tpru_ext || echo "install: continuing without the C++ TPRU recurrence"
