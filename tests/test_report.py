"""Reports from a synthetic MLflow record written exactly as the driver writes it (harness.record.writer)."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
warnings.filterwarnings("ignore", message=".*noload.*")

from harness.driver.cells import params_hash  # noqa: E402
from harness.record.contract import WorkerResult  # noqa: E402
from harness.record.sources import default_tracking_uri  # noqa: E402
from harness.record.writer import Tracker  # noqa: E402

TAG = "tprbench."  # the record's tags as stored (pinned here: harness/record/contract.py defines them)
PHASE = TAG + "phase"

COMMIT = "1234567abcdef"
SEEDS = 3


@dataclass
class FakeCell:
    """Just the fields harness.record.writer reads from a harness.study.cells.Cell."""

    id: str
    task: str
    arch: str
    unit: str
    unit_canonical: str
    dim: int = 16
    input_dim: int = 16
    study: str = "synth"
    epochs: int = 3
    data: str = "generated"
    task_options: dict = field(default_factory=dict)
    task_label: str = ""

    @property
    def label(self) -> str:
        return f"{self.task_label or self.task}/{self.arch}/d{self.dim}/{self.unit}"


def canon(name: str, **opts) -> str:
    base = {"basis_seed": "None", "bidirectional": "false", "impl": "fused", "layers": "1", "roles": "64", "slices": "1"}
    if name in ("gru", "lstm"):
        base = {"bidirectional": "false", "layers": "1"}
    base.update({k: str(v) for k, v in opts.items()})
    return f"{name}[{','.join(f'{k}={v}' for k, v in sorted(base.items()))}]"


GRU = FakeCell("aaaaaaaaaaa1", "logic", "plain", "gru", canon("gru"))
R8 = FakeCell("aaaaaaaaaaa2", "logic", "plain", "tpru[roles=8]", canon("tpru", roles=8))
R32 = FakeCell("aaaaaaaaaaa3", "logic", "plain", "tpru[roles=32]", canon("tpru", roles=32))
R32S8 = FakeCell("aaaaaaaaaaa4", "logic", "plain", "tpru[roles=32,slices=8]", canon("tpru", roles=32, slices=8))
NLI = FakeCell("bbbbbbbbbbb1", "nli", "plain", "lstm", canon("lstm"))
CELLS = [GRU, R8, R32, R32S8, NLI]
LOGIC_SPLITS = ("easy", "hard", "big", "massive", "exam")
BEST = {"lr": 0.001, "batch_size": 64}

# valid accuracy of each final seed (None = diverged, missing key = not run)
VALID = {
    GRU.id: {0: 0.80, 1: 0.82, 2: 0.84},
    R8.id: {0: 0.70, 1: 0.71, 2: 0.75},
    R32.id: {0: 0.90, 1: 0.86, 2: None},
    R32S8.id: {0: 0.92, 1: 0.94},
    NLI.id: {0: 0.61},
}


def result_for(valid: float | None, task: str, seed: int, pruned: bool = False) -> dict:
    if valid is None:
        return {
            "status": "failed",
            "reason": "loss became nan at epoch 2, step 5",
            "metric": "valid_acc",
            "history": [{"epoch": 1, "train_loss": 1.0, "train_acc": 0.5, "valid_acc": 0.5, "valid_loss": 1.0, "lr": 1e-3, "epoch_seconds": 1.0}],
            "test": {},
            "seconds": 2.0,
            "params_formula": 1536,
            "params_total": 1600,
        }
    history = [
        {
            "epoch": e,
            "train_loss": 1.0 / e + seed * 0.01,
            "train_acc": valid - 0.1 / e,
            "valid_acc": valid - 0.05 * (3 - e),
            "valid_loss": 0.5 / e,
            "lr": 1e-3,
            "epoch_seconds": 0.5 + 0.1 * seed,
        }
        for e in (1, 2, 3)
    ]
    if pruned:
        return {
            "status": "pruned",
            "reason": "pruned after epoch 1",
            "metric": "valid_acc",
            "history": history[:1],
            "best_valid": valid,
            "best_epoch": 1,
            "test": {},
            "seconds": 1.0,
            "params_formula": 1536,
            "params_total": 1600,
        }
    # split names as the adapters give them (logic: test_easy ... → metric test_test_easy_acc)
    splits = {"logic": tuple(f"test_{s}" for s in LOGIC_SPLITS), "nli": ("dev_matched", "dev_mismatched")}[task]
    test = {s: {"acc": valid - 0.01 * (i + 1), "loss": 0.3} for i, s in enumerate(splits)}
    return {
        "status": "finished",
        "metric": "valid_acc",
        "history": history,
        "best_valid": valid,
        "best_epoch": 3,
        "test": test,
        "seconds": 3.0,
        "params_formula": 1536,
        "params_total": 1600,
    }


def log(
    tracker: Tracker,
    cell_run: str,
    cell: FakeCell,
    phase: str,
    seed: int,
    params: dict,
    result: dict,
    key: str,
    commit: str = COMMIT,
    trial: int | None = None,
) -> None:
    """What harness.driver.runner.StudyRunner._record writes."""
    from harness.record.writer import cell_tags

    tags = {
        PHASE: phase,
        TAG + "seed": seed,
        TAG + "git_commit": commit,
        TAG + "params_hash": params_hash(params),
        TAG + "params_formula": result["params_formula"],
        TAG + "params_total": result["params_total"],
        TAG + "host": "testhost",
        **cell_tags(cell),
    }
    if trial is not None:
        tags[TAG + "trial"] = trial
    tracker.log_run(cell_run, key, tags, {**params, "seed": seed}, WorkerResult(**result))  # a legacy "failed" stays as written


def plan_final(tracker: Tracker, cell_run: str, params: dict) -> str:
    h = params_hash(params)
    tracker.client.set_tag(cell_run, TAG + "final_params_hash", h)
    tracker.client.set_tag(cell_run, TAG + "final_params", json.dumps(params, sort_keys=True))
    return h


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> SimpleNamespace:
    return build_store(tmp_path_factory.mktemp("record"))


def build_store(root: Path) -> SimpleNamespace:
    """Study `synth` (5 cells: exact seeds, one diverged, one missing, search trials, an old best)
    and study `synth2` (one cell at two commits) in one SQLite store under `root`."""
    uri = default_tracking_uri(root)
    tracker = Tracker(uri, "synth", root / "mlartifacts")
    study_run = tracker.study_run(COMMIT)
    for cell in CELLS:
        if cell is NLI:
            cell.task_label = "nli"
        cr = tracker.cell_run(cell, study_run)
        if cell is GRU:  # search phase: finished, pruned, failed trials
            for n, (v, pruned) in enumerate([(0.78, False), (0.60, True), (None, False)]):
                hp = {"lr": 0.001 * (n + 1), "batch_size": 64}
                log(tracker, cr, cell, "search", 10_000 + n, hp, result_for(v, cell.task, 0, pruned), f"{cell.id}/trial/{n}", trial=n)
            old = {"lr": 0.5, "batch_size": 32}  # a previous best: its seed run must be ignored
            log(tracker, cr, cell, "final", 0, old, result_for(0.10, cell.task, 0), f"{cell.id}/seed/0/{params_hash(old)}")
        h = plan_final(tracker, cr, BEST)
        for seed, v in VALID[cell.id].items():
            log(tracker, cr, cell, "final", seed, BEST, result_for(v, cell.task, seed), f"{cell.id}/seed/{seed}/{h}")

    # a second study: the GRU cell run at two commits with different best params (for compare)
    t2 = Tracker(uri, "synth2", root / "mlartifacts")
    s2 = t2.study_run("bbbb222")
    cell = FakeCell(GRU.id, "logic", "plain", "gru", canon("gru"), study="synth2")
    cr = t2.cell_run(cell, s2)
    first = {"lr": 0.002, "batch_size": 64}
    for seed, v in {0: 0.70, 1: 0.72, 2: 0.74}.items():
        log(t2, cr, cell, "final", seed, first, result_for(v, "logic", seed), f"{cell.id}/seed/{seed}/{params_hash(first)}", commit="aaaa111")
    h = plan_final(t2, cr, BEST)
    for seed, v in {0: 0.90, 1: 0.92, 2: 0.94}.items():
        log(t2, cr, cell, "final", seed, BEST, result_for(v, "logic", seed), f"{cell.id}/seed/{seed}/{h}", commit="bbbb222")
    return SimpleNamespace(root=root, uri=uri)


def test_load_runs_casts_and_counts(store):
    from harness.report import load_cells, load_history, load_runs

    runs = load_runs(store.uri, "synth")
    assert len(runs) == 3 + 1 + sum(len(v) for v in VALID.values())
    assert str(runs["param.batch_size"].dtype) == "Int64" and runs["param.lr"].dtype == "float64"
    assert str(runs["seed"].dtype) == "Int64" and str(runs["dim"].dtype) == "Int64"
    assert set(runs["status"]) == {"finished", "failed", "pruned"}
    assert runs["run_key"].is_unique
    cells = load_cells(store.uri, "synth")
    assert sorted(cells["cell_id"]) == sorted(c.id for c in CELLS)
    assert set(cells["final_params_hash"]) == {params_hash(BEST)}
    hist = load_history(store.uri, "synth", run_ids=list(runs["run_id"][:2]), keys=["train_loss", "valid_acc"])
    assert list(hist.columns) == ["run_id", "key", "step", "value"]
    assert set(hist["key"]) == {"train_loss", "valid_acc"} and hist["step"].max() <= 3


def test_aggregate_exact_values_and_failures(store):
    from harness.report import aggregate, load_cells, load_runs

    agg = aggregate(load_runs(store.uri, "synth"), load_cells(store.uri, "synth"), SEEDS)
    row = lambda cell, split: agg[(agg["cell_id"] == cell.id) & (agg["split"] == split)].iloc[0]  # noqa: E731
    gru = row(GRU, "valid")
    assert gru["n"] == 3 and gru["mean"] == pytest.approx(0.82) and gru["std"] == pytest.approx(0.02)  # old best ignored
    assert row(GRU, "easy")["mean"] == pytest.approx(0.81)
    assert (gru["trials"], gru["trials_pruned"], gru["trials_failed"]) == (3, 1, 1)
    assert gru["best_search"] == pytest.approx(0.78) and gru["best_trial"] == 0
    assert json.loads(gru["final_params"]) == BEST
    assert gru["params_formula"] == 1536 and gru["params_total"] == 1600
    r32 = row(R32, "valid")
    assert (r32["seeds_finished"], r32["seeds_failed"], r32["seeds_missing"]) == (2, 1, 0)
    assert r32["mean"] == pytest.approx(0.88) and r32["std"] == pytest.approx(math.sqrt(0.0008))
    s8 = row(R32S8, "hard")
    assert (s8["seeds_finished"], s8["seeds_failed"], s8["seeds_missing"], s8["missing_seeds"]) == (2, 0, 1, "2")
    nli = row(NLI, "valid")
    assert nli["n"] == 1 and math.isnan(nli["std"]) and nli["seeds_missing"] == 2
    assert set(agg[agg["cell_id"] == NLI.id]["split"]) == {"valid", "dev_matched", "dev_mismatched"}
    assert (row(R32S8, "valid")["roles"], row(R32S8, "valid")["slices"], row(R8, "valid")["slices"]) == (32, 8, 1)
    assert row(GRU, "valid")["order"] < row(R8, "valid")["order"] < row(R32, "valid")["order"] < row(R32S8, "valid")["order"]


def test_tables_mark_failures(store):
    from harness.report import aggregate, load_cells, load_runs, make_table

    agg = aggregate(load_runs(store.uri, "synth"), load_cells(store.uri, "synth"), SEEDS)
    md = make_table(agg, "markdown", ["cmd"])
    assert md.startswith("<!-- cmd -->\n")
    assert "| arch | d | unit | roles | valid | easy | hard | big | massive | exam |" in md
    assert "82.0 ± 2.0" in md and "61.0 ± –" in md
    assert "tpru†" in md and "tpru[slices=8]‡" in md
    assert "1 of 3 seeds diverged (failed seed 2; seed 2: loss became nan" in md
    assert "1 of 3 seeds missing (seed 2: not yet run)" in md
    assert "| dev_matched | dev_mismatched |" in md
    tex = make_table(agg, "latex")
    assert r"\toprule" in tex and r"82.0 $\pm$ 2.0" in tex and r"tpru\textsuperscript{\dag}" in tex and r"\ddag" in tex
    csv = make_table(agg, "csv", ["cmd"])
    assert csv.startswith("cell_id,") and "#" not in csv and "82.0" not in csv.split("\n")[1]  # raw numbers, no comments


def test_report_files_byte_identical_and_cli(store, tmp_path, capsys, monkeypatch):
    import pandas as pd

    monkeypatch.setenv("COLUMNS", "250")  # rich: one line per table row in the captured output

    from harness.cli import main

    out, bench = tmp_path / "rep", tmp_path / "bench.csv"
    bench.write_text(
        "unit,dim,seq,batch,forward_ms,backward_ms,total_ms,ratio_to_gru,params_formula,params_total\n"
        "gru,16,50,64,1.0,2.0,3.0,1.0,1536,1600\ntpru[roles=16],16,50,64,2.0,4.0,6.0,2.0,1536,1600\n"
    )
    argv = ["report", "synth", "--root", str(store.root), "--out", str(out), "--seeds", "3", "--bench", str(bench)]
    assert main(argv) == 0
    names = [
        "table.md",
        "table.tex",
        "table.csv",
        "search.csv",
        "curves_roles.png",
        "curves_roles.svg",
        "curves_slices.png",
        "curves_slices.svg",
        "speed.png",
        "speed.svg",
        "units.png",
        "units.svg",
        "curves.png",
        "curves.svg",
    ]  # every unit compared, learning curves with bands
    first = {n: (out / n).read_bytes() for n in names}
    assert main(argv) == 0
    assert {n: (out / n).read_bytes() for n in names} == first
    printed = capsys.readouterr().out
    assert "tpru[slices=8]‡" in printed and "82.0 ± 2.0" in printed
    md = first["table.md"].decode()
    assert f"tprbench report synth --root {store.root} --out {out} --bench {bench} --seeds 3" in md and COMMIT in md
    table = pd.read_csv(out / "table.csv")  # plain: no comment lines
    assert f"tprbench report synth --root {store.root}" in (out / "provenance.txt").read_text()
    gru = table[table["cell_id"] == GRU.id].iloc[0]
    assert gru["valid_mean"] == pytest.approx(0.82) and gru["valid_n"] == 3 and gru["seeds_failed"] == 0
    assert table[table["cell_id"] == R32.id].iloc[0]["seeds_failed"] == 1
    search = pd.read_csv(out / "search.csv")
    assert search[search["cell_id"] == GRU.id].iloc[0]["trials_pruned"] == 1
    assert b"<dc:date>" not in first["speed.svg"] and b"Matplotlib" not in first["curves_roles.png"]
    # The comparison figure has a bar for every cell with finished seeds, GRU and new units alike,
    # and the curves figure a line per cell (SVG text is drawn as paths, so read the figures).
    from harness.report.aggregate import aggregate
    from harness.report.figures import fig_units
    from harness.report.load import load_record

    runs, cells = load_record(store.uri, "synth")
    agg = aggregate(runs, cells, 3)
    fig = fig_units(agg)
    valid_ax = next(ax for ax in fig.axes if ax.get_visible() and "logic: valid" in ax.get_title())
    ticks = [t.get_text() for t in valid_ax.get_yticklabels()]
    assert ticks == ["gru", "tpru (8 roles)", "tpru (32 roles)", "tpru[slices=8] (32 roles)"], ticks
    assert len(valid_ax.patches) == 4  # bars: mean over seeds, with ± std error bars


def test_report_errors(store, tmp_path, capsys):
    from harness.cli import main

    assert main(["report", "nosuch", "--root", str(store.root), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "'nosuch'" in err and store.uri in err and "synth" in err
    assert main(["report", "synth", "--root", str(tmp_path / "empty")]) == 2
    assert not (tmp_path / "empty" / "mlflow.db").exists()


def test_a_record_whose_runs_are_all_in_flight_reports_them_as_not_yet_run(tmp_path, capsys):
    """A long study's first milestone: every run is still training (live, per-epoch metrics only).
    The report writes its tables, says each seed is missing and why no figure is drawn; the speed
    figure crashed here (two empty frames merged on run ids of different dtypes)."""
    from harness.cli import main

    root = tmp_path / "root"
    uri = default_tracking_uri(root)
    tracker = Tracker(uri, "long", root / "mlartifacts")
    cell = FakeCell("eeeeeeeeeee1", "logic", "plain", "gru", canon("gru"), study="long")
    cell_run = tracker.cell_run(cell, tracker.study_run(COMMIT))
    h = plan_final(tracker, cell_run, BEST)
    tags = {PHASE: "final", TAG + "seed": 0, TAG + "git_commit": COMMIT, TAG + "params_hash": h}
    live = tracker.start_live(cell_run, f"{cell.id}/seed/0/{h}", tags, cell.label, None)
    tracker.log_epochs(live, [(1, {"valid_acc": 0.6, "epoch_seconds": 2.0}, 1.0), (2, {"valid_acc": 0.7, "epoch_seconds": 2.1}, 3.0)])

    out = tmp_path / "rep"
    assert main(["report", "long", "--root", str(root), "--out", str(out), "--seeds", "1"]) == 0
    printed = capsys.readouterr().out
    assert "1 of 1 seeds missing (seed 0: not yet run)" in printed
    assert "speed: not drawn (no epoch timings recorded)" in printed
    assert sorted(p.name for p in out.iterdir()) == ["provenance.txt", "search.csv", "table.csv", "table.md", "table.tex"]


def test_compare_studies_and_commits(store, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    from harness.cli import main
    from harness.report import compare_studies

    res = compare_studies({"study": "synth", "uri": store.uri}, {"study": "synth2", "uri": store.uri}, seeds_wanted=3)
    valid = res.frame[res.frame["split"] == "valid"].iloc[0]
    assert valid["match"] == "id" and valid["diff"] == pytest.approx(0.92 - 0.82)
    assert len(res.only_a) == 4 and not res.only_b
    res = compare_studies({"study": "synth2", "uri": store.uri, "commit": "aaaa"}, {"study": "synth2", "uri": store.uri, "commit": "bbbb"})
    valid = res.frame[res.frame["split"] == "valid"].iloc[0]
    assert valid["mean_a"] == pytest.approx(0.72) and valid["diff"] == pytest.approx(0.20)
    assert main(["compare", "synth", "synth2", "--root", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert "+10.0" in out and "only in A" in out
    # Cells in one study only: their numbers and parameter counts, not just their labels.
    import pandas as pd

    res = compare_studies({"study": "synth", "uri": store.uri}, {"study": "synth2", "uri": store.uri}, seeds_wanted=3)
    one = res.frame[(res.frame["match"] == "A only") & (res.frame["split"] == "valid")]
    assert len(one) == 4 and set(one["label"]) == set(res.only_a)
    r8 = one[one["cell_id_a"] == R8.id].iloc[0]
    assert r8["mean_a"] == pytest.approx(0.72) and r8["n_a"] == 3 and r8["n_b"] == 0
    assert r8["params_a"] == 1536 and pd.isna(r8["params_b"]) and pd.isna(r8["diff"])
    assert main(["compare", "synth", "synth2", "--root", str(store.root)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if R8.label in ln and "(A only)" in ln and "valid" in ln)
    assert "72.0 ± 2.6" in line and "not in B" in line and "1,536" in line, line


def test_print_summary_includes_unrecorded_cells(store):
    from rich.console import Console

    from harness.report import print_summary

    extra = FakeCell("ccccccccccc1", "logic", "plain", "lstm", canon("lstm"))
    console = Console(record=True, width=250)
    agg = print_summary(SimpleNamespace(name="synth", seeds=3), [GRU, R32, extra], store.uri, console)
    text = console.export_text()
    assert "82.0 ± 2.0" in text and "tpru†" in text and "lstm‡" in text
    assert set(agg["cell_id"]) == {GRU.id, R32.id, extra.id}


def test_a_summary_of_cells_not_run_yet_names_the_studys_metric(tmp_path):
    """The table `tprbench run` prints before anything is recorded is labelled with the study's
    metric (an LM study's perplexity), not a default accuracy."""
    from rich.console import Console

    from harness.report import print_summary

    lm = FakeCell("ddddddddddd1", "lm", "plain", "lstm", canon("lstm"), study="lm-new")
    lm.metric, lm.direction = "valid_ppl", "minimize"
    console = Console(record=True, width=250)
    agg = print_summary(SimpleNamespace(name="lm-new", seeds=1), [lm], f"sqlite:///{tmp_path / 'mlflow.db'}", console)
    assert list(agg["metric"]) == ["ppl"] and list(agg["direction"]) == ["minimize"]
    assert "ppl" in console.export_text()


def test_report_from_study_file_that_does_not_validate_here(store, tmp_path, capsys):
    """A study file is read for its name and seeds even where it does not validate (e.g. unset data env var)."""
    from harness.cli import main

    study = tmp_path / "synth.toml"
    study.write_text('[study]\nname = "synth"\nseeds = 2\n')  # no epochs, no tasks: not a valid study
    out = tmp_path / "rep"
    assert main(["report", str(study), "--root", str(store.root), "--out", str(out), "--no-figures"]) == 0
    md = (out / "table.md").read_text()
    assert "81.0 ± 1.4" in md  # seeds 0 and 1 of the GRU cell only
    assert "does not validate here" in capsys.readouterr().out
    assert not list(out.glob("*.png"))


def test_a_large_table_prints_as_aligned_plain_text_and_a_small_one_through_rich() -> None:
    """Rich renders ~5 ms a row; past PLAIN_ROWS rows the closing table is plain text
    (same cells, aligned), so a 5,010-cell study's table prints in well under a second."""
    import io

    from rich.console import Console

    from harness.report.render import PLAIN_ROWS, Section, print_sections

    def section(n: int) -> Section:
        rows = [[f"tpru[roles={i}]", f"{50 + i % 7}.0 ± 0.1"] for i in range(n)]
        return Section("logic", "plain", "logic: accuracy (%)", ["unit", "valid"], ["l", "r"], rows, ["a footnote"])

    out = io.StringIO()
    print_sections([section(PLAIN_ROWS + 1), section(3)], Console(file=out, width=80, force_terminal=False))
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0] == "logic: accuracy (%)" and lines[1].split() == ["unit", "valid"]
    body = lines[3 : 3 + PLAIN_ROWS + 1]
    assert [ln.split()[0] for ln in body] == [f"tpru[roles={i}]" for i in range(PLAIN_ROWS + 1)]
    assert len({len(ln) for ln in body}) == 1  # right-aligned numbers: every row as wide as the widest
    assert lines[3 + PLAIN_ROWS + 1] == "a footnote"
    assert "┏" in text or "━" in text or "┃" in text  # the small table: a rich table
    assert text.count("a footnote") == 2


