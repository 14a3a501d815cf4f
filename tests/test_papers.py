"""`tprbench papers`: claims measured from a record, verdicts, byte-identical output, clear errors,
and the committed reports/papers/ regenerated from the committed records byte for byte."""

from __future__ import annotations

import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report.papers import (
    HELD,
    IN_PROGRESS,
    NOT_HELD,
    NOT_REACHABLE,
    NOT_READ,
    NOT_RUN,
    SHORT,
    UNCHECKED,
    PapersError,
    evaluate,
    load_claims,
    write_papers,
)
from tasks.result import paused_reason

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    """A synthetic record of the quickstart's cells (harness.bench.record: real MLflow runs with
    random numbers, no training): 8 cells × 3 seeds, study file under studies/."""
    from harness.bench.record import CASES, build

    root = tmp_path_factory.mktemp("papers")
    build(CASES["quickstart"], root, say=lambda *a: None)
    return root


def _seed_values(root: Path, unit: str, key: str = "best_valid_acc") -> list[float]:
    """The metric of a unit's final-phase runs, read straight from MLflow's tables (independent of
    the harness's readers)."""
    con = sqlite3.connect(root / "mlflow.db")
    rows = con.execute(
        "SELECT m.value FROM latest_metrics m JOIN tags u ON u.run_uuid = m.run_uuid AND u.key = 'tprbench.unit' "
        "JOIN tags p ON p.run_uuid = m.run_uuid AND p.key = 'tprbench.phase' "
        "WHERE m.key = ? AND u.value = ? AND p.value = 'final'",
        (key, unit),
    ).fetchall()
    return sorted(r[0] for r in rows)


def _claims(tmp: Path, body: str) -> Path:
    path = tmp / "claims.toml"
    path.write_text('title = "test claims"\n' + body)
    return path


CLAIM = """
[[claims]]
id = "{id}"
seed = "000"
paper = "P"
where = "Table 1"
claim = "c"
paper_value = "{pv}"
paper_number = {pn}
study = "studies/quickstart.toml"
record = "{record}"
measure = {measure}
verdict = {verdict}
budget = {{ data = 0.5, epochs = 0.1, size = 1.0 }}
"""


def claim(id: str, measure: str, verdict: str, pn: float = 0.7, record: str = ".") -> str:
    return CLAIM.format(id=id, pv=pn, pn=pn, record=record, measure=measure, verdict=verdict)


