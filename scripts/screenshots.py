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
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
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
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runner processes for a UI
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
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


class Chromium:
    """Headless Chromium driven over the DevTools protocol through a pipe (`--remote-debugging-pipe`:
    JSON messages separated by NUL on file descriptors 3 and 4), so a page can be waited for,
    clicked (to unfold nested runs) and screenshotted without a WebDriver or websocket library."""

    def __init__(self, size: tuple[int, int] = (1500, 950)) -> None:
        self.profile = tempfile.mkdtemp(prefix="tprchrome")
        to_child, self._w = os.pipe()
        self._r, from_child = os.pipe()

        def fds() -> None:  # in the child: its fd 3 reads our commands, fd 4 writes its answers
            import fcntl

            a, b = fcntl.fcntl(to_child, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child, fcntl.F_DUPFD, 10)  # out of 3/4's way
            os.dup2(a, 3)
            os.dup2(b, 4)

        argv = [
            chromium(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile}",
            f"--window-size={size[0]},{size[1]}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            pass_fds=(3, 4),
            start_new_session=True,
        )  # kept open: close_fds runs after preexec_fn
        os.close(to_child)
        os.close(from_child)
        self._buf, self._id, self.size = b"", 0, size

    def call(self, method: str, session: str | None = None, timeout: float = 120, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer.get("result", {})
            if time.time() > deadline:
                raise TimeoutError(f"Chromium did not answer {method} within {timeout:.0f} s")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium exited")
            self._buf += chunk

    def page(
        self,
        url: str,
        png: Path | None,
        want: list[str],
        click: str | None = None,
        timeout: float = 150,
        before_shot: str = "",
        widen: tuple[str, int] | None = None,
    ) -> str:
        """Open `url`, clicking the first element matching the CSS selector `click` once (e.g. the
        expander of the study run), until every text in `want` is on the page or `timeout`; then
        run the JavaScript `before_shot`, drag the right edge of the element matching `widen[0]`
        by `widen[1]` pixels (a table column), and screenshot into `png`. Returns the page's text."""
        target = self.call("Target.createTarget", url=url)["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", session, width=self.size[0], height=self.size[1], deviceScaleFactor=1, mobile=False)
        js = (
            "(() => {"
            + (
                f"const b = document.querySelector({click!r}); if (b && !window.tprClicked) {{ window.tprClicked = true; b.click(); }}"
                if click
                else ""
            )
            + "return document.body ? document.body.innerText : ''; })()"
        )
        t0, text = time.time(), ""
        while time.time() - t0 < timeout:
            text = self.call("Runtime.evaluate", session, expression=js, returnByValue=True).get("result", {}).get("value") or ""
            if text and all(w in text for w in want):
                time.sleep(2)  # let the last rows render and the layout settle
                text = self.call("Runtime.evaluate", session, expression=js, returnByValue=True)["result"].get("value") or text
                break
            time.sleep(1)
        if before_shot:
            self.call("Runtime.evaluate", session, expression=before_shot)
        if widen is not None:
            self._drag_edge(session, *widen)
        if png is not None:
            import base64

            data = self.call("Page.captureScreenshot", session, format="png")["data"]
            png.write_bytes(base64.b64decode(data))
            shrink(png)
        self.call("Target.closeTarget", targetId=target)
        return text

    def _drag_edge(self, session: str, selector: str, dx: int) -> None:
        """Press at the right edge of the element, move right by `dx`, release (resizes a column)."""
        rect = self.call(
            "Runtime.evaluate",
            session,
            returnByValue=True,
            expression=(
                f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null; "
                "const r = e.getBoundingClientRect(); return [r.right - 2, r.top + r.height / 2]; })()"
            ),
        )["result"].get("value")
        if not rect:
            return
        x, y = rect
        for kind, at, buttons in (
            ("mouseMoved", x, 0),
            ("mousePressed", x, 1),
            ("mouseMoved", x + dx / 2, 1),
            ("mouseMoved", x + dx, 1),
            ("mouseReleased", x + dx, 1),
        ):
            extra = {"button": "left", "clickCount": 1} if kind != "mouseMoved" else {"button": "left" if buttons else "none"}
            self.call("Input.dispatchMouseEvent", session, type=kind, x=at, y=y, buttons=buttons, **extra)
        time.sleep(1)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for fd in (self._w, self._r):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)


