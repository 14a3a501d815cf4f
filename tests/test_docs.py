"""Docs that show commands or output, run as tests, the way docs/adding-a-task.md is:

- the README's everyday commands parse as `tprbench` commands, and every study they name exists;
  the cheap ones (`units`, `tasks`) run;
- the README's quickstart table and the committed reports/quickstart/table.md count parameters
  of the task's encoder (`layers` of the unit), which is what the README says and what
  `tprbench units` (one layer) multiplied by the encoder's layers gives;
- docs/cluster.md's sample output has the study's own numbers of cells, trials and seeds and the
  shape of the lines the driver prints.
- docs that cannot drift: README.md links every docs/*.md and reports/README.md, the map
  (docs/ARCHITECTURE.md) stays at most 350 lines and every path it names exists, every docs/x.md
  named in the docs exists; commands' default outputs go to ignored folders.

The quickstart's table itself, from a real run, is tests/test_quickstart.py.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLUSTER = ROOT / "docs" / "cluster.md"
STUDY_ARGS = {"run": 1, "report": 1, "compare": 2}  # commands whose first N positionals name studies


def _block(text: str, after: str, lang: str) -> str:
    start = text.index(after)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert match, f"no ```{lang} block after {after!r}"
    return match.group(1)


def everyday_commands() -> list[list[str]]:
    """The README's everyday commands as argv lists (comments and `[optional]` parts dropped)."""
    block = _block(README.read_text(), "## Everyday commands", "bash").replace("\\\n", " ")
    out = []
    for line in block.splitlines():
        line = line.split(" # ")[0].split("  #")[0].strip()
        if line:
            argv = [t for t in shlex.split(line) if not (t.startswith("[") and t.endswith("]"))]
            assert argv[0] == "tprbench", line
            out.append(argv[1:])
    return out


def _study_names() -> dict[str, Path]:
    import tomllib

    names = {}
    for path in (ROOT / "studies").glob("*.toml"):  # other files there (e.g. claims tables) have no [study]
        name = tomllib.loads(path.read_text()).get("study", {}).get("name")
        if name:
            names[name] = path
    return names


def test_the_readme_says_how_to_reach_tprbench() -> None:
    text = README.read_text()
    assert re.match(r"# tprbench\n\n```bash\nbash scripts/install\.sh && (\w+=[\w.-]+ )*\.venv/bin/tprbench run studies/quickstart\.toml ", text)
    everyday = text[text.index("## Everyday commands") :]
    assert "source .venv/bin/activate" in everyday.split("```")[0] and ".venv/bin/tprbench" in everyday.split("```")[0]


def test_every_everyday_command_parses_and_names_studies_that_exist() -> None:
    from harness.cli import build_parser

    commands = everyday_commands()
    assert len(commands) >= 12
    names = _study_names()
    for argv in commands:
        args = build_parser().parse_args(argv)  # SystemExit(2) on an option the CLI does not have
        n = STUDY_ARGS.get(argv[0], 1 if argv[:2] == ["study", "show"] else 0)
        given = [a for a in argv[1 + (argv[0] == "study") :] if not a.startswith("-")][:n]
        for study in given:
            assert (ROOT / study).is_file() or study in names, f"{' '.join(argv)}: no study {study!r}"
        assert args.command == argv[0]


@pytest.mark.parametrize("argv", [["units", "--dim", "64"], ["tasks"]], ids=["units", "tasks"])
def test_cheap_everyday_commands_run(argv: list[str], capsys) -> None:
    from harness.cli import main

    assert argv in everyday_commands()
    assert main(argv) == 0
    out = capsys.readouterr().out
    if argv[0] == "units":
        assert "params of one layer of each unit" in " ".join(out.split())


def _readme_rows() -> list[dict[str, str]]:
    block = README.read_text().split("| arch |", 1)[1]
    header = ["arch", *[c.strip() for c in block.splitlines()[0].split("|")[:-1]]]
    rows = []
    for line in block.splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, [c.strip() for c in line.split("|")[1:-1]], strict=True)))
    return rows


def _spec(unit: str, roles: str) -> str:
    """The table's unit column and roles column as one unit spec."""
    if roles in ("–", ""):
        return unit
    name, _, opts = unit.partition("[")
    return f"{name}[roles={roles}" + (f",{opts}" if opts else "]")


