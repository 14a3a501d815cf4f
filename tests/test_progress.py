"""Progress inside long work: `train` epochs, data generation and a study's start-up
say what they are doing: a bar on a terminal, a line at once and then at intervals otherwise.
Reporting never changes what is trained."""

from __future__ import annotations

import io
import time
from pathlib import Path
from types import SimpleNamespace

from tasks.progress import ConsoleReporter, LineTask, Reporter, current, per_split, reporting

OPTIONS = {"train_size": 200, "eval_size": 40, "preset": "exam", "layers": 1}


class Recorder(Reporter):
    """Every task opened and every advance, for assertions."""

    def __init__(self) -> None:
        self.tasks: list[dict] = []

    def task(self, description, total=None, unit="batches"):
        rec = {"description": description, "total": total, "unit": unit, "done": 0, "examples": 0, "closed": False}
        self.tasks.append(rec)

        class T:
            def advance(self, n=1, examples=0):
                rec["done"] += n
                rec["examples"] += examples

            def close(self):
                rec["closed"] = True

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.close()

        return T()


def _console(buf: io.StringIO):
    from rich.console import Console

    return Console(file=buf, width=200, force_terminal=False)  # a log file: no TTY


def test_unattended_line_at_once_then_at_intervals(monkeypatch) -> None:
    lines: list[str] = []
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    task = LineTask(lines.append, "epoch 1/3", 100, "batches", every=30)
    assert len(lines) == 1 and "epoch 1/3: 0/100 batches" in lines[0]  # the first line needs no wait
    clock[0] += 10
    task.advance(20, examples=640)
    assert len(lines) == 1  # 10 s: not yet
    clock[0] += 20
    task.advance(20, examples=640)
    assert len(lines) == 2
    assert "epoch 1/3: 40/100 batches · 43 examples/s · elapsed 0:00:30 · ETA 0:00:45" in lines[1]
    task.close()


def test_a_step_longer_than_the_interval_still_gets_lines() -> None:
    """The heartbeat: one slow step (here 0.5 s at a 0.1 s interval) is not silent."""
    lines: list[str] = []
    task = LineTask(lines.append, "generating train", 10, "lines", every=0.1)
    time.sleep(0.5)
    task.close()
    n = len(lines)
    assert n >= 3 and all("generating train: 0/10 lines" in ln for ln in lines), lines
    time.sleep(0.3)
    assert len(lines) == n  # closed: quiet


def test_console_reporter_prints_plain_lines_without_a_tty(monkeypatch) -> None:
    monkeypatch.setenv("TPRBENCH_PROGRESS_SECONDS", "0")
    buf = io.StringIO()
    with reporting(ConsoleReporter(_console(buf))):
        with current().task("epoch 1/1", 3) as task:
            for _ in range(3):
                task.advance(1, 8)
    out = buf.getvalue().splitlines()
    assert len(out) == 4 and out[-1].endswith("ETA 0:00:00") and "3/3 batches" in out[-1], out
    assert isinstance(current(), Reporter) and not isinstance(current(), ConsoleReporter)  # silent again


def test_generation_reports_each_split(tmp_path: Path, monkeypatch) -> None:
    from tasks.logic.generator import EXCLUDING, write_dataset

    rec = Recorder()
    with reporting(rec), per_split("generating") as progress:
        write_dataset(tmp_path / "g", train=40, eval_size=8, progress=progress)
    names = [t["description"] for t in rec.tasks]
    assert names[-1] == "generating train" and "generating validate" in names
    assert all(t["closed"] for t in rec.tasks)
    assert rec.tasks[-1]["total"] == 40 and rec.tasks[-1]["done"] == 40
    rec = Recorder()  # excluding a real folder's pairs: its files are read first, counted in files
    with reporting(rec), per_split("generating", units={EXCLUDING: "files"}) as progress:
        write_dataset(tmp_path / "h", train=8, eval_size=0, exclude=[tmp_path / "g"], progress=progress)
    assert [(t["description"], t["unit"], t["total"]) for t in rec.tasks] == [
        (f"generating {EXCLUDING}", "files", 7),
        ("generating train", "lines", 8),
    ]


