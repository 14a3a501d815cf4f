"""Append one run of the browser check to docs/browser-check.md (scripts/browser_check.sh calls it).

A row: UTC date, the commit checked (`-dirty` when tracked code differed), passed/failed/skipped,
seconds, Chromium's and optuna-dashboard's versions. Exit 0 only for a pass.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "browser-check.md"
HEADER = "| date (UTC) | commit | result | seconds | Chromium | optuna-dashboard |\n|:---|:---|:---|---:|:---|:---|\n"


def outcome(rc: int, log: str) -> str:
    if rc == 0 and re.search(r"\b1 passed\b", log) and "skipped" not in log:
        return "passed"
    return "skipped" if "skipped" in log and rc == 0 else "failed"


def chromium_version() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        try:
            out = subprocess.run([name, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        version = re.search(r"\d+(\.\d+)+", out)
        if version:
            return version.group(0)
    return "none"


def main() -> int:
    sys.path.insert(0, str(REPO))
    from harness.record.writer import git_commit

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rc", type=int, required=True)
    p.add_argument("--seconds", type=int, required=True)
    p.add_argument("--log", required=True)
    a = p.parse_args()
    result = outcome(a.rc, Path(a.log).read_text(errors="replace"))
    try:
        dashboard = metadata.version("optuna-dashboard")
    except metadata.PackageNotFoundError:
        dashboard = "none"
    row = (
        f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {git_commit(REPO)[:12]} | {result} | {a.seconds} | "
        f"{chromium_version()} | {dashboard} |\n"
    )
    text = DOC.read_text() if DOC.exists() else ""
    if HEADER not in text:
        raise SystemExit(f"{DOC}: its runs table header is missing; restore it from git")
    DOC.write_text(text.rstrip("\n") + "\n" + row)
    print(f"browser check {result} in {a.seconds} s; recorded in {DOC.relative_to(REPO)}")
    return 0 if result == "passed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
