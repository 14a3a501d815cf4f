#!/usr/bin/env bash
# Install (if needed) and run the whole test suite, slow tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/tprbench ] || bash scripts/install.sh
export TPRBENCH_DATA="${TPRBENCH_DATA:-$(cd .. && pwd)/shared/data}"
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
