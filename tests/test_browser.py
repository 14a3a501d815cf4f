"""Look at a record as a person would: scripts/screenshots.py serves the MLflow
UI and optuna-dashboard on a study's stores, opens both in headless Chromium and checks that the
names a user reads are on the pages: the experiment `tprbench/<study>`, the cell runs named by
their labels, the Optuna studies `<study>/<cell id>` with the cell label as a user attribute.

A dev step (marker `browser`): it needs Chromium and optuna-dashboard, which
`scripts/screenshots.sh` installs; where they are missing the test skips, saying so. The record
is the synthetic one of tests/test_report.py (no training) plus one Optuna study per cell.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[1]


def _missing() -> str | None:
    if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        return "no Chromium (scripts/screenshots.sh installs Debian's `chromium`)"
    if not Path(sys.executable).with_name("optuna-dashboard").exists():
        return "no optuna-dashboard (pip install -e '.[dashboard]'; scripts/screenshots.sh does)"
    return None


def test_the_mlflow_ui_and_optuna_dashboard_show_the_names_a_user_reads(tmp_path: Path) -> None:
    why = _missing()
    if why:
        pytest.skip(why)
    import optuna

    from harness.driver.status import describe_optuna_study
    from harness.record.storage import default_storage_url, open_storage
    from tests.test_report import CELLS, build_store

    store = build_store(tmp_path / "root")
    storage = open_storage(default_storage_url(store.root))
    for cell in CELLS:
        described = SimpleNamespace(
            id=cell.id, label=cell.label, task=cell.task, arch=cell.arch, unit=cell.unit, dim=cell.dim, metric="valid_acc", direction="maximize"
        )
        study = optuna.create_study(study_name=f"synth/{cell.id}", storage=storage, direction="maximize")
        describe_optuna_study(study, described, "synth")
        study.add_trial(
            optuna.trial.create_trial(
                params={"lr": 0.01}, distributions={"lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)}, value=0.8
            )
        )
    out = tmp_path / "img"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "screenshots.py"), "--root", str(store.root), "--study", "synth", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("mlflow-ui.png", "optuna-dashboard.png"):
        assert (out / name).stat().st_size > 10_000, name
    assert "MLflow UI: experiment tprbench/synth" in done.stdout and "problem:" not in done.stdout
