"""`tprbench bench record`: how the commands that read a study's record scale with its size.

It builds a synthetic record of N runs in C cells (logic task, a grid of `tpru` role counts and
`gru` over several dims) through the driver's own record-writing code — the
`StudyRunner` asks and tells the Optuna trials, chooses the final parameters and makes every
run's tags, params and metrics (`StudyRunner.run_tags`, `Tracker.run_payload`); only the transport is bulk
(`Tracker.log_bulk`: one transaction per 2,000 runs on a SQL store; a buffered Optuna journal
written once). Building is not timed. Then it times, each in a fresh process as a user types it:

- `run` again with nothing to do, `study show --json`, `report --no-figures`, `report` with the
  figures, `compare` (the study with itself);
- each one cold (no summary of ended runs: the first read after a run) and warm (summary present);
- peak memory (max RSS of the process), and the physical floor: the four tables' rows of the
  study read straight from SQLite with sqlite3.

`--code DIR` times another checkout of the project (e.g. `git archive` of an older commit) on
the same records — the before/after of docs/benchmarks.md. `--tracking-server` also times
`study show` and `report` through an `mlflow server` started over the same record. The machine's load average is
printed beside the numbers: on a shared machine they are upper bounds.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.metrics import MAXIMIZE
from tasks.result import RunStatus

from ..driver.cells import CellState, Job, params_hash
from ..driver.errors import RunnerError
from ..driver.runner import StudyRunner
from ..record.contract import (
    MLFLOW_PARENT,
    CellRecord,
    Kind,
    MlflowStatus,
    Splits,
    Tag,
    WorkerInfo,
    WorkerResult,
    experiment_name,
    split_tags,
)
from ..record.layout import RunRoot, sqlite_uri
from ..record.sources import default_tracking_uri
from ..record.writer import BulkRun, Tracker, git_commit
from ..study.cells import expand
from ..study.load import load_study

SPLITS = ("test_easy", "test_hard", "test_big", "test_massive", "test_exam")
DIMS10 = list(range(8, 27, 2))


@dataclass(frozen=True)
class Case:
    """A record: `dims` × (gru + tpru at each of `roles`), `trials` search trials and `seeds`
    seed runs per cell; `planned` restricts the timed study file to the first dim and that many
    cells (the rest of the record belongs to the same study but is not asked for)."""

    name: str
    dims: tuple[int, ...]
    roles: tuple[int, ...]
    trials: int
    seeds: int
    epochs: int
    planned: int | None = None
    note: str = ""
    units: tuple[str, ...] = ("gru",)  # besides the tpru role grid

    @property
    def cells(self) -> int:
        return len(self.dims) * (len(self.units) + len(self.roles))

    @property
    def runs(self) -> int:
        """MLflow runs in the record: the study run, the cell runs, the trial and seed runs."""
        return 1 + self.cells * (1 + self.trials + self.seeds)


CASES = {
    c.name: c
    for c in (
        Case(
            "quickstart",
            (16,),
            (8, 16),
            2,
            3,
            3,
            note="studies/quickstart.toml's cells: 8, 2 trials + 3 seeds each",
            units=("lstm", "gru", "tpru-mod1[roles=8]", "tpru-mod2[roles=8]", "tpru-mod3[roles=8]", "tpru[roles=8,slices=8]"),
        ),
        Case("tiny-502", (8, 12), tuple(range(2, 252)), 0, 1, 1, note="502 tiny cells, trials 0, 1 seed"),
        Case("8-of-10k", tuple(DIMS10), tuple(range(2, 126)), 4, 3, 2, planned=8, note="8 planned cells of a record of 1,250 cells"),
        Case("1000-cells", tuple(DIMS10), tuple(range(2, 101)), 6, 3, 2, note="target: a 1,000-cell study, 10k runs"),
        Case("tiny-5010", tuple(DIMS10), tuple(range(2, 502)), 0, 1, 1, note="5,010 tiny cells, trials 0, 1 seed"),
        Case("100k", tuple(DIMS10), tuple(range(2, 1001)), 6, 3, 2, note="target: a 10,000-cell study, 100k runs"),
    )
}
#: The cases of `--sizes 1k,10k,100k`.
SIZES = {"quickstart": ["quickstart"], "1k": ["tiny-502"], "10k": ["8-of-10k", "1000-cells", "tiny-5010"], "100k": ["100k"]}


def study_text(case: Case, planned: bool = False) -> str:
    dims = case.dims[:1] if planned and case.planned else case.dims
    roles = list(case.roles)
    if planned and case.planned:
        roles = roles[: case.planned - len(case.units)]
    search = "lr = { log_uniform = [1e-3, 1e-2] }\nbatch_size = 32\n" if case.trials else "lr = 1e-2\nbatch_size = 32\n"
    return f"""[study]
