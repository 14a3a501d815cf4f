#!/usr/bin/env bash
# Install (if needed), lint (ruff) and run the whole test suite, slow tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/tprbench ] || bash scripts/install.sh
# Servers the `servers` tests start (PostgreSQL from Debian's packages when missing; quick when present).
bash scripts/install_servers.sh || echo "test.sh: install_servers.sh failed; the PostgreSQL tests will skip" >&2
export TPRBENCH_DATA="${TPRBENCH_DATA:-$(cd .. && pwd)/shared/data}"
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# Lint first (pyproject.toml [tool.ruff]): a finding fails the run like a failing test.
.venv/bin/ruff check --quiet .
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