def test_a_split_scored_by_correlation_shows_pearson_in_an_accuracy_table() -> None:
    """SentEval's STS-B inside a transfer task whose metric is accuracy: no `_acc` column exists,
    so the table shows its Pearson r (× 100 like the accuracies, and labelled so), not a dash."""
    import pandas as pd

    from harness.report.aggregate import _scored_split

    runs = pd.DataFrame({"metric.test_senteval_MR_acc": [0.5], "metric.test_senteval_STSBenchmark_pearson": [0.41]})
    assert _scored_split("senteval_MR", "acc", runs) == ("senteval_MR", "metric.test_senteval_MR_acc")
    assert _scored_split("senteval_STSBenchmark", "acc", runs) == (
        "senteval_STSBenchmark (pearson ×100)",
        "metric.test_senteval_STSBenchmark_pearson",
    )
    assert _scored_split("senteval_X", "acc", runs) == ("senteval_X", "metric.test_senteval_X_acc")  # nothing: a dash


def test_mean_std_gives_numpys_bits_and_records_gives_to_dicts_values() -> None:
    """aggregate's mean ± std (plain Python below 8 values, numpy above) is bit for bit what
    numpy gives, and `records` is `to_dict("records")` (nullable integers: None for missing)."""
    import random

    import numpy as np
    import pandas as pd

    from harness.report.aggregate import mean_std, records

    rng = random.Random(7)
    for n in range(1, 12):
        for _ in range(2000):
            scale = rng.choice([1.0, 100.0, 1e-3, 1e6])
            vals = [rng.uniform(-1, 1) * scale for _ in range(n)]
            mean, std = mean_std(vals)
            assert mean == float(np.mean(vals))
            if n > 1:
                assert std == float(np.std(vals, ddof=1))
            else:
                assert math.isnan(std)
    assert all(math.isnan(x) for x in mean_std([]))
    assert math.isnan(mean_std([1.0, float("nan")])[0])

    df = pd.DataFrame(
        {
            "a": pd.array([1, None, 3], dtype="Int64"),
            "b": [0.5, float("nan"), 2.0],
            "c": pd.array(["x", None, "z"], dtype="str"),
            "d": [{"k": 1}, None, "s"],
            "e": pd.array([True, None, False], dtype="boolean"),
        }
    )
    want, got = df.to_dict("records"), records(df)
    assert len(want) == len(got) == 3
    for w, g in zip(want, got):
        assert list(w) == list(g)
        for key in w:
            assert type(w[key]) is type(g[key]), key
            assert w[key] == g[key] or (w[key] != w[key] and g[key] != g[key]), key
    some = records(df, ["b", "zz"])  # asked columns only; one the frame lacks is left out
    assert [list(r) for r in some] == [["b"]] * 3 and some[0]["b"] == 0.5 and math.isnan(some[1]["b"])


