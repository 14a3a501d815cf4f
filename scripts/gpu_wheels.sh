#!/usr/bin/env bash
# Fill .whl/ (ignored) with the wheels the lent GPU machines' image lacks, for its Python 3.12
# (../.library/device/KINDS.md lists what it holds: torch, Triton, numpy, rich, typing-extensions,
# but not pydantic). Only these, with --no-deps: the working tree and what a call carries must stay
# under 64 MiB together, and the committed records take most of it.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl
.venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    pydantic pydantic-core annotated-types typing-inspection
du -sh .whl; ls .whl