def test_quickstart_parameter_counts_are_of_the_tasks_two_layer_encoder() -> None:
    import units
    from tasks.logic.meta import LogicOptions

    layers = LogicOptions().layers
    assert layers == 2
    rows = _readme_rows()
    assert len(rows) == 8
    committed = (
        subprocess.run(["git", "show", "HEAD:reports/quickstart/table.md"], cwd=ROOT, capture_output=True, text=True).stdout
        or (ROOT / "reports" / "quickstart" / "table.md").read_text()
    )
    for row in rows:
        spec = _spec(row["unit"], row["roles"])
        one_layer = units.param_counts(spec, 16, 16).formula
        assert int(row["# params"].replace(",", "")) == layers * one_layer, spec
        line = f"| {row['arch']} | 16 | {row['unit']} | {row['roles']} | "
        assert line in committed and f"| {row['# params']} | {row['# params (total)']} |" in committed, spec
    text = " ".join(README.read_text().split())
    assert "twice what `tprbench units --dim 16` shows for one layer (GRU: 1,536 per layer, 3,072 here)" in text
    assert units.param_counts("gru", 16, 16).formula == 1536


def test_report_provenance_says_what_the_parameter_columns_count() -> None:
    from harness.report.write import PARAMS_NOTE

    assert "all its layers" in PARAMS_NOTE and "`tprbench units`" in PARAMS_NOTE


def test_cluster_sample_output_matches_the_study_and_the_driver(monkeypatch) -> None:
    from harness.commands.run import watch_hint
    from harness.study.cells import expand
    from harness.study.load import load_study

    sample = _block(CLUSTER.read_text(), "What it prints", "text").splitlines()
    command = _block(CLUSTER.read_text(), "## 3. The study", "bash").replace("\\\n", " ")
    study_file = shlex.split(command)[2]
    # The study names its data as ${TPRBENCH_DATA}/...; only its cells are counted, so the value does not matter
    # (as in test_cell_ids_pinned.py).
    monkeypatch.setenv("TPRBENCH_DATA", "/nonexistent")
    study = load_study(ROOT / study_file)
    cells = expand(study)
    n, trials, seeds = len(cells), len(cells) * study.study.trials, len(cells) * study.study.seeds
    assert sample[0] == f"tprbench run {study_file}: {n} cells · root /shared/runs"
    assert sample[1] == f"watch: {watch_hint('http://mlflow-host:5000')}"
    stamp = r"\[\d\d:\d\d:\d\d\] "
    expected = [
        rf"{stamp}opening the record \(http://mlflow-host:5000\)",
        rf"{stamp}preparing data for logic \(/shared/data/logical_entailment\)",
        rf"{stamp}no train.txt in /shared/data/logical_entailment: generating train: 0/100,000 lines · elapsed 0:00:00",
        rf"{stamp}no train.txt in /shared/data/logical_entailment: generating train: [\d,]+/100,000 lines · "
        r"elapsed [\d:]+ · ETA [\d:]+",
        rf"{stamp}data for logic ready in [\d.]+ s",
        rf"{stamp}connecting to Ray at HEAD_IP:6379",
        rf"{stamp}Ray ready in [\d.]+ s; planning {n} cell\(s\)",
        rf"{n} cells, \d+ trial slot\(s\); tracking http://mlflow-host:5000",
        rf"{stamp}0/{n} cells done · trials \d+/{trials} · seeds 0/{seeds} · \d+ running · elapsed [\d:]+ · ETA [\d:]+",
    ]
    for pattern, line in zip(expected, sample[2:], strict=False):
        assert re.fullmatch(pattern, line), (pattern, line)
    from tasks.logic.meta import LogicOptions

    assert LogicOptions().train_size == 100_000  # the sample's generated training pairs
    assert "logical_entailment" in str(cells[0].data)


def test_cluster_resume_message_is_the_drivers() -> None:
    """docs/cluster.md quotes the resume line; its wording is the driver's."""
    import inspect

    from harness.driver.runner import StudyRunner

    quoted = re.search(r"`(resuming: [^`]+)`", " ".join(CLUSTER.read_text().split())).group(1)
    source = inspect.getsource(StudyRunner._say_resume)
    for part in re.sub(r"\d+", "", quoted).removeprefix("resuming: ").split(", "):
        assert part.strip() in re.sub(r"\{[^}]*\}", "", source), part


