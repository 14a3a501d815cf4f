"""Look at a recorded study as a person would: MLflow's UI and optuna-dashboard on its stores,
opened in headless Chromium, screenshotted, and the names a user reads checked in the page.

    python scripts/screenshots.py --root runs --study quickstart --out docs/img

Starts `mlflow server` (the study's SQLite store, its artifacts) and `optuna-dashboard` (the
study's Optuna journal, or `--storage URL`) on 127.0.0.1 on free ports, each in its own session,
and stops them by their PIDs afterwards, also on errors. Chromium: Debian's `chromium` package
(`apt-get install chromium`; scripts/screenshots.sh installs it). Writes `mlflow-ui.png` and
`optuna-dashboard.png` (palette PNGs, small enough to commit) and prints what it found.
Exit 1 when a name a user should see is not on the page.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise SystemExit("screenshots: no Chromium found; install Debian's `chromium` (apt-get install chromium)")


@contextlib.contextmanager
def serve(argv: list[str], url: str, log: Path, timeout: float = 180):
    """A server in its own session; yields once `url` answers 200; SIGTERM then SIGKILL by PID."""
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        t0 = time.time()
        while not _ok(url):
            if proc.poll() is not None:
                raise SystemExit(f"screenshots: {argv[0]} exited with {proc.returncode}; see {log}")
            if time.time() - t0 > timeout:
                raise SystemExit(f"screenshots: {url} not up after {timeout:.0f} s; see {log}")
            time.sleep(0.5)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server and the workers it forked (its session = its group)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def browse(url: str, png: Path | None, budget_ms: int = 25000, size: str = "1500,950") -> str:
    """The page's DOM after `budget_ms` of virtual time (scripts run, data fetched); a screenshot if `png`."""
    profile = tempfile.mkdtemp(prefix="tprchrome")
    common = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
              f"--user-data-dir={profile}", f"--window-size={size}", f"--virtual-time-budget={budget_ms}"]
    try:
        dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=240).stdout
        if png is not None:
            subprocess.run([*common, f"--screenshot={png}", url], capture_output=True, timeout=240, check=True)
            shrink(png)
        return dom
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def shrink(png: Path) -> None:
    """A palette PNG (256 colours): UI screenshots lose nothing visible and get ~4x smaller."""
    from PIL import Image

    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(png, optimize=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="the study's run directory (mlflow.db, optuna.journal)")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--storage", default=None, help="Optuna storage URL (default: the journal under --root)")
    p.add_argument("--out", default="docs/img", help="folder for the PNGs (default docs/img)")
    args = p.parse_args(argv)
    root, out = Path(args.root).resolve(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="tprshots"))
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import optuna
    from mlflow import MlflowClient

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness.storage import open_storage

    problems: list[str] = []
    db = f"sqlite:///{root / 'mlflow.db'}"
    exp = MlflowClient(tracking_uri=db).get_experiment_by_name(f"tprbench/{args.study}")
    if exp is None:
        raise SystemExit(f"screenshots: no experiment tprbench/{args.study} in {db}")
    cells = MlflowClient(tracking_uri=db).search_runs([exp.experiment_id], "tags.`tprbench.kind` = 'cell'")
    labels = sorted(r.info.run_name for r in cells)

    port = free_port()
    with serve([str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                "--backend-store-uri", db, "--artifacts-destination", str(root / "mlartifacts")],
               f"http://127.0.0.1:{port}/health", logs / "mlflow.log"):
        dom = browse(f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}", out / "mlflow-ui.png")
    for name in [f"tprbench/{args.study}", *labels[:3]]:
        if name not in dom:
            problems.append(f"MLflow UI: {name!r} not on the experiment page")
    print(f"MLflow UI: experiment tprbench/{args.study}, cell runs {', '.join(labels)} -> {out / 'mlflow-ui.png'}")

    storage_url = args.storage or f"journal://{root / 'optuna.journal'}"
    storage = open_storage(storage_url, create=False)
    studies = [s for s in optuna.get_all_study_summaries(storage) if s.study_name.startswith(args.study + "/")]
    if not studies:
        raise SystemExit(f"screenshots: no Optuna study {args.study}/… in {storage_url}")
    first = sorted(studies, key=lambda s: s.study_name)[0]
    dash = ([str(BIN / "optuna-dashboard"), str(root / "optuna.journal"), "--storage-class", "JournalFileStorage"]
            if args.storage is None else [str(BIN / "optuna-dashboard"), args.storage])
    port = free_port()
    with serve([*dash, "--host", "127.0.0.1", "--port", str(port), "--quiet"], f"http://127.0.0.1:{port}/dashboard/",
               logs / "optuna-dashboard.log"):
        listing = browse(f"http://127.0.0.1:{port}/dashboard/", None)
        dom = browse(f"http://127.0.0.1:{port}/dashboard/studies/{first._study_id}", out / "optuna-dashboard.png")
    label = first.user_attrs.get("label", "")
    if first.study_name not in listing:
        problems.append(f"optuna-dashboard: study {first.study_name!r} not in the study list")
    if not label or label not in dom:
        problems.append(f"optuna-dashboard: the cell label {label!r} not on the study's page")
    print(f"optuna-dashboard: {len(studies)} studies ({first.study_name} = {label}) -> {out / 'optuna-dashboard.png'}")
    for problem in problems:
        print("problem: " + problem)
    shutil.rmtree(logs, ignore_errors=True) if not problems else print(f"server logs: {logs}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
