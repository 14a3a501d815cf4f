"""The claims file of `tprbench papers` is data a researcher edits: what it may not say.

Before: `paper_number = nan`, `inf` or `1e309` (inf in TOML) decided "did not hold"; `tolerance =
inf` made every claim "held"; `scale = nan` printed "nan (2 seeds)"; a `record` path that does not
exist, is a file or an empty folder read "not yet run", so a typo hid a claim; a binary claims file
was a traceback; a NUL and raw HTML in a claim's text went into README.md and claims.csv as they
were. Now every number is finite and in range, every record path is a record folder, control
characters are refused in one line naming the claim and the field, and text is escaped for
Markdown (raw HTML, table pipes) and CSV (the csv module's quoting).
"""

from __future__ import annotations

import csv
import io
import subprocess
from pathlib import Path

import pytest

from harness.report.papers import PapersError, evaluate, load_claims, write_papers
from tests.ray_helpers import TPRBENCH

REPO = Path(__file__).resolve().parents[1]

CLAIM = """
[[claims]]
id = "{id}"
seed = "000"
paper = "P"
where = "Table 1"
claim = "{text}"
paper_value = "0.5"
paper_number = {paper_number}
study = "studies/quickstart.toml"
record = "{record}"
measure = {{ select = {{ unit = "gru" }}, metric = "best_valid_acc", scale = {scale} }}
verdict = {{ rule = "within", tolerance = {tolerance} }}
budget = {{ data = {data}, epochs = 0.1, size = 1.0 }}
"""


def _claims(tmp: Path, **kw: object) -> Path:
    values = dict(id="c", text="a claim", paper_number=0.5, record=".", scale=1.0, tolerance=0.1, data=0.5) | kw
    path = tmp / "claims.toml"
    path.write_text('title = "claims"\n' + CLAIM.format(**values))
    return path


NUMBERS = {
    "paper_number = nan": ({"paper_number": "nan"}, "claim c: paper_number: Input should be a finite number"),
    "paper_number = inf": ({"paper_number": "inf"}, "claim c: paper_number: Input should be a finite number"),
    "paper_number = 1e309": ({"paper_number": "1e309"}, "claim c: paper_number: Input should be a finite number"),
    "paper_number = -1e300": ({"paper_number": "-1e300"}, "claim c: paper_number: Input should be greater than or equal to -1000000000000"),
    "tolerance = inf": ({"tolerance": "inf"}, "claim c: verdict.tolerance: Input should be a finite number"),
    "scale = nan": ({"scale": "nan"}, "claim c: measure.scale: Input should be a finite number"),
    "scale = 0": ({"scale": "0"}, "claim c: measure.scale: Input should be greater than 0"),
    "budget data = inf": ({"data": "inf"}, "claim c: budget.data: Input should be a finite number"),
}


@pytest.mark.parametrize("case", list(NUMBERS))
def test_every_number_is_finite_and_in_range(case, tmp_path) -> None:
    values, message = NUMBERS[case]
    with pytest.raises(PapersError) as err:
        load_claims(_claims(tmp_path, **values))
    assert message in str(err.value) and "claims.toml" in str(err.value), err.value
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["missing", "a file", "an empty folder"])
def test_a_record_path_that_is_no_record_is_an_error_not_not_yet_run(kind, tmp_path) -> None:
    place = tmp_path / "rec"
    if kind == "a file":
        place.write_text("x")
    elif kind == "an empty folder":
        place.mkdir()
    why = {"missing": "no such folder", "a file": "is a file, not a record folder", "an empty folder": "holds no record (no mlflow.db file"}[kind]
    with pytest.raises(PapersError) as err:
        evaluate(load_claims(_claims(tmp_path, record=str(place))), REPO)
    assert str(err.value).startswith(f"claim c: record {place}: {why}"), err.value


def test_a_control_character_is_refused_naming_the_claim_and_field(tmp_path) -> None:
    with pytest.raises(PapersError) as err:
        load_claims(_claims(tmp_path, text="held\\u0000 by a NUL"))
    assert "claim c: claim: contains the control character U+0000 (character 5)" in str(err.value), err.value


def test_raw_html_and_pipes_are_escaped_in_markdown_and_quoted_in_csv(tmp_path) -> None:
    """A claim's text as a reader of README.md and a CSV parser see it: as written."""
    text = 'a <script>alert(1)</script> & &amp; <img src=x onerror=y> | 1.12 < 36.4, "quoted"'
    toml_text = text.replace('"', '\\"')
    body = (
        f'title = "claims <b>bold</b>"\n[[claims]]\nid = "c"\nseed = "000"\npaper = "P"\nwhere = "W"\nclaim = "{toml_text}"\n'
        f'paper_value = "1"\ncluster = {{ estimate = "e" }}\nnote = "<!-- hidden -->"\n'
    )
    (tmp_path / "claims.toml").write_text(body)
    write_papers(tmp_path / "claims.toml", tmp_path / "out", tmp_path, "tprbench papers")
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "<script" not in readme and "<img" not in readme and "<b>" not in readme and "<!--" not in readme
    assert "&lt;script>alert(1)&lt;/script> & &amp;amp; &lt;img src=x onerror=y> \\| 1.12 < 36.4" in readme
    assert readme.startswith("# claims &lt;b>bold&lt;/b>\n") and "- `c`: &lt;!-- hidden -->" in readme
    rows = list(csv.reader(io.StringIO((tmp_path / "out" / "claims.csv").read_text())))
    assert rows[1][4] == text  # the csv module quotes the comma and the quotes: the field reads back whole


def test_a_binary_claims_file_is_one_line_from_the_real_command(tmp_path) -> None:
    claims = tmp_path / "claims.bin"
    claims.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    proc = subprocess.run(
        [TPRBENCH, "papers", str(claims), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == f"tprbench papers: error: claims file {claims}: not UTF-8 text (byte 0x89 at offset 0); give the TOML claims file"
    assert not (tmp_path / "out").exists()
