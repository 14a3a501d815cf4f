"""Every command that writes files checks where first (harness/commands/support/output_path.py): one line, exit 2,
nothing created.

`report --out`, `compare --csv`, `papers --out`, `record snapshot` and `record restore` pointed at
an existing file (a folder, for `--csv`), a path under a file, a read-only folder or /dev/null (as
a folder) ended in a Python traceback (exit 1), `report` after reading the whole record, or in a
line blaming something else (`snapshot --root FILE`: "mlflow.db does not exist"). Each case runs on the golden record
(tests/fixtures/record-v1); the read-only folder is a real read-only bind mount (as root; permission
bits as an ordinary user). One case per command goes through the real `tprbench` (what the user
sees); the whole matrix runs in this process.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ray_helpers import TPRBENCH, ray_environ

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "record-v1"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The golden record (`root`), a file, and a read-only folder holding a copy of the record."""
    base = tmp_path_factory.mktemp("outputs")
    root = base / "root"
    root.mkdir()
    with gzip.open(FIXTURE / "mlflow.db.gz", "rb") as src, open(root / "mlflow.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    (base / "a-file").write_text("not a folder\n")
    src, ro = base / "ro-src", base / "ro"
    shutil.copytree(root, src)
    ro.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True).returncode == 0
    if mounted and subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode != 0:
        subprocess.run(["umount", str(ro)], capture_output=True)
        mounted = False
    if not mounted:
        if os.geteuid() == 0:
            pytest.skip("root may not bind-mount here, and permission bits do not stop root")
        ro.rmdir()
        src.rename(ro)
        ro.chmod(0o555)
    yield {"root": root, "file": base / "a-file", "ro": ro, "base": base}
    if mounted:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)
    else:
        ro.chmod(0o755)


#: What each command is pointed at: {bad place: (the value, the words of the refusal)}.
FOLDER = {
    "an existing file": ("{file}", "is a file, not a folder"),
    "a path under a file": ("{file}/sub", "cannot be created: {file} is a file, not a folder"),
    "a read-only folder": ("{ro}", "the folder is not writable"),
    "/dev/null": ("/dev/null", "is a device, not a folder"),
}
FILE = {
    "a folder": ("{base}", "is a folder, not a file"),
    "a path under a file": ("{file}/out.csv", "cannot be created: {file} is a file, not a folder"),
    "a read-only folder": ("{ro}/out.csv", "cannot be created: the folder {ro} is not writable"),
}
COMMANDS = {
    "report --out": (["report", "golden", "--root", "{root}", "--no-figures", "--out"], FOLDER),
    "compare --csv": (["compare", "golden", "golden", "--root", "{root}", "--csv"], FILE),
    "papers --out": (["papers", "--out"], FOLDER),
    "record snapshot --root": (["record", "snapshot", "--root"], FOLDER),
    "record restore --root": (["record", "restore", "--root"], FOLDER),
}
CASES = [(command, place) for command, (_argv, places) in COMMANDS.items() for place in places]
THROUGH_THE_CLI = {
    "report --out": "an existing file",
    "compare --csv": "a path under a file",
    "papers --out": "/dev/null",
    "record snapshot --root": "a read-only folder",
    "record restore --root": "a path under a file",
}


def _case(command: str, place: str, places: dict[str, Path]) -> tuple[list[str], str, str]:
    argv, kinds = COMMANDS[command]
    value, why = kinds[place]
    value, why = value.format(**places), why.format(**places)
    return [a.format(**places) for a in argv] + [value], value, why


def _tree(base: Path) -> list[str]:
    return sorted(str(p.relative_to(base)) for p in base.rglob("*"))


@pytest.mark.parametrize("command, place", CASES, ids=[f"{c} at {p}" for c, p in CASES])
def test_an_output_path_that_cannot_be_written_is_one_line_and_nothing_is_created(command, place, places, capsys, monkeypatch) -> None:
    from harness.cli import main

    monkeypatch.chdir(REPO)  # papers reads studies/papers.toml from here (it must not get that far)
    argv, value, why = _case(command, place, places)
    before = _tree(places["base"])
    rc = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    option = argv[-2]
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"tprbench {argv[0]}: error: {option} {value}: ") and why in err[0], err[0]
    assert _tree(places["base"]) == before


@pytest.mark.parametrize("command", list(THROUGH_THE_CLI))
def test_the_user_sees_one_line_from_the_real_command(command, places) -> None:
    argv, value, why = _case(command, THROUGH_THE_CLI[command], places)
    before = _tree(places["base"])
    proc = subprocess.run([TPRBENCH, *argv], capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, **ray_environ()})
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert err[0].startswith(f"tprbench {argv[0]}: error: {argv[-2]} {value}: ") and why in err[0], err[0]
    assert _tree(places["base"]) == before


def test_a_writable_place_passes_and_nothing_is_created(tmp_path) -> None:
    """The check creates nothing, and accepts what the commands accept: a new folder under a
    writable one, an existing folder, a file to replace, a new file."""
    from harness.commands.support.output_path import check_output_path

    (tmp_path / "old.csv").write_text("a\n")
    assert check_output_path(tmp_path / "new" / "deeper", "--out") == tmp_path / "new" / "deeper"
    assert check_output_path(tmp_path, "--out") == tmp_path
    assert check_output_path(tmp_path / "old.csv", "--csv", folder=False) == tmp_path / "old.csv"
    assert check_output_path(tmp_path / "sub" / "new.csv", "--csv", folder=False) == tmp_path / "sub" / "new.csv"
    assert check_output_path("/dev/null", "--csv", folder=False) == Path("/dev/null")  # a stream, as for any Unix tool
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.csv"]