def test_an_epoch_reports_its_batches_and_trains_the_same(tmp_path: Path) -> None:
    from tasks.registry import get_task
    from tasks.training import TrainConfig, train

    adapter = get_task("logic")(OPTIONS, "generated", tmp_path / "cache")
    adapter.prepare()
    cfg = TrainConfig(unit="gru", arch="plain", dim=8, input_dim=8, epochs=2, seed=0, hparams={"lr": 1e-2, "batch_size": 32})
    silent = train(adapter, cfg, tmp_path / "a")
    rec = Recorder()
    with reporting(rec):
        shown = train(adapter, cfg, tmp_path / "b")
    assert [t["description"] for t in rec.tasks] == ["epoch 1/2", "epoch 2/2"]
    assert [(t["total"], t["done"], t["examples"]) for t in rec.tasks] == [(7, 7, 200)] * 2  # 200 pairs, 32 a batch
    assert shown.history == [{**row, "epoch_seconds": shown.history[i]["epoch_seconds"]} for i, row in enumerate(silent.history)]


def test_data_of_a_study_is_reported_in_timestamped_phases(tmp_path: Path) -> None:
    from harness.driver.runner import StudyRunner

    events: list[str] = []
    cell = SimpleNamespace(task="logic", task_options=OPTIONS, data="generated")
    fake = SimpleNamespace(cells=[cell], cache_dir=tmp_path / "cache", console=None, _say=events.append)
    fake._datasets = lambda: StudyRunner._datasets(fake)
    fake._phase = lambda text: StudyRunner._phase(fake, text)
    StudyRunner._prepare_data(fake)
    assert events[0].startswith("[") and "] preparing data for logic (generated)" in events[0]
    assert "] data for logic ready in " in events[1]


def test_resume_names_trials_without_a_checkpoint(tmp_path: Path) -> None:
    """A rerun says which unfinished trials continue from a checkpoint and which start over."""
    from harness.driver.runner import StudyRunner

    (tmp_path / "c1" / "trial-0000").mkdir(parents=True)
    (tmp_path / "c1" / "trial-0000" / "checkpoint.pt").write_bytes(b"x")
    events: list[str] = []
    st = SimpleNamespace(
        cell=SimpleNamespace(id="c1"),
        records={"c1/trial/2": SimpleNamespace(status="FINISHED")},
        stale=[(0, 10), (1, 11)],
        retried=0,
        continued=0,
        started_over=0,
        interrupted=0,
    )
    fake = SimpleNamespace(work_dir=tmp_path, _errored=StudyRunner._errored, _say=events.append)
    StudyRunner._say_resume(fake, [st])
    assert events == [
        "resuming: 1 trial(s) continue from their checkpoints, 1 unfinished trial(s) start over "
        "(no checkpoint written yet), 1 run(s) already recorded"
    ]


def test_train_prints_at_once_and_inside_the_epoch(tmp_path: Path, capsys, monkeypatch) -> None:
    """`tprbench train` unattended: its first line before any work (before torch is imported in a
    fresh process: measured 0.4–0.8 s to the first line), then data generation and the epoch
    reported as they run (every 0 s here), not only at the epoch's end. In-process, so a busy
    machine makes it slower, never flaky."""
    from harness.cli import main

    monkeypatch.setenv("TPRBENCH_PROGRESS_SECONDS", "0")
    assert (
        main(
            [
                "train",
                "--unit",
                "gru",
                "--dim",
                "8",
                "--epochs",
                "1",
                "--batch-size",
                "32",
                "--root",
                str(tmp_path),
                "--set",
                "train_size=200",
                "--set",
                "eval_size=40",
                "--set",
                "preset=exam",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "train logic · gru · data generated: setting up"
    assert any("generating logic data: train: 0/200 lines" in ln for ln in lines), lines
    inside = [ln for ln in lines if "epoch 1/1: " in ln and "batches" in ln]
    assert inside and "7/7 batches" in inside[-1] and "examples/s" in inside[-1], lines
    assert lines.index(inside[0]) < next(i for i, ln in enumerate(lines) if ln.startswith("epoch 1/1 train_loss"))


def test_slow_starting_commands_say_so_first(tmp_path: Path, capsys) -> None:
    """`units` (torch, every unit built) and `report` (pandas, MLflow) print a line before their
    imports, so nothing is silent for seconds; a report with no record still ends in one error."""
    from harness.cli import main

    assert main(["units", "gru", "--dim", "8"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "counting parameters at d=8, d'=8: 1 unit spec(s)"
    assert main(["report", "nosuch", "--root", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == f"report nosuch: reading the record in sqlite:///{tmp_path / 'mlflow.db'}"
    assert len(captured.err.splitlines()) == 1