name = "bench-{case.name}"
trials = {case.trials}
seeds = {case.seeds}
epochs = {case.epochs}

[[tasks]]
name = "logic"
data = "generated"
[tasks.options]
preset = "exam"
train_size = 200
eval_size = 50

[matrix]
arch = ["plain"]
dim = {list(dims)}
units = {json.dumps(list(case.units))}

[[matrix.grid]]
unit = "tpru"
roles = {roles}

[search]
{search}
[resources]
cpus = 1
"""


# ---------------------------------------------------------------------------------------------
# Building


class _BufferedJournal:
    """An Optuna journal backend in memory, written to a file once (`dump`): the same lines
    `JournalFileBackend.append_logs` writes, without a lock and an fsync per operation."""

    def __init__(self) -> None:
        self.logs: list[dict[str, Any]] = []

    def read_logs(self, log_number_from: int):
        yield from self.logs[log_number_from:]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self.logs.extend(json.loads(json.dumps(log)) for log in logs)

    def dump(self, path: Path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            for log in self.logs:
                fh.write(json.dumps(log, separators=(",", ":")) + "\n")


def _result(job: Any, rng: random.Random, epochs: int) -> WorkerResult:
    """A worker's result for a logic run, with plausible numbers."""
    lr = float(job.hparams.get("lr", 1e-2))
    history, best, best_epoch = [], -1.0, 1
    for epoch in range(1, epochs + 1):
        acc = round(0.5 + 0.4 * rng.random(), 4)
        history.append(
            {
                "epoch": epoch,
                "train_loss": 0.7 - 0.1 * rng.random(),
                "train_acc": acc,
                "valid_loss": 0.7 - 0.1 * rng.random(),
                "valid_acc": acc,
                "lr": lr,
                "epoch_seconds": 0.05 + 0.01 * rng.random(),
            }
        )
        if acc > best:
            best, best_epoch = acc, epoch
    test = {s: {"loss": 0.7 - 0.1 * rng.random(), "acc": round(0.5 + 0.3 * rng.random(), 4)} for s in SPLITS}
    return WorkerResult(
        status=RunStatus.FINISHED,
        reason="",
        best_epoch=best_epoch,
        best_valid=best,
        metric="valid_acc",
        direction=MAXIMIZE,
        history=history,
        test=test,
        params_formula=384,
        params_total=394,
        seconds=0.3 + rng.random(),
        resumed_from_epoch=0,
        hparams=dict(job.hparams),
        notes=[],
        reproducible=True,
        splits=Splits("validate", list(SPLITS)),
        worker=WorkerInfo(host="bench"),
    )


