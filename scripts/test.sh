#!/usr/bin/env bash
# Install (if needed), lint (ruff) and run the whole test suite, slow tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/tprbench ] || bash scripts/install.sh
# Servers the `servers` tests start (PostgreSQL from Debian's packages when missing; quick when present).
bash scripts/install_servers.sh || echo "test.sh: install_servers.sh failed; the PostgreSQL tests will skip" >&2
export TPRBENCH_DATA="${TPRBENCH_DATA:-$(cd .. && pwd)/shared/data}"
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# Lint and format first (pyproject.toml [tool.ruff]): a finding, or a file `ruff format` would
# change, fails the run like a failing test. Run `.venv/bin/ruff format .` before committing.
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet . || { echo "test.sh: files not formatted (run .venv/bin/ruff format .)" >&2; exit 1; }
# --durations: the 25 slowest tests close every log, so the CI budget (under 30 minutes on an idle
# 2-core machine; the AMD EPYC took 37-38 in all on 2026-11-28) is kept from measured times, not guessed.
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