# MLflow 3.17 opens an "MLflow Assistant" panel on the right: close it (its X, top right) so the
# runs table has the width.
CLOSE_SIDE_PANEL = """(() => {
  for (const b of document.querySelectorAll('button')) {
    const r = b.getBoundingClientRect(), label = (b.getAttribute('aria-label') || '') + b.textContent;
    if (r.top < 80 && r.left > 0.85 * window.innerWidth && /close/i.test(label)) { b.click(); return true; }
  }
  return false;
})()"""


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

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness.record.compressed import reading_root
    from harness.record.contract import Tag, experiment_name
    from harness.record.layout import RunRoot, sqlite_uri
    from harness.record.reader import RecordReader, ReportError
    from harness.record.storage import open_storage

    problems: list[str] = []
    layout = RunRoot(root)
    db = sqlite_uri(RunRoot(reading_root(root)).db)  # a committed mlflow.db.gz: its decompressed copy
    try:
        reader = RecordReader(db, args.study)
    except ReportError:
        raise SystemExit(f"screenshots: no experiment {experiment_name(args.study)} in {db}") from None
    # A cell run is named by its cell's label (harness.record.writer.Tracker.create_cell_run).
    labels = sorted(str(r["tags"].get(Tag.LABEL.bare, "")) for r in reader.cell_runs())

    port = free_port()
    browser = Chromium()
    try:
        with serve(
            [
                str(BIN / "mlflow"),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
                "--backend-store-uri",
                db,
                "--artifacts-destination",
                str(layout.artifacts),
            ],
            f"http://127.0.0.1:{port}/health",
            logs / "mlflow.log",
        ):
            # MLflow 3.17's UI opens in its GenAI mode whatever the experiment's kind; the runs table
            # is its "model training" workflow. The cell runs are children of the study run: unfold them.
            query = urllib.parse.urlencode({"workflowType": "machine_learning"})
            text = browser.page(
                f"http://127.0.0.1:{port}/#/experiments/{reader.experiment_id}/runs?{query}",
                out / "mlflow-ui.png",
                want=labels[:3],
                click="button[data-component-id*='runnamecellrenderer']",
                before_shot=CLOSE_SIDE_PANEL,
                widen=(".ag-header-cell[col-id*='Run Name']", 260),
            )
        for name in [args.study, *labels[:3]]:
            if name not in text:
                problems.append(f"MLflow UI: {name!r} not on the experiment's runs page")
        print(f"MLflow UI: experiment tprbench/{args.study}, cell runs {', '.join(labels)} -> {out / 'mlflow-ui.png'}")

        storage_url = args.storage or layout.storage_url
        storage = open_storage(storage_url, create=False)
        studies = [s for s in optuna.get_all_study_summaries(storage) if s.study_name.startswith(args.study + "/")]
        if not studies:
            raise SystemExit(f"screenshots: no Optuna study {args.study}/… in {storage_url}")
        first = sorted(studies, key=lambda s: s.study_name)[0]
        dash = (
            [str(BIN / "optuna-dashboard"), str(layout.journal), "--storage-class", "JournalFileStorage"]
            if args.storage is None
            else [str(BIN / "optuna-dashboard"), args.storage]
        )
        label = first.user_attrs.get("label", "")
        port = free_port()
        with serve(
            [*dash, "--host", "127.0.0.1", "--port", str(port), "--quiet"], f"http://127.0.0.1:{port}/dashboard/", logs / "optuna-dashboard.log"
        ):
            listing = browser.page(f"http://127.0.0.1:{port}/dashboard/", None, want=[first.study_name], timeout=90)
            # The cell's label is among the study's user attributes, below the charts: scroll to it.
            scroll = (
                "(() => { const all = [...document.querySelectorAll('body *')].filter(e => e.children.length === 0 "
                f"&& e.textContent.includes({json.dumps(label or first.study_name)})); "
                "if (all.length) all[all.length - 1].scrollIntoView({block: 'center'}); return all.length; })()"
            )
            text = browser.page(
                f"http://127.0.0.1:{port}/dashboard/studies/{first._study_id}",
                out / "optuna-dashboard.png",
                want=[label] if label else [first.study_name],
                before_shot=scroll,
            )
    finally:
        browser.close()
    if first.study_name not in listing:
        problems.append(f"optuna-dashboard: study {first.study_name!r} not in the study list")
    if not label or label not in text:
        problems.append(f"optuna-dashboard: the cell label {label!r} not on the study's page")
    print(f"optuna-dashboard: {len(studies)} studies ({first.study_name} = {label}) -> {out / 'optuna-dashboard.png'}")
    for problem in problems:
        print("problem: " + problem)
    shutil.rmtree(logs, ignore_errors=True) if not problems else print(f"server logs: {logs}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
