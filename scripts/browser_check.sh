#!/usr/bin/env bash
# The browser check on a schedule: tests/test_browser.py (MLflow's UI and optuna-dashboard in
# headless Chromium, the names a user reads checked on the pages) with its dependencies installed,
# and the run recorded as the last line of docs/browser-check.md (date, commit, result, seconds,
# versions). tests/test_docs.py fails the suite when the recorded last run did not pass.
#
# Why a schedule and not CI: CI runs the whole suite in ~16 min of its 30; Debian's
# Chromium is ~100 MB of packages whose download CI cannot bound, and what the check guards (the
# pages docs/img shows) changes with MLflow/optuna-dashboard upgrades, not with most commits.
#   weekly, e.g. cron:  17 3 * * 1  cd /srv/tprbench && git pull -q && bash scripts/browser_check.sh
# Exit status: 0 when the check passed, 1 otherwise (a skip counts as a failure here).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/tprbench ] || bash scripts/install.sh
bash scripts/browser_deps.sh
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
log="$(mktemp)"
start=$(date +%s)
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider -rs tests/test_browser.py > "$log" 2>&1
rc=$?
set -e
seconds=$(( $(date +%s) - start ))
tail -5 "$log"
.venv/bin/python scripts/record_browser_check.py --rc "$rc" --seconds "$seconds" --log "$log"
