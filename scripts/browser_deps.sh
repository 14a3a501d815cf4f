#!/usr/bin/env bash
# What the browser check and the screenshots need, installed when missing: Debian's `chromium`
# (as root with apt-get, bounded by timeouts) and the `dashboard` extra's optuna-dashboard in .venv.
# Used by scripts/screenshots.sh and scripts/browser_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium > /dev/null && ! command -v chromium-browser > /dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        timeout 120 apt-get update -qq > /dev/null
        timeout 900 apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core > /dev/null
    else
        echo "browser_deps: install Chromium (Debian: apt-get install chromium) and rerun" >&2
        exit 1
    fi
fi
# The extra's package only (not `-e .[dashboard]`: that would re-point an editable install).
[ -x .venv/bin/optuna-dashboard ] || .venv/bin/pip install -q -c constraints.txt "optuna-dashboard>=0.17"