def test_the_browser_checks_last_recorded_run_passed() -> None:
    """The browser check runs on a schedule (scripts/browser_check.sh, docs/browser-check.md says
    why not in CI); its last recorded run must have passed, on a commit of this repository."""
    doc = (ROOT / "docs" / "browser-check.md").read_text()
    rows = [ln for ln in doc.splitlines() if re.match(r"\| \d{4}-\d\d-\d\d \d\d:\d\d \|", ln)]
    assert rows, "docs/browser-check.md records no run: run bash scripts/browser_check.sh"
    date, commit, result, seconds, chromium, dashboard = (c.strip() for c in rows[-1].strip("|").split("|"))
    assert result == "passed", f"the last browser check ({date}, {commit}) {result}: rerun scripts/browser_check.sh"
    assert chromium != "none" and dashboard != "none"
    sha = commit.removesuffix("-dirty")
    known = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=ROOT, capture_output=True)
    assert known.returncode == 0 or not (ROOT / ".git").exists(), f"{commit}: not a commit of this repository"


# Docs that cannot drift: the README lists every doc, the map stays a map, and what it names exists.

ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
MAP_MAX_LINES = 350


def test_the_readme_links_every_doc_and_the_reports_index() -> None:
    text = README.read_text()
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    missing = [name for name in docs if f"docs/{name}" not in text]
    assert not missing, f"README.md's Documentation section does not link {missing}"
    assert "reports/README.md" in text
    assert len(text.splitlines()) <= 130, "README.md grew past ~130 lines: results go to reports/README.md, detail to docs/"


def test_the_reports_index_lists_every_report_folder() -> None:
    text = (ROOT / "reports" / "README.md").read_text()
    folders = sorted(p.name for p in (ROOT / "reports").iterdir() if p.is_dir())
    assert [f for f in folders if f"[`{f}/`]({f}/)" not in text] == []


def test_architecture_is_a_map() -> None:
    n = len(ARCHITECTURE.read_text().splitlines())
    assert n <= MAP_MAX_LINES, f"docs/ARCHITECTURE.md has {n} lines (at most {MAP_MAX_LINES}): move detail into a focused docs/ page"


def map_paths() -> list[str]:
    """Every repository path docs/ARCHITECTURE.md names in backticks (`units/tpru.py`, `harness/record/`)."""
    text = ARCHITECTURE.read_text()
    pattern = r"`((?:units|tasks|harness|tests|scripts|studies|records|reports|docs)/[\w./-]*)`"
    return sorted({m for m in re.findall(pattern, text) if "<" not in m})


def test_every_path_the_map_names_exists() -> None:
    paths = map_paths()
    assert len(paths) >= 60, "the map names the modules by their paths"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_doc_the_map_and_the_docs_name_exists() -> None:
    """`docs/x.md` named anywhere in README.md or docs/ is a file (a moved section leaves no dead name)."""
    for page in [README, *(ROOT / "docs").glob("*.md")]:
        for name in set(re.findall(r"docs/([\w-]+\.md)", page.read_text())):
            assert (ROOT / "docs" / name).is_file(), f"{page.name} names docs/{name}"


# Commands' default outputs: a command run with its defaults leaves no tracked file changed and no
# untracked file outside an ignored folder. These defaults write where a user means to publish
# (regenerating a committed report byte for byte from its record), so they are the exceptions.
PUBLISHING_DEFAULTS = {("report", "--out"), ("papers", "--out")}
OUTPUT_OPTIONS = {"--out", "--root", "--csv", "--json", "--run-dir", "--to", "--cache"}


def _subparsers(parser, prefix=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _subparsers(sub, (*prefix, name))


def test_default_outputs_go_to_ignored_folders() -> None:
    from harness.cli import build_parser

    checked = []
    for names, sub in _subparsers(build_parser()):
        for action in sub._actions:
            flag = next((s for s in action.option_strings if s in OUTPUT_OPTIONS), None)
            if flag is None or not isinstance(action.default, str) or (names[0], flag) in PUBLISHING_DEFAULTS:
                continue
            probe = f"{action.default.rstrip('/')}/probe-file"
            ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", probe], cwd=ROOT).returncode == 0
            assert ignored, f"tprbench {' '.join(names)} {flag} defaults to {action.default!r}, not an ignored folder (.gitignore)"
            checked.append((names, flag))
    assert (("gradients",), "--out") in checked and (("run",), "--root") in checked
    source = (ROOT / "harness" / "commands" / "interpret.py").read_text()
    assert 'Path("runs") / "interpret"' in source  # its default is computed from the run id