def test_figures_of_a_large_study_draw_the_baselines_and_the_best_cells() -> None:
    """A panel of hundreds of cells draws MAX_BARS bars / MAX_LINES curves — the
    baselines, then the best by the split's mean in the metric's direction, in table order —
    and a role grid of hundreds draws evenly spaced role counts, first and last included."""
    import pandas as pd

    from harness.report.figures import MAX_LINES, _best_rows, _spread

    assert _spread(list(range(5)), MAX_LINES) == list(range(5))
    picked = _spread(list(range(2, 252)), MAX_LINES)
    assert len(picked) == MAX_LINES and picked[0] == 2 and picked[-1] == 251 and picked == sorted(picked)
    rows = pd.DataFrame({"unit_name": ["lstm", "gru"] + ["tpru"] * 20, "mean": [0.1, 0.2] + [i / 100 for i in range(20)], "direction": "maximize"})
    best = _best_rows(rows, 5)
    assert list(best["unit_name"]) == ["lstm", "gru", "tpru", "tpru", "tpru"]
    assert list(best["mean"][2:]) == [0.17, 0.18, 0.19]  # the best three, in table order
    low = _best_rows(rows.assign(direction="minimize"), 4)
    assert list(low["mean"][2:]) == [0.0, 0.01]
    assert _best_rows(rows, 30) is rows


