#!/usr/bin/env bash
# Screenshots of a recorded study as a person sees it (docs/cluster.md, "Looking at it"):
# MLflow's UI and optuna-dashboard in headless Chromium, with the names checked on the pages.
#   bash scripts/screenshots.sh --root runs --study quickstart --out docs/img
# Installs what it needs when missing: Debian's `chromium` (as root with apt-get, bounded by a
# timeout) and the `dashboard` extra (optuna-dashboard) into .venv. A dev step, not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/browser_deps.sh
exec .venv/bin/python scripts/screenshots.py "$@"