def _other_study_record(tmp: Path) -> Path:
    """A record folder holding another study's runs only (the golden record): there the claim's study
    is "not yet run". A record path that is no record folder at all is an error (test_papers_input.py)."""
    import gzip
    import shutil

    folder = tmp / "other-record"
    folder.mkdir()
    with gzip.open(REPO / "tests" / "fixtures" / "record-v1" / "mlflow.db.gz", "rb") as src, open(folder / "mlflow.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return folder


def test_measures_and_verdicts(record, tmp_path):
    gru, lstm = _seed_values(record, "gru"), _seed_values(record, "lstm")
    assert len(gru) == 3 and len(lstm) == 3
    body = (
        claim(
            "gru-near",
            '{ select = { unit = "gru" }, metric = "best_valid_acc", scale = 100.0 }',
            '{ rule = "within", tolerance = 0.001 }',
            pn=round(100 * statistics.mean(gru), 6),
        )
        + claim("gru-far", '{ select = { unit = "gru" }, metric = "best_valid_acc" }', '{ rule = "within", tolerance = 0.001 }', pn=5.0)
        + claim("lstm", '{ select = { unit = "lstm" }, metric = "best_valid_acc" }', '{ rule = "at_least", value = 0.0 }')
        + claim("gru-vs-lstm", '{ select = { unit = "gru" }, metric = "best_valid_acc" }', '{ rule = "above_claim", claim = "lstm" }')
        + claim(
            "gru-near-lstm", '{ select = { unit = "gru" }, metric = "best_valid_acc" }', '{ rule = "within_claim", claim = "lstm", tolerance = 1.0 }'
        )
        + claim(
            "gru-far-lstm", '{ select = { unit = "gru" }, metric = "best_valid_acc" }', '{ rule = "within_claim", claim = "lstm", tolerance = 0.0 }'
        )
        + claim(  # one-sided: GRU at most LSTM's value (+ 0), whichever is larger here
            "gru-at-most-lstm",
            '{ select = { unit = "gru" }, metric = "best_valid_acc" }',
            '{ rule = "at_most_claim", claim = "lstm", tolerance = 0.0 }',
        )
        + claim(  # the other way round: the lower of the two holds, where within_claim at 0 fails both
            "lstm-at-most-gru",
            '{ select = { unit = "lstm" }, metric = "best_valid_acc" }',
            '{ rule = "at_most_claim", claim = "gru-far", tolerance = 0.0 }',
        )
        + claim("all-tpru", '{ select = { unit = "tpru*" }, metric = "best_valid_acc", over = "cells" }', '{ rule = "at_most", value = 1.0 }')
        + claim(
            "count", '{ select = { unit = "*" }, metric = "best_valid_acc", over = "count_above", above = 0.7 }', '{ rule = "at_most", value = 8 }'
        )
        + claim(
            "needs-more", '{ select = { unit = "gru" }, metric = "best_valid_acc", over = "cells", cells = 2 }', '{ rule = "at_most", value = 1.0 }'
        )
        + claim(
            "no-record",
            '{ select = { unit = "gru" }, metric = "best_valid_acc" }',
            '{ rule = "at_most", value = 1.0 }',
            record=str(_other_study_record(tmp_path)),
        )
        + '\n[[claims]]\nid = "cluster"\nseed = "004"\npaper = "P"\nwhere = "T"\nclaim = "c"\npaper_value = "1"\n'
        'cluster = { study = "studies/quickstart.toml", estimate = "1,000 core-hours" }\n'
    )
    rows = {r.claim.id: r for r in evaluate(load_claims(_claims(tmp_path, body)), record)}

    assert rows["gru-near"].ours.value == pytest.approx(100 * statistics.mean(gru))
    assert rows["gru-near"].verdict == HELD and rows["gru-far"].verdict == UNCHECKED
    sd = 100 * statistics.stdev(gru)
    assert rows["gru-near"].ours.text == f"{100 * statistics.mean(gru):.2f} ± {sd:.2f} (3 seeds)"
    assert rows["gru-vs-lstm"].verdict == (HELD if statistics.mean(gru) > statistics.mean(lstm) else UNCHECKED)
    assert rows["gru-near-lstm"].verdict == HELD  # accuracies differ by less than 1
    assert rows["gru-far-lstm"].verdict == (HELD if statistics.mean(gru) == statistics.mean(lstm) else UNCHECKED)
    assert statistics.mean(gru) != statistics.mean(lstm)  # so exactly one of the two one-sided rows holds
    assert rows["gru-at-most-lstm"].verdict == (HELD if statistics.mean(gru) < statistics.mean(lstm) else UNCHECKED)
    assert rows["lstm-at-most-gru"].verdict == (HELD if statistics.mean(lstm) < statistics.mean(gru) else UNCHECKED)
    tpru_units = ["tpru-mod1[roles=8]", "tpru-mod2[roles=8]", "tpru-mod3[roles=8]", "tpru[roles=16]", "tpru[roles=8,slices=8]", "tpru[roles=8]"]
    cell_means = [statistics.mean(_seed_values(record, u)) for u in tpru_units]
    assert rows["all-tpru"].ours.value == pytest.approx(statistics.mean(cell_means))
    all_units = tpru_units + ["gru", "lstm"]
    assert rows["count"].ours.value == sum(statistics.mean(_seed_values(record, u)) > 0.7 for u in all_units)
    assert rows["needs-more"].verdict == IN_PROGRESS and "1 of 2 cells" in rows["needs-more"].ours.progress
    assert rows["no-record"].verdict == NOT_RUN and rows["no-record"].ours.value is None
    assert rows["cluster"].verdict == NOT_REACHABLE


def _with_authors(body: str, authors: str) -> str:
    """A claim body with an `authors_code` line added after its budget."""
    return body.replace("budget = {", authors + "\nbudget = {", 1)


def test_did_not_hold_is_a_verdict_only_where_the_authors_code_fails_too(record, tmp_path):
    """Ours fails every claim below. With the authors' code at the same budget failing too: "did not
    hold"; meeting it: "short of the authors' code" (a reproduction fault); not run: unchecked. A
    number from their code on some cells only is a lower bound (a count of failed cells, or a mean
    of errors with the cells not run at 0): it decides a failure once past what the rule allows,
    nothing else."""
    (record / "authors.md").write_text("their runs\n")
    gru = '{ select = { unit = "gru" }, metric = "best_valid_acc" }'
    far = '{ rule = "within", tolerance = 0.001 }'
    count = '{ select = { unit = "*" }, metric = "best_valid_acc", over = "count_above", above = 0.0 }'
    body = (
        _with_authors(claim("both-fail", gru, far, pn=5.0), 'authors_code = { value = 4.0, text = "4.0", source = "authors.md" }')
        + _with_authors(claim("theirs-holds", gru, far, pn=5.0), 'authors_code = { value = 5.0, text = "5.0", source = "authors.md" }')
        + claim("unchecked", gru, far, pn=5.0)
        + _with_authors(
            claim("count-bound-past", count, '{ rule = "at_most", value = 1 }'),
            'authors_code = { value = 2, text = "2 of 3 run", source = "authors.md", covers = "some" }',
        )
        + _with_authors(
            claim("count-bound-short", count, '{ rule = "at_most", value = 1 }'),
            'authors_code = { value = 1, text = "1 of 3 run", source = "authors.md", covers = "some" }',
        )
        + _with_authors(
            claim("some-within", gru, far, pn=5.0), 'authors_code = { value = 5.0, text = "5.0", source = "authors.md", covers = "some" }'
        )
        + _with_authors(
            claim("some-above", gru, far, pn=5.0), 'authors_code = { value = 5.01, text = ">= 5.01", source = "authors.md", covers = "some" }'
        )
        + _with_authors(
            claim("some-at-least", gru, '{ rule = "at_least", value = 9.0 }'),
            'authors_code = { value = 1.0, text = ">= 1", source = "authors.md", covers = "some" }',
        )
        + _with_authors(
            claim("ours-holds", gru, '{ rule = "at_most", value = 1.0 }'), 'authors_code = { value = 9.0, text = "9", source = "authors.md" }'
        )
    )
    rows = {r.claim.id: r for r in evaluate(load_claims(_claims(tmp_path, body)), record)}
    assert rows["both-fail"].verdict == NOT_HELD
    assert rows["theirs-holds"].verdict == SHORT
    assert rows["unchecked"].verdict == UNCHECKED
    assert rows["count-bound-past"].verdict == NOT_HELD  # 8 cells over 0 here; theirs: at least 2 > 1
    assert rows["count-bound-short"].verdict == UNCHECKED  # theirs: at least 1, may be more
    assert rows["some-within"].verdict == UNCHECKED  # a bound of 5.0 may still be within 5.0 ± 0.001
    assert rows["some-above"].verdict == NOT_HELD  # theirs is at least 5.01: past 5.0 + 0.001
    assert rows["some-at-least"].verdict == UNCHECKED  # a lower bound never shows "at least" failing
    assert rows["ours-holds"].verdict == HELD  # their number does not matter where ours holds


def test_the_authors_code_column_and_its_errors(record, tmp_path):
    gru = '{ select = { unit = "gru" }, metric = "best_valid_acc" }'
    body = _with_authors(
        claim("c", gru, '{ rule = "within", tolerance = 0.001 }', pn=5.0),
        'authors_code = { value = 4.0, text = "4.0 ± 0.1 (6 seeds)", source = "authors-column.md" }',
    )
    (record / "authors-column.md").write_text("their runs\n")
    out = tmp_path / "out"
    write_papers(_claims(tmp_path, body), out, record, "tprbench papers")
    readme = (out / "README.md").read_text()
    assert "| authors' code |" in readme and "4.0 ± 0.1 (6 seeds) ([runs](../../authors-column.md))" in readme
    assert "4.0 ± 0.1 (6 seeds),4.0" in (out / "claims.csv").read_text()
    (record / "authors-column.md").unlink()
    with pytest.raises(PapersError, match=r"claim c: authors_code.source authors-column.md not found"):
        evaluate(load_claims(_claims(tmp_path, body)), record)
    compare = _with_authors(
        claim("d", gru, '{ rule = "above_claim", claim = "c" }'), 'authors_code = { value = 4.0, text = "4", source = "authors-column.md" }'
    )
    with pytest.raises(PapersError, match=r"claim d: authors_code needs a measured claim whose rule is within, at_most or at_least"):
        load_claims(_claims(tmp_path, body + compare))


def test_written_report_is_byte_identical_and_names_its_command(record, tmp_path):
    body = claim("gru", '{ select = { unit = "gru" }, metric = "best_valid_acc" }', '{ rule = "at_most", value = 1.0 }')
    path = _claims(tmp_path, body)
    _rows, files = write_papers(path, tmp_path / "a", record, "tprbench papers X")
    first = {f.name: f.read_bytes() for f in files}
    write_papers(path, tmp_path / "b", record, "tprbench papers X")
    assert first == {f.name: (tmp_path / "b" / f.name).read_bytes() for f in files}
    text = first["README.md"].decode()
    assert "`tprbench papers X`" in text and "| 000 |" in text and "5%" in text  # budget 0.5 × 0.1 × 1


@pytest.mark.parametrize(
    "body, message",
    [
        (
            '[[claims]]\nid = "x"\nseed = "0"\npaper = "P"\nwhere = "W"\nclaim = "c"\npaper_value = "1"\ncluster = { estimate = "e" }\n',
            "claim x: seed",
        ),
        (claim("a", '{ select = { unit = "gru" }, metric = "m", over = "count_above" }', '{ rule = "at_most", value = 1 }'), "claim a: measure"),
        (
            claim("a", '{ select = { unit = "gru" }, metric = "m" }', '{ rule = "below_claim", claim = "nope" }'),
            "verdict.claim 'nope' is not a claim id",
        ),
        (claim("a", '{ select = { unit = "gru" }, metric = "m" }', '{ rule = "at_most" }'), "rule 'at_most' needs `value`"),
        (claim("a", '{ select = { colour = "gru" }, metric = "m" }', '{ rule = "at_most", value = 1 }'), "claim a: measure.select.colour"),
    ],
)
def test_bad_claims_file_says_what_and_where(tmp_path, body, message):
    with pytest.raises(PapersError) as err:
        load_claims(_claims(tmp_path, body))
    assert message in str(err.value) and "claims.toml" in str(err.value)


def test_a_measure_over_seeds_must_select_one_cell(record, tmp_path):
    body = claim("two", '{ select = { unit = "tpru*" }, metric = "best_valid_acc" }', '{ rule = "at_most", value = 1 }')
    with pytest.raises(PapersError, match="selects 6 cells"):
        evaluate(load_claims(_claims(tmp_path, body)), record)


def test_committed_papers_report_regenerates_byte_for_byte(tmp_path, data_root):
    """reports/papers/ is what `tprbench papers` writes from the committed records and claims (the
    study files name their data under $TPRBENCH_DATA: `data_root` skips without it)."""
    committed = REPO / "reports" / "papers"
    if not (committed / "README.md").is_file():
        pytest.skip("reports/papers/ is not committed yet")
    out = tmp_path / "papers"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "papers", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for name in ("README.md", "claims.csv"):
        assert (out / name).read_text() == (committed / name).read_text(), name


def _set_status(copy: Path, unit: str, seeds: tuple[str, ...], status: str) -> list[str]:
    """Give some final-phase seed runs of a unit another status tag, by hand (the record's tables);
    their run ids."""
    con = sqlite3.connect(copy / "mlflow.db")
    runs = []
    for seed in seeds:
        (run,) = con.execute(
            "SELECT u.run_uuid FROM tags u JOIN tags p ON p.run_uuid = u.run_uuid AND p.key = 'tprbench.phase' "
            "AND p.value = 'final' JOIN tags s ON s.run_uuid = u.run_uuid AND s.key = 'tprbench.seed' AND s.value = ? "
            "WHERE u.key = 'tprbench.unit' AND u.value = ?",
            (seed, unit),
        ).fetchone()
        con.execute("UPDATE tags SET value = ? WHERE run_uuid = ? AND key = 'tprbench.status'", (status, run))
        runs.append(run)
    con.commit()
    con.close()
    return runs


def test_paused_seeds_give_their_values_but_keep_the_claim_in_progress(record, tmp_path, monkeypatch):
    """A seed paused by `run --until-epoch` has its best-so-far numbers: they are averaged, but the
    seed has not ended, so the measure is in progress (a verdict waits for the last epoch)."""
    import shutil

    monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", "0")  # the tag is edited by hand below
    copy = tmp_path / "rec"
    shutil.copytree(record, copy, ignore=shutil.ignore_patterns("cache"))
    (run,) = _set_status(copy, "gru", ("0",), "paused")
    con = sqlite3.connect(copy / "mlflow.db")
    con.execute("DELETE FROM tags WHERE run_uuid = ? AND key = 'tprbench.reason'", (run,))
    con.execute("INSERT INTO tags (key, value, run_uuid) VALUES ('tprbench.reason', ?, ?)", (paused_reason(7, 90, 7), run))
    con.commit()
    con.close()
    body = claim("gru", '{ select = { unit = "gru" }, metric = "best_valid_acc" }', '{ rule = "at_most", value = 1.0 }')
    (row,) = evaluate(load_claims(_claims(tmp_path, body)), copy)
    gru = _seed_values(copy, "gru")
    assert row.ours.value == pytest.approx(statistics.mean(gru))  # all three seeds' values
    assert "1 paused at epoch 7, best so far" in row.ours.text and row.verdict == IN_PROGRESS
    assert row.ours.runs == 2 and row.ours.progress == "ended: 0 of 1 cell × 3 seeds (2 runs)"  # "1 cells" read as a typo


def test_a_diverged_seed_is_left_out_or_fails_its_cell_as_the_claim_says(record, tmp_path, monkeypatch):
    """Left out (the default), a cell whose every seed diverged is not counted at all and one with a
    seed left is counted from the others; `diverged = "failed"` counts both cells as failed — the
    authors' loop reports such a seed at its best validation before the NaN. Either way the seeds
    ended, so the measure is complete."""
    import shutil

    monkeypatch.setenv("TPRBENCH_RECORD_SUMMARY", "0")  # the tags are edited by hand below
    copy = tmp_path / "rec"
    shutil.copytree(record, copy, ignore=shutil.ignore_patterns("cache"))
    _set_status(copy, "gru", ("0", "1", "2"), "diverged")
    _set_status(copy, "lstm", ("0",), "diverged")
    above = 2.0  # no accuracy is above it: only diverged cells can count
    count = '{{ select = {{ unit = "*" }}, metric = "best_valid_acc", over = "count_above", above = {a}{d} }}'
    body = claim("left-out", count.format(a=above, d=""), '{ rule = "at_most", value = 0 }') + claim(
        "failed", count.format(a=above, d=', diverged = "failed"'), '{ rule = "at_most", value = 0 }'
    )
    rows = {r.claim.id: r for r in evaluate(load_claims(_claims(tmp_path, body)), copy)}
    assert rows["left-out"].ours.value == 0 and rows["left-out"].ours.text == "0 of 7 (4 seeds diverged)"
    assert rows["failed"].ours.value == 2 and rows["failed"].ours.text == "2 of 8 (4 seeds diverged, counted as failed)"
    assert rows["left-out"].verdict == HELD and rows["failed"].ours.complete and rows["failed"].verdict == UNCHECKED
    with pytest.raises(PapersError, match=r'diverged = "failed" counts cells as failed: it needs over = "count_above"'):
        load_claims(
            _claims(tmp_path, claim("x", '{ select = { unit = "gru" }, metric = "m", diverged = "failed" }', '{ rule = "at_most", value = 1 }'))
        )


def test_a_metric_the_finished_runs_do_not_log_is_an_error_not_a_verdict(record, tmp_path):
    """A misspelt metric used to read as "nothing finished" and decide *did not hold*."""
    body = claim("typo", '{ select = { unit = "gru" }, metric = "best_valid_accuracy" }', '{ rule = "at_most", value = 1.0 }')
    with pytest.raises(
        PapersError,
        match=r"claim typo \(\.\): metric 'best_valid_accuracy' is not in the record's "
        r"finished run .*it logs: .*best_valid_acc",
    ):
        evaluate(load_claims(_claims(tmp_path, body)), record)


def test_a_claim_names_a_unit_as_its_study_file_does():
    """The record writes unit specs with their options sorted; a claim that copies the study
    file's `lstm[layers=1,bidirectional=true]` selects that cell all the same."""
    from harness.report.papers import _matches

    cell = {"unit": "lstm[bidirectional=true,layers=1]", "unit_canonical": "lstm[bidirectional=true,layers=1]"}
    assert _matches(cell, {"unit": "lstm[layers=1,bidirectional=true]"})
    assert _matches(cell, {"unit": "lstm[bidirectional=true,layers=1]"})
    assert not _matches(cell, {"unit": "lstm[layers=2,bidirectional=true]"})
    assert _matches(cell, {"unit": "lstm*"}) and not _matches(cell, {"unit": "gru*"})


PLANNED = """
[[claims]]
id = "planned"
seed = "004"
paper = "P"
where = "Table 3"
claim = "c"
paper_value = "8"
plan = { study = "studies/quickstart.toml", cost = "35 core-hours (measured)", budget = { data = 1.0, epochs = 0.02, size = 1.0, note = "2% of the authors' steps" } }

[[claims]]
id = "unread"
seed = "003"
paper = "P"
where = "Table 5"
claim = "c"
paper_value = "not quoted"
unread = "the paper's text is not readable here"
"""


def test_a_planned_claim_is_not_yet_run_with_its_study_cost_and_budget(record, tmp_path):
    """A claim this machine can run but no record measures yet names no record: its verdict is
    "not yet run" with the study file and the measured cost; its plan's budget fills the column. A
    table whose text was not read is listed with why, and nothing is measured for it."""
    path = _claims(tmp_path, PLANNED)
    rows, files = write_papers(path, tmp_path / "out", record, "tprbench papers")
    verdicts = {r.claim.id: r.verdict for r in rows}
    assert verdicts == {"planned": NOT_RUN, "unread": NOT_READ}
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "not yet run: [studies/quickstart.toml](../../studies/quickstart.toml), 35 core-hours (measured)" in readme
    assert "| 2% (data 1 × epochs 0.02 × size 1) |" in readme and "Budget: 2% of the authors' steps" in readme
    assert "paper table not read here: the paper's text is not readable here" in readme
    csv_rows = (tmp_path / "out" / "claims.csv").read_text().splitlines()
    assert csv_rows[1].startswith("planned,") and ",0.02,not yet run,,studies/quickstart.toml," in csv_rows[1]


@pytest.mark.parametrize(
    "extra, message",
    [
        ("", "a plan, a cluster plan or `unread`"),
        ('plan = { study = "s", cost = "c" }\ncluster = { estimate = "e" }\n', "excludes a measure and a cluster plan"),
    ],
)
def test_a_claim_needs_something_to_say_and_a_plan_stands_alone(tmp_path, extra, message):
    body = '[[claims]]\nid = "x"\nseed = "000"\npaper = "P"\nwhere = "W"\nclaim = "c"\npaper_value = "1"\n' + extra
    with pytest.raises(PapersError, match="claim x") as err:
        load_claims(_claims(tmp_path, body))
    assert message in str(err.value)
