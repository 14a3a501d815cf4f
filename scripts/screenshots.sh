#!/usr/bin/env bash
# Screenshots of a recorded study as a person sees it (docs/cluster.md, "Looking at it"):
# MLflow's UI and optuna-dashboard in headless Chromium, with the names checked on the pages.
#   bash scripts/screenshots.sh --root runs --study quickstart --out docs/img
# Installs what it needs when missing: Debian's `chromium` (as root with apt-get, bounded by a
# timeout) and the `dashboard` extra (optuna-dashboard) into .venv. A dev step, not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium > /dev/null && ! command -v chromium-browser > /dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        timeout 120 apt-get update -qq > /dev/null
        timeout 900 apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core > /dev/null
    else
        echo "screenshots: install Chromium (Debian: apt-get install chromium) and rerun" >&2
        exit 1
    fi
fi
[ -x .venv/bin/optuna-dashboard ] || .venv/bin/pip install -q -c constraints.txt -e ".[dashboard]"
exec .venv/bin/python scripts/screenshots.py "$@"