def build(case: Case, root: Path, say: Any = print) -> dict[str, Any]:
    """Write the case's record under `root` (mlflow.db, optuna.journal, studies/*.toml)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    root.mkdir(parents=True, exist_ok=True)
    studies = root / "studies"
    studies.mkdir(exist_ok=True)
    full, planned = studies / f"{case.name}.toml", studies / f"{case.name}-planned.toml"
    full.write_text(study_text(case))
    planned.write_text(study_text(case, planned=True))
    t0 = time.time()
    study = load_study(full)
    cells = expand(study)
    uri = default_tracking_uri(root)
    runner = StudyRunner(study, cells, root, uri)
    backend = _BufferedJournal()
    runner.storage = optuna.storages.JournalStorage(backend)
    runner.tracker = tracker = Tracker(uri, study.name, RunRoot(root).artifacts, root=root)
    runner.study_run_id = tracker.study_run(git_commit())
    clock = int(time.time() * 1000) - case.runs * 1000  # runs end one second apart, up to now
    batch: list[BulkRun] = []
    written = 0

    def add(run: BulkRun) -> None:
        nonlocal clock, written
        clock += 1000
        run.start_time, run.end_time = clock - 900, (None if run.status == MlflowStatus.RUNNING else clock)
        batch.append(run)
        if len(batch) >= 2000:
            tracker.log_bulk(batch)
            written += len(batch)
            batch.clear()

    for n, cell in enumerate(cells):
        rng = random.Random(cell.id)
        st = CellState(cell, None, case.trials, case.seeds)
        cell_run = BulkRun(cell.label, {}, status=MlflowStatus.RUNNING)
        runs: list[BulkRun] = []

        def record(job: Job, result: WorkerResult, cell_run: BulkRun = cell_run, runs: list = runs) -> None:
            tags, metrics = tracker.run_payload(cell_run.run_id, job.run_key, runner.run_tags(job, result), result)
            runs.append(BulkRun(job.key.name, tags, {**result.hparams, "seed": job.seed}, metrics, status=MlflowStatus.FINISHED))

        for _ in range(case.trials):
            study_ = runner.cell_study(st)
            trial = study_.ask()
            job = runner.trial_job(st, trial.number, trial._trial_id)
            result = _result(job.work, rng, case.epochs)
            record(job, result)
            study_.tell(trial.number, result.best_valid)
            st.trials_done += 1
        params = runner.final_params(st)
        h = params_hash(params)
        for seed in range(case.seeds):
            job = runner.seed_job(cell, seed, params)
            record(job, _result(job.work, rng, case.epochs))
        rec = CellRecord.of_cell(cell)
        cell_run.tags = {
            Tag.KIND: Kind.CELL,
            Tag.STUDY: study.name,
            Tag.CELL: cell.id,
            MLFLOW_PARENT: runner.study_run_id,
            **rec.tags(),
            **split_tags("validate", SPLITS),
            Tag.FINAL_PARAMS_HASH: h,
            Tag.FINAL_PARAMS: json.dumps(params, sort_keys=True),
            Tag.FINAL_TRIALS: st.trials_done,
        }
        cell_run.params = rec.params()
        add(cell_run)
        for run in runs:
            add(run)
        if n and n % 1000 == 0:
            say(f"  {case.name}: {n}/{len(cells)} cells ({time.time() - t0:.0f} s)")
    if batch:
        tracker.log_bulk(batch)
        written += len(batch)
    backend.dump(RunRoot(root).journal)
    return {
        "case": case.name,
        "cells": len(cells),
        "mlflow_runs": written + 1,
        "seconds": time.time() - t0,
        "db_mb": RunRoot(root).db.stat().st_size / 2**20,
        "journal_mb": RunRoot(root).journal.stat().st_size / 2**20,
    }


# ---------------------------------------------------------------------------------------------
# Timing


@dataclass
class Timing:
    case: str
    code: str
    command: str
    summary: str  # cold | warm | -
    seconds: float
    peak_mb: float
    rc: int
    cpu: float  # user + system CPU seconds of the process: on a shared machine, what the command itself cost
    load: float
    extra: dict[str, Any] = field(default_factory=dict)


def timed(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 3600) -> tuple[float, float, int, str, float]:
    """(wall seconds, peak RSS in MB, exit code, last output, CPU seconds) of one command in a fresh process."""
    out = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.time() > deadline:
            proc.kill()
        time.sleep(0.02)
    seconds = time.perf_counter() - t0
    out.seek(0)
    text = out.read().decode(errors="replace")[-2000:]
    return seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), text, usage.ru_utime + usage.ru_stime


def floor(db: Path, study: str) -> dict[str, float]:
    """The physical floor: the study's rows of the four tables read straight from SQLite."""
    t0 = time.perf_counter()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    exp = con.execute("SELECT experiment_id FROM experiments WHERE name = ?", (experiment_name(study),)).fetchone()[0]
    sel = "SELECT run_uuid FROM runs WHERE experiment_id = ? AND lifecycle_stage = 'active'"
    n = {"runs": len(con.execute(sel, (exp,)).fetchall())}
    for table, cols in (("tags", "run_uuid, key, value"), ("params", "run_uuid, key, value"), ("latest_metrics", "run_uuid, key, value, step")):
        n[table] = len(con.execute(f"SELECT {cols} FROM {table} WHERE run_uuid IN ({sel})", (exp,)).fetchall())
    con.close()
    return {"seconds": time.perf_counter() - t0, "rows": sum(n.values()), **n}


def load_average() -> float:
    return os.getloadavg()[0]


