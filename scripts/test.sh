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
# 2-core machine) is kept from measured times, not guessed.
# -n / --dist loadfile (pytest-xdist): two test processes, each taking whole files, so a module's
# fixtures are built once and tests/test_servers.py's servers run one at a time. Why: one process
# kept the 2-core machine 66% idle (user + sys 25.7 of 75.8 core-minutes in a 37.9-minute CI run on
# the AMD EPYC, 2026-11-28): the suite waits on Ray start-ups, driver subprocesses and servers more
# than it computes. Every Ray a test starts is its own (a temp dir and session of its own,
# tests/ray_helpers.py; servers on free ports, tests/servers.py), so two files at once do not meet.
# Measured on the AMD EPYC (fresh clone, idle): 37:53 in all with one process, 27:05 with two (tests 33:31 -> 23:17).
# The files run in their alphabetical order: the five slowest collected first made it slower (29:30, tests
# 25:20, user time +2.2 min: the heaviest tests then contend with each other instead of with light ones).
# TPRBENCH_TEST_WORKERS=0 runs everything in this one process (a debugger, `-x` on a first failure).
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 -n "${TPRBENCH_TEST_WORKERS:-2}" --dist loadfile "$@"
