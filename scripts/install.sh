#!/usr/bin/env bash
# Create .venv and install tprbench with the versions measured on these machines.
# constraints.txt pins torch to the local CPU wheel (an unpinned torch pulls GBs of CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q -c constraints.txt -e ".[test]"
