#!/usr/bin/env bash
# Fill .whl/ (ignored) with the wheels a lent GPU machine's image may lack (pydantic, rich and
# their needs), for Pythons 3.10-3.13, so scripts/gpu_check.sh can install them without a network.
set -euo pipefail
cd "$(dirname "$0")/.."
for v in 3.10 3.11 3.12 3.13; do
    .venv/bin/pip download -q --only-binary=:all: --python-version "$v" --platform manylinux2014_x86_64 \
        -d .whl pydantic rich
done
ls .whl