def test_cells_of_two_encoder_shapes_are_drawn_apart() -> None:
    """A study of two readings (one bidirectional layer; the units' default two one-way layers) at
    one task/arch/d: each shape gets panels of its own, titled with it, and a roles curve averages
    only its own shape's runs (it averaged a bidirectional and a two-layer run as two seeds)."""
    import pandas as pd

    from harness.report.figures import _groups, fig_curves, fig_roles

    units = ["lstm", "lstm[bidirectional=true,layers=1]", "tpru-v1[roles=8]", "tpru-v1[bidirectional=true,layers=1,roles=8]", "tpru-v1[roles=32]"]
    cells = pd.DataFrame(
        {
            "cell_id": [f"c{i}" for i in range(len(units))],
            "task_label": "logic",
            "arch": "plain",
            "dim": 64,
            "unit": units,
            "unit_short": ["lstm", "lstm[bidirectional=true,layers=1]", "tpru-v1", "tpru-v1[bidirectional=true,layers=1]", "tpru-v1"],
            "unit_name": ["lstm", "lstm", "tpru-v1", "tpru-v1", "tpru-v1"],
            "roles": [None, None, 8, 8, 32],
            "slices": None,
            "metric": "acc",
            "order": range(len(units)),
            "mean": 0.7,
            "direction": "maximize",
        }
    )
    groups = _groups(cells)
    assert [(title, named, list(g["cell_id"])) for title, named, g in groups] == [
        ("logic / plain / d=64 / default shape", True, ["c0", "c2", "c4"]),
        ("logic / plain / d=64 / layers=1, bidirectional=true", True, ["c1", "c3"]),
    ]
    assert [(t, n) for t, n, _ in _groups(cells[cells["unit"].str.contains("bidirectional")])] == [("logic / plain / d=64", False)]

    used = pd.DataFrame({"cell_id": cells["cell_id"], "run_id": [f"r{i}" for i in range(len(units))]})
    # valid_acc per epoch: the two-layer tpru-v1 at 8 roles learns nothing (0.5), the bidirectional one does (0.8).
    value = {"r0": 0.7, "r1": 0.7, "r2": 0.5, "r3": 0.8, "r4": 0.6}
    history = pd.DataFrame(
        [{"run_id": r, "key": k, "step": e, "value": v} for r, v in value.items() for e in (1, 2) for k in ("train_loss", "valid_acc")]
    )
    fig = fig_roles(cells, used, history)
    assert fig is not None  # one panel row: the default shape (8 and 32 roles); the bidirectional shape has one role count
    (valid,) = [ax for ax in fig.axes if ax.get_ylabel().startswith("validation")]
    assert valid.get_title().endswith("default shape: tpru-v1")
    assert {ln.get_label(): float(ln.get_ydata()[0]) for ln in valid.lines} == {"8 roles": 50.0, "32 roles": 60.0}
    curves = fig_curves(cells, used, history)
    labels = [sorted(ln.get_label() for ln in ax.lines) for ax in curves.axes if ax.get_ylabel().startswith("validation")]
    assert labels == [["lstm", "tpru-v1 (32 roles)", "tpru-v1 (8 roles)"], ["lstm", "tpru-v1 (8 roles)"]]