def commands(case: Case, root: Path, out: Path, tracking_uri: str | None = None) -> list[tuple[str, list[str]]]:
    study = str(root / "studies" / (f"{case.name}-planned.toml" if case.planned else f"{case.name}.toml"))
    r = ["--root", str(root)] + (["--tracking-uri", tracking_uri] if tracking_uri else [])
    return [
        ("run (nothing to do)", ["run", study, *r, "--quiet"]),
        ("study show", ["study", "show", study, *r, "--json"]),
        ("report tables", ["report", study, *r, "--out", str(out / "tables"), "--no-figures"]),
        ("report + figures", ["report", study, *r, "--out", str(out / "figures")]),
        ("compare", ["compare", study, study, *r]),
    ]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def tracking_server(root: Path, say: Any = print, timeout: float = 300) -> Iterator[str]:
    """An `mlflow server` on 127.0.0.1 over the record's SQLite file (the tracking-server
    case: `report` reads the runs through MLflow's REST API, a page of 1,000 runs a call);
    yields its URL, and stops it (its whole process group) on exit."""
    import signal
    import urllib.request

    port = _free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    argv = [
        str(mlflow) if mlflow.exists() else "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        sqlite_uri(RunRoot(root).db),
        "--artifacts-destination",
        str(root / "server-artifacts"),
    ]
    log = open(root / "mlflow-server.log", "ab")
    # No job runner (MLflow's GenAI jobs start ~10 worker processes): nothing here uses it.
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() - t0 > timeout:
                raise RuntimeError(f"mlflow server did not start (see {root / 'mlflow-server.log'})")
            time.sleep(0.5)
        say(f"  mlflow server at {url} over {RunRoot(root).db} (up in {time.monotonic() - t0:.0f} s)")
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def time_case(
    case: Case, root: Path, code: Path | None, label: str, which: list[str], say: Any, repeat: int = 1, tracking_uri: str | None = None
) -> list[Timing]:
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false")
    if code is not None:
        env["PYTHONPATH"] = str(code) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    exe = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())"]
    out_dir = Path(tempfile.mkdtemp(prefix="tprbench-bench-out-"))
    summary = RunRoot(root).summary
    rows = []
    try:
        for name, argv in commands(case, root, out_dir, tracking_uri):
            if which and not any(w in name for w in which):
                continue
            for mode in ("cold", "warm") if code is None else ("-",):
                for _ in range(repeat):
                    if mode == "cold":
                        shutil.rmtree(summary, ignore_errors=True)
                    load = load_average()
                    seconds, peak, rc, text, cpu = timed(exe + argv, env, out_dir)
                    rows.append(Timing(case.name, label, name, mode, seconds, peak, rc, cpu, load))
                    say(
                        f"  {case.name:12s} {label:8s} {name:20s} {mode:5s} {seconds:8.2f} s (cpu {cpu:7.2f} s) "
                        f"{peak:6.0f} MB  rc {rc}  load {load:.1f}"
                    )
                    if rc:
                        say("    " + text.strip().replace("\n", "\n    ")[-1500:])
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return rows


def run_record_bench(args: Any) -> int:
    from rich.console import Console

    console = Console()
    say = console.print
    names = []
    for size in args.sizes.split(","):
        size = size.strip()
        names += SIZES.get(size, [size])
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise RunnerError(f"bench record: unknown size/case {', '.join(unknown)} (sizes: {', '.join(SIZES)}; cases: {', '.join(CASES)})")
    base = Path(args.root).expanduser().resolve() if args.root else Path(tempfile.mkdtemp(prefix="tprbench-bench-record-"))
    code = {"this": None}
    if args.code:
        code[args.code_label] = Path(args.code).expanduser().resolve()
    which = [w.strip() for w in args.only.split(",")] if args.only else []
    results: list[Timing] = []
    try:
        for name in names:
            case = CASES[name]
            root = base / name
            if not RunRoot(root).db.exists():
                say(f"building {name}: {case.cells} cells, {case.runs:,} MLflow runs ({case.note})")
                info = build(case, root, say)
                say(f"  built in {info['seconds']:.0f} s: mlflow.db {info['db_mb']:.0f} MB, optuna.journal {info['journal_mb']:.1f} MB")
            db = RunRoot(root).db
            fl = floor(db, f"bench-{case.name}")
            results.append(
                Timing(
                    case.name,
                    "floor",
                    "floor: rows straight from SQLite",
                    "-",
                    fl["seconds"],
                    0,
                    0,
                    fl["seconds"],
                    load_average(),
                    {"rows": fl["rows"]},
                )
            )
            say(f"  {case.name:12s} floor: {fl['rows']:,} rows in {fl['seconds']:.2f} s")
            for label, path in code.items():
                results += time_case(case, root, path, label, which, say, args.repeat)
            if getattr(args, "tracking_server", False):
                with tracking_server(root, say) as url:
                    # `report`, which has a target through a server (docs/benchmarks-record.md), and `study show`
                    results += time_case(case, root, None, "server", ["study show", "report tables"], say, args.repeat, tracking_uri=url)
        if args.csv:
            Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
            with open(args.csv, "w", newline="") as fh:
                w = csv.writer(fh, lineterminator="\n")
                w.writerow(["case", "code", "command", "summary", "seconds", "cpu_seconds", "peak_mb", "rc", "load1"])
                for r in results:
                    w.writerow([r.case, r.code, r.command, r.summary, f"{r.seconds:.2f}", f"{r.cpu:.2f}", f"{r.peak_mb:.0f}", r.rc, f"{r.load:.1f}"])
            say(f"wrote {args.csv}")
    finally:
        if not args.root and not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0
